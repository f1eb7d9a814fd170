//! Outgoing messages: how big a body may be, how an oversized one is cut,
//! and when a message the broker refused is tried again. Pure: the relay
//! carries these decisions out.
//!
//! A body over the bound is never handed to the broker (RabbitMQ closes the
//! channel on a message over its `max_message_size`, which would take every
//! message in flight with it). A bridge message is cut instead: its longest
//! texts are shortened to one common length, each ending with the reply's
//! "the full result is kept" note, since the full text stays in Postgres.
//! Anything else over the bound is dead-lettered, its body cut the same way.

use std::time::Duration;

use serde_json::Value;

use crate::protocol::language::Language;
use crate::protocol::reply::{natural_cut, truncation_note};

/// What the relay does with a row before publishing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the bound: publish as it is.
    Send,
    /// A bridge message over the bound: publish it cut, so the bridge still
    /// hears (a reply that is cut rather than lost).
    Cut,
    /// An internal message over the bound: it can never be published; move it aside.
    TooBig,
}

pub fn verdict(size: usize, max_bytes: usize, bridge_message: bool) -> Verdict {
    match (size <= max_bytes, bridge_message) {
        (true, _) => Verdict::Send,
        (false, true) => Verdict::Cut,
        (false, false) => Verdict::TooBig,
    }
}

/// Whether a body is a `BridgeStatus` or a `BridgeReply` (docs/bridge-protocol.md#statuses-and-replies).
pub fn is_bridge_message(body: &Value) -> bool {
    matches!(body["type"].as_str(), Some("reply" | "status"))
}

/// The language a body's notes are written in: the reply's own, else English.
pub fn language_of(body: &Value) -> Language {
    body["language"].as_str().and_then(Language::parse).unwrap_or(Language::En)
}

/// Bytes `value` takes as compact JSON, counted without building the text.
pub fn json_len(value: &Value) -> usize {
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).expect("a Value always serializes");
    counter.0
}

struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes a string's content takes inside a JSON string (quotes excluded).
/// Counted by bytes: only ASCII is ever escaped, and a multi-byte character
/// is written as it is.
pub fn json_str_len(s: &str) -> usize {
    s.len() + s.bytes().map(extra_escaped_bytes).sum::<usize>()
}

fn extra_escaped_bytes(b: u8) -> usize {
    match b {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
        0..=0x1f => 5,
        _ => 0,
    }
}

fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// `text`, cut so that its JSON content takes at most `max` bytes, ending
/// with the "full result is kept" note on its own line. Unchanged when it fits.
pub fn bound_text(text: &str, max: usize, language: Language) -> String {
    // Escaping only adds bytes: a text longer than `max` needs no count.
    if text.len() <= max && json_str_len(text) <= max {
        return text.to_string();
    }
    let note = truncation_note(language);
    let Some(room) = max.checked_sub(json_str_len(note) + json_str_len("\n")) else {
        return String::new();
    };
    let cut = natural_cut(text, prefix_within(text, room));
    format!("{}\n{note}", text[..cut].trim_end())
}

/// The longest prefix (in bytes, on a char boundary) whose JSON content fits `room`.
fn prefix_within(text: &str, room: usize) -> usize {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += escaped_len(c);
        if used > room {
            return at;
        }
    }
    text.len()
}

/// A body cut to at most `max_bytes` of JSON, or `None` when it already fits.
///
/// Every string longer than a common length is cut to it (with the note), the
/// length chosen as large as the bound allows: a reply's `text`, its single
/// part and `result.finalText` are cut alike, and short fields (ids, status,
/// language) stay whole. A body whose structure alone is over the bound (no
/// long strings to cut) becomes a short object saying so.
pub fn fit(body: &Value, max_bytes: usize, language: Language) -> Option<Value> {
    fit_sized(body, json_len(body), max_bytes, language)
}

/// [`fit`], for a caller that already knows the body's JSON size.
pub fn fit_sized(body: &Value, total: usize, max_bytes: usize, language: Language) -> Option<Value> {
    if total <= max_bytes {
        return None;
    }
    // Each string's length before escapes, a slight underestimate that costs
    // no scan of a huge text; the result is checked below, and escapes only
    // make `keep` smaller.
    let mut lengths = vec![];
    strings(body, &mut |s| lengths.push(s.len()));
    let mut keep = longest_kept(&lengths, total, max_bytes);
    while keep > 0 {
        let cut = cut_strings(body, keep, language);
        if json_len(&cut) <= max_bytes {
            return Some(cut);
        }
        // A string shorter than the note grows when cut; try a smaller length.
        keep /= 2;
    }
    Some(serde_json::json!({ "truncated": truncation_note(language), "bytes": total }))
}

