//! Detectors for personal identifiers: e-mail addresses, ID numbers (with their check
//! character and birth date), bank card numbers (Luhn) and mainland and international phone numbers.

use std::ops::Range;
use std::sync::LazyLock;

use chrono::{Datelike, NaiveDate};
use regex::Regex;

use super::detect::{compile, stands_alone_as_number, stands_alone_as_word, whole_matches, Hit};
use super::Finding;

// ---------------------------------------------------------------------------
// Personal identifiers
// ---------------------------------------------------------------------------

/// An address with a dotted domain. `user@localhost` has none and is kept:
/// it names a local login (a database role, an ssh target), not a mailbox
/// anyone outside the machine can reach. `@zhang` is a chat mention, kept.
static EMAIL: LazyLock<Regex> = LazyLock::new(|| compile(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"));

pub(super) fn emails(text: &str) -> Vec<Hit> {
    whole_matches(&EMAIL, text, Finding::Email, |range| {
        stands_alone_as_word(text, &range) && !is_remote_login(text, &range)
    })
}

/// `ssh://git@github.com/…` and `git@github.com:org/repo.git` are server
/// logins in a repository address, not mailboxes; agents need them intact.
fn is_remote_login(text: &str, range: &Range<usize>) -> bool {
    let in_url = text[..range.start].ends_with("://");
    let scp_path = text[range.end..]
        .strip_prefix(':')
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|path| path.contains('/') || path.ends_with(".git"));
    in_url || scp_path
}

/// What may stand between the digit groups of a written number: nothing, a
/// space (also the no-break and the ideographic space of Chinese input), or
/// a dash. Spelled with escapes on purpose: under the `x` flag the regex
/// crate ignores a literal space even inside a character class, so `[ -]`
/// there would silently mean `[-]`.
const GAP: &str = r"[\x20\u{A0}\u{3000}-]?";

/// Resident ID number: six-digit area, birth date, sequence, check character;
/// bare, or written in groups (6-8-4, 6-4-4-4, or 4-4-4-4-2 like a card).
pub(super) static ID_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?x)
          [0-9]{{6}} {GAP} (?: [0-9]{{8}} {GAP} [0-9]{{3}} | [0-9]{{4}} {GAP} [0-9]{{4}} {GAP} [0-9]{{3}} ) [0-9Xx]
        | [0-9]{{4}} (?: {GAP} [0-9]{{4}} ){{3}} {GAP} [0-9][0-9Xx]
        "
    ))
});

pub(super) fn id_numbers(text: &str) -> Vec<Hit> {
    whole_matches(&ID_NUMBER, text, Finding::ChineseId, |range| {
        stands_alone_as_number(text, &range) && is_valid_id_number(&id_characters(&text[range]))
    })
}

/// The ID number without its group separators.
fn id_characters(written: &str) -> String {
    written.chars().filter(char::is_ascii_alphanumeric).collect()
}

/// Eighteen digits are common (order numbers, snowflake ids), so only a
/// plausible birth date and a correct ISO 7064 MOD 11-2 check character make
/// one an ID number.
pub(super) fn is_valid_id_number(id: &str) -> bool {
    let Some((body, check)) = id.split_at_checked(17) else {
        return false;
    };
    let birth_date = &body[6..14];
    is_plausible_date(birth_date)
        && id_check_char(body).is_some_and(|expected| check.eq_ignore_ascii_case(expected.encode_utf8(&mut [0; 4])))
}

/// The ISO 7064 MOD 11-2 check character for the first 17 digits of an ID.
pub(super) fn id_check_char(body: &str) -> Option<char> {
    const WEIGHTS: [u32; 17] = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2];
    const CHECK_CHARS: &[u8; 11] = b"10X98765432";
    if body.len() != WEIGHTS.len() {
        return None;
    }
    let mut sum = 0;
    for (c, weight) in body.chars().zip(WEIGHTS) {
        sum += c.to_digit(10)? * weight;
    }
    Some(char::from(CHECK_CHARS[(sum % 11) as usize]))
}

