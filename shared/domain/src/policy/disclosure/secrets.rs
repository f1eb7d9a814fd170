//! Detectors for secrets: URL passwords, vendor API keys, JWTs, PEM private keys,
//! authorization headers, bearer tokens and `key = value` assignments under secret-looking names.

use std::sync::LazyLock;

use regex::{Captures, Match, Regex};

use super::detect::{compile, stands_alone_as_word, starts_word, whole_matches, Hit};
use super::Finding;

// ---------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------

/// `scheme://user:password@host`; only the password group is replaced.
pub(super) static URL_PASSWORD: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?x)
        [A-Za-z][A-Za-z0-9+.-]*://     # scheme
        [^\s:/?\#@]*                   # user (may be empty: redis://:pw@host)
        :(?P<password>[^\s/?\#@]+)
        @[^\s/?\#@]                    # a host must follow, or it is no userinfo
        ",
    )
});

pub(super) fn url_passwords(text: &str) -> Vec<Hit> {
    URL_PASSWORD
        .captures_iter(text)
        .filter_map(|caps| caps.name("password"))
        .map(|m| Hit { range: m.range(), finding: Finding::UrlPassword })
        .collect()
}

/// Keys whose prefix names the vendor, so the shape alone is proof enough.
pub(super) static VENDOR_KEY: LazyLock<Regex> = LazyLock::new(|| {
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

pub(super) fn vendor_keys(text: &str) -> Vec<Hit> {
    whole_matches(&VENDOR_KEY, text, Finding::ApiKey, |range| stands_alone_as_word(text, &range))
}

/// A JSON Web Token: three base64url parts, the first a JSON object
/// (`{"` encodes as `eyJ`).
static JWT: LazyLock<Regex> =
    LazyLock::new(|| compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"));

pub(super) fn jwts(text: &str) -> Vec<Hit> {
    whole_matches(&JWT, text, Finding::Token, |range| stands_alone_as_word(text, &range))
}

/// A PEM private key block (PKCS#1, PKCS#8, OpenSSH, EC …), whole. A block
/// cut off before its END line is removed to the end of the text.
static PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)")
});

pub(super) fn private_keys(text: &str) -> Vec<Hit> {
    whole_matches(&PRIVATE_KEY, text, Finding::PrivateKey, |_| true)
}

/// The credentials of an `Authorization` header, whatever the scheme
/// (`Basic dXNlcjpw…`, `Bearer …`, `token …`) or none; the scheme stays.
static AUTHORIZATION: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r#"(?i)(?P<key>(?:proxy-)?authorization)["']?[ \t]*[:=][ \t]*["']?(?:(?:bearer|basic|token|digest)[ \t]+)?(?P<token>[A-Za-z0-9._~+/=:-]{8,})"#,
    )
});

pub(super) fn authorization_headers(text: &str) -> Vec<Hit> {
    credentials_after(&AUTHORIZATION, "key", text)
}

/// The `token` of each match whose `word` group starts a word and which
/// looks like a credential rather than an English word.
fn credentials_after(pattern: &Regex, word: &str, text: &str) -> Vec<Hit> {
    pattern
        .captures_iter(text)
        .filter(|caps| caps.name(word).is_some_and(|m| starts_word(text, m.start())))
        .filter_map(|caps| caps.name("token"))
        .filter(|token| looks_like_credential(token.as_str()))
        .map(|token| Hit { range: token.range(), finding: Finding::Token })
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

pub(super) fn bearer_tokens(text: &str) -> Vec<Hit> {
    credentials_after(&BEARER, "scheme", text)
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
    compile(&format!(r"(?i)(?P<key>{KEY_HEAD}(?:passw(?:or)?d|pwd|passphrase)|密码|口令){ASSIGNED_VALUE}"))
});

/// Shortest value a generic `token=`/`secret=` assignment must have: below
/// that it is a setting ("token: none"), not a credential.
const MIN_SECRET_CHARS: usize = 12;

pub(super) fn secret_assignments(text: &str) -> Vec<Hit> {
    assignments(&SECRET_ASSIGNMENT, text)
        .filter(|(_, value)| non_blank_chars(value.as_str()) >= MIN_SECRET_CHARS)
        .map(|(key, value)| Hit { range: value.range(), finding: secret_kind(key) })
        .collect()
}

pub(super) fn password_assignments(text: &str) -> Vec<Hit> {
    // Any non-empty value counts: a password may be as short as it likes.
    assignments(&PASSWORD_ASSIGNMENT, text)
        .map(|(_, value)| Hit { range: value.range(), finding: Finding::Password })
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
        (starts_word(text, key.start()) && !value.as_str().trim().is_empty() && !is_reference(value.as_str()))
            .then_some((word.as_str(), value))
    })
}

fn assigned_value<'t>(caps: &Captures<'t>) -> Option<Match<'t>> {
    caps.name("dq").or_else(|| caps.name("sq")).or_else(|| caps.name("bare"))
}

/// Values that only point at a secret kept elsewhere (`${DB_PASSWORD}`,
/// `$API_TOKEN`, `<your-key>`) or that this filter already replaced: the
/// agent needs to see those, and leaving them makes filtering idempotent.
fn is_reference(value: &str) -> bool {
    let env_var = value.strip_prefix('$').is_some_and(|name| {
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
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
