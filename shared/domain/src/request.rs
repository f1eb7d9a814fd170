//! The bridge's `HandoffRequest`: the message a chat bridge publishes when a
//! user's request should be handed to an agent (see CONTRACT.md §2).
//!
//! [`parse_request`] is the single gate between raw queue bytes and the typed
//! request. It refuses anything Baton should not act on and, when it refuses,
//! still hands back whatever identifies the sender (handoff id, chat id,
//! language) so a `failed` reply can reach the user instead of silence.
//!
//! The checks run cheapest and most dangerous first: size, UTF-8, nesting
//! depth, then JSON, then shape, then field values. The shape is the
//! contract's, as written: every field it marks required must be present
//! (lists included: a bridge with nothing to say sends `[]`), objects must be
//! objects and words must be strings ([`strict`]); unknown fields are
//! ignored. A refusal names the field by its full path
//! (`context.userMemories[3].sensitivity`).

use chrono::DateTime;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::language::Language;

mod strict;

/// Largest body Baton will look at (1 MiB); anything bigger is dead-lettered
/// unread so one oversized message cannot exhaust a worker's memory.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Deepest `[`/`{` nesting accepted, counting the top-level object as 1.
/// Kept well under `serde_json`'s own recursion limit (128) so a hostile body
/// gets our clear reason rather than a parser error.
pub const MAX_NESTING: usize = 64;

/// Longest accepted handoff id, in characters. The id is the idempotency key
/// and ends up in logs, queue headers and database keys.
const MAX_ID_CHARS: usize = 128;

/// Declares a closed set of wire strings as an enum, with `as_str`, `parse`,
/// `ALL` and serde renames generated from one list so they cannot drift apart.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $wire:literal),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The value as it appears on the wire.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire),+
                }
            }

            /// Reads a wire string; `None` for anything outside the set.
            #[must_use]
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// Where the request came from.
    pub enum Source { Weixin => "weixin", Admin => "admin", System => "system" }
}

wire_enum! {
    /// Which agent profile should take the handoff.
    pub enum TargetAgent {
        Codex => "codex",
        QwenCode => "qwen_code",
        ClaudeCode => "claude_code",
        DocsAgent => "docs_agent",
        /// No model runs; an operator pastes the result.
        Manual => "manual",
    }
}

wire_enum! {
    /// Lifecycle of a handoff, shared by requests, events and replies.
    pub enum HandoffStatus {
        /// Stored for review, never run.
        Draft => "draft",
        Requested => "requested",
        Accepted => "accepted",
        Running => "running",
        Blocked => "blocked",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl HandoffStatus {
    /// True once nothing more will happen to the handoff.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

wire_enum! {
    /// What kind of work the user asked for.
    pub enum TaskType {
        CodeTask => "code_task",
        DocsTask => "docs_task",
        ResearchTask => "research_task",
        DebugTask => "debug_task",
        PlanningTask => "planning_task",
        Other => "other",
    }
}

wire_enum! {
    /// How urgently the user wants the result.
    pub enum Priority { Low => "low", Normal => "normal", High => "high" }
}

wire_enum! {
    /// Who said a conversation turn.
    pub enum Role { User => "user", Assistant => "assistant", System => "system" }
}

wire_enum! {
    /// Which memory store a context memory came from.
    pub enum MemoryScope {
        User => "user",
        Project => "project",
        Session => "session",
        AgentRuntime => "agent_runtime",
    }
}

wire_enum! {
    /// How careful Baton must be before letting a memory leave.
    pub enum Sensitivity { Low => "low", Medium => "medium", High => "high" }
}

/// One handoff as the bridge sent it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HandoffRequest {
    pub id: String,
    pub source: Source,
    pub target_agent: TargetAgent,
    pub status: HandoffStatus,
    pub user_intent: String,
    pub task_type: TaskType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    pub priority: Priority,
    pub context: ContextPackage,
    pub constraints: Constraints,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<Callback>,
    pub created_at: String,
    pub updated_at: String,
}

impl HandoffRequest {
    /// The chat a reply should go to, if the bridge asked for one.
    #[must_use]
    pub fn reply_to_chat_id(&self) -> Option<&str> {
        self.callback.as_ref()?.reply_to_chat_id.as_deref()
    }

    /// The language every user-facing word about this handoff must use.
    #[must_use]
    pub fn language(&self) -> Language {
        self.constraints.language
    }

    /// Whether a worker should start a run. Drafts are stored but not run.
    #[must_use]
    pub fn is_runnable(&self) -> bool {
        self.status == HandoffStatus::Requested
    }
}

/// The context the bridge gathered (already filtered on its side).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ContextPackage {
    pub id: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    // The lists are required (CONTRACT §2): a bridge with nothing to say
    // sends `[]`, and a missing list means a bridge that does not follow it.
    pub recent_conversation: Vec<ConversationTurn>,
    pub user_memories: Vec<ContextMemoryRef>,
    pub project_memories: Vec<ContextMemoryRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_runtime_summary: Option<String>,
    pub redactions: Vec<Redaction>,
}

/// One message of the recent chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConversationTurn {
    pub role: Role,
    pub content: String,
    pub created_at: String,
}

