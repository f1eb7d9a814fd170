//! `BridgeCancel`: a bridge asks the fleet to stop a handoff. It travels on
//! the requests queue with `"type": "cancel"`; its `id` is the idempotency
//! key of the cancel itself, `handoffId` the request it is about.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::protocol::contract::{parse_timestamp, CancelType, TIMESTAMP_PATTERN};
use crate::protocol::request::{bounded_reason, RequestError};

/// Largest cancel body looked at: a cancel is a few short fields.
pub const MAX_CANCEL_BYTES: usize = 64 * 1024;

/// Longest accepted `id` and `handoffId`, as for a request's id.
const MAX_ID_CHARS: usize = 128;

/// A bridge asks the fleet to stop a handoff (docs/bridge-protocol.md#conversations), on
/// `baton.bridge.requests`. Kept once per `id`; a cancel that arrives
/// before its request is kept and applied on arrival.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct BridgeCancel {
    #[serde(rename = "type")]
    pub kind: CancelType,
    /// The idempotency key of this cancel.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    /// The handoff to stop.
    #[schemars(length(min = 1, max = 128))]
    pub handoff_id: String,
    /// The user's or bridge's words, shown in the `cancelled` reply (bounded
    /// to 1024 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reason: Option<String>,
    /// When the user cancelled (RFC 3339).
    #[schemars(extend("format" = "date-time"), regex(pattern = TIMESTAMP_PATTERN))]
    pub at: String,
}

/// The `type` of a message on the requests queue: `None` for a body that
/// has none (a `HandoffRequest`) or is not a JSON object.
#[must_use]
pub fn message_type(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<Value>,
    }
    let typed: Typed = serde_json::from_slice(body).ok()?;
    match typed.kind? {
        Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

/// Parses and checks one cancel body.
///
/// # Errors
///
/// A [`RequestError`] naming what is wrong. It never carries the handoff id:
/// a malformed cancel says nothing the handoff's user must hear, so it is
/// dead-lettered without a reply.
pub fn parse_cancel(body: &[u8]) -> Result<BridgeCancel, RequestError> {
    read(body).map_err(|reason| RequestError { reason, handoff_id: None, reply_to_chat_id: None, language: None })
}

fn read(body: &[u8]) -> Result<BridgeCancel, String> {
    if body.len() > MAX_CANCEL_BYTES {
        return Err(format!("a cancel is {} bytes; the limit is {MAX_CANCEL_BYTES}", body.len()));
    }
    let wire: BridgeCancel = serde_json::from_slice(body).map_err(|e| format!("not a cancel: {e}"))?;
    check_id("id", &wire.id)?;
    check_id("handoffId", &wire.handoff_id)?;
    parse_timestamp(&wire.at).map_err(|e| format!("field `at` must be an RFC 3339 timestamp ({e})"))?;
    let reason = wire.reason.map(|r| bounded_reason(r.trim())).filter(|r| !r.is_empty());
    if [&wire.id, &wire.handoff_id].iter().any(|s| s.contains('\0'))
        || reason.as_deref().is_some_and(|r| r.contains('\0'))
    {
        return Err("a string contains a NUL character (\\u0000)".into());
    }
    Ok(BridgeCancel { reason, ..wire })
}

fn check_id(field: &str, id: &str) -> Result<(), String> {
    let n = id.chars().count();
    if (1..=MAX_ID_CHARS).contains(&n) {
        Ok(())
    } else {
        Err(format!("field `{field}` must be 1 to {MAX_ID_CHARS} characters long (it is {n})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: &str = "2026-11-30T10:00:00Z";

    #[test]
    fn a_cancel_parses_with_and_without_a_reason() {
        let body = format!(r#"{{"type":"cancel","id":"c-1","handoffId":"h-1","reason":"  stop  ","at":"{AT}"}}"#);
        let cancel = parse_cancel(body.as_bytes()).unwrap();
        assert_eq!(
            cancel,
            BridgeCancel {
                kind: CancelType::Cancel,
                id: "c-1".into(),
                handoff_id: "h-1".into(),
                reason: Some("stop".into()),
                at: AT.into()
            }
        );
        let bare = format!(r#"{{"type":"cancel","id":"c-1","handoffId":"h-1","at":"{AT}","extra":1}}"#);
        assert_eq!(parse_cancel(bare.as_bytes()).unwrap().reason, None);
    }

    #[test]
    fn a_bad_cancel_is_refused_without_naming_its_handoff() {
        for (body, expected) in [
            (format!(r#"{{"type":"cancel","id":"","handoffId":"h","at":"{AT}"}}"#), "field `id`"),
            (format!(r#"{{"type":"cancel","id":"c","at":"{AT}"}}"#), "handoffId"),
            (r#"{"type":"cancel","id":"c","handoffId":"h","at":"yesterday"}"#.to_string(), "field `at`"),
            (
                format!(r#"{{"type":"answer","id":"c","handoffId":"h","at":"{AT}"}}"#),
                "unknown variant `answer`, expected `cancel`",
            ),
        ] {
            let err = parse_cancel(body.as_bytes()).unwrap_err();
            assert!(err.reason.contains(expected), "{body}: {}", err.reason);
            assert_eq!(err.handoff_id, None);
        }
    }

    #[test]
    fn the_message_type_tells_control_messages_from_requests() {
        assert_eq!(message_type(br#"{"type":"cancel","id":"x"}"#).as_deref(), Some("cancel"));
        assert_eq!(message_type(br#"{"id":"x","source":"weixin"}"#), None);
        assert_eq!(message_type(br#"{"type":7}"#).as_deref(), Some("7"));
        assert_eq!(message_type(b"not json"), None);
    }
}