/// `YYYYMMDD`, a real calendar day between 1900 and 2099.
fn is_plausible_date(yyyymmdd: &str) -> bool {
    NaiveDate::parse_from_str(yyyymmdd, "%Y%m%d").is_ok_and(|date| (1900..=2099).contains(&date.year()))
}

/// 13–19 digits, bare or in groups of four split by spaces or dashes.
static CARD_NUMBER: LazyLock<Regex> = LazyLock::new(|| compile(r"[0-9]{4}(?:[ -]?[0-9]{4}){2,3}(?:[ -]?[0-9]{1,3})?"));

pub(super) fn bank_cards(text: &str) -> Vec<Hit> {
    whole_matches(&CARD_NUMBER, text, Finding::BankCard, |range| {
        stands_alone_as_number(text, &range) && is_card_number(&digits_of(&text[range]))
    })
}

/// A plausible payment card: right length, an issuer range of a payment
/// network (first digit 2–6: Mastercard, Amex/JCB/Diners, Visa, UnionPay and
/// Discover), not a compact date or timestamp, and a valid Luhn check digit.
/// The issuer and date rules keep 13-digit millisecond timestamps and
/// date-prefixed order numbers, a tenth of which pass Luhn by chance, out.
fn is_card_number(digits: &str) -> bool {
    (13..=19).contains(&digits.len())
        && matches!(digits.as_bytes()[0], b'2'..=b'6')
        && !is_plausible_date(&digits[..8])
        && luhn_valid(digits)
}

fn digits_of(text: &str) -> String {
    text.chars().filter(char::is_ascii_digit).collect()
}

/// The Luhn check: from the right, double every second digit (minus 9 when
/// over 9); the sum must end in 0.
pub(super) fn luhn_valid(digits: &str) -> bool {
    let sum: u32 = digits
        .bytes()
        .rev()
        .map(|b| u32::from(b - b'0'))
        .enumerate()
        .map(|(position, digit)| match (position % 2, digit * 2) {
            (0, _) => digit,
            (_, doubled) if doubled > 9 => doubled - 9,
            (_, doubled) => doubled,
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Mainland mobile numbers: `1[3-9]` and nine more digits, optionally after
/// `+86`/`0086`/`86`/`(+86)`, and optionally grouped 3-4-4 by spaces or
/// dashes.
pub(super) static MAINLAND_MOBILE: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?x)
        (?: (?: (?:\+|00)?86 | [(（]\+86[)）] ) {GAP} )?   # country code
        1[3-9][0-9] {GAP} [0-9]{{4}} {GAP} [0-9]{{4}}       # 3-4-4
        "
    ))
});

/// Mainland landline numbers: an area code (`010`, `02x`, `0xxx`; in
/// parentheses or not; without its 0 after `+86`/`0086`), then a local number
/// of 7 or 8 digits, grouped or not, and maybe an extension.
pub(super) static MAINLAND_LANDLINE: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?x)
        (?: [(（]? 0 (?:10|2[0-9]|[3-9][0-9]{{2}}) [)）]?                   # area code
          | (?:\+|00)86 {GAP} [(（]? (?:10|2[0-9]|[3-9][0-9]{{2}}) [)）]?    # or after the country code
        )
        {GAP} [1-9][0-9]{{2,3}} {GAP} [0-9]{{4}}                          # local number
        (?: {GAP} (?:(?i:ext)\.?|(?i:x)|转|分机) {GAP} [0-9]{{1,6}} | -[0-9]{{1,6}} )?   # extension
        "
    ))
});

/// International numbers written with a leading `+`: 8 to 15 digits in all
/// (E.164 allows at most 15), with the usual separators between them.
static INTERNATIONAL_PHONE: LazyLock<Regex> = LazyLock::new(|| compile(r"\+[0-9](?:[ ().-]{0,2}[0-9]){7,14}"));

pub(super) fn phones(text: &str) -> Vec<Hit> {
    [&*MAINLAND_MOBILE, &*MAINLAND_LANDLINE, &*INTERNATIONAL_PHONE]
        .into_iter()
        .flat_map(|re| whole_matches(re, text, Finding::Phone, |range| stands_alone_as_number(text, &range)))
        .collect()
}