/// A memory the bridge chose to share, with its sensitivity label.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ContextMemoryRef {
    pub id: String,
    pub scope: MemoryScope,
    #[serde(rename = "type")]
    pub r#type: String,
    pub content: String,
    pub sensitivity: Sensitivity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A record that something was removed from the context, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Redaction {
    pub field: String,
    pub reason: String,
}

/// What the agent may and may not do, and how to answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    pub language: Language,
    pub allowed_actions: Vec<String>,
    pub forbidden_actions: Vec<String>,
    pub require_confirmation_for: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output: Option<String>,
}

/// Where progress and the final reply should go.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Callback {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to_chat_id: Option<String>,
}

/// Why a body was refused, plus what could still be read from it so the
/// sender can be told (a failed reply needs handoffId and replyToChatId).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct RequestError {
    pub reason: String,
    pub handoff_id: Option<String>,
    pub reply_to_chat_id: Option<String>,
    pub language: Option<Language>,
}

/// The longest refusal reason kept, in bytes. A reason may quote a field of
/// any size (serde names an unknown variant in full), and it travels in a
/// message header, which must fit in one AMQP frame, and in a chat message.
pub const MAX_REASON_BYTES: usize = 1024;

/// `reason` cut to [`MAX_REASON_BYTES`] on a character boundary, ending with
/// an ellipsis when cut.
#[must_use]
pub fn bounded_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut cut = MAX_REASON_BYTES - '…'.len_utf8();
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &reason[..cut])
}

impl RequestError {
    /// A refusal with nothing salvaged: the body was not readable JSON.
    fn bare(reason: String) -> Self {
        Self {
            reason,
            handoff_id: None,
            reply_to_chat_id: None,
            language: None,
        }
    }

    /// A refusal of a JSON body, keeping whatever identifies the sender.
    fn salvaged(reason: String, body: &Value) -> Self {
        Self {
            reason,
            handoff_id: salvage_id(body),
            reply_to_chat_id: salvage_chat_id(body),
            language: salvage_language(body),
        }
    }
}

/// Parses and validates one bridge message body.
///
/// On failure the error's `reason` names the offending field in plain words,
/// and its salvage fields carry what could still be read from the body.
///
/// # Errors
///
/// Returns [`RequestError`] when the body is too large, not UTF-8, nested
/// deeper than [`MAX_NESTING`], not JSON, missing or mistyping a required
/// field, or carrying a value the contract forbids.
pub fn parse_request(body: &[u8]) -> Result<HandoffRequest, RequestError> {
    let text = check_envelope(body).map_err(RequestError::bare)?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| RequestError::bare(format!("body is not JSON: {e}")))?;
    if contains_nul(&value) {
        // Postgres text cannot store NUL; refuse it here with a clear reason.
        return Err(RequestError::salvaged("a string contains a NUL character (\\u0000)".to_owned(), &value));
    }
    build_request(&value).map_err(|reason| RequestError::salvaged(reason, &value))
}

fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Envelope: checks that must pass before any JSON parser sees the bytes.
// ---------------------------------------------------------------------------

/// Size, encoding and depth checks; returns the body as text.
fn check_envelope(body: &[u8]) -> Result<&str, String> {
    check_size(body)?;
    let text = check_utf8(body)?;
    check_depth(text.as_bytes())?;
    if text.trim().is_empty() {
        return Err("body is empty".to_owned());
    }
    Ok(text)
}

fn check_size(body: &[u8]) -> Result<(), String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "body is {} bytes; the limit is {MAX_BODY_BYTES}",
            body.len()
        ));
    }
    Ok(())
}

fn check_utf8(body: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(body).map_err(|e| {
        format!(
            "body is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        )
    })
}

fn check_depth(bytes: &[u8]) -> Result<(), String> {
    if nesting_depth(bytes) > MAX_NESTING {
        return Err(format!("JSON nests deeper than {MAX_NESTING} levels"));
    }
    Ok(())
}

/// Deepest `[`/`{` nesting outside JSON strings, without recursion, so even
/// a megabyte of `[` costs one linear pass. Working on bytes is safe for
/// UTF-8 text: multi-byte sequences never contain ASCII bytes.
fn nesting_depth(bytes: &[u8]) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in bytes {
        if in_string {
            // Inside a string only the closing quote matters, and a quote
            // right after a backslash does not close it.
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            // Unbalanced closers are the JSON parser's problem, not ours.
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

// ---------------------------------------------------------------------------
// Shape: from a JSON value to a typed request.
// ---------------------------------------------------------------------------

fn build_request(value: &Value) -> Result<HandoffRequest, String> {
    if !value.is_object() {
        return Err(format!("body must be a JSON object, found {}", json_kind(value)));
    }
    let request: HandoffRequest =
        serde_path_to_error::deserialize(strict::Strict(value)).map_err(|e| explain_shape_error(&e))?;
    validate(&request)?;
    Ok(request)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde's own message with the full path of the field it is about:
/// "missing field `context.userId`", "field `context.userMemories[3].sensitivity`
/// is invalid: unknown variant `secret`, expected one of …".
fn explain_shape_error(err: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = err.path().to_string();
    let inner = err.inner().to_string();
    let at_root = path == ".";
    match missing_field(&inner) {
        Some(field) if at_root => format!("missing field `{field}`"),
        Some(field) => format!("missing field `{path}.{field}`"),
        None if at_root => format!("body does not match HandoffRequest: {inner}"),
        None => format!("field `{path}` is invalid: {inner}"),
    }
}

/// The field named by serde's "missing field `x`" message. serde has no
/// error kind for it, only this wording, which it has kept since 1.0.
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.strip_suffix('`')
}

// ---------------------------------------------------------------------------
// Values: rules the type system cannot express.
// ---------------------------------------------------------------------------

fn validate(request: &HandoffRequest) -> Result<(), String> {
    check_id(&request.id)?;
    check_intent(&request.user_intent)?;
    check_status(request.status)?;
    check_timestamp("createdAt", &request.created_at)?;
    check_timestamp("updatedAt", &request.updated_at)
}

fn id_length_ok(id: &str) -> bool {
    (1..=MAX_ID_CHARS).contains(&id.chars().count())
}

fn check_id(id: &str) -> Result<(), String> {
    if id_length_ok(id) {
        return Ok(());
    }
    Err(format!(
        "field `id` must be 1 to {MAX_ID_CHARS} characters long (it is {})",
        id.chars().count()
    ))
}

fn check_intent(intent: &str) -> Result<(), String> {
    if intent.trim().is_empty() {
        return Err("field `userIntent` must not be empty".to_owned());
    }
    Ok(())
}

/// A bridge only ever creates handoffs; any later status would mean it is
/// trying to drive Baton's state machine from outside.
fn check_status(status: HandoffStatus) -> Result<(), String> {
    match status {
        HandoffStatus::Requested | HandoffStatus::Draft => Ok(()),
        other => Err(format!(
            "field `status` is \"{other}\"; a bridge may only send requested or draft"
        )),
    }
}

fn check_timestamp(field: &str, raw: &str) -> Result<(), String> {
    DateTime::parse_from_rfc3339(raw)
        .map(drop)
        .map_err(|e| format!("field `{field}` must be an RFC 3339 timestamp, got {raw:?} ({e})"))
}

// ---------------------------------------------------------------------------
// Salvage: who to tell when the body is refused.
// ---------------------------------------------------------------------------

fn salvage_id(body: &Value) -> Option<String> {
    let id = body.get("id")?.as_str()?;
    id_length_ok(id).then(|| id.to_owned())
}

fn salvage_chat_id(body: &Value) -> Option<String> {
    let chat = body.get("callback")?.get("replyToChatId")?.as_str()?;
    // An empty chat id addresses nobody; treat it as absent.
    (!chat.is_empty()).then(|| chat.to_owned())
}

fn salvage_language(body: &Value) -> Option<Language> {
    Language::parse(body.get("constraints")?.get("language")?.as_str()?)
}

// ---------------------------------------------------------------------------
// Test support (public: integration tests and the demo use it).
// ---------------------------------------------------------------------------

/// A realistic, valid `WeChat` handoff asking for a short announcement.
///
/// `target` and `language` are copied verbatim, so callers can also build
/// deliberately invalid requests; any language other than `zh-CN` gets
/// English text.
#[must_use]
pub fn sample_request_json(id: &str, target: &str, language: &str) -> Value {
    let chinese = language == Language::ZhCn.as_str();
    let (intent, ask, answer) = if chinese {
        (
            "帮我写一段简短的公告：本周五晚上 10 点到 12 点系统维护。",
            "周五晚上要停机维护，能帮我写个公告吗？",
            "好的，我请文档助手来写，稍后发给你。",
        )
    } else {
        (
            "Write a short announcement: the system is down for maintenance Friday 10pm to midnight.",
            "We have maintenance on Friday night, can you draft a notice?",
            "Sure, I'll ask the docs agent and send it to you shortly.",
        )
    };
    json!({
        "id": id,
        "source": "weixin",
        "targetAgent": target,
        "status": "requested",
        "userIntent": intent,
        "taskType": "docs_task",
        "priority": "normal",
        "context": {
            "id": format!("ctx_{id}"),
            "userId": "user_demo",
            "recentConversation": [
                { "role": "user", "content": ask, "createdAt": "2025-06-06T09:28:00+08:00" },
                { "role": "assistant", "content": answer, "createdAt": "2025-06-06T09:28:30+08:00" }
            ],
            "userMemories": [{
                "id": "mem_user_tone",
                "scope": "user",
                "type": "preference",
                "content": "Prefers short, friendly announcements without emoji.",
                "sensitivity": "low",
                "source": "weixin"
            }],
            "projectMemories": [],
            "redactions": []
        },
        "constraints": {
            "language": language,
            "allowedActions": ["draft_text", "read_context"],
            "forbiddenActions": ["send_messages", "modify_files"],
            "requireConfirmationFor": ["publish"],
            "expectedOutput": "announcement text under 150 words"
        },
        "callback": { "replyToChatId": "wxid_demo_chat" },
        "createdAt": "2025-06-06T09:30:00+08:00",
        "updatedAt": "2025-06-06T09:30:00+08:00"
    })
}

#[cfg(test)]
mod nul_tests {
    use super::*;

    #[test]
    fn a_nul_character_anywhere_is_refused_with_the_sender_still_told() {
        let mut v = sample_request_json("nul-1", "docs_agent", "en");
        v["userIntent"] = "bad\u{0}intent".into();
        let err = parse_request(v.to_string().as_bytes()).unwrap_err();
        assert!(err.reason.contains("NUL"), "{}", err.reason);
        assert_eq!(err.handoff_id.as_deref(), Some("nul-1"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(request.status, HandoffStatus::Requested);
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
        assert_eq!(
            request.constraints.forbidden_actions,
            ["send_messages", "modify_files"]
        );
    }

    #[test]
    fn the_public_sample_is_valid_in_both_languages() {
        for language in ["zh-CN", "en"] {
            let request = parse_value(&sample_request_json("h1", "codex", language)).unwrap();
            assert_eq!(request.language().as_str(), language);
        }
    }

    #[test]
    fn a_draft_is_accepted_but_not_runnable() {
        let mut value = sample_json();
        value["status"] = json!("draft");
        let request = parse_value(&value).unwrap();
        assert_eq!(request.status, HandoffStatus::Draft);
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
        assert_eq!(
            parse_request(&body).unwrap_err().reason,
            "body is not valid UTF-8 (invalid byte at offset 11)"
        );
    }

    #[test]
    fn text_that_is_not_json_is_refused_without_salvage() {
        let err = parse_request(b"hello there").unwrap_err();
        assert!(
            err.reason.starts_with("body is not JSON: "),
            "{}",
            err.reason
        );
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
        assert_eq!(
            parse_request(b"[1, 2]").unwrap_err().reason,
            "body must be a JSON object, found an array"
        );
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
        assert_eq!(
            parse_request(body.as_bytes()).unwrap_err().reason,
            "JSON nests deeper than 64 levels"
        );
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
        assert_eq!(
            reason_for(&value),
            "field `userIntent` is invalid: invalid type: integer `5`, expected a string"
        );
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
        assert_eq!(
            reason_for(&value),
            "field `id` must be 1 to 128 characters long (it is 0)"
        );
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
        assert_eq!(
            reason_for(&value),
            "field `id` must be 1 to 128 characters long (it is 129)"
        );
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
            "field `status` is \"running\"; a bridge may only send requested or draft"
        );
    }

    #[test]
    fn a_timestamp_that_is_not_rfc3339_is_refused() {
        let mut value = sample_json();
        value["updatedAt"] = json!("yesterday at noon");
        let reason = reason_for(&value);
        assert!(
            reason.starts_with(
                "field `updatedAt` must be an RFC 3339 timestamp, got \"yesterday at noon\""
            ),
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
        assert_eq!(
            parse_value(&value).unwrap(),
            parse_value(&sample_json()).unwrap()
        );
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
        ("/constraints/allowedActions", r#""draft_text""#, "field `constraints.allowedActions` is invalid: invalid type: string"),
        ("/constraints/allowedActions", "null", "field `constraints.allowedActions` is invalid: invalid type: null"),
        ("/constraints/forbiddenActions/1", "7", "field `constraints.forbiddenActions[1]` is invalid: invalid type: integer"),
        (
            "/context/userMemories/0/sensitivity",
            r#""secret""#,
            "field `context.userMemories[0].sensitivity` is invalid: unknown variant `secret`",
        ),
        ("/context/projectMemories", "{}", "field `context.projectMemories` is invalid: invalid type: map, expected a sequence"),
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
            assert_eq!(HandoffStatus::parse(status.as_str()), Some(*status));
        }
        assert_eq!(HandoffStatus::parse("done"), None);
        let terminal: Vec<_> = HandoffStatus::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                &HandoffStatus::Completed,
                &HandoffStatus::Failed,
                &HandoffStatus::Cancelled
            ]
        );
    }

    #[test]
    fn the_error_displays_as_its_reason() {
        let err = parse_request(b"{}").unwrap_err();
        assert_eq!(err.to_string(), err.reason);
    }
}
