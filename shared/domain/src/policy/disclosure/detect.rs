//! The detection engine: running the detectors in order, keeping the hits that do not
//! overlap, splicing placeholders in, and the word and number boundaries every detector checks.

use std::ops::Range;

use regex::Regex;

use super::personal::{bank_cards, emails, id_numbers, phones};
use super::secrets::{
    authorization_headers, bearer_tokens, jwts, password_assignments, private_keys, secret_assignments, url_passwords,
    vendor_keys,
};
use super::{DisclosurePolicy, Finding};

/// A byte range of the input to replace, and what it holds.
#[derive(Debug)]
pub(super) struct Hit {
    pub(super) range: Range<usize>,
    pub(super) finding: Finding,
}

type Detector = fn(&str) -> Vec<Hit>;

/// Most specific first: where two detectors claim overlapping text, the
/// earlier one wins. The URL password comes before e-mail so that
/// `user:pw@host.com` loses only `pw`; a PEM block and vendor keys come
/// before the generic `key=value` rule so they are reported as what they
/// are; e-mail comes before phone so `13812345678@163.com` goes as one
/// address; ID numbers come before bank cards and phones, whose shapes
/// overlap theirs.
const SECRET_DETECTORS: &[Detector] = &[
    url_passwords,
    private_keys,
    vendor_keys,
    jwts,
    authorization_headers,
    bearer_tokens,
    secret_assignments,
    password_assignments,
];
const PERSONAL_DETECTORS: &[Detector] = &[emails, id_numbers, bank_cards, phones];

/// Every hit the policy asks for, without overlaps, sorted by position.
pub(super) fn find_hits(text: &str, policy: &DisclosurePolicy) -> Vec<Hit> {
    let secrets = SECRET_DETECTORS.iter().filter(|_| policy.redact_secrets);
    let personal = PERSONAL_DETECTORS.iter().filter(|_| policy.redact_personal);
    let mut kept: Vec<Hit> = Vec::new();
    for detect in secrets.chain(personal) {
        for hit in detect(text) {
            if !kept.iter().any(|k| overlaps(&k.range, &hit.range)) {
                kept.push(hit);
            }
        }
    }
    kept.sort_by_key(|hit| hit.range.start);
    kept
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// `text` with each (sorted, disjoint) hit replaced by its placeholder.
pub(super) fn splice(text: &str, hits: &[Hit]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for hit in hits {
        out.push_str(&text[copied..hit.range.start]);
        out.push_str(hit.finding.placeholder());
        copied = hit.range.end;
    }
    out.push_str(&text[copied..]);
    out
}

/// Hits for every whole match of `re` that `keep` accepts.
pub(super) fn whole_matches(re: &Regex, text: &str, finding: Finding, keep: impl Fn(Range<usize>) -> bool) -> Vec<Hit> {
    re.find_iter(text)
        .map(|m| m.range())
        .filter(|range| keep(range.clone()))
        .map(|range| Hit { range, finding })
        .collect()
}

pub(super) fn compile(pattern: &str) -> Regex {
    Regex::new(pattern).expect("built-in disclosure pattern is valid")
}

// ---------------------------------------------------------------------------
// Boundaries
//
// The regex crate has no look-around, and its `\b` is Unicode-aware: in
// "手机13812345678" or "密钥sk-…" there is no word boundary between the Han
// character and the value. Chat text in Chinese rarely has spaces, so the
// boundaries are checked here, on ASCII bytes only (a UTF-8 continuation
// byte is never ASCII, so looking at single bytes is safe).
// ---------------------------------------------------------------------------

/// Letters, digits and `_`: bytes that glue a match into a longer word.
fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The byte `distance` places before `index`, if any.
fn byte_before(bytes: &[u8], index: usize, distance: usize) -> Option<u8> {
    index.checked_sub(distance).map(|i| bytes[i])
}

/// True when no ASCII word runs on into `index` from the left, so the
/// "sk-" of "task-list" never starts a match.
pub(super) fn starts_word(text: &str, index: usize) -> bool {
    !byte_before(text.as_bytes(), index, 1).is_some_and(is_word_byte)
}

/// True when the match is neither the tail nor the head of a longer ASCII word.
pub(super) fn stands_alone_as_word(text: &str, range: &Range<usize>) -> bool {
    let glued_after = text.as_bytes().get(range.end).copied().is_some_and(is_word_byte);
    starts_word(text, range.start) && !glued_after
}

/// True when the number is not part of a longer run: no letter or digit
/// next to it, no `.`/`-`/`_` leading on to more digits (versions, dates,
/// decimals, UUID groups), and no `+` in front (a sign or a country code
/// this match did not include).
pub(super) fn stands_alone_as_number(text: &str, range: &Range<usize>) -> bool {
    let bytes = text.as_bytes();
    let before = byte_before(bytes, range.start, 1);
    let glued_before = before == Some(b'+') || continues_number(before, byte_before(bytes, range.start, 2));
    let glued_after = continues_number(bytes.get(range.end).copied(), bytes.get(range.end + 1).copied());
    !glued_before && !glued_after
}

/// Whether `next` (adjacent to a number) and `beyond` (one further out)
/// extend that number into a longer token.
fn continues_number(next: Option<u8>, beyond: Option<u8>) -> bool {
    match next {
        Some(byte) if is_word_byte(byte) => true,
        Some(b'.' | b'-') => beyond.is_some_and(|byte| byte.is_ascii_digit()),
        _ => false,
    }
}
