//! The messages a bridge receives (docs/bridge-protocol.md#statuses-and-replies): status changes and
//! one final reply per request, with deterministic message ids so a bridge
//! can drop the rare duplicate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::protocol::contract::{ErrorCode, ReplyType, StatusType};
use crate::protocol::language::Language;
use crate::protocol::reply::{humanize, split_parts, ChannelLimits, Outcome, ReplyStatus};
use crate::protocol::request::HandoffStatus;

/// A change of a handoff's status (docs/bridge-protocol.md#statuses-and-replies). `message_id`:
/// `status:<handoffId>:<seq>`; `correlation_id`: the handoff's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct BridgeStatus {
    #[serde(rename = "type")]
    pub kind: StatusType,
    pub handoff_id: String,
    pub status: HandoffStatus,
    /// 1, 2, 3 … per handoff, in the order the changes happened: a bridge
    /// ignores a status whose `seq` is below one it already has.
    #[schemars(range(min = 1))]
    pub seq: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reply_to_chat_id: Option<String>,
    /// When the change happened (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
}

/// The body of a status callback: every `BridgeStatus` is also POSTed, as
/// it is, to the request's `callback.statusUrl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(transparent)]
pub struct StatusCallback(pub BridgeStatus);

/// The one final reply of a handoff (docs/bridge-protocol.md#statuses-and-replies). `message_id`:
/// `reply:<handoffId>`, or `reply:<handoffId>:<attempt>` for a retried run
/// (attempt >= 2); `correlation_id`: the handoff's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct BridgeReply {
    #[serde(rename = "type")]
    pub kind: ReplyType,
    pub handoff_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reply_to_chat_id: Option<String>,
    pub status: ReplyStatus,
    pub language: Language,
    /// A humanized message, ready to send to the chat.
    pub text: String,
    /// `text` cut for the channel: each part is one chat message (for
    /// `source: weixin`, at most 5 parts of at most 2048 bytes).
    pub parts: Vec<String>,
    /// What the agents produced, when the handoff completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub result: Option<ReplyResult>,
    /// Why the handoff failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub error: Option<ReplyError>,
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
}

/// The result of a completed handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ReplyResult {
    pub run_id: String,
    pub final_text: String,
    /// The agents that held the work, in order (`manual` handoffs list none).
    pub agents: Vec<String>,
    /// What a coding agent changed in the request's project (docs/bridge-protocol.md#coding-agent-results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub changes: Option<ReplyChanges>,
}

/// What a coding agent changed: the diff of its checkout (docs/bridge-protocol.md#coding-agent-results).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ReplyChanges {
    /// The request's `projectId`.
    pub project: String,
    /// Paths changed, relative to the project.
    pub files: Vec<String>,
    #[schemars(range(min = 0))]
    pub insertions: i32,
    #[schemars(range(min = 0))]
    pub deletions: i32,
    /// Where they were pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub branch: Option<String>,
    /// The pushed commit's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub commit: Option<String>,
}

/// Why a handoff failed: a code for the bridge, a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ReplyError {
    pub code: ErrorCode,
    pub message: String,
}

/// `status:<handoffId>:<seq>` (docs/bridge-protocol.md#statuses-and-replies): a status can repeat
/// (running → blocked → running), so the sequence number, not the status,
/// keeps each message's id its own.
pub fn status_message_id(handoff_id: &str, seq: i32) -> String {
    format!("status:{handoff_id}:{seq}")
}

pub fn reply_message_id(handoff_id: &str) -> String {
    format!("reply:{handoff_id}")
}

/// The reply of a run's `attempt`: `reply:<handoffId>` for the first, and
/// `reply:<handoffId>:<attempt>` for a retried run (attempt >= 2), so a
/// bridge that drops duplicate message ids still sees the new reply.
pub fn attempt_reply_message_id(handoff_id: &str, attempt: i32) -> String {
    match attempt {
        ..=1 => reply_message_id(handoff_id),
        n => format!("reply:{handoff_id}:{n}"),
    }
}

