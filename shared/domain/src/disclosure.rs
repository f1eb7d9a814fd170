//! The disclosure policy: what a target agent may see of a handoff
//! (CONTRACT.md §2, "Disclosure policy before anything leaves").
//!
//! The bridge already filters on its side, but Baton hands the context to
//! agents and their tools, so it filters again rather than trust that. Two
//! things happen:
//!
//! - memories labelled more sensitive than [`DisclosurePolicy::max_sensitivity`]
//!   are dropped whole;
//! - every free-text field an agent is shown (the user intent, the context's
//!   texts, the constraints' lists and expected output) is scanned for
//!   secrets (API keys, tokens, passwords, private keys, under any key name
//!   including camel case) and personal identifiers (mobile and landline
//!   numbers, ID and bank card numbers, however grouped; e-mail addresses),
//!   and each one is replaced by a placeholder that says what was there, so
//!   the agent still understands the sentence.
//!
//! Every removal is recorded as a [`Redaction`], both in the result and in the
//! request's own `context.redactions`, so the agent knows something is missing
//! and an operator can see why.
//!
//! Detection errs on the side of removing: a false positive costs the agent a
//! word, a false negative leaks a credential. The exceptions are shapes that
//! are everyday in engineering chats and never secret on their own (version
//! strings, dates, timestamps, UUIDs, commit hashes, longer digit runs such as
//! order numbers); the tests pin each of those down.

use std::ops::Range;
use std::sync::LazyLock;

use chrono::{Datelike, NaiveDate};
use regex::{Captures, Match, Regex};
use serde::{Deserialize, Serialize};

use crate::request::{Constraints, ContextMemoryRef, ContextPackage, HandoffRequest, Redaction, Sensitivity};

// ---------------------------------------------------------------------------
// Policy and findings
// ---------------------------------------------------------------------------

/// What a target agent may see. Read from TOML with snake_case keys; every
/// field may be omitted and takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DisclosurePolicy {
    /// Memories labelled above this are dropped. Default: `medium`.
    pub max_sensitivity: Sensitivity,
    /// Remove API keys, tokens and passwords. Default: `true`.
    pub redact_secrets: bool,
    /// Remove phone, ID and bank card numbers and e-mail addresses. Default: `true`.
    pub redact_personal: bool,
}

impl Default for DisclosurePolicy {
    fn default() -> Self {
        Self {
            max_sensitivity: Sensitivity::Medium,
            redact_secrets: true,
            redact_personal: true,
        }
    }
}

/// One kind of thing that was removed from a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    ApiKey,
    Token,
    UrlPassword,
    Password,
    PrivateKey,
    Phone,
    ChineseId,
    BankCard,
    Email,
}

impl Finding {
    /// Every kind, secrets first.
    pub const ALL: [Self; 9] = [
        Self::ApiKey,
        Self::Token,
        Self::UrlPassword,
        Self::Password,
        Self::PrivateKey,
        Self::Phone,
        Self::ChineseId,
        Self::BankCard,
        Self::Email,
    ];

    /// What was removed, in words; used as the redaction's `reason`.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::ApiKey => "API key",
            Self::Token => "access token",
            Self::UrlPassword => "password in URL",
            Self::Password => "password",
            Self::PrivateKey => "private key",
            Self::Phone => "phone number",
            Self::ChineseId => "mainland China ID number",
            Self::BankCard => "bank card number",
            Self::Email => "e-mail address",
        }
    }

    /// The text that takes the removed value's place: `[redacted <reason>]`.
    #[must_use]
    pub fn placeholder(self) -> &'static str {
        match self {
            Self::ApiKey => "[redacted API key]",
            Self::Token => "[redacted access token]",
            Self::UrlPassword => "[redacted password in URL]",
            Self::Password => "[redacted password]",
            Self::PrivateKey => "[redacted private key]",
            Self::Phone => "[redacted phone number]",
            Self::ChineseId => "[redacted mainland China ID number]",
            Self::BankCard => "[redacted bank card number]",
            Self::Email => "[redacted e-mail address]",
        }
    }

    /// Personal identifiers are governed by `redact_personal`, the rest by
    /// `redact_secrets`.
    #[must_use]
    pub fn is_personal(self) -> bool {
        matches!(
            self,
            Self::Phone | Self::ChineseId | Self::BankCard | Self::Email
        )
    }
}

// ---------------------------------------------------------------------------
// Filtering a request
// ---------------------------------------------------------------------------

/// The request as the target may see it, with every removal recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    pub request: HandoffRequest,
    /// This filter's removals only (the bridge's own stay in the request).
    pub removed: Vec<Redaction>,
}

/// Applies `policy` to every free-text field an agent is shown (the user
/// intent, every text of the context, and every constraint: allowed and
/// forbidden actions, what needs confirmation, the expected output), and
/// drops memories above `max_sensitivity`.
///
/// Each removal becomes one [`Redaction`], appended to `removed` and to the
/// returned request's `context.redactions` after those the bridge recorded.
/// Field paths follow the wire names: `userIntent`,
/// `context.recentConversation[2].content`, `context.userMemories[m-7]` (a
/// dropped memory) or `context.userMemories[m-7].content`,
/// `context.sessionSummary`, `context.agentRuntimeSummary`,
/// `constraints.allowedActions[0]`, `constraints.requireConfirmationFor[1]`,
/// `constraints.expectedOutput`. Memories are named by id, not index, because
/// dropping earlier ones shifts the indexes of the rest.
#[must_use]
pub fn apply(policy: &DisclosurePolicy, request: &HandoffRequest) -> Filtered {
    let mut filter = Filter {
        policy,
        removed: Vec::new(),
    };
    let mut request = request.clone();
    filter.scrub("userIntent", &mut request.user_intent);
    filter.context(&mut request.context);
    filter.constraints(&mut request.constraints);
    request
        .context
        .redactions
        .extend(filter.removed.iter().cloned());
    Filtered {
        request,
        removed: filter.removed,
    }
}

/// One pass of [`apply`]: the policy plus the removals recorded so far.
struct Filter<'a> {
    policy: &'a DisclosurePolicy,
    removed: Vec<Redaction>,
}

