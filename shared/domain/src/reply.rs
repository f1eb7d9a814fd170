//! What the chat user reads when a handoff ends (CONTRACT §3, `BridgeReply`).
//!
//! Two jobs live here, both pure:
//! - [`humanize`] turns an [`Outcome`] into one friendly message in the
//!   reply's language. It never shows error codes or internal ids: those go in
//!   the reply's structured `error`/`result` fields, not in the chat.
//! - [`split_parts`] cuts that message into the `parts` a bridge sends as
//!   separate chat messages, within a channel's [`ChannelLimits`].
//!
//! Cutting prefers the most natural place that still fills a part well:
//! paragraph breaks, then line breaks, then sentence ends, then spaces, and
//! only as a last resort an arbitrary character boundary. Fenced code blocks
//! and URLs are kept whole whenever they fit in one part, because half a URL
//! is useless and half a code block is misleading.

use std::ops::Range;

use crate::language::Language;

/// How a handoff ended, as the collector sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed { final_text: String },
    Failed { code: String, message: String },
    Blocked { message: String },
    Cancelled { reason: Option<String> },
}

impl Outcome {
    /// The `status` field of the bridge reply.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Failed { .. } => "failed",
            Outcome::Blocked { .. } => "blocked",
            Outcome::Cancelled { .. } => "cancelled",
        }
    }
}

/// A humanized chat message for the outcome, in the requested language.
///
/// A completed handoff's final text is passed through (trimmed): the agents
/// already wrote it for the user. The other outcomes get a short, friendly
/// sentence with the human-readable detail; the error code stays out of it.
pub fn humanize(outcome: &Outcome, language: Language) -> String {
    match outcome {
        Outcome::Completed { final_text } => completed_text(final_text, language),
        Outcome::Failed { message, .. } => with_detail(FAILED, message, language),
        Outcome::Blocked { message } => with_detail(BLOCKED, message, language),
        Outcome::Cancelled { reason } => {
            with_detail(CANCELLED, reason.as_deref().unwrap_or_default(), language)
        }
    }
}

/// A fixed phrase in both reply languages, without final punctuation.
#[derive(Clone, Copy)]
struct Phrase {
    en: &'static str,
    zh_cn: &'static str,
}

impl Phrase {
    fn pick(self, language: Language) -> &'static str {
        match language {
            Language::En => self.en,
            Language::ZhCn => self.zh_cn,
        }
    }
}

const FAILED: Phrase = Phrase {
    en: "Sorry, I couldn't finish this request",
    zh_cn: "抱歉，这次请求没有完成",
};

const BLOCKED: Phrase = Phrase {
    en: "This request is paused and needs someone to step in",
    zh_cn: "这次请求暂停了，需要有人协助处理",
};

const CANCELLED: Phrase = Phrase {
    en: "This request was cancelled",
    zh_cn: "这次请求已取消",
};

const NOTHING_TO_REPORT: Phrase = Phrase {
    en: "Done. There was nothing more to report",
    zh_cn: "已完成，没有需要补充的内容",
};

fn completed_text(final_text: &str, language: Language) -> String {
    let text = final_text.trim();
    // A blank final text would otherwise reach the chat as an empty message.
    if text.is_empty() {
        return with_detail(NOTHING_TO_REPORT, "", language);
    }
    text.to_string()
}

/// `lead: detail`, or just `lead.` when there is no detail to give.
fn with_detail(lead: Phrase, detail: &str, language: Language) -> String {
    let lead = lead.pick(language);
    let detail = detail.trim();
    let (colon, stop) = match language {
        Language::En => (": ", "."),
        Language::ZhCn => ("：", "。"),
    };
    if detail.is_empty() {
        format!("{lead}{stop}")
    } else {
        format!("{lead}{colon}{detail}")
    }
}

