//! Conversations (CONTRACT §6): a run that asks its user and waits, and the
//! control messages a bridge sends about a request it started. They share
//! the requests queue with `HandoffRequest`s and are told apart by `type`.

pub mod answer;
pub mod question;

/// The `type` of a body on the requests queue, when it is a JSON object
/// that has one; a `HandoffRequest` has none.
pub fn message_type(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    if body.len() > crate::request::MAX_BODY_BYTES || !body.trim_ascii_start().starts_with(b"{") {
        return None;
    }
    serde_json::from_slice::<Typed>(body).ok()?.kind
}

#[cfg(test)]
mod tests {
    use super::message_type;

    #[test]
    fn a_body_without_type_is_a_request() {
        assert_eq!(message_type(br#"{"id": "h1", "userIntent": "x"}"#), None);
        assert_eq!(message_type(br#"{"type": "answer", "id": "a1"}"#).as_deref(), Some("answer"));
        assert_eq!(message_type(br#"["answer"]"#), None);
        assert_eq!(message_type(b"not json"), None);
        assert_eq!(message_type(br#"{"type": 3}"#), None);
    }
}