impl Filter<'_> {
    fn context(&mut self, context: &mut ContextPackage) {
        for (index, turn) in context.recent_conversation.iter_mut().enumerate() {
            self.scrub(
                &format!("context.recentConversation[{index}].content"),
                &mut turn.content,
            );
        }
        self.memories("context.userMemories", &mut context.user_memories);
        self.memories("context.projectMemories", &mut context.project_memories);
        if let Some(summary) = &mut context.session_summary {
            self.scrub("context.sessionSummary", summary);
        }
        if let Some(summary) = &mut context.agent_runtime_summary {
            self.scrub("context.agentRuntimeSummary", summary);
        }
    }

    fn constraints(&mut self, constraints: &mut Constraints) {
        self.list("constraints.allowedActions", &mut constraints.allowed_actions);
        self.list("constraints.forbiddenActions", &mut constraints.forbidden_actions);
        self.list("constraints.requireConfirmationFor", &mut constraints.require_confirmation_for);
        if let Some(expected) = &mut constraints.expected_output {
            self.scrub("constraints.expectedOutput", expected);
        }
    }

    fn list(&mut self, list: &str, items: &mut [String]) {
        for (index, item) in items.iter_mut().enumerate() {
            self.scrub(&format!("{list}[{index}]"), item);
        }
    }

    /// Drops memories above the policy's sensitivity and scrubs the rest.
    fn memories(&mut self, list: &str, memories: &mut Vec<ContextMemoryRef>) {
        memories.retain_mut(|memory| {
            let field = format!("{list}[{}]", memory.id);
            if let Some(reason) = self.too_sensitive(memory.sensitivity) {
                self.record(field, reason);
                return false;
            }
            self.scrub(&format!("{field}.content"), &mut memory.content);
            true
        });
    }

    /// Why a memory of this sensitivity may not leave, if it may not.
    fn too_sensitive(&self, sensitivity: Sensitivity) -> Option<String> {
        let limit = self.policy.max_sensitivity;
        (rank(sensitivity) > rank(limit))
            .then(|| format!("sensitivity {sensitivity} is above {limit}"))
    }

    /// Redacts `text` in place and records one redaction per finding.
    fn scrub(&mut self, field: &str, text: &mut String) {
        let (redacted, findings) = redact_text(text, self.policy);
        if findings.is_empty() {
            return;
        }
        *text = redacted;
        for finding in findings {
            self.record(field.to_owned(), finding.reason().to_owned());
        }
    }

    fn record(&mut self, field: String, reason: String) {
        self.removed.push(Redaction { field, reason });
    }
}

/// `Sensitivity` carries no order of its own (it is a wire enum), so the
/// policy ranks it here.
fn rank(sensitivity: Sensitivity) -> u8 {
    match sensitivity {
        Sensitivity::Low => 0,
        Sensitivity::Medium => 1,
        Sensitivity::High => 2,
    }
}

// ---------------------------------------------------------------------------
// Redacting one text
// ---------------------------------------------------------------------------

/// Redacts one text; returns the new text and what was found, in order of
/// appearance (one entry per removed value).
///
/// Only the secret itself is replaced: `api_key=sk-…` keeps `api_key=`, and
/// `https://user:pw@host` keeps scheme, user and host, so the agent can still
/// tell what the text is about. Running it again on its own output finds
/// nothing more.
#[must_use]
pub fn redact_text(text: &str, policy: &DisclosurePolicy) -> (String, Vec<Finding>) {
    let hits = find_hits(text, policy);
    let findings = hits.iter().map(|hit| hit.finding).collect();
    (splice(text, &hits), findings)
}

/// A byte range of the input to replace, and what it holds.
#[derive(Debug)]
struct Hit {
    range: Range<usize>,
    finding: Finding,
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
fn find_hits(text: &str, policy: &DisclosurePolicy) -> Vec<Hit> {
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
fn splice(text: &str, hits: &[Hit]) -> String {
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
fn whole_matches(
    re: &Regex,
    text: &str,
    finding: Finding,
    keep: impl Fn(Range<usize>) -> bool,
) -> Vec<Hit> {
    re.find_iter(text)
        .map(|m| m.range())
        .filter(|range| keep(range.clone()))
        .map(|range| Hit { range, finding })
        .collect()
}

fn compile(pattern: &str) -> Regex {
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
fn starts_word(text: &str, index: usize) -> bool {
    !byte_before(text.as_bytes(), index, 1).is_some_and(is_word_byte)
}

/// True when the match is neither the tail nor the head of a longer ASCII word.
fn stands_alone_as_word(text: &str, range: &Range<usize>) -> bool {
    let glued_after = text
        .as_bytes()
        .get(range.end)
        .copied()
        .is_some_and(is_word_byte);
    starts_word(text, range.start) && !glued_after
}

/// True when the number is not part of a longer run: no letter or digit
/// next to it, no `.`/`-`/`_` leading on to more digits (versions, dates,
/// decimals, UUID groups), and no `+` in front (a sign or a country code
/// this match did not include).
fn stands_alone_as_number(text: &str, range: &Range<usize>) -> bool {
    let bytes = text.as_bytes();
    let before = byte_before(bytes, range.start, 1);
    let glued_before =
        before == Some(b'+') || continues_number(before, byte_before(bytes, range.start, 2));
    let glued_after = continues_number(
        bytes.get(range.end).copied(),
        bytes.get(range.end + 1).copied(),
    );
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

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

/// `scheme://user:password@host`; only the password group is replaced.
static URL_PASSWORD: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?x)
        [A-Za-z][A-Za-z0-9+.-]*://     # scheme
        [^\s:/?\#@]*                   # user (may be empty: redis://:pw@host)
        :(?P<password>[^\s/?\#@]+)
        @[^\s/?\#@]                    # a host must follow, or it is no userinfo
        ",
    )
});

fn url_passwords(text: &str) -> Vec<Hit> {
    URL_PASSWORD
        .captures_iter(text)
        .filter_map(|caps| caps.name("password"))
        .map(|m| Hit {
            range: m.range(),
            finding: Finding::UrlPassword,
        })
        .collect()
}

/// Keys whose prefix names the vendor, so the shape alone is proof enough.
static VENDOR_KEY: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?x)
          sk-(?:proj-)?[A-Za-z0-9_-]{20,}             # OpenAI (and sk-ant-… alike)
        | gh[opsur]_[A-Za-z0-9]{20,}                  # GitHub OAuth, app, user, refresh
        | github_pat_[A-Za-z0-9_]{20,}                # GitHub fine-grained token
        | (?:AKIA|ASIA)[0-9A-Z]{16}                   # AWS access key id
        | xox[abprs]-[A-Za-z0-9-]{10,}                # Slack
        | AIza[0-9A-Za-z_-]{35}                       # Google API key
        ",
    )
});

fn vendor_keys(text: &str) -> Vec<Hit> {
    whole_matches(&VENDOR_KEY, text, Finding::ApiKey, |range| {
        stands_alone_as_word(text, &range)
    })
}

/// A JSON Web Token: three base64url parts, the first a JSON object
/// (`{"` encodes as `eyJ`).
static JWT: LazyLock<Regex> =
    LazyLock::new(|| compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"));

fn jwts(text: &str) -> Vec<Hit> {
    whole_matches(&JWT, text, Finding::Token, |range| {
        stands_alone_as_word(text, &range)
    })
}

/// A PEM private key block (PKCS#1, PKCS#8, OpenSSH, EC …), whole. A block
/// cut off before its END line is removed to the end of the text.
static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)")
});

