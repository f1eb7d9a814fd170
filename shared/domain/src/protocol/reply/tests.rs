//! Tests of humanizing and of cutting into parts.

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
        assert!(part.len() <= limits.max_part_bytes, "part of {} bytes", part.len());
    }
}

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

fn assert_preserves(parts: &[String], text: &str) {
    assert_eq!(without_whitespace(&parts.concat()), without_whitespace(text));
}

fn english_paragraph(sentences: usize) -> String {
    (0..sentences)
        .map(|i| format!("Sentence number {i} says something about the handoff."))
        .collect::<Vec<_>>()
        .join(" ")
}

fn chinese_paragraph(sentences: usize) -> String {
    (0..sentences).map(|i| format!("第{i}句话说明了这次交接的一些情况。")).collect()
}

fn contains_uuid(text: &str) -> bool {
    const DASHES: [usize; 4] = [8, 13, 18, 23];
    text.as_bytes().windows(36).any(|window| {
        window.iter().enumerate().all(
            |(i, byte)| {
                if DASHES.contains(&i) {
                    *byte == b'-'
                } else {
                    byte.is_ascii_hexdigit()
                }
            },
        )
    })
}

#[test]
fn status_names_match_the_contract() {
    let reason = Some("user asked".to_string());
    let outcomes = [
        (Outcome::Completed { final_text: "ok".into() }, "completed"),
        (Outcome::Failed { code: ErrorCode::Failed, message: "m".into() }, "failed"),
        (Outcome::Blocked { message: "m".into() }, "blocked"),
        (Outcome::Cancelled { reason }, "cancelled"),
    ];
    for (outcome, status) in outcomes {
        assert_eq!(outcome.status().as_str(), status);
    }
}

#[test]
fn humanized_completion_is_the_trimmed_final_text() {
    let outcome = Outcome::Completed { final_text: "  Here is your plan.\n".into() };
    assert_eq!(humanize(&outcome, Language::ZhCn), "Here is your plan.");
}

#[test]
fn humanized_completion_with_blank_text_is_still_a_message() {
    let outcome = Outcome::Completed { final_text: " \n ".into() };
    assert!(!humanize(&outcome, Language::En).is_empty());
    assert!(!humanize(&outcome, Language::ZhCn).is_empty());
}

#[test]
fn a_spent_budget_is_explained_in_both_languages() {
    use crate::policy::budget::{Exhausted, Limit};
    let ex = |limit, max| Exhausted { limit, spent: max, max };
    let en = |e: Exhausted| e.message(Language::En);
    let zh = |e: Exhausted| e.message(Language::ZhCn);
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
    let failed = Outcome::Failed { code: ErrorCode::BudgetExhausted, message: zh(ex(Limit::WallClock, 7200)) };
    assert_eq!(
        humanize(&failed, Language::ZhCn),
        "抱歉，这次请求没有完成：智能体已达到本次请求的运行时间上限（2 小时）"
    );
}

#[test]
fn humanized_failure_apologizes_with_the_message() {
    let outcome = Outcome::Failed { code: ErrorCode::AgentTimeout, message: "the research agent took too long".into() };
    assert_eq!(
        humanize(&outcome, Language::En),
        "Sorry, I couldn't finish this request: the research agent took too long"
    );
    assert_eq!(humanize(&outcome, Language::ZhCn), "抱歉，这次请求没有完成：the research agent took too long");
}

#[test]
fn humanized_cancellation_without_reason_is_a_full_sentence() {
    let outcome = Outcome::Cancelled { reason: None };
    assert_eq!(humanize(&outcome, Language::En), "This request was cancelled.");
    assert_eq!(humanize(&outcome, Language::ZhCn), "这次请求已取消。");
}

#[test]
fn humanized_outcomes_show_no_internal_ids_in_either_language() {
    let outcomes = [
        Outcome::Completed { final_text: "Your trip is booked.".into() },
        Outcome::Failed { code: ErrorCode::HostError, message: "the booking site is down".into() },
        Outcome::Failed { code: ErrorCode::Failed, message: String::new() },
        Outcome::Blocked { message: "a manager must approve the budget".into() },
        Outcome::Cancelled { reason: Some("the user changed their mind".into()) },
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
    assert!(contains_uuid("run 0190f5c2-7a4b-7c3d-8e9f-0123456789ab failed"));
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
    let urls: Vec<String> =
        (0..12).map(|i| format!("https://example.com/reports/{i}/{}?page=1", "x".repeat(300))).collect();
    let text: String = urls.iter().map(|url| format!("{} see {url} ", "word ".repeat(40))).collect();
    let parts = weixin_parts(&text);
    assert_well_formed(&parts, WEIXIN);
    assert_preserves(&parts, &text);
    for url in &urls {
        assert!(parts.iter().any(|part| part.contains(url.as_str())), "{url} split");
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
    let block = format!("```rust\n{}\n{}```", code_line.repeat(15), code_line.repeat(15));
    assert!(block.len() < WEIXIN.max_part_bytes);
    let text = format!("{}\n{block}\n{}", english_paragraph(20), english_paragraph(20));
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
        assert!(parts[..parts.len() - 1].iter().all(|part| !part.contains(note)));
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
        assert!(parts.iter().all(|part| !part.contains(truncation_note(Language::En))));
        assert_preserves(&parts, &text);
    }
}