/// Why a run stopped on its budget, in words for the chat (the reply's
/// `error.message` and, after the apology, its text).
pub fn budget_exhausted_message(exhausted: &crate::budget::Exhausted, language: Language) -> String {
    use crate::budget::Limit;
    let max = exhausted.max;
    let n = thousands(max);
    match (exhausted.limit, language) {
        (Limit::Tokens, Language::En) => format!("the agents reached this request's limit of {n} model tokens"),
        (Limit::ModelCalls, Language::En) => format!("the agents reached this request's limit of {n} model calls"),
        (Limit::ToolCalls, Language::En) => format!("the agents reached this request's limit of {n} tool calls"),
        (Limit::WallClock, Language::En) => format!("the agents reached this request's time limit of {}", duration_en(max)),
        (Limit::Tokens, Language::ZhCn) => format!("智能体已用完本次请求的模型用量上限（{n} 个 token）"),
        (Limit::ModelCalls, Language::ZhCn) => format!("智能体已达到本次请求的模型调用次数上限（{n} 次）"),
        (Limit::ToolCalls, Language::ZhCn) => format!("智能体已达到本次请求的工具调用次数上限（{n} 次）"),
        (Limit::WallClock, Language::ZhCn) => format!("智能体已达到本次请求的运行时间上限（{}）", duration_zh(max)),
    }
}

/// `1234567` → `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whole hours or minutes when the limit is one, else seconds.
fn duration_parts(secs: u64) -> (u64, usize) {
    match secs {
        s if s >= 3600 && s.is_multiple_of(3600) => (s / 3600, 0),
        s if s >= 60 && s.is_multiple_of(60) => (s / 60, 1),
        s => (s, 2),
    }
}

fn duration_en(secs: u64) -> String {
    let (n, unit) = duration_parts(secs);
    let name = ["hour", "minute", "second"][unit];
    if n == 1 {
        format!("1 {name}")
    } else {
        format!("{} {name}s", thousands(n))
    }
}

fn duration_zh(secs: u64) -> String {
    let (n, unit) = duration_parts(secs);
    format!("{n} {}", ["小时", "分钟", "秒"][unit])
}

/// Limits for one chat channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLimits {
    pub max_part_bytes: usize,
    pub max_parts: usize,
}

impl ChannelLimits {
    /// WeChat: 2048 bytes per text message, and a user's message opens a
    /// window of 5 customer-service messages.
    pub const WEIXIN: Self = Self {
        max_part_bytes: 2048,
        max_parts: 5,
    };

    /// Channels without known limits get the whole text as one message.
    pub const SINGLE: Self = Self {
        max_part_bytes: usize::MAX,
        max_parts: 1,
    };

    /// The limits for a request's `source`.
    pub fn for_source(source: &str) -> Self {
        match source {
            "weixin" => Self::WEIXIN,
            _ => Self::SINGLE,
        }
    }
}

/// The note that ends the last part when the text did not fit.
pub fn truncation_note(language: Language) -> &'static str {
    match language {
        Language::En => "(The full result is kept; ask an operator for the rest.)",
        Language::ZhCn => "（完整结果已保存，可请管理员查看全文。）",
    }
}

/// Cut `text` into at most `limits.max_parts` parts of at most
/// `limits.max_part_bytes` bytes of UTF-8 each.
///
/// Parts are trimmed and never empty; empty or whitespace-only text gives no
/// parts. If the text does not fit, the last part ends with
/// [`truncation_note`] on its own line, still within the byte limit.
/// A limit smaller than one character cannot be honored; such a part holds a
/// single character rather than nothing.
pub fn split_parts(text: &str, limits: ChannelLimits, language: Language) -> Vec<String> {
    let text = text.trim();
    if text.is_empty() || limits.max_parts == 0 {
        return Vec::new();
    }
    // What fits needs no layout (a long text on a one-part channel would
    // otherwise be scanned for nothing).
    if text.len() <= limits.max_part_bytes {
        return vec![text.to_string()];
    }
    let layout = Layout::new(text);
    let mut parts = Vec::new();
    let mut start = 0;
    while parts.len() + 1 < limits.max_parts && text.len() - start > limits.max_part_bytes {
        let cut = layout.cut(start, limits.max_part_bytes);
        parts.push(layout.part(start, cut));
        start = layout.skip_whitespace(cut);
    }
    parts.push(last_part(&layout, start, limits, language));
    parts
}

