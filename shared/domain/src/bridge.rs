//! The messages a bridge receives (CONTRACT.md section 3): status changes and
//! one final reply per request, with deterministic message ids so a bridge
//! can drop the rare duplicate.

use serde::Serialize;
use serde_json::Value;

use crate::language::Language;
use crate::reply::{humanize, split_parts, ChannelLimits, Outcome};

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeStatus<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub handoff_id: &'a str,
    pub status: &'a str,
    pub seq: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_chat_id: Option<&'a str>,
    pub at: String,
}

/// `status:<handoffId>:<seq>` (CONTRACT §3): a status can repeat
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

pub fn status(handoff_id: &str, status: &str, seq: i32, chat_id: Option<&str>, at: String) -> Value {
    let message = BridgeStatus { kind: "status", handoff_id, status, seq, reply_to_chat_id: chat_id, at };
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
    pub at: String,
}

/// The final `BridgeReply`, humanized and cut into chat-sized parts.
pub fn reply(input: &ReplyInput<'_>) -> Value {
    let text = humanize(&input.outcome, input.language);
    let parts = split_parts(&text, ChannelLimits::for_source(input.source), input.language);
    let mut reply = serde_json::json!({
        "type": "reply",
        "handoffId": input.handoff_id,
        "status": input.outcome.status(),
        "language": input.language.as_str(),
        "text": text,
        "parts": parts,
        "at": input.at,
    });
    if let Some(chat) = input.chat_id {
        reply["replyToChatId"] = chat.into();
    }
    match &input.outcome {
        Outcome::Completed { final_text } => {
            reply["result"] = serde_json::json!({
                "runId": input.run_id, "finalText": final_text, "agents": input.agents,
            });
        }
        Outcome::Failed { code, message } => {
            reply["error"] = serde_json::json!({ "code": code, "message": message });
        }
        _ => {}
    }
    reply
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
        let r = reply(&input(Outcome::Failed { code: "bad_request".into(), message: "missing field".into() }));
        assert_eq!(r["status"], "failed");
        assert_eq!(r["error"]["code"], "bad_request");
        assert!(r["text"].as_str().unwrap().contains("missing field"));
    }

    #[test]
    fn status_messages_have_deterministic_ids() {
        assert_eq!(status_message_id("h1", 2), "status:h1:2");
        assert_eq!(attempt_reply_message_id("h1", 1), "reply:h1");
        assert_eq!(attempt_reply_message_id("h1", 2), "reply:h1:2");
        let s = status("h1", "running", 2, None, "t".into());
        assert_eq!(s["type"], "status");
        assert_eq!(s["seq"], 2);
        assert!(s.get("replyToChatId").is_none());
    }
}
