//! Tests of the request types and of parsing.

use serde_json::json;

use super::parse::*;
use super::*;

#[test]
fn a_nul_character_anywhere_is_refused_with_the_sender_still_told() {
    let mut v = sample_request_json("nul-1", "docs_agent", "en");
    v["userIntent"] = "bad\u{0}intent".into();
    let err = parse_request(v.to_string().as_bytes()).unwrap_err();
    assert!(err.reason.contains("NUL"), "{}", err.reason);
    assert_eq!(err.handoff_id.as_deref(), Some("nul-1"));
}

fn sample_json() -> Value {
    let mut value = sample_request_json("handoff_0001", "docs_agent", "zh-CN");
    value["projectId"] = json!("proj_site");
    value["context"]["projectId"] = json!("proj_site");
    value["context"]["sessionSummary"] = json!("User is preparing a maintenance notice.");
    value["callback"]["statusUrl"] = json!("https://bridge.example/handoffs/handoff_0001");
    value
}

fn parse_value(value: &Value) -> Result<HandoffRequest, RequestError> {
    parse_request(&serde_json::to_vec(value).unwrap())
}

fn reason_for(value: &Value) -> String {
    parse_value(value).unwrap_err().reason
}

/// The sample with one more field wrapped in `levels` nested arrays.
fn nested_sample(levels: usize) -> Vec<u8> {
    let mut body = serde_json::to_string(&sample_json()).unwrap();
    body.pop(); // drop the closing brace to append a field
    body.push_str(",\"deep\":");
    body.push_str(&"[".repeat(levels));
    body.push_str(&"]".repeat(levels));
    body.push('}');
    body.into_bytes()
}