/// The final part: the rest if it fits, else as much as fits with the note.
fn last_part(layout: &Layout, start: usize, limits: ChannelLimits, language: Language) -> String {
    if layout.text.len() - start <= limits.max_part_bytes {
        return layout.part(start, layout.text.len());
    }
    let note = truncation_note(language);
    let room = limits.max_part_bytes.saturating_sub(note.len() + 1);
    // Too little room for even one character: the note alone says the most.
    if room < MAX_CHAR_BYTES {
        return note.to_string();
    }
    let cut = layout.cut(start, room);
    format!("{}\n{note}", layout.part(start, cut))
}

const MAX_CHAR_BYTES: usize = 4;

/// Where to end a cut of `text` that may hold at most `budget` bytes: the
/// most natural place (paragraph, line, sentence, space) that keeps at
/// least half, else `budget` itself (on a char boundary), never inside a
/// URL or a code block that could still start whole.
pub(crate) fn natural_cut(text: &str, budget: usize) -> usize {
    if text.len() <= budget {
        return text.len();
    }
    // Only the window can hold the cut: laying out the rest of a very long
    // text would cost time and memory for nothing.
    let window = &text[..floor_char_boundary(text, budget)];
    if window.is_empty() {
        return 0;
    }
    Layout::new(window).cut(0, window.len())
}

/// Characters that end a Chinese sentence or clause. No space follows them,
/// so a cut goes right after the character.
const CJK_STOPS: [char; 4] = ['。', '！', '？', '；'];

/// Where a cut may fall, best first: the derived order ranks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Boundary {
    Paragraph,
    Line,
    Sentence,
    Space,
}

impl Boundary {
    const BEST_FIRST: [Boundary; 4] = [
        Boundary::Paragraph,
        Boundary::Line,
        Boundary::Sentence,
        Boundary::Space,
    ];
}

/// A trimmed text with the places it may be cut, worked out once.
struct Layout<'a> {
    text: &'a str,
    /// Candidate cuts, by offset: the part ends before `offset`. None of them
    /// falls inside a protected unit.
    boundaries: Vec<(usize, Boundary)>,
    /// Code blocks and URLs, in order and disjoint.
    protected: Vec<Range<usize>>,
}

impl<'a> Layout<'a> {
    fn new(text: &'a str) -> Self {
        let protected = protected_units(text);
        let boundaries = text
            .char_indices()
            .filter(|&(at, _)| !strictly_inside(&protected, at))
            .filter_map(|(at, next)| classify(text, at, next).map(|kind| (at, kind)))
            .collect();
        Self {
            text,
            boundaries,
            protected,
        }
    }

    /// The trimmed part between two offsets.
    fn part(&self, start: usize, end: usize) -> String {
        self.text[start..end].trim().to_string()
    }

    fn skip_whitespace(&self, at: usize) -> usize {
        let rest = &self.text[at..];
        at + (rest.len() - rest.trim_start().len())
    }

    /// Where to end a part that starts at `start` and may hold `budget` bytes.
    fn cut(&self, start: usize, budget: usize) -> usize {
        let end = self.window_end(start, budget);
        self.best_boundary(start, end, budget)
            .unwrap_or_else(|| self.hard_cut(start, end))
    }

    /// The furthest char boundary within budget, but always past `start` so
    /// that splitting makes progress even with an absurdly small budget.
    fn window_end(&self, start: usize, budget: usize) -> usize {
        let limit = start.saturating_add(budget).min(self.text.len());
        let end = floor_char_boundary(self.text, limit);
        if end > start {
            end
        } else {
            start + self.text[start..].chars().next().map_or(0, char::len_utf8)
        }
    }

    /// The best-ranked boundary that leaves the part at least half full.
    ///
    /// Without the half-full rule an early paragraph break would win over a
    /// sentence end near the limit and waste most of a part; with only five
    /// parts per window on WeChat, that space matters. If nothing reaches
    /// half, the latest boundary of any kind still beats a hard cut.
    fn best_boundary(&self, start: usize, end: usize, budget: usize) -> Option<usize> {
        let window = self.boundaries_in(start, end);
        let half_full = start.saturating_add(budget / 2);
        Boundary::BEST_FIRST
            .iter()
            .find_map(|&kind| {
                window
                    .iter()
                    .rev()
                    .find(|&&(at, found)| found == kind && at >= half_full)
            })
            .or_else(|| window.last())
            .map(|&(at, _)| at)
    }