fn private_keys(text: &str) -> Vec<Hit> {
    whole_matches(&PRIVATE_KEY, text, Finding::PrivateKey, |_| true)
}

/// The credentials of an `Authorization` header, whatever the scheme
/// (`Basic dXNlcjpw…`, `Bearer …`, `token …`) or none; the scheme stays.
static AUTHORIZATION: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r#"(?i)(?P<key>(?:proxy-)?authorization)["']?[ \t]*[:=][ \t]*["']?(?:(?:bearer|basic|token|digest)[ \t]+)?(?P<token>[A-Za-z0-9._~+/=:-]{8,})"#,
    )
});

fn authorization_headers(text: &str) -> Vec<Hit> {
    AUTHORIZATION
        .captures_iter(text)
        .filter(|caps| caps.name("key").is_some_and(|m| starts_word(text, m.start())))
        .filter_map(|caps| caps.name("token"))
        .filter(|token| looks_like_credential(token.as_str()))
        .map(|token| Hit {
            range: token.range(),
            finding: Finding::Token,
        })
        .collect()
}

/// "Authorization: required", "the bearer responsibilities": an English
/// word is not a credential; a credential has a capital, a digit or a sign.
fn looks_like_credential(value: &str) -> bool {
    !value.bytes().all(|b| b.is_ascii_lowercase())
}

/// `Bearer <token>` as in an Authorization header; the word stays.
static BEARER: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?i)(?P<scheme>bearer)[ \t]+(?P<token>[A-Za-z0-9._~+/=-]{16,})"));

fn bearer_tokens(text: &str) -> Vec<Hit> {
    BEARER
        .captures_iter(text)
        .filter(|caps| {
            caps.name("scheme")
                .is_some_and(|m| starts_word(text, m.start()))
        })
        .filter_map(|caps| caps.name("token"))
        .filter(|token| looks_like_credential(token.as_str()))
        .map(|token| Hit {
            range: token.range(),
            finding: Finding::Token,
        })
        .collect()
}

/// Whatever comes before the key word in the same identifier: `GITHUB_`,
/// `client_`, `x-`, `db.`, and camel-case heads such as the `Secret` of
/// `SecretAccessKey` or the `client` of `clientSecret`. Lazy, so the key word
/// found is the last one before the sign. The whole key must still start a
/// word ([`assignments`]).
const KEY_HEAD: &str = r"[A-Za-z0-9_.-]*?";

/// After the key: an optional closing quote (JSON), `=` or `:` (also the
/// full-width `：` of Chinese text), then the value, quoted or bare. Blanks
/// around the sign never span a line, so "password:" at a line's end does
/// not swallow the next line.
const ASSIGNED_VALUE: &str =
    r#"["']?[ \t]*[:=：][ \t]*(?:"(?P<dq>[^"\r\n]*)"|'(?P<sq>[^'\r\n]*)'|(?P<bare>[^\s"'`]+))"#;

/// `api_key=…`, `clientSecret: …`, `GITHUB_TOKEN=…`, `"accessToken": "…"`,
/// `SecretAccessKey: …`, `aws_secret_access_key = …`, `privateKey=…`, and the
/// names Chinese clouds and WeChat use: `AccessKeySecret`, `appSecret`,
/// `EncodingAESKey`.
static SECRET_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)(?P<key>{KEY_HEAD}(?P<word>api[_-]?key|access[_-]?key|private[_-]?key|aes[_-]?key|secret(?:[_-]?key)?|token|credentials?)){ASSIGNED_VALUE}"
    ))
});

/// `password=…`, `passwd: …`, `pwd=…`, `DB_PASSWORD=…`, `dbPassword: …`,
/// `密码：…`.
static PASSWORD_ASSIGNMENT: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)(?P<key>{KEY_HEAD}(?:passw(?:or)?d|pwd|passphrase)|密码|口令){ASSIGNED_VALUE}"
    ))
});

/// Shortest value a generic `token=`/`secret=` assignment must have: below
/// that it is a setting ("token: none"), not a credential.
const MIN_SECRET_CHARS: usize = 12;

fn secret_assignments(text: &str) -> Vec<Hit> {
    assignments(&SECRET_ASSIGNMENT, text)
        .filter(|(_, value)| non_blank_chars(value.as_str()) >= MIN_SECRET_CHARS)
        .map(|(key, value)| Hit {
            range: value.range(),
            finding: secret_kind(key),
        })
        .collect()
}

fn password_assignments(text: &str) -> Vec<Hit> {
    // Any non-empty value counts: a password may be as short as it likes.
    assignments(&PASSWORD_ASSIGNMENT, text)
        .map(|(_, value)| Hit {
            range: value.range(),
            finding: Finding::Password,
        })
        .collect()
}

