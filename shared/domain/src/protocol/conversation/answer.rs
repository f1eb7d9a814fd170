//! `BridgeAnswer` (docs/bridge-protocol.md#conversations): what a user said to an open question,
//! parsed strictly at the edge.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::protocol::contract::{parse_timestamp, AnswerType, TIMESTAMP_PATTERN};
use crate::protocol::request::MAX_BODY_BYTES;

/// The longest id (the answer's own, the handoff's, the question's).
pub const MAX_ID_CHARS: usize = 128;

/// What a user said to an open question (docs/bridge-protocol.md#conversations), bridge to fleet, on
/// `baton.bridge.requests`. Applied at most once per `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct BridgeAnswer {
    #[serde(rename = "type")]
    pub kind: AnswerType,
    /// The idempotency key of this answer.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    #[schemars(length(min = 1, max = 128))]
    pub handoff_id: String,
    /// The `questionId` of the `BridgeQuestion` it answers.
    #[schemars(length(min = 1, max = 128))]
    pub question_id: String,
    /// What the user said (the disclosure policy applies).
    pub text: String,
    /// When the user answered (RFC 3339).
    #[schemars(extend("format" = "date-time"), regex(pattern = TIMESTAMP_PATTERN))]
    pub at: String,
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
    let answer: BridgeAnswer = serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("`{path}`: {}", e.into_inner())
        }
    })?;
    for (name, id) in [("id", &answer.id), ("handoffId", &answer.handoff_id), ("questionId", &answer.question_id)] {
        let chars = id.chars().count();
        if chars == 0 || chars > MAX_ID_CHARS {
            return Err(format!("`{name}` must be 1..{MAX_ID_CHARS} characters"));
        }
    }
    if [&answer.id, &answer.handoff_id, &answer.question_id, &answer.text].iter().any(|s| s.contains('\0')) {
        return Err("a string contains a NUL character (\\u0000)".into());
    }
    parse_timestamp(&answer.at).map_err(|e| format!("`at` is not an RFC 3339 time: {e}"))?;
    Ok(answer)
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
        assert_eq!(
            (a.id.as_str(), a.handoff_id.as_str(), a.question_id.as_str(), a.text.as_str()),
            ("a1", "h1", "q1", "yes")
        );
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