    /// Boundaries in `(start, end]`: a cut at `start` itself would be empty.
    fn boundaries_in(&self, start: usize, end: usize) -> &[(usize, Boundary)] {
        let from = self.boundaries.partition_point(|&(at, _)| at <= start);
        let to = self.boundaries.partition_point(|&(at, _)| at <= end);
        &self.boundaries[from..to]
    }

    /// A cut with no natural boundary: at `end`, unless that splits a
    /// protected unit which could still start the next part whole.
    fn hard_cut(&self, start: usize, end: usize) -> usize {
        match self
            .protected
            .iter()
            .find(|unit| strictly_inside_unit(unit, end))
        {
            Some(unit) if unit.start > start => unit.start,
            _ => end,
        }
    }
}

/// What kind of cut, if any, may go at `at`, just before the char `next`.
fn classify(text: &str, at: usize, next: char) -> Option<Boundary> {
    if next == '\n' {
        let blank_line_follows = next_line_is_blank(&text[at + 1..]);
        return Some(if blank_line_follows {
            Boundary::Paragraph
        } else {
            Boundary::Line
        });
    }
    match text[..at].chars().next_back() {
        Some(prev) if CJK_STOPS.contains(&prev) => Some(Boundary::Sentence),
        Some('.' | '!' | '?') if next.is_whitespace() => Some(Boundary::Sentence),
        _ if next.is_whitespace() => Some(Boundary::Space),
        _ => None,
    }
}

/// Whether the line starting at `rest` holds only whitespace. Text is
/// trimmed, so a blank line is always followed by another newline.
fn next_line_is_blank(rest: &str) -> bool {
    rest.find('\n')
        .is_some_and(|newline| rest[..newline].trim().is_empty())
}

/// Fenced code blocks and URLs, the units a cut must not split.
fn protected_units(text: &str) -> Vec<Range<usize>> {
    let mut units = Vec::new();
    let mut at = 0;
    while let Some(next) = text[at..].chars().next() {
        let rest = &text[at..];
        match fence_len(rest).or_else(|| url_len(rest)) {
            Some(len) => {
                units.push(at..at + len);
                at += len;
            }
            None => at += next.len_utf8(),
        }
    }
    units
}

const FENCE: &str = "```";

/// Length of a fenced code block starting at `rest`, closing fence included.
/// An unclosed fence protects nothing: one stray fence should not force hard
/// cuts through all the prose after it.
fn fence_len(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix(FENCE)?;
    body.find(FENCE).map(|close| 2 * FENCE.len() + close)
}

/// Length of a URL starting at `rest`. It runs to whitespace, or to a
/// backtick, which a URL never holds unescaped but Markdown puts around one.
fn url_len(rest: &str) -> Option<usize> {
    if !(rest.starts_with("http://") || rest.starts_with("https://")) {
        return None;
    }
    Some(
        rest.find(|c: char| c.is_whitespace() || c == '`')
            .unwrap_or(rest.len()),
    )
}

fn strictly_inside(units: &[Range<usize>], at: usize) -> bool {
    units.iter().any(|unit| strictly_inside_unit(unit, at))
}

/// A cut at a unit's very start or end leaves it whole; only between is bad.
fn strictly_inside_unit(unit: &Range<usize>, at: usize) -> bool {
    unit.start < at && at < unit.end
}