/// (key word, value) of each `key = value` match whose key starts a word
/// and whose value is real rather than a reference to one. The key word is
/// the last word of the key (`AccessKey` of `SecretAccessKey`), where the
/// pattern names one.
fn assignments<'t>(re: &'t Regex, text: &'t str) -> impl Iterator<Item = (&'t str, Match<'t>)> {
    re.captures_iter(text).filter_map(move |caps| {
        let key = caps.name("key")?;
        let word = caps.name("word").unwrap_or(key);
        let value = assigned_value(&caps)?;
        (starts_word(text, key.start())
            && !value.as_str().trim().is_empty()
            && !is_reference(value.as_str()))
        .then_some((word.as_str(), value))
    })
}

fn assigned_value<'t>(caps: &Captures<'t>) -> Option<Match<'t>> {
    caps.name("dq")
        .or_else(|| caps.name("sq"))
        .or_else(|| caps.name("bare"))
}

/// Values that only point at a secret kept elsewhere (`${DB_PASSWORD}`,
/// `$API_TOKEN`, `<your-key>`) or that this filter already replaced: the
/// agent needs to see those, and leaving them makes filtering idempotent.
fn is_reference(value: &str) -> bool {
    let env_var = value.strip_prefix('$').is_some_and(|name| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    });
    env_var
        || value.starts_with("${")
        || value.starts_with("{{")
        || value.starts_with("[redacted")
        || (value.starts_with('<') && value.ends_with('>'))
}

/// A key word that names a private key is one, one that names a key is an
/// API key; a token or secret is a token.
fn secret_kind(word: &str) -> Finding {
    let key = word.to_ascii_lowercase();
    if key.contains("private") {
        Finding::PrivateKey
    } else if key.contains("key") {
        Finding::ApiKey
    } else {
        Finding::Token
    }
}

fn non_blank_chars(value: &str) -> usize {
    value.chars().filter(|c| !c.is_whitespace()).count()
}

// ---------------------------------------------------------------------------
// Personal identifiers
// ---------------------------------------------------------------------------

/// An address with a dotted domain. `user@localhost` has none and is kept:
/// it names a local login (a database role, an ssh target), not a mailbox
/// anyone outside the machine can reach. `@zhang` is a chat mention, kept.
static EMAIL: LazyLock<Regex> =
    LazyLock::new(|| compile(r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}"));

fn emails(text: &str) -> Vec<Hit> {
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
static ID_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?x)
          [0-9]{{6}} {GAP} (?: [0-9]{{8}} {GAP} [0-9]{{3}} | [0-9]{{4}} {GAP} [0-9]{{4}} {GAP} [0-9]{{3}} ) [0-9Xx]
        | [0-9]{{4}} (?: {GAP} [0-9]{{4}} ){{3}} {GAP} [0-9][0-9Xx]
        "
    ))
});

fn id_numbers(text: &str) -> Vec<Hit> {
    whole_matches(&ID_NUMBER, text, Finding::ChineseId, |range| {
        stands_alone_as_number(text, &range) && is_valid_id_number(&id_characters(&text[range]))
    })
}

/// The ID number without its group separators.
fn id_characters(written: &str) -> String {
    written.chars().filter(|c| c.is_ascii_alphanumeric()).collect()
}

/// Eighteen digits are common (order numbers, snowflake ids), so only a
/// plausible birth date and a correct ISO 7064 MOD 11-2 check character make
/// one an ID number.
fn is_valid_id_number(id: &str) -> bool {
    let Some((body, check)) = id.split_at_checked(17) else {
        return false;
    };
    let birth_date = &body[6..14];
    is_plausible_date(birth_date)
        && id_check_char(body)
            .is_some_and(|expected| check.eq_ignore_ascii_case(expected.encode_utf8(&mut [0; 4])))
}

/// The ISO 7064 MOD 11-2 check character for the first 17 digits of an ID.
fn id_check_char(body: &str) -> Option<char> {
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
    NaiveDate::parse_from_str(yyyymmdd, "%Y%m%d")
        .is_ok_and(|date| (1900..=2099).contains(&date.year()))
}

/// 13–19 digits, bare or in groups of four split by spaces or dashes.
static CARD_NUMBER: LazyLock<Regex> =
    LazyLock::new(|| compile(r"[0-9]{4}(?:[ -]?[0-9]{4}){2,3}(?:[ -]?[0-9]{1,3})?"));