/// The largest string length `keep` such that cutting every longer string
/// to `keep` brings the body within `max_bytes`.
fn longest_kept(lengths: &[usize], total: usize, max_bytes: usize) -> usize {
    let size_with = |keep: usize| total - lengths.iter().map(|&l| l.saturating_sub(keep)).sum::<usize>();
    let (mut low, mut high) = (0, lengths.iter().copied().max().unwrap_or(0));
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if size_with(mid) <= max_bytes {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    low
}

fn strings<'a>(value: &'a Value, visit: &mut impl FnMut(&'a str)) {
    match value {
        Value::String(s) => visit(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, visit)),
        Value::Object(fields) => fields.values().for_each(|v| strings(v, visit)),
        _ => {}
    }
}

fn cut_strings(value: &Value, keep: usize, language: Language) -> Value {
    match value {
        Value::String(s) => Value::String(bound_text(s, keep, language)),
        Value::Array(items) => items.iter().map(|v| cut_strings(v, keep, language)).collect(),
        Value::Object(fields) => fields.iter().map(|(k, v)| (k.clone(), cut_strings(v, keep, language))).collect(),
        other => other.clone(),
    }
}

/// How long to wait before trying again after `attempt` failures (1, 2, …):
/// `base`, doubling each time, never more than `cap`.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let doublings = attempt.saturating_sub(1).min(20);
    base.saturating_mul(1 << doublings).min(cap)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_within_the_bound_is_sent_as_it_is() {
        assert_eq!(verdict(10, 10, false), Verdict::Send);
        assert_eq!(verdict(11, 10, true), Verdict::Cut);
        assert_eq!(verdict(11, 10, false), Verdict::TooBig);
        assert_eq!(fit(&json!({"a": "short"}), 100, Language::En), None);
    }

    #[test]
    fn json_lengths_count_escapes() {
        let v = json!({"t": "a\"b\n\u{1}é中"});
        assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len());
        assert_eq!(json_str_len("a\"b\n\u{1}é中"), 1 + 2 + 1 + 2 + 6 + 2 + 3);
    }

    #[test]
    fn a_long_text_is_cut_on_a_natural_boundary_with_the_note() {
        let text = "First paragraph here.\n\nSecond one is much longer and goes on and on. ".repeat(50);
        let cut = bound_text(&text, 300, Language::En);
        assert!(json_str_len(&cut) <= 300, "{}", cut.len());
        assert!(cut.ends_with(truncation_note(Language::En)), "{cut}");
        let body = cut.strip_suffix(truncation_note(Language::En)).unwrap().trim_end();
        assert!(body.ends_with('.'), "cut after a sentence: {body}");
        assert_eq!(bound_text("fits", 300, Language::En), "fits");
    }

    #[test]
    fn escapes_count_against_the_room() {
        let text = "\u{1}".repeat(1000);
        let cut = bound_text(&text, 200, Language::ZhCn);
        assert!(json_str_len(&cut) <= 200);
        assert!(cut.ends_with(truncation_note(Language::ZhCn)));
    }

    #[test]
    fn a_huge_reply_is_cut_evenly_and_keeps_its_shape() {
        let final_text = "All good. ".repeat(400_000);
        let reply = json!({
            "type": "reply", "handoffId": "h1", "status": "completed", "language": "zh-CN",
            "text": final_text, "parts": [final_text], "result": {"runId": "r1", "finalText": final_text, "agents": ["writer"]},
        });
        let max = 64 * 1024;
        let cut = fit(&reply, max, language_of(&reply)).expect("over the bound");
        assert!(json_len(&cut) <= max);
        assert!(json_len(&cut) > max * 9 / 10, "the room is used: {}", json_len(&cut));
        assert_eq!(cut["handoffId"], "h1");
        assert_eq!(cut["result"]["agents"][0], "writer");
        assert_eq!(cut["text"], cut["result"]["finalText"]);
        assert_eq!(cut["text"], cut["parts"][0]);
        assert!(cut["text"].as_str().unwrap().ends_with(truncation_note(Language::ZhCn)));
    }

    #[test]
    fn a_body_too_big_for_its_structure_becomes_a_short_notice() {
        let many: Vec<u32> = (0..10_000).collect();
        let cut = fit(&json!({"n": many}), 200, Language::En).unwrap();
        assert!(json_len(&cut) <= 200, "{cut}");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let (base, cap) = (Duration::from_secs(1), Duration::from_secs(60));
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n, base, cap).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(u32::MAX, base, cap), cap);
    }
}