pub fn status(handoff_id: &str, status: HandoffStatus, seq: i32, chat_id: Option<&str>, at: String) -> Value {
    let message = BridgeStatus {
        kind: StatusType::Status,
        handoff_id: handoff_id.to_string(),
        status,
        seq,
        reply_to_chat_id: chat_id.map(str::to_string),
        at,
    };
    serde_json::to_value(message).expect("a status message always serializes")
}

/// What the collector knows about a finished request.
#[derive(Debug, Clone)]
pub struct ReplyInput<'a> {
    pub handoff_id: &'a str,
    pub chat_id: Option<&'a str>,
    pub source: &'a str,
    pub language: Language,
    pub outcome: Outcome,
    pub run_id: Option<String>,
    pub agents: Vec<String>,
    /// What a coding agent changed, when one ran.
    pub changes: Option<ReplyChanges>,
    pub at: String,
}

/// The final `BridgeReply`, humanized and cut into chat-sized parts.
pub fn reply(input: &ReplyInput<'_>) -> Value {
    serde_json::to_value(reply_message(input)).expect("a reply always serializes")
}

/// [`reply`], as its type.
pub fn reply_message(input: &ReplyInput<'_>) -> BridgeReply {
    let text = humanize(&input.outcome, input.language);
    let parts = split_parts(&text, ChannelLimits::for_source(input.source), input.language);
    let (result, error) = match &input.outcome {
        Outcome::Completed { final_text } => {
            let run_id = input.run_id.clone().unwrap_or_default();
            {
                let result = ReplyResult {
                    run_id,
                    final_text: final_text.clone(),
                    agents: input.agents.clone(),
                    changes: input.changes.clone(),
                };
                (Some(result), None)
            }
        }
        Outcome::Failed { code, message } => (None, Some(ReplyError { code: *code, message: message.clone() })),
        _ => (None, None),
    };
    BridgeReply {
        kind: ReplyType::Reply,
        handoff_id: input.handoff_id.to_string(),
        reply_to_chat_id: input.chat_id.map(str::to_string),
        status: input.outcome.reply_status(),
        language: input.language,
        text,
        parts,
        result,
        error,
        at: input.at.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(outcome: Outcome) -> ReplyInput<'static> {
        ReplyInput {
            handoff_id: "h1",
            chat_id: Some("wx"),
            source: "weixin",
            language: Language::En,
            outcome,
            run_id: Some("r1".into()),
            agents: vec!["writer".into(), "editor".into()],
            changes: None,
            at: "2026-11-30T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_completed_reply_carries_the_final_text_and_agents() {
        let r = reply(&input(Outcome::Completed { final_text: "Hello all.".into() }));
        assert_eq!(r["status"], "completed");
        assert_eq!(r["text"], "Hello all.");
        assert_eq!(r["parts"][0], "Hello all.");
        assert_eq!(r["result"]["agents"][1], "editor");
        assert_eq!(r["replyToChatId"], "wx");
    }

    #[test]
    fn a_failed_reply_carries_the_error() {
        let r = reply(&input(Outcome::Failed { code: ErrorCode::InvalidRequest, message: "missing field".into() }));
        assert_eq!(r["status"], "failed");
        assert_eq!(r["error"]["code"], "invalid_request");
        assert!(r["text"].as_str().unwrap().contains("missing field"));
    }

    #[test]
    fn status_messages_have_deterministic_ids() {
        assert_eq!(status_message_id("h1", 2), "status:h1:2");
        assert_eq!(attempt_reply_message_id("h1", 1), "reply:h1");
        assert_eq!(attempt_reply_message_id("h1", 2), "reply:h1:2");
        let s = status("h1", HandoffStatus::Running, 2, None, "t".into());
        assert_eq!(s["type"], "status");
        assert_eq!(s["seq"], 2);
        assert!(s.get("replyToChatId").is_none());
    }
}