fn bank_cards(text: &str) -> Vec<Hit> {
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
fn luhn_valid(digits: &str) -> bool {
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
static MAINLAND_MOBILE: LazyLock<Regex> = LazyLock::new(|| {
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
static MAINLAND_LANDLINE: LazyLock<Regex> = LazyLock::new(|| {
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
static INTERNATIONAL_PHONE: LazyLock<Regex> =
    LazyLock::new(|| compile(r"\+[0-9](?:[ ().-]{0,2}[0-9]){7,14}"));

fn phones(text: &str) -> Vec<Hit> {
    [&*MAINLAND_MOBILE, &*MAINLAND_LANDLINE, &*INTERNATIONAL_PHONE]
        .into_iter()
        .flat_map(|re| {
            whole_matches(re, text, Finding::Phone, |range| {
                stands_alone_as_number(text, &range)
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Refused bodies
//
// A body intake refuses never reaches an agent, but it is kept for an
// operator (in `baton.dead`) and its refusal reason travels in a header and a
// reply. Neither may carry what the policy would have removed from a valid
// request. No target was chosen for a refused body, so the strictest policy
// applies: secrets and personal identifiers alike.
// ---------------------------------------------------------------------------

/// How much of a refused body is kept for an operator: enough to see what
/// was wrong, bounded so a huge body does not become a huge dead letter.
pub const REFUSED_BODY_KEPT_BYTES: usize = 64 * 1024;

/// How much of a refused body is scanned: the largest body a valid request
/// may have, so every secret a valid body could hold is found before the
/// text is cut.
const REFUSED_BODY_SCANNED_BYTES: usize = crate::request::MAX_BODY_BYTES;

/// Text about a refused message (its reason, say) with every secret and
/// personal identifier replaced.
#[must_use]
pub fn redact_strictly(text: &str) -> String {
    redact_text(text, &DisclosurePolicy::default()).0
}

/// A refused body as it may be kept: read as UTF-8 (invalid bytes become
/// U+FFFD), redacted strictly, and cut to `keep` bytes with a note saying how
/// large the body was. A clean body under `keep` comes back unchanged.
#[must_use]
pub fn redact_refused_body(body: &[u8], keep: usize) -> Vec<u8> {
    let scanned = &body[..body.len().min(REFUSED_BODY_SCANNED_BYTES)];
    let text = redact_strictly(&String::from_utf8_lossy(scanned));
    if text.len() <= keep && scanned.len() == body.len() {
        return text.into_bytes();
    }
    let mut cut = keep.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n[cut: the body had {} bytes]", &text[..cut], body.len()).into_bytes()
}

/// The disclosure section of the profiles file: a default policy and one
/// per `targetAgent` that needs another.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DisclosureConfig {
    pub default: DisclosurePolicy,
    pub targets: std::collections::BTreeMap<String, DisclosurePolicy>,
}

impl DisclosureConfig {
    /// The policy for a request's target agent.
    pub fn for_target(&self, target: &str) -> &DisclosurePolicy {
        self.targets.get(target).unwrap_or(&self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::{sample_request_json, MemoryScope};
    use Finding::*;

    /// A valid test ID number (the textbook example, check character X).
    const ID: &str = "11010519491231002X";
    const OPENAI_KEY: &str = "sk-proj-Abc123Def456Ghi789Jkl012";

    /// (input, findings in order). Near-misses expect nothing.
    const CORPUS: &[(&str, &[Finding])] = &[
        // --- API keys ---
        ("use sk-proj-Abc123Def456Ghi789Jkl012 for now", &[ApiKey]),
        ("key:sk-abcdefghijklmnopqrstuvwxyz012345", &[ApiKey]),
        ("密钥sk-abcdefghijklmnopqrstuvwxyz012345谢谢", &[ApiKey]),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", &[ApiKey]),
        ("github_pat_11ABCDEFG0123456789_abcdefghij", &[ApiKey]),
        ("aws AKIAIOSFODNN7EXAMPLE here", &[ApiKey]),
        ("slack xoxb-1234567890-abcdefghij", &[ApiKey]),
        ("maps AIzaSyD-0123456789abcdefghijABCDEFGHIJ_ ok", &[ApiKey]),
        ("api_key=abcd1234efgh5678", &[ApiKey]),
        ("export OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz012345", &[ApiKey]),
        // --- tokens ---
        ("GITHUB_TOKEN: 0123456789abcdef", &[Token]),
        (r#"{"access_token": "ya29.a0AfH6SMBx-long-token"}"#, &[Token]),
        ("client_secret = 's3cr3t-value-here'", &[Token]),
        ("Authorization: Bearer abcdef0123456789xyz", &[Token]),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            &[Token],
        ),
        // --- passwords ---
        ("postgres://app:hunter2@db.internal:5432/app", &[UrlPassword]),
        ("redis://:s3cret@cache:6379", &[UrlPassword]),
        ("login?user=bob&password=hunter2", &[Password]),
        ("passwd: correct-horse", &[Password]),
        ("pwd=abc123", &[Password]),
        ("数据库密码：Xy9#kq", &[Password]),
        ("DB_PASSWORD='p@ss word'", &[Password]),
        // --- phones ---
        ("call me at 13812345678.", &[Phone]),
        ("手机13912345678谢谢", &[Phone]),
        ("电话：+86 138 1234 5678", &[Phone]),
        ("86-139-1234-5678", &[Phone]),
        ("office +1 (415) 555-2671", &[Phone]),
        ("London +44 20 7946 0958", &[Phone]),
        // --- ID numbers ---
        ("身份证11010519491231002X", &[ChineseId]),
        ("id 11010519491231002x", &[ChineseId]),
        // --- bank cards ---
        ("card 4111 1111 1111 1111 exp 12/28", &[BankCard]),
        ("4111111111111111", &[BankCard]),
        ("5500-0000-0000-0004", &[BankCard]),
        ("amex 378282246310005", &[BankCard]),
        ("银行卡6222021234567890128", &[BankCard]),
        // --- e-mail ---
        ("mail zhang.san@example.com", &[Email]),
        ("写信到li.si+work@mail.example.cn吧", &[Email]),
        ("13812345678@163.com", &[Email]),
        // --- mobile numbers in groups (the `x`-flag class bug let these through) ---
        ("call 138 1234 5678 tonight", &[Phone]),
        ("call 138-1234-5678 tonight", &[Phone]),
        ("+86 138 1234 5678", &[Phone]),
        ("+86-138-1234-5678", &[Phone]),
        ("+8613812345678", &[Phone]),
        ("0086 138 1234 5678", &[Phone]),
        ("0086-13812345678", &[Phone]),
        ("(+86) 139 1234 5678", &[Phone]),
        ("（+86）13912345678", &[Phone]),
        ("手机：138 1234 5678，谢谢", &[Phone]),
        ("手机号138　1234　5678", &[Phone]), // ideographic spaces
        ("tel 86 138 1234 5678", &[Phone]),
        ("confirm with 15012345678 before paying", &[Phone]),
        // --- landlines ---
        ("office 010-12345678", &[Phone]),
        ("office (010) 1234 5678", &[Phone]),
        ("office (010)12345678", &[Phone]),
        ("办公室（010）12345678", &[Phone]),
        ("深圳 0755 8888 6666", &[Phone]),
        ("0755-88886666", &[Phone]),
        ("上海021-6123-4567转802", &[Phone]),
        ("021-6123-4567 ext 89", &[Phone]),
        ("021-6123-4567 ext. 89", &[Phone]),
        ("021-6123-4567-801", &[Phone]),
        ("0371-123-4567", &[Phone]),
        ("0086 10 1234 5678", &[Phone]),
        ("+86 10 1234 5678", &[Phone]),
        ("+86 (21) 6123 4567", &[Phone]),
        // --- ID numbers written in groups ---
        ("身份证 110101 19900307 1233", &[ChineseId]),
        ("ID 110101-19900307-1233", &[ChineseId]),
        ("ID 440304 19900307 123X", &[ChineseId]),
        ("ID 440304-1990-0307-123x", &[ChineseId]),
        ("身份证号：110105 19491231 002X。", &[ChineseId]),
        ("ID 310115198511204566", &[ChineseId]),
        ("ID 4403 0419 9003 0712 3X", &[ChineseId]),
        // --- credentials after camel-case and other key names ---
        ("SecretAccessKey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
        ("secretAccessKey=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
        (r#"{"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}"#, &[ApiKey]),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &[ApiKey]),
        ("clientSecret: 8f1c2d3e4b5a69788796a5b4", &[Token]),
        (r#"{"clientSecret":"8f1c2d3e4b5a69788796a5b4"}"#, &[Token]),
        ("apiKey=a1b2c3d4e5f6g7h8i9j0", &[ApiKey]),
        ("const apiKey = 'a1b2c3d4e5f6g7h8i9j0';", &[ApiKey]),
        ("accessToken: a1b2c3d4e5f6g7h8i9j0", &[Token]),
        ("refreshToken=a1b2c3d4e5f6g7h8i9j0k1", &[Token]),
        ("X-Api-Key: a1b2c3d4e5f6g7h8i9j0", &[ApiKey]),
        ("AccessKeySecret: 8f1c2d3e4b5a69788796a5b4", &[Token]),
        ("appSecret=8f1c2d3e4b5a69788796a5b4", &[Token]),
        ("EncodingAESKey: abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", &[ApiKey]),
        ("dbPassword: hunter2", &[Password]),
        ("adminPwd=abc123", &[Password]),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", &[Token]),
        (r#""authorization": "Bearer abcdef0123456789xyz""#, &[Token]),
        ("authorization: token 0123456789abcdef0123", &[Token]),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1abc\n-----END RSA PRIVATE KEY----- done",
            &[PrivateKey],
        ),
        ("key: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA", &[PrivateKey]),
        ("privateKey=0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318", &[PrivateKey]),
        // --- several, in order of appearance ---
        (
            "a@b.io, 13812345678, sk-abcdefghijklmnopqrstuvwxyz012345",
            &[Email, Phone, ApiKey],
        ),
        // --- near-misses: nothing to redact ---
        ("身份证110105194912310021", &[]), // wrong MOD 11-2 check digit
        ("card 4111 1111 1111 1112", &[]), // fails Luhn
        ("1381234567", &[]),               // 10 digits
        ("run 98765138123456780000", &[]), // 11-digit mobile inside a 20-digit run
        ("upgrade 1.2.3 to 13.8.1234.5678", &[]),
        ("due 2026-11-30", &[]),
        ("at 20261130123045", &[]),
        ("at 20261130123049", &[]), // a timestamp that happens to pass Luhn
        ("order 202611301234567890", &[]), // date-prefixed 18-digit order number
        ("epoch ms 1764460800000", &[]),
        ("task-list and risk-free-investment-strategy-2026", &[]),
        ("desk-organizer-and-storage-boxes", &[]),
        ("see https://example.com/a?b=c", &[]),
        ("https://example.com:8080/path", &[]),
        ("@zhang 看一下", &[]),
        ("psql -U user@localhost", &[]),
        ("git@github.com:baton/fleet.git", &[]),
        ("ssh://git@github.com/baton/fleet.git", &[]),
        ("forgot my password again", &[]),
        ("password:\nnext line", &[]),
        ("max_tokens: 128000000000000", &[]),
        ("token: short", &[]),
        ("api_key=${OPENAI_API_KEY}", &[]),
        ("password=$DB_PASSWORD", &[]),
        ("the bearer responsibilities", &[]),
        ("+1 to this idea", &[]),
        ("uuid 550e8400-e29b-41d4-a716-446655440000", &[]),
        ("uuid 123e4567-e89b-12d3-a456-426614174000", &[]),
        ("commit 3f786850e387550fdab836ed7e6dc881de23001b", &[]),
        ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8", &[]),
        ("pi 3.14159265358979323", &[]),
        ("host 192.168.100.138", &[]),
        ("身份证 110101 19900307 123X", &[]), // wrong check character
        ("ID 110101-19900230-1233", &[]),    // no 30 February
        ("version 13.8.1234.5678 and v138.1234.5678", &[]),
        ("2026-11-30 13:45:00", &[]),
        ("2026-11-30T13:45:00+08:00", &[]),
        ("at 13:45, then 13:8:12", &[]),
        ("epoch 1764460800 and 1764460800123", &[]),
        ("price ¥138.00 or 1380元, total 13,812.45", &[]),
        ("price 0.0755 per unit", &[]),
        ("订单号 202611301381234567", &[]),
        ("order 20261130-1381-2345", &[]),
        ("sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", &[]),
        ("uuid 01938f4e-1381-7234-8567-0755888866660", &[]),
        ("max_tokens: 4096, tokenizer: cl100k_base", &[]),
        ("tokenBudget: 100000000000000", &[]),
        ("secretName: my-app-secret-v2", &[]),
        ("accessKeyId: someid12345678", &[]),
        ("api_key_env = \"DEEPSEEK_API_KEY\"", &[]),
        ("apiKey: ${API_KEY}", &[]),
        ("accessToken=<your-token>", &[]),
        ("Authorization: required for every call", &[]),
        ("rotate the private key monthly", &[]),
        ("room 0101 floor 2", &[]),
    ];

    fn redact(text: &str) -> (String, Vec<Finding>) {
        redact_text(text, &DisclosurePolicy::default())
    }

    #[test]
    fn the_corpus_finds_exactly_what_it_should() {
        let failures: Vec<String> = CORPUS
            .iter()
            .filter_map(|&(input, expected)| {
                let (output, found) = redact(input);
                (found != expected).then(|| {
                    format!("{input:?}: expected {expected:?}, got {found:?} -> {output:?}")
                })
            })
            .collect();
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[test]
    fn the_corpus_covers_every_kind_and_enough_near_misses() {
        for kind in Finding::ALL {
            assert!(CORPUS.iter().any(|(_, f)| f.contains(&kind)), "{kind:?}");
        }
        assert!(CORPUS.len() >= 40);
        assert!(CORPUS.iter().filter(|(_, f)| f.is_empty()).count() >= 20);
    }

    #[test]
    fn near_misses_come_back_unchanged() {
        for (input, _) in CORPUS.iter().filter(|(_, f)| f.is_empty()) {
            assert_eq!(redact(input).0, *input);
        }
    }

    #[test]
    fn redacting_twice_finds_nothing_more() {
        for (input, _) in CORPUS {
            let (once, _) = redact(input);
            let (twice, found) = redact(&once);
            assert_eq!(found, [], "{input:?} -> {once:?}");
            assert_eq!(twice, once);
        }
    }

    /// Under `(?x)` the regex crate drops a literal space even inside a
    /// character class, so `[ -]` silently becomes `[-]` (how grouped phone
    /// numbers once got through). No verbose pattern may have one.
    #[test]
    fn no_verbose_pattern_has_a_literal_space_in_a_class() {
        let verbose = [&*URL_PASSWORD, &*VENDOR_KEY, &*ID_NUMBER, &*MAINLAND_MOBILE, &*MAINLAND_LANDLINE];
        for re in verbose {
            assert!(re.as_str().starts_with("(?x)"));
            let (mut in_class, mut escaped) = (false, false);
            for c in re.as_str().chars() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '[' => in_class = true,
                    ']' => in_class = false,
                    ' ' => assert!(!in_class, "a literal space in a class of {}", re.as_str()),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn placeholders_name_the_reason() {
        for kind in Finding::ALL {
            assert_eq!(kind.placeholder(), format!("[redacted {}]", kind.reason()));
        }
    }

    #[test]
    fn only_the_value_of_an_assignment_is_replaced() {
        assert_eq!(
            redact("api_key=abcd1234efgh5678").0,
            "api_key=[redacted API key]"
        );
        assert_eq!(
            redact("DB_PASSWORD='p@ss word' next").0,
            "DB_PASSWORD='[redacted password]' next"
        );
        assert_eq!(
            redact("Authorization: Bearer abcdef0123456789xyz").0,
            "Authorization: Bearer [redacted access token]"
        );
    }

    #[test]
    fn a_url_keeps_scheme_user_and_host() {
        assert_eq!(
            redact("postgres://app:hunter2@db.internal:5432/app").0,
            "postgres://app:[redacted password in URL]@db.internal:5432/app"
        );
    }

    #[test]
    fn personal_values_are_replaced_whole() {
        assert_eq!(
            redact("手机13912345678，邮箱a@b.io").0,
            "手机[redacted phone number]，邮箱[redacted e-mail address]"
        );
    }

    #[test]
    fn a_computed_id_number_is_found_and_a_wrong_check_digit_is_not() {
        let body = "44030419900307123";
        let check = id_check_char(body).unwrap();
        assert_eq!(check, 'X');
        assert_eq!(redact(&format!("ID {body}{check}")).1, [ChineseId]);
        assert_eq!(redact(&format!("ID {body}0")).1, []);
        assert_eq!(id_check_char(&ID[..17]), Some('X'));
    }

    #[test]
    fn an_id_number_needs_a_real_birth_date() {
        // Correct check digit, but born on 30 February.
        let body = "11010519490230001";
        let id = format!("{body}{}", id_check_char(body).unwrap());
        assert!(!is_valid_id_number(&id));
    }

    #[test]
    fn luhn_accepts_test_cards_and_rejects_one_digit_off() {
        assert!(luhn_valid("4111111111111111"));
        assert!(luhn_valid("378282246310005"));
        assert!(!luhn_valid("4111111111111112"));
    }

    #[test]
    fn policy_switches_select_what_is_redacted() {
        let text = "a@b.io 13812345678 sk-abcdefghijklmnopqrstuvwxyz012345";
        let no_personal = DisclosurePolicy {
            redact_personal: false,
            ..DisclosurePolicy::default()
        };
        assert_eq!(redact_text(text, &no_personal).1, [ApiKey]);
        let no_secrets = DisclosurePolicy {
            redact_secrets: false,
            ..DisclosurePolicy::default()
        };
        assert_eq!(redact_text(text, &no_secrets).1, [Email, Phone]);
        let neither = DisclosurePolicy {
            redact_secrets: false,
            redact_personal: false,
            ..DisclosurePolicy::default()
        };
        assert_eq!(redact_text(text, &neither), (text.to_owned(), vec![]));
    }

    #[test]
    fn the_policy_reads_from_toml_with_defaults() {
        let empty: DisclosurePolicy = toml::from_str("").unwrap();
        assert_eq!(empty, DisclosurePolicy::default());
        assert_eq!(empty.max_sensitivity, Sensitivity::Medium);
        assert!(empty.redact_secrets && empty.redact_personal);

        let custom: DisclosurePolicy =
            toml::from_str("max_sensitivity = \"high\"\nredact_personal = false").unwrap();
        assert_eq!(custom.max_sensitivity, Sensitivity::High);
        assert!(custom.redact_secrets);
        assert!(!custom.redact_personal);

        assert!(toml::from_str::<DisclosurePolicy>("redact_everything = true").is_err());
        assert!(toml::from_str::<DisclosurePolicy>("max_sensitivity = \"secret\"").is_err());
    }

    // --- refused bodies ---

    #[test]
    fn a_refused_body_keeps_its_shape_but_not_its_secrets() {
        let body = br#"{"id":"x","constraints":{"requireConfirmationFor":["call 138 1234 5678"]},"apiKey":"a1b2c3d4e5f6g7h8i9j0"}"#;
        let kept = String::from_utf8(redact_refused_body(body, REFUSED_BODY_KEPT_BYTES)).unwrap();
        assert_eq!(
            kept,
            r#"{"id":"x","constraints":{"requireConfirmationFor":["call [redacted phone number]"]},"apiKey":"[redacted API key]"}"#
        );
    }

    #[test]
    fn a_clean_refused_body_comes_back_byte_for_byte() {
        assert_eq!(redact_refused_body(b"{not json", 100), b"{not json");
    }

    #[test]
    fn a_large_refused_body_is_cut_after_it_is_redacted() {
        let mut body = "é".repeat(40).into_bytes();
        body.extend_from_slice(b" 13812345678 and more text after it");
        let kept = String::from_utf8(redact_refused_body(&body, 41)).unwrap();
        assert_eq!(kept, format!("{}\n[cut: the body had {} bytes]", "é".repeat(20), body.len()));
        let kept = String::from_utf8(redact_refused_body(&body, 200)).unwrap();
        assert!(kept.contains("[redacted phone number]") && !kept.contains("13812345678"), "{kept}");
    }

    #[test]
    fn a_refused_body_that_is_not_utf8_is_still_redacted() {
        let mut body = b"\xff\xfe pwd=hunter2 ".to_vec();
        body.push(0xC3);
        let kept = String::from_utf8(redact_refused_body(&body, 100)).unwrap();
        assert!(kept.contains("pwd=[redacted password]") && !kept.contains("hunter2"), "{kept}");
    }

    // --- apply ---

    fn memory(id: &str, content: &str, sensitivity: Sensitivity) -> ContextMemoryRef {
        ContextMemoryRef {
            id: id.to_owned(),
            scope: MemoryScope::User,
            r#type: "fact".to_owned(),
            content: content.to_owned(),
            sensitivity,
            source: None,
        }
    }

    fn redaction(field: &str, reason: &str) -> Redaction {
        Redaction {
            field: field.to_owned(),
            reason: reason.to_owned(),
        }
    }

    /// A request with a secret or identifier in every filtered field.
    fn leaky_request() -> HandoffRequest {
        let mut request: HandoffRequest =
            serde_json::from_value(sample_request_json("h-1", "codex", "en")).unwrap();
        request.user_intent = format!("deploy with key {OPENAI_KEY}");
        let context = &mut request.context;
        context.recent_conversation[0].content = "my number is 13812345678".to_owned();
        context.recent_conversation[1].content = "noted, mail a@b.io".to_owned();
        context.user_memories = vec![
            memory("m-1", "prefers short replies", Sensitivity::Low),
            memory("m-7", &format!("ID {ID}"), Sensitivity::High),
            memory("m-8", "card 4111 1111 1111 1111", Sensitivity::Medium),
        ];
        context.project_memories = vec![memory(
            "p-1",
            "db at postgres://app:hunter2@db:5432",
            Sensitivity::Low,
        )];
        context.session_summary = Some("GITHUB_TOKEN=0123456789abcdef0123".to_owned());
        context.agent_runtime_summary = Some("password: tr0ub4dor".to_owned());
        context.redactions = vec![redaction("context.userMemories[m-0]", "bridge policy")];
        let constraints = &mut request.constraints;
        constraints.allowed_actions = vec!["draft_text".to_owned(), "call (010) 1234 5678".to_owned()];
        constraints.forbidden_actions = vec!["use apiKey=a1b2c3d4e5f6g7h8i9j0".to_owned()];
        constraints.require_confirmation_for = vec!["paying".to_owned(), "texting 138 1234 5678".to_owned()];
        constraints.expected_output = Some("reply to zhang@example.com".to_owned());
        request
    }

    const SECRETS: &[&str] = &[
        OPENAI_KEY,
        "13812345678",
        "a@b.io",
        ID,
        "4111 1111 1111 1111",
        "hunter2",
        "0123456789abcdef0123",
        "tr0ub4dor",
        "zhang@example.com",
        "1234 5678",
        "a1b2c3d4e5f6g7h8i9j0",
    ];

    #[test]
    fn apply_records_every_removal_with_its_field_path() {
        let filtered = apply(&DisclosurePolicy::default(), &leaky_request());
        let expected = [
            redaction("userIntent", "API key"),
            redaction("context.recentConversation[0].content", "phone number"),
            redaction("context.recentConversation[1].content", "e-mail address"),
            redaction(
                "context.userMemories[m-7]",
                "sensitivity high is above medium",
            ),
            redaction("context.userMemories[m-8].content", "bank card number"),
            redaction("context.projectMemories[p-1].content", "password in URL"),
            redaction("context.sessionSummary", "access token"),
            redaction("context.agentRuntimeSummary", "password"),
            redaction("constraints.allowedActions[1]", "phone number"),
            redaction("constraints.forbiddenActions[0]", "API key"),
            redaction("constraints.requireConfirmationFor[1]", "phone number"),
            redaction("constraints.expectedOutput", "e-mail address"),
        ];
        assert_eq!(filtered.removed, expected);
    }

    #[test]
    fn apply_drops_memories_above_the_limit_and_keeps_the_rest() {
        let filtered = apply(&DisclosurePolicy::default(), &leaky_request());
        let ids: Vec<_> = filtered
            .request
            .context
            .user_memories
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        assert_eq!(ids, ["m-1", "m-8"]);

        let permissive = DisclosurePolicy {
            max_sensitivity: Sensitivity::High,
            ..DisclosurePolicy::default()
        };
        let kept = apply(&permissive, &leaky_request());
        assert_eq!(kept.request.context.user_memories.len(), 3);
        assert_eq!(
            kept.request.context.user_memories[1].content,
            "ID [redacted mainland China ID number]"
        );
    }

    #[test]
    fn apply_keeps_the_bridges_redactions_first() {
        let filtered = apply(&DisclosurePolicy::default(), &leaky_request());
        let recorded = &filtered.request.context.redactions;
        assert_eq!(
            recorded[0],
            redaction("context.userMemories[m-0]", "bridge policy")
        );
        assert_eq!(recorded[1..], filtered.removed[..]);
    }

    #[test]
    fn nothing_secret_is_left_anywhere_in_the_filtered_request() {
        let filtered = apply(&DisclosurePolicy::default(), &leaky_request());
        let json = serde_json::to_string(&filtered.request).unwrap();
        for secret in SECRETS {
            assert!(!json.contains(secret), "{secret} leaked: {json}");
        }
    }

    #[test]
    fn without_personal_redaction_contacts_stay_but_keys_go() {
        let policy = DisclosurePolicy {
            redact_personal: false,
            ..DisclosurePolicy::default()
        };
        let filtered = apply(&policy, &leaky_request());
        let json = serde_json::to_string(&filtered.request).unwrap();
        for kept in [
            "13812345678",
            "a@b.io",
            "zhang@example.com",
            "4111 1111 1111 1111",
        ] {
            assert!(json.contains(kept), "{kept} was removed");
        }
        for gone in [OPENAI_KEY, "hunter2", "tr0ub4dor", "0123456789abcdef0123"] {
            assert!(!json.contains(gone), "{gone} leaked");
        }
    }

    #[test]
    fn a_clean_request_passes_through_unchanged() {
        let request: HandoffRequest =
            serde_json::from_value(sample_request_json("h-2", "docs_agent", "zh-CN")).unwrap();
        let filtered = apply(&DisclosurePolicy::default(), &request);
        assert_eq!(filtered.request, request);
        assert!(filtered.removed.is_empty());
    }
}
