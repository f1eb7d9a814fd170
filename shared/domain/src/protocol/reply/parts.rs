//! Cutting a message into the `parts` a bridge sends as separate chat messages: natural
//! boundaries first, fenced code blocks and URLs kept whole when they fit.

use std::ops::Range;

use crate::protocol::language::Language;

/// Limits for one chat channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelLimits {
    pub max_part_bytes: usize,
    pub max_parts: usize,
}

impl ChannelLimits {
    /// WeChat: 2048 bytes per text message, and a user's message opens a
    /// window of 5 customer-service messages.
    pub const WEIXIN: Self = Self { max_part_bytes: 2048, max_parts: 5 };

    /// Channels without known limits get the whole text as one message.
    pub const SINGLE: Self = Self { max_part_bytes: usize::MAX, max_parts: 1 };

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
    const BEST_FIRST: [Boundary; 4] = [Boundary::Paragraph, Boundary::Line, Boundary::Sentence, Boundary::Space];
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
        Self { text, boundaries, protected }
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
        self.best_boundary(start, end, budget).unwrap_or_else(|| self.hard_cut(start, end))
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
            .find_map(|&kind| window.iter().rev().find(|&&(at, found)| found == kind && at >= half_full))
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
        match self.protected.iter().find(|unit| strictly_inside_unit(unit, end)) {
            Some(unit) if unit.start > start => unit.start,
            _ => end,
        }
    }
}

/// What kind of cut, if any, may go at `at`, just before the char `next`.
fn classify(text: &str, at: usize, next: char) -> Option<Boundary> {
    if next == '\n' {
        let blank_line_follows = next_line_is_blank(&text[at + 1..]);
        return Some(if blank_line_follows { Boundary::Paragraph } else { Boundary::Line });
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
    rest.find('\n').is_some_and(|newline| rest[..newline].trim().is_empty())
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
    Some(rest.find(|c: char| c.is_whitespace() || c == '`').unwrap_or(rest.len()))
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
    (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
}