#[test]
fn a_full_valid_sample_parses_into_every_field() {
    let request = parse_value(&sample_json()).unwrap();
    assert_eq!(request.id, "handoff_0001");
    assert_eq!(request.source, Source::Weixin);
    assert_eq!(request.target_agent, TargetAgent::DocsAgent);
    assert_eq!(request.status, RequestStatus::Requested);
    assert_eq!(request.task_type, TaskType::DocsTask);
    assert_eq!(request.priority, Priority::Normal);
    assert_eq!(request.project_id.as_deref(), Some("proj_site"));
    assert_eq!(request.language(), Language::ZhCn);
    assert_eq!(request.reply_to_chat_id(), Some("wxid_demo_chat"));
    assert!(request.is_runnable());

    let context = &request.context;
    assert_eq!(context.user_id, "user_demo");
    assert_eq!(context.recent_conversation.len(), 2);
    assert_eq!(context.recent_conversation[1].role, Role::Assistant);
    assert_eq!(context.user_memories[0].scope, MemoryScope::User);
    assert_eq!(context.user_memories[0].r#type, "preference");
    assert_eq!(context.user_memories[0].sensitivity, Sensitivity::Low);
    assert!(context.session_summary.is_some());
    assert_eq!(request.constraints.forbidden_actions, ["send_messages", "modify_files"]);
}

#[test]
fn the_public_sample_is_valid_in_both_languages() {
    for language in ["zh-CN", "en"] {
        let request = parse_value(&sample_request_json("h1", "codex", language)).unwrap();
        assert_eq!(request.language().as_str(), language);
    }
}

#[test]
fn the_conversation_is_the_chat_unless_the_bridge_names_one() {
    assert_eq!(parse_value(&sample_json()).unwrap().conversation_key(), Some("wxid_demo_chat"));
    let mut value = sample_json();
    value["conversationKey"] = json!("thread-7");
    assert_eq!(parse_value(&value).unwrap().conversation_key(), Some("thread-7"));
    value["conversationKey"] = json!("");
    assert!(reason_for(&value).contains("field `conversationKey` must be 1 to 128"));
}

#[test]
fn a_draft_is_accepted_but_not_runnable() {
    let mut value = sample_json();
    value["status"] = json!("draft");
    let request = parse_value(&value).unwrap();
    assert_eq!(request.status, RequestStatus::Draft);
    assert!(!request.is_runnable());
}

#[test]
fn a_body_over_one_mebibyte_is_refused_by_size() {
    let err = parse_request(&vec![b' '; MAX_BODY_BYTES + 1]).unwrap_err();
    assert_eq!(err.reason, "body is 1048577 bytes; the limit is 1048576");
}

#[test]
fn invalid_utf8_is_refused_with_its_offset() {
    let mut body = br#"{"id": "abc"#.to_vec();
    body.push(0xFF);
    assert_eq!(parse_request(&body).unwrap_err().reason, "body is not valid UTF-8 (invalid byte at offset 11)");
}

#[test]
fn text_that_is_not_json_is_refused_without_salvage() {
    let err = parse_request(b"hello there").unwrap_err();
    assert!(err.reason.starts_with("body is not JSON: "), "{}", err.reason);
    assert_eq!(err.handoff_id, None);
    assert_eq!(err.reply_to_chat_id, None);
    assert_eq!(err.language, None);
}

#[test]
fn an_empty_body_is_refused_as_empty() {
    assert_eq!(parse_request(b"  \n").unwrap_err().reason, "body is empty");
}

#[test]
fn a_json_array_body_is_refused_as_not_an_object() {
    assert_eq!(parse_request(b"[1, 2]").unwrap_err().reason, "body must be a JSON object, found an array");
}

#[test]
fn nesting_of_sixty_five_levels_is_refused() {
    // Top-level object is level 1, so 64 arrays reach level 65.
    let err = parse_request(&nested_sample(64)).unwrap_err();
    assert_eq!(err.reason, "JSON nests deeper than 64 levels");
}

#[test]
fn nesting_of_sixty_four_levels_is_accepted() {
    assert!(parse_request(&nested_sample(63)).is_ok());
}

#[test]
fn a_megabyte_of_brackets_is_refused_by_depth_not_by_serde() {
    let body = "[".repeat(MAX_BODY_BYTES);
    assert_eq!(parse_request(body.as_bytes()).unwrap_err().reason, "JSON nests deeper than 64 levels");
}

#[test]
fn brackets_inside_strings_do_not_count_toward_depth() {
    let mut value = sample_json();
    value["userIntent"] = json!(format!("quote \" and slash \\ then {}", "[{".repeat(200)));
    assert!(parse_value(&value).is_ok());
}

#[test]
fn the_depth_scanner_honours_escapes() {
    assert_eq!(nesting_depth(br#"{"a": "\"[[["}"#), 1);
    // An escaped backslash does not escape the closing quote.
    assert_eq!(nesting_depth(br#"{"a": "\\", "b": [[1]]}"#), 3);
    assert_eq!(nesting_depth(br#""{[""#), 0);
}

#[test]
fn a_missing_required_field_is_named() {
    let mut value = sample_json();
    value.as_object_mut().unwrap().remove("targetAgent");
    assert_eq!(reason_for(&value), "missing field `targetAgent`");
}

#[test]
fn a_missing_nested_field_is_named_with_its_path() {
    let mut value = sample_json();
    value["context"].as_object_mut().unwrap().remove("userId");
    assert_eq!(reason_for(&value), "missing field `context.userId`");
}

#[test]
fn an_unsupported_source_lists_the_accepted_values() {
    let mut value = sample_json();
    value["source"] = json!("email");
    assert_eq!(
        reason_for(&value),
        "field `source` is invalid: unknown variant `email`, expected one of `weixin`, `admin`, `system`"
    );
}

#[test]
fn an_unsupported_language_names_the_nested_field() {
    let mut value = sample_json();
    value["constraints"]["language"] = json!("fr");
    assert_eq!(
        reason_for(&value),
        "field `constraints.language` is invalid: unknown variant `fr`, expected `zh-CN` or `en`"
    );
}

#[test]
fn a_mistyped_field_gets_serdes_reason_with_the_field_name() {
    let mut value = sample_json();
    value["userIntent"] = json!(5);
    assert_eq!(reason_for(&value), "field `userIntent` is invalid: invalid type: integer `5`, expected a string");
}

#[test]
fn a_bad_value_deep_in_the_context_is_named_by_its_full_path() {
    let mut value = sample_json();
    value["context"]["recentConversation"][1]["role"] = json!("robot");
    let reason = reason_for(&value);
    assert!(
        reason.starts_with("field `context.recentConversation[1].role` is invalid: unknown variant `robot`"),
        "{reason}"
    );
}

#[test]
fn an_empty_id_is_refused() {
    let mut value = sample_json();
    value["id"] = json!("");
    assert_eq!(reason_for(&value), "field `id` must be 1 to 128 characters long (it is 0)");
}

#[test]
fn a_reason_quoting_a_huge_field_is_cut_to_the_bound() {
    let mut value = sample_request_json("r1", "docs_agent", "en");
    value["taskType"] = json!("界".repeat(100_000));
    let reason = bounded_reason(&parse_request(&serde_json::to_vec(&value).unwrap()).unwrap_err().reason);
    assert!(reason.len() <= MAX_REASON_BYTES && reason.ends_with('…'), "{} bytes", reason.len());
    assert!(reason.contains("taskType"), "{reason}");
    assert_eq!(bounded_reason("missing field `userIntent`"), "missing field `userIntent`");
}

#[test]
fn an_id_of_128_characters_is_accepted_and_129_refused() {
    let mut value = sample_json();
    value["id"] = json!("界".repeat(128));
    assert!(parse_value(&value).is_ok());
    value["id"] = json!("x".repeat(129));
    assert_eq!(reason_for(&value), "field `id` must be 1 to 128 characters long (it is 129)");
}

#[test]
fn a_blank_user_intent_is_refused() {
    let mut value = sample_json();
    value["userIntent"] = json!("  \n\t ");
    assert_eq!(reason_for(&value), "field `userIntent` must not be empty");
}

#[test]
fn a_status_past_requested_is_refused() {
    let mut value = sample_json();
    value["status"] = json!("running");
    assert_eq!(
        reason_for(&value),
        "field `status` is invalid: unknown variant `running`, expected `requested` or `draft`"
    );
}

#[test]
fn a_timestamp_that_is_not_rfc3339_is_refused() {
    let mut value = sample_json();
    value["updatedAt"] = json!("yesterday at noon");
    let reason = reason_for(&value);
    assert!(
        reason.starts_with("field `updatedAt` must be an RFC 3339 timestamp, got \"yesterday at noon\""),
        "{reason}"
    );
}

#[test]
fn an_invalid_body_still_yields_id_chat_and_language() {
    let mut value = sample_json();
    value["userIntent"] = json!("");
    let err = parse_value(&value).unwrap_err();
    assert_eq!(err.handoff_id.as_deref(), Some("handoff_0001"));
    assert_eq!(err.reply_to_chat_id.as_deref(), Some("wxid_demo_chat"));
    assert_eq!(err.language, Some(Language::ZhCn));
}

#[test]
fn salvage_works_even_when_the_shape_is_wrong() {
    let body = br#"{"id": "h9", "callback": {"replyToChatId": "wxid_x"}, "constraints": {"language": "en"}}"#;
    let err = parse_request(body).unwrap_err();
    assert_eq!(err.reason, "missing field `constraints.allowedActions`");
    assert_eq!(err.handoff_id.as_deref(), Some("h9"));
    assert_eq!(err.reply_to_chat_id.as_deref(), Some("wxid_x"));
    assert_eq!(err.language, Some(Language::En));
}

#[test]
fn salvage_skips_an_id_that_is_too_long_or_not_a_string() {
    for id in [json!("x".repeat(129)), json!(42)] {
        let mut value = sample_json();
        value["id"] = id;
        assert_eq!(parse_value(&value).unwrap_err().handoff_id, None);
    }
}

#[test]
fn unknown_fields_are_ignored_at_every_level() {
    let mut value = sample_json();
    value["bridgeVersion"] = json!("2.1");
    value["context"]["extra"] = json!({ "a": [1, 2] });
    value["constraints"]["budget"] = json!(3);
    assert_eq!(parse_value(&value).unwrap(), parse_value(&sample_json()).unwrap());
}

/// Applies one edit to the sample: `Some(v)` sets the field at `path`
/// (JSON pointer), `None` removes it.
fn edited(path: &str, to: Option<Value>) -> Value {
    let mut value = sample_json();
    let (parent, key) = path.rsplit_once('/').unwrap();
    let parent = value.pointer_mut(parent).unwrap_or_else(|| panic!("{path}"));
    match (parent, to) {
        (Value::Object(map), Some(v)) => drop(map.insert(key.to_owned(), v)),
        (Value::Object(map), None) => drop(map.remove(key)),
        (Value::Array(items), Some(v)) => items[key.parse::<usize>().unwrap()] = v,
        (other, _) => panic!("{path}: cannot edit {other}"),
    }
    value
}

/// Bodies the contract accepts, each one edit away from the sample.
const GOOD: &[(&str, &str)] = &[
    ("/projectId", "absent"),
    ("/callback", "absent"),
    ("/callback", "null"),
    ("/callback", "{}"),
    ("/callback/replyToChatId", "absent"),
    ("/context/sessionSummary", "absent"),
    ("/context/recentConversation", "[]"),
    ("/context/userMemories", "[]"),
    ("/context/redactions", r#"[{"field": "context.userMemories[m-0]", "reason": "bridge policy"}]"#),
    ("/constraints/allowedActions", "[]"),
    ("/constraints/forbiddenActions", "[]"),
    ("/constraints/requireConfirmationFor", "[]"),
    ("/constraints/expectedOutput", "absent"),
    ("/context/userMemories/0/source", "absent"),
    ("/bridgeVersion", r#""2.1""#),
    ("/context/extra", r#"{"a": [1, 2]}"#),
];

/// Bodies the contract refuses, with the start of the reason.
const BAD: &[(&str, &str, &str)] = &[
    ("/priority", "absent", "missing field `priority`"),
    ("/taskType", "absent", "missing field `taskType`"),
    ("/createdAt", "absent", "missing field `createdAt`"),
    ("/updatedAt", "absent", "missing field `updatedAt`"),
    ("/context", "absent", "missing field `context`"),
    ("/constraints", "absent", "missing field `constraints`"),
    ("/context/recentConversation", "absent", "missing field `context.recentConversation`"),
    ("/context/userMemories", "absent", "missing field `context.userMemories`"),
    ("/context/projectMemories", "absent", "missing field `context.projectMemories`"),
    ("/context/redactions", "absent", "missing field `context.redactions`"),
    ("/constraints/allowedActions", "absent", "missing field `constraints.allowedActions`"),
    ("/constraints/forbiddenActions", "absent", "missing field `constraints.forbiddenActions`"),
    ("/constraints/requireConfirmationFor", "absent", "missing field `constraints.requireConfirmationFor`"),
    ("/constraints/language", "absent", "missing field `constraints.language`"),
    ("/context/userMemories/0/sensitivity", "absent", "missing field `context.userMemories[0].sensitivity`"),
    ("/context/recentConversation/1/createdAt", "absent", "missing field `context.recentConversation[1].createdAt`"),
    ("/callback", "[]", "field `callback` is invalid: invalid type: sequence, expected an object"),
    ("/callback", r#"["wxid"]"#, "field `callback` is invalid: invalid type: sequence"),
    ("/callback", r#""wxid_demo_chat""#, "field `callback` is invalid: invalid type: string"),
    ("/context", "[]", "field `context` is invalid: invalid type: sequence, expected an object"),
    ("/constraints", r#"["en", [], [], []]"#, "field `constraints` is invalid: invalid type: sequence"),
    (
        "/context/userMemories/0",
        r#"["m", "user", "fact", "text", "low"]"#,
        "field `context.userMemories[0]` is invalid: invalid type: sequence, expected an object",
    ),
    ("/priority", r#"{"high": null}"#, "field `priority` is invalid: invalid type: map, expected a string"),
    ("/priority", "null", "field `priority` is invalid: invalid type: null, expected a string"),
    ("/priority", "2", "field `priority` is invalid: invalid type: a number, expected a string"),
    ("/userIntent", "5", "field `userIntent` is invalid: invalid type: integer `5`, expected a string"),
    ("/createdAt", "1764460800", "field `createdAt` is invalid: invalid type: integer"),
    ("/callback/replyToChatId", "42", "field `callback.replyToChatId` is invalid: invalid type: integer"),
    (
        "/constraints/allowedActions",
        r#""draft_text""#,
        "field `constraints.allowedActions` is invalid: invalid type: string",
    ),
    ("/constraints/allowedActions", "null", "field `constraints.allowedActions` is invalid: invalid type: null"),
    (
        "/constraints/forbiddenActions/1",
        "7",
        "field `constraints.forbiddenActions[1]` is invalid: invalid type: integer",
    ),
    (
        "/context/userMemories/0/sensitivity",
        r#""secret""#,
        "field `context.userMemories[0].sensitivity` is invalid: unknown variant `secret`",
    ),
    (
        "/context/projectMemories",
        "{}",
        "field `context.projectMemories` is invalid: invalid type: map, expected a sequence",
    ),
];

fn edit_of(path: &str, to: &str) -> Value {
    edited(path, (to != "absent").then(|| serde_json::from_str(to).unwrap()))
}

#[test]
fn the_contract_table_of_good_bodies_parses() {
    let failures: Vec<String> = GOOD
        .iter()
        .filter_map(|(path, to)| parse_value(&edit_of(path, to)).err().map(|e| format!("{path} = {to}: {}", e.reason)))
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_contract_table_of_bad_bodies_is_refused_with_the_field_path() {
    let failures: Vec<String> = BAD
        .iter()
        .filter_map(|(path, to, reason)| match parse_value(&edit_of(path, to)) {
            Ok(_) => Some(format!("{path} = {to}: accepted")),
            Err(e) if !e.reason.starts_with(reason) => Some(format!("{path} = {to}: {:?}", e.reason)),
            Err(_) => None,
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn a_refused_body_still_names_its_sender_whatever_field_is_wrong() {
    for (path, to, _) in BAD {
        let err = parse_value(&edit_of(path, to)).unwrap_err();
        assert_eq!(err.handoff_id.as_deref(), Some("handoff_0001"), "{path}");
    }
}

#[test]
fn a_request_survives_a_serialize_parse_round_trip() {
    let request = parse_value(&sample_json()).unwrap();
    let again = parse_request(&serde_json::to_vec(&request).unwrap()).unwrap();
    assert_eq!(again, request);
}

#[test]
fn status_strings_parse_and_terminal_ones_are_known() {
    for status in HandoffStatus::ALL {
        assert_eq!(HandoffStatus::parse(status.as_str()), Some(status));
    }
    assert_eq!(HandoffStatus::parse("done"), None);
    let terminal: Vec<_> = HandoffStatus::ALL.iter().filter(|s| s.is_terminal()).collect();
    assert_eq!(terminal, [&HandoffStatus::Completed, &HandoffStatus::Failed, &HandoffStatus::Cancelled]);
}

#[test]
fn the_error_displays_as_its_reason() {
    let err = parse_request(b"{}").unwrap_err();
    assert_eq!(err.to_string(), err.reason);
}