/// The largest char boundary at or before `at`. (`str::floor_char_boundary`
/// only became stable in Rust 1.91, and the workspace pins no toolchain.)
fn floor_char_boundary(text: &str, at: usize) -> usize {
    (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEIXIN: ChannelLimits = ChannelLimits::WEIXIN;

    fn weixin_parts(text: &str) -> Vec<String> {
        split_parts(text, WEIXIN, Language::En)
    }

    /// Every invariant a bridge relies on, whatever the input.
    fn assert_well_formed(parts: &[String], limits: ChannelLimits) {
        assert!(parts.len() <= limits.max_parts, "{} parts", parts.len());
        for part in parts {
            assert!(!part.is_empty(), "empty part");
            assert_eq!(part, part.trim(), "untrimmed part");
            assert!(
                part.len() <= limits.max_part_bytes,
                "part of {} bytes",
                part.len()
            );
        }
    }

    fn without_whitespace(text: &str) -> String {
        text.chars().filter(|c| !c.is_whitespace()).collect()
    }

    fn assert_preserves(parts: &[String], text: &str) {
        assert_eq!(
            without_whitespace(&parts.concat()),
            without_whitespace(text)
        );
    }

    fn english_paragraph(sentences: usize) -> String {
        (0..sentences)
            .map(|i| format!("Sentence number {i} says something about the handoff."))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn chinese_paragraph(sentences: usize) -> String {
        (0..sentences)
            .map(|i| format!("第{i}句话说明了这次交接的一些情况。"))
            .collect()
    }

    fn contains_uuid(text: &str) -> bool {
        const DASHES: [usize; 4] = [8, 13, 18, 23];
        text.as_bytes().windows(36).any(|window| {
            window.iter().enumerate().all(|(i, byte)| {
                if DASHES.contains(&i) {
                    *byte == b'-'
                } else {
                    byte.is_ascii_hexdigit()
                }
            })
        })
    }

    #[test]
    fn status_names_match_the_contract() {
        let reason = Some("user asked".to_string());
        let outcomes = [
            (
                Outcome::Completed {
                    final_text: "ok".into(),
                },
                "completed",
            ),
            (
                Outcome::Failed {
                    code: "c".into(),
                    message: "m".into(),
                },
                "failed",
            ),
            (
                Outcome::Blocked {
                    message: "m".into(),
                },
                "blocked",
            ),
            (Outcome::Cancelled { reason }, "cancelled"),
        ];
        for (outcome, status) in outcomes {
            assert_eq!(outcome.status(), status);
        }
    }

    #[test]
    fn humanized_completion_is_the_trimmed_final_text() {
        let outcome = Outcome::Completed {
            final_text: "  Here is your plan.\n".into(),
        };
        assert_eq!(humanize(&outcome, Language::ZhCn), "Here is your plan.");
    }

    #[test]
    fn humanized_completion_with_blank_text_is_still_a_message() {
        let outcome = Outcome::Completed {
            final_text: " \n ".into(),
        };
        assert!(!humanize(&outcome, Language::En).is_empty());
        assert!(!humanize(&outcome, Language::ZhCn).is_empty());
    }

    #[test]
    fn a_spent_budget_is_explained_in_both_languages() {
        use crate::budget::{Exhausted, Limit};
        let ex = |limit, max| Exhausted { limit, spent: max, max };
        let en = |e| budget_exhausted_message(&e, Language::En);
        let zh = |e| budget_exhausted_message(&e, Language::ZhCn);
        assert_eq!(en(ex(Limit::Tokens, 2_000_000)), "the agents reached this request's limit of 2,000,000 model tokens");
        assert_eq!(en(ex(Limit::ModelCalls, 200)), "the agents reached this request's limit of 200 model calls");
        assert_eq!(en(ex(Limit::ToolCalls, 1000)), "the agents reached this request's limit of 1,000 tool calls");
        assert_eq!(en(ex(Limit::WallClock, 3600)), "the agents reached this request's time limit of 1 hour");
        assert_eq!(en(ex(Limit::WallClock, 90)), "the agents reached this request's time limit of 90 seconds");
        assert_eq!(en(ex(Limit::WallClock, 600)), "the agents reached this request's time limit of 10 minutes");
        assert_eq!(zh(ex(Limit::ModelCalls, 4)), "智能体已达到本次请求的模型调用次数上限（4 次）");
        assert_eq!(zh(ex(Limit::ToolCalls, 5)), "智能体已达到本次请求的工具调用次数上限（5 次）");
        assert_eq!(zh(ex(Limit::Tokens, 120)), "智能体已用完本次请求的模型用量上限（120 个 token）");
        assert_eq!(zh(ex(Limit::WallClock, 2)), "智能体已达到本次请求的运行时间上限（2 秒）");
        let failed = Outcome::Failed { code: "budget_exhausted".into(), message: zh(ex(Limit::WallClock, 7200)) };
        assert_eq!(humanize(&failed, Language::ZhCn), "抱歉，这次请求没有完成：智能体已达到本次请求的运行时间上限（2 小时）");
    }

    #[test]
    fn humanized_failure_apologizes_with_the_message() {
        let outcome = Outcome::Failed {
            code: "agent_timeout".into(),
            message: "the research agent took too long".into(),
        };
        assert_eq!(
            humanize(&outcome, Language::En),
            "Sorry, I couldn't finish this request: the research agent took too long"
        );
        assert_eq!(
            humanize(&outcome, Language::ZhCn),
            "抱歉，这次请求没有完成：the research agent took too long"
        );
    }

    #[test]
    fn humanized_cancellation_without_reason_is_a_full_sentence() {
        let outcome = Outcome::Cancelled { reason: None };
        assert_eq!(
            humanize(&outcome, Language::En),
            "This request was cancelled."
        );
        assert_eq!(humanize(&outcome, Language::ZhCn), "这次请求已取消。");
    }

    #[test]
    fn humanized_outcomes_show_no_internal_ids_in_either_language() {
        let outcomes = [
            Outcome::Completed {
                final_text: "Your trip is booked.".into(),
            },
            Outcome::Failed {
                code: "invocation_failed".into(),
                message: "the booking site is down".into(),
            },
            Outcome::Failed {
                code: "task_timeout".into(),
                message: String::new(),
            },
            Outcome::Blocked {
                message: "a manager must approve the budget".into(),
            },
            Outcome::Cancelled {
                reason: Some("the user changed their mind".into()),
            },
            Outcome::Cancelled { reason: None },
        ];
        for outcome in &outcomes {
            for language in [Language::En, Language::ZhCn] {
                let text = humanize(outcome, language);
                assert!(!text.is_empty());
                assert!(!text.contains("invocation"), "{text}");
                assert!(!text.contains("task_"), "{text}");
                assert!(!contains_uuid(&text), "{text}");
            }
        }
    }

    #[test]
    fn the_uuid_detector_used_above_detects_uuids() {
        assert!(contains_uuid(
            "run 0190f5c2-7a4b-7c3d-8e9f-0123456789ab failed"
        ));
        assert!(!contains_uuid("Sorry, I couldn't finish this request."));
    }

    #[test]
    fn weixin_gets_weixin_limits_and_other_sources_one_part() {
        assert_eq!(ChannelLimits::for_source("weixin"), ChannelLimits::WEIXIN);
        assert_eq!(ChannelLimits::for_source("slack"), ChannelLimits::SINGLE);
    }

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(weixin_parts("  Hello there.\n"), vec!["Hello there."]);
    }

    #[test]
    fn empty_or_whitespace_text_has_no_parts() {
        assert!(weixin_parts("").is_empty());
        assert!(weixin_parts(" \n\t ").is_empty());
    }

    #[test]
    fn single_limits_give_exactly_the_trimmed_text() {
        let text = format!("\n{}\n\n", english_paragraph(500));
        let parts = split_parts(&text, ChannelLimits::SINGLE, Language::En);
        assert_eq!(parts, vec![text.trim().to_string()]);
    }

    #[test]
    fn every_part_of_long_english_text_fits_the_weixin_limit() {
        let text = english_paragraph(120);
        let parts = weixin_parts(&text);
        assert!(parts.len() > 1);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
    }

    #[test]
    fn every_part_of_long_chinese_text_fits_the_weixin_limit() {
        let text = chinese_paragraph(150);
        let parts = split_parts(&text, WEIXIN, Language::ZhCn);
        assert!(parts.len() > 1);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
    }

    #[test]
    fn chinese_text_without_any_punctuation_is_cut_on_char_boundaries() {
        let text = "交接".repeat(1500);
        let parts = split_parts(&text, WEIXIN, Language::ZhCn);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
    }

    #[test]
    fn chinese_text_is_cut_right_after_sentence_punctuation() {
        let text = chinese_paragraph(150);
        let parts = split_parts(&text, WEIXIN, Language::ZhCn);
        for part in &parts[..parts.len() - 1] {
            assert!(part.ends_with('。'), "ends with {:?}", part.chars().last());
        }
    }

    #[test]
    fn paragraph_boundaries_are_preferred_over_sentence_ends() {
        // Each paragraph fills well over half a part, so a paragraph break is
        // always in reach, yet a later sentence end would fit more.
        let paragraphs: Vec<String> = (0..3).map(|_| english_paragraph(25)).collect();
        assert!(paragraphs[0].len() > 1100 && paragraphs[0].len() < 1500);
        let parts = weixin_parts(&paragraphs.join("\n\n"));
        assert_eq!(parts, paragraphs);
    }

    #[test]
    fn line_breaks_are_preferred_over_sentence_ends() {
        let lines: Vec<String> = (0..3).map(|_| english_paragraph(25)).collect();
        let parts = weixin_parts(&lines.join("\n"));
        assert_eq!(parts, lines);
    }

    #[test]
    fn a_url_is_never_split() {
        let urls: Vec<String> = (0..12)
            .map(|i| format!("https://example.com/reports/{i}/{}?page=1", "x".repeat(300)))
            .collect();
        let text: String = urls
            .iter()
            .map(|url| format!("{} see {url} ", "word ".repeat(40)))
            .collect();
        let parts = weixin_parts(&text);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
        for url in &urls {
            assert!(
                parts.iter().any(|part| part.contains(url.as_str())),
                "{url} split"
            );
        }
    }

    #[test]
    fn a_hard_cut_stops_short_of_a_url() {
        // No boundary at all before the URL, and the limit falls inside it.
        let url = format!("http://example.com/{}", "y".repeat(200));
        let text = format!("{}{url}", "说".repeat(650));
        let parts = split_parts(&text, WEIXIN, Language::ZhCn);
        assert_eq!(parts, vec!["说".repeat(650), url]);
    }

    #[test]
    fn a_fenced_code_block_is_kept_whole_when_it_fits() {
        let code_line = "let answer = compute(42); // keep this line intact.\n";
        let block = format!(
            "```rust\n{}\n{}```",
            code_line.repeat(15),
            code_line.repeat(15)
        );
        assert!(block.len() < WEIXIN.max_part_bytes);
        let text = format!(
            "{}\n{block}\n{}",
            english_paragraph(20),
            english_paragraph(20)
        );
        let parts = weixin_parts(&text);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
        assert!(parts.iter().any(|part| part.contains(&block)));
    }

    #[test]
    fn an_oversized_code_block_is_hard_cut_within_the_limit() {
        let block = format!("```\n{}```", "fn step() {}\n".repeat(400));
        let text = format!("Here is the code:\n{block}\nThat is all.");
        let parts = weixin_parts(&text);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
    }

    #[test]
    fn overflow_ends_the_last_part_with_the_note_within_the_limit() {
        let cases = [
            (english_paragraph(600), Language::En),
            (chinese_paragraph(600), Language::ZhCn),
            ("交接".repeat(6000), Language::ZhCn),
        ];
        for (text, language) in cases {
            let parts = split_parts(&text, WEIXIN, language);
            assert_eq!(parts.len(), WEIXIN.max_parts);
            assert_well_formed(&parts, WEIXIN);
            let note = truncation_note(language);
            let last = parts.last().unwrap();
            assert!(last.ends_with(&format!("\n{note}")), "{last}");
            assert!(parts[..parts.len() - 1]
                .iter()
                .all(|part| !part.contains(note)));
        }
    }

    #[test]
    fn no_part_is_empty_even_with_runs_of_blank_lines() {
        let text = format!(
            "\n\n{}\n\n\n   \n\n{}\n \n\t\n{}",
            english_paragraph(30),
            chinese_paragraph(60),
            english_paragraph(30)
        );
        let parts = weixin_parts(&text);
        assert_well_formed(&parts, WEIXIN);
        assert_preserves(&parts, &text);
    }

    #[test]
    fn parts_preserve_the_text_when_it_fits() {
        let texts = [
            english_paragraph(100),
            chinese_paragraph(120),
            format!("{}\n\n{}", english_paragraph(40), chinese_paragraph(60)),
        ];
        for text in texts {
            let parts = weixin_parts(&text);
            assert_well_formed(&parts, WEIXIN);
            assert!(parts
                .iter()
                .all(|part| !part.contains(truncation_note(Language::En))));
            assert_preserves(&parts, &text);
        }
    }
}
