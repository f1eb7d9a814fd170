//! Tests of the disclosure policy and its detectors.

use super::corpus::{CORPUS, ID, OPENAI_KEY};
use super::personal::*;
use super::secrets::*;
use super::*;
use crate::protocol::request::{sample_request_json, MemoryScope};
use Finding::*;

fn redact(text: &str) -> (String, Vec<Finding>) {
    redact_text(text, &DisclosurePolicy::default())
}

#[test]
fn the_corpus_finds_exactly_what_it_should() {
    let failures: Vec<String> = CORPUS
        .iter()
        .filter_map(|&(input, expected)| {
            let (output, found) = redact(input);
            (found != expected).then(|| format!("{input:?}: expected {expected:?}, got {found:?} -> {output:?}"))
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
    assert_eq!(redact("api_key=abcd1234efgh5678").0, "api_key=[redacted API key]");
    assert_eq!(redact("DB_PASSWORD='p@ss word' next").0, "DB_PASSWORD='[redacted password]' next");
    assert_eq!(redact("Authorization: Bearer abcdef0123456789xyz").0, "Authorization: Bearer [redacted access token]");
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
    assert_eq!(redact("手机13912345678，邮箱a@b.io").0, "手机[redacted phone number]，邮箱[redacted e-mail address]");
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
    let no_personal = DisclosurePolicy { redact_personal: false, ..DisclosurePolicy::default() };
    assert_eq!(redact_text(text, &no_personal).1, [ApiKey]);
    let no_secrets = DisclosurePolicy { redact_secrets: false, ..DisclosurePolicy::default() };
    assert_eq!(redact_text(text, &no_secrets).1, [Email, Phone]);
    let neither = DisclosurePolicy { redact_secrets: false, redact_personal: false, ..DisclosurePolicy::default() };
    assert_eq!(redact_text(text, &neither), (text.to_owned(), vec![]));
}

#[test]
fn the_policy_reads_from_toml_with_defaults() {
    let empty: DisclosurePolicy = toml::from_str("").unwrap();
    assert_eq!(empty, DisclosurePolicy::default());
    assert_eq!(empty.max_sensitivity, Sensitivity::Medium);
    assert!(empty.redact_secrets && empty.redact_personal);

    let custom: DisclosurePolicy = toml::from_str("max_sensitivity = \"high\"\nredact_personal = false").unwrap();
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
    Redaction { field: field.to_owned(), reason: reason.to_owned() }
}

/// A request with a secret or identifier in every filtered field.
fn leaky_request() -> HandoffRequest {
    let mut request: HandoffRequest = serde_json::from_value(sample_request_json("h-1", "codex", "en")).unwrap();
    request.user_intent = format!("deploy with key {OPENAI_KEY}");
    let context = &mut request.context;
    context.recent_conversation[0].content = "my number is 13812345678".to_owned();
    context.recent_conversation[1].content = "noted, mail a@b.io".to_owned();
    context.user_memories = vec![
        memory("m-1", "prefers short replies", Sensitivity::Low),
        memory("m-7", &format!("ID {ID}"), Sensitivity::High),
        memory("m-8", "card 4111 1111 1111 1111", Sensitivity::Medium),
    ];
    context.project_memories = vec![memory("p-1", "db at postgres://app:hunter2@db:5432", Sensitivity::Low)];
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
        redaction("context.userMemories[m-7]", "sensitivity high is above medium"),
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
    let ids: Vec<_> = filtered.request.context.user_memories.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m-1", "m-8"]);

    let permissive = DisclosurePolicy { max_sensitivity: Sensitivity::High, ..DisclosurePolicy::default() };
    let kept = apply(&permissive, &leaky_request());
    assert_eq!(kept.request.context.user_memories.len(), 3);
    assert_eq!(kept.request.context.user_memories[1].content, "ID [redacted mainland China ID number]");
}

#[test]
fn apply_keeps_the_bridges_redactions_first() {
    let filtered = apply(&DisclosurePolicy::default(), &leaky_request());
    let recorded = &filtered.request.context.redactions;
    assert_eq!(recorded[0], redaction("context.userMemories[m-0]", "bridge policy"));
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
    let policy = DisclosurePolicy { redact_personal: false, ..DisclosurePolicy::default() };
    let filtered = apply(&policy, &leaky_request());
    let json = serde_json::to_string(&filtered.request).unwrap();
    for kept in ["13812345678", "a@b.io", "zhang@example.com", "4111 1111 1111 1111"] {
        assert!(json.contains(kept), "{kept} was removed");
    }
    for gone in [OPENAI_KEY, "hunter2", "tr0ub4dor", "0123456789abcdef0123"] {
        assert!(!json.contains(gone), "{gone} leaked");
    }
}

#[test]
fn a_clean_request_passes_through_unchanged() {
    let request: HandoffRequest = serde_json::from_value(sample_request_json("h-2", "docs_agent", "zh-CN")).unwrap();
    let filtered = apply(&DisclosurePolicy::default(), &request);
    assert_eq!(filtered.request, request);
    assert!(filtered.removed.is_empty());
}
