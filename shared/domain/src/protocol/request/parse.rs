//! Parsing one bridge body: the envelope checks (size, UTF-8, nesting), the shape read through
//! [`super::strict`], the field values, and salvaging who to tell when the body is refused.

use serde_json::Value;

use super::*;
use crate::protocol::language::Language;

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
    let value: Value = serde_json::from_str(text).map_err(|e| RequestError::bare(format!("body is not JSON: {e}")))?;
    if crate::wire::contains_nul(&value) {
        // Postgres text cannot store NUL; refuse it here with a clear reason.
        return Err(RequestError::salvaged("a string contains a NUL character (\\u0000)".to_owned(), &value));
    }
    build_request(&value).map_err(|reason| RequestError::salvaged(reason, &value))
}

/// Whether a body fails the checks made before any JSON parser sees it
/// (size, depth): such a body is never parsed, not even for its routing keys.
pub fn refused_unread(body: &[u8]) -> Option<String> {
    check_size(body).and_then(|()| check_depth(body)).err()
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
        return Err(format!("body is {} bytes; the limit is {MAX_BODY_BYTES}", body.len()));
    }
    Ok(())
}

fn check_utf8(body: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(body)
        .map_err(|e| format!("body is not valid UTF-8 (invalid byte at offset {})", e.valid_up_to()))
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
pub(super) fn nesting_depth(bytes: &[u8]) -> usize {
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
    check_conversation_key(request.conversation_key.as_deref())?;
    check_intent(&request.user_intent)?;
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
    Err(format!("field `id` must be 1 to {MAX_ID_CHARS} characters long (it is {})", id.chars().count()))
}

fn check_conversation_key(key: Option<&str>) -> Result<(), String> {
    match key {
        Some(key) if !id_length_ok(key) => Err(format!(
            "field `conversationKey` must be 1 to {MAX_ID_CHARS} characters long (it is {})",
            key.chars().count()
        )),
        _ => Ok(()),
    }
}

fn check_intent(intent: &str) -> Result<(), String> {
    if intent.trim().is_empty() {
        return Err("field `userIntent` must not be empty".to_owned());
    }
    Ok(())
}

fn check_timestamp(field: &str, raw: &str) -> Result<(), String> {
    crate::protocol::contract::parse_timestamp(raw)
        .map(drop)
        .map_err(|e| format!("field `{field}` must be an RFC 3339 timestamp, got {raw:?} ({e})"))
}

// ---------------------------------------------------------------------------
// Salvage: who to tell when the body is refused.
// ---------------------------------------------------------------------------

pub(super) fn salvage_id(body: &Value) -> Option<String> {
    let id = body.get("id")?.as_str()?;
    id_length_ok(id).then(|| id.to_owned())
}

pub(super) fn salvage_chat_id(body: &Value) -> Option<String> {
    let chat = body.get("callback")?.get("replyToChatId")?.as_str()?;
    // An empty chat id addresses nobody; treat it as absent.
    (!chat.is_empty()).then(|| chat.to_owned())
}

pub(super) fn salvage_language(body: &Value) -> Option<Language> {
    Language::parse(body.get("constraints")?.get("language")?.as_str()?)
}
