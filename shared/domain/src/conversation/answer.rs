//! `BridgeAnswer` (CONTRACT §6): what a user said to an open question,
//! parsed strictly at the edge.

use serde::Deserialize;
use serde_json::Value;

use crate::request::MAX_BODY_BYTES;

/// The longest id (the answer's own, the handoff's, the question's).
pub const MAX_ID_CHARS: usize = 128;

/// A bridge's answer to a question, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeAnswer {
    /// The idempotency key of this answer.
    pub id: String,
    pub handoff_id: String,
    pub question_id: String,
    /// What the user said, before the disclosure policy.
    pub text: String,
    pub at: chrono::DateTime<chrono::FixedOffset>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    handoff_id: String,
    question_id: String,
    text: String,
    at: String,
}

/// Parses a `BridgeAnswer` body; the error says what is wrong in words an
/// operator (and the bridge's developer) can act on.
pub fn parse(body: &[u8]) -> Result<BridgeAnswer, String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!("body is {} bytes; the limit is {MAX_BODY_BYTES}", body.len()));
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    if !value.is_object() {
        return Err("an answer must be a JSON object".into());
    }
    let wire: Wire = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." { e.into_inner().to_string() } else { format!("`{path}`: {}", e.into_inner()) }
    })?;
    if wire.kind != "answer" {
        return Err(format!("`type` is `{}`, not `answer`", wire.kind));
    }
    for (name, id) in [("id", &wire.id), ("handoffId", &wire.handoff_id), ("questionId", &wire.question_id)] {
        let chars = id.chars().count();
        if chars == 0 || chars > MAX_ID_CHARS {
            return Err(format!("`{name}` must be 1..{MAX_ID_CHARS} characters"));
        }
    }
    if [&wire.id, &wire.handoff_id, &wire.question_id, &wire.text].iter().any(|s| s.contains('\0')) {
        return Err("a string contains a NUL character (\\u0000)".into());
    }
    let at = chrono::DateTime::parse_from_rfc3339(&wire.at).map_err(|e| format!("`at` is not an RFC 3339 time: {e}"))?;
    Ok(BridgeAnswer { id: wire.id, handoff_id: wire.handoff_id, question_id: wire.question_id, text: wire.text, at })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Vec<u8> {
        serde_json::to_vec(&v).unwrap()
    }

    fn sample() -> Value {
        json!({"type": "answer", "id": "a1", "handoffId": "h1", "questionId": "q1", "text": "yes", "at": "2026-11-30T10:00:00Z", "extra": 1})
    }

    #[test]
    fn a_well_formed_answer_parses_and_ignores_unknown_fields() {
        let a = parse(&body(sample())).unwrap();
        assert_eq!((a.id.as_str(), a.handoff_id.as_str(), a.question_id.as_str(), a.text.as_str()), ("a1", "h1", "q1", "yes"));
    }

    #[test]
    fn each_missing_or_mistyped_field_is_named() {
        for field in ["id", "handoffId", "questionId", "text", "at"] {
            let mut v = sample();
            v.as_object_mut().unwrap().remove(field);
            let error = parse(&body(v)).unwrap_err();
            assert!(error.contains(&format!("`{field}`")), "{field}: {error}");
        }
        let mut v = sample();
        v["text"] = json!(["yes"]);
        assert!(parse(&body(v)).unwrap_err().contains("text"));
    }

    #[test]
    fn bad_ids_times_and_shapes_are_refused() {
        let mut v = sample();
        v["id"] = json!("");
        assert!(parse(&body(v)).unwrap_err().contains("`id`"));
        let mut v = sample();
        v["questionId"] = json!("q".repeat(129));
        assert!(parse(&body(v)).unwrap_err().contains("`questionId`"));
        let mut v = sample();
        v["at"] = json!("yesterday");
        assert!(parse(&body(v)).unwrap_err().contains("`at`"));
        let mut v = sample();
        v["type"] = json!("cancel");
        assert!(parse(&body(v)).is_err());
        assert!(parse(br#"["answer","a1","h1","q1","yes","2026-11-30T10:00:00Z"]"#).is_err());
        assert!(parse(b"{").unwrap_err().starts_with("body is not JSON"));
    }
}
