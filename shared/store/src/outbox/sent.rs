//! What each bridge was sent: every bridge message, kept after it was
//! published (its row is marked sent, not deleted), so an operator can read
//! statuses and replies exactly as they left.

use crate::GenericClient;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use baton_domain::protocol::bridge;
use baton_domain::protocol::request::HandoffStatus;

use crate::decode::RowOf;
use crate::{sql, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub message_id: Option<String>,
    pub queue: String,
    pub body: Value,
    pub at: DateTime<Utc>,
    /// Not confirmed by the broker yet (its writer or the relay still has
    /// it), with the broker's last refusal if it refused it.
    pub pending: bool,
    pub last_error: Option<String>,
}

/// A handoff's messages in the order they were queued.
pub async fn for_handoff(c: &impl GenericClient, handoff_id: &str) -> Result<Vec<Sent>> {
    let rows = sql::query(
        c,
        // Sent and pending messages are indexed apart (V40).
        "SELECT b.queue, b.created_at, b.pending, b.last_error, b.message_id, b.handoff_id, b.body, b.status, b.seq,
                b.created_at, h.bridge_id, h.reply_chat_id, b.then_status, h.language, b.sent_parts
           FROM bridge_messages b LEFT JOIN handoff_requests h ON b.status IS NOT NULL AND h.id = b.handoff_id
          WHERE b.handoff_id = $1 AND (NOT b.pending OR b.pending) ORDER BY b.id",
        &[&handoff_id],
    )
    .await?;
    let mut sent = vec![];
    for r in &rows {
        // A row this version cannot read is shown with the reason.
        let messages =
            rendered(r, 4).unwrap_or_else(|e| vec![(r.get(4), serde_json::json!({"unreadable": e.to_string()}))]);
        // Of a row refused half-way, the messages before `sent_parts` left.
        let left = usize::try_from(r.get::<_, Option<i16>>(14).unwrap_or(0)).unwrap_or(0);
        sent.extend(messages.into_iter().enumerate().map(|(n, (message_id, body))| Sent {
            message_id,
            queue: r.get(0),
            body,
            at: r.get(1),
            pending: r.get::<_, bool>(2) && n >= left,
            last_error: r.get(3),
        }));
    }
    Ok(sent)
}

/// A row's bridge messages, each its id and body as sent, in the order they
/// are published: its status, its second status, its message with a body
/// (V46). The row's columns from `from` on are its `message_id, handoff_id,
/// body, status, seq, created_at`, its request's `bridge_id,
/// reply_chat_id`, its `then_status` and its request's `language`. A status
/// keeps only what its body is rendered from (V43), a reply what its
/// request and its row do not say ([`Reply`]), every other message
/// its body.
pub(crate) fn rendered(r: &tokio_postgres::Row, from: usize) -> Result<Vec<(Option<String>, Value)>> {
    let handoff: String = r.get(from + 1);
    let at = RowOf { table: "bridge_messages of", id: &handoff };
    let statuses = [at.wire_opt::<HandoffStatus>(r, from + 3)?, at.wire_opt::<HandoffStatus>(r, from + 8)?];
    let mut messages = Vec::with_capacity(2);
    let bridge: Option<String> = r.get(from + 6);
    let wire = baton_domain::protocol::bridges::unqualified(bridge.as_deref(), &handoff);
    let chat: Option<String> = r.get(from + 7);
    let written: DateTime<Utc> = r.get(from + 5);
    if statuses.iter().any(Option::is_some) {
        let seq: i32 = r.get(from + 4);
        for (status, seq) in statuses.into_iter().zip(seq..).filter_map(|(s, n)| s.map(|s| (s, n))) {
            let (id, body) = status_message(wire, chat.as_deref(), status, seq, written);
            messages.push((Some(id), body));
        }
    }
    if let Some(body) = r.get::<_, Option<Value>>(from + 2) {
        let message_id: Option<String> = r.get(from);
        if body.get("type").is_none() {
            let last = statuses[1].or(statuses[0]);
            let language: Option<String> = r.get(from + 9);
            let about = Reply { wire, chat: chat.as_deref(), language: language.as_deref(), status: last };
            let id = message_id.unwrap_or_else(|| bridge::reply_message_id(wire));
            messages.push((Some(id), about.whole(body, written)));
        } else {
            messages.push((message_id, body));
        }
    }
    Ok(messages)
}

/// What a reply's row and its request say of it, which its stored body
/// leaves out: the request's id as its bridge knows it, its chat and
/// language, and the row's last status.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reply<'a> {
    pub wire: &'a str,
    pub chat: Option<&'a str>,
    pub language: Option<&'a str>,
    pub status: Option<HandoffStatus>,
}

/// The keys a reply's stored body leaves out when they say what its row
/// and request say (and `at`, the row's time, always).
const SAID_ELSEWHERE: [&str; 6] = ["type", "handoffId", "replyToChatId", "language", "status", "at"];

impl Reply<'_> {
    /// What each key of [`SAID_ELSEWHERE`] says, read from the row.
    fn said(&self, key: &str) -> Option<Value> {
        match key {
            "type" => Some(Value::from("reply")),
            "handoffId" => Some(Value::from(self.wire)),
            "replyToChatId" => self.chat.map(Value::from),
            "language" => self.language.map(Value::from),
            "status" => self.status.map(|s| Value::from(s.as_str())),
            _ => None,
        }
    }

    /// A reply's body as its row keeps it: without what the row and the
    /// request say (a key that says otherwise stays), and without `at`,
    /// which becomes the row's time.
    pub(crate) fn kept(&self, mut body: Value) -> Value {
        if let Some(fields) = body.as_object_mut() {
            for key in SAID_ELSEWHERE {
                if key == "at" || (fields.get(key).is_some() && fields.get(key) == self.said(key).as_ref()) {
                    fields.remove(key);
                }
            }
        }
        body
    }

    /// The reply as its bridge receives it, from its kept body.
    fn whole(&self, mut kept: Value, written: DateTime<Utc>) -> Value {
        if let Some(fields) = kept.as_object_mut() {
            for key in SAID_ELSEWHERE {
                let said = match key {
                    "at" => Some(Value::from(written.to_rfc3339_opts(SecondsFormat::Millis, true))),
                    _ => self.said(key),
                };
                if let (false, Some(said)) = (fields.contains_key(key), said) {
                    fields.insert(key.to_string(), said);
                }
            }
        }
        kept
    }
}

/// A status message as its bridge receives it, its message id and body,
/// rendered from what its row keeps (V43): the status, its sequence number
/// and when it was written, with its request's id as the bridge knows it
/// (`Request::wire_id`) and chat.
pub fn status_message(
    wire_id: &str,
    chat_id: Option<&str>,
    status: HandoffStatus,
    seq: i32,
    at: DateTime<Utc>,
) -> (String, Value) {
    let body = bridge::status(wire_id, status, seq, chat_id, at.to_rfc3339_opts(SecondsFormat::Millis, true));
    (bridge::status_message_id(wire_id, seq), body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_reply_keeps_what_its_row_does_not_say_and_reads_back_whole() {
        let at = DateTime::parse_from_rfc3339("2026-12-05T16:25:00.450041Z").unwrap().with_timezone(&Utc);
        let about =
            Reply { wire: "h-1", chat: Some("chat-9"), language: Some("en"), status: Some(HandoffStatus::Completed) };
        let sent = json!({"type": "reply", "handoffId": "h-1", "replyToChatId": "chat-9", "language": "en",
                          "status": "completed", "at": "2026-12-05T16:25:00.449Z", "text": "done", "parts": ["done"],
                          "result": {"runId": "r", "agents": ["e1"], "finalText": "done"}});
        let kept = about.kept(sent.clone());
        assert_eq!(
            kept,
            json!({"text": "done", "parts": ["done"], "result": {"runId": "r", "agents": ["e1"], "finalText": "done"}})
        );
        let mut expected = sent;
        expected["at"] = json!("2026-12-05T16:25:00.450Z");
        assert_eq!(about.whole(kept, at), expected, "its time is the row's");
    }

    #[test]
    fn a_reply_key_that_says_otherwise_than_its_row_is_kept() {
        let about = Reply { wire: "h-1", chat: None, language: Some("en"), status: Some(HandoffStatus::Failed) };
        let sent =
            json!({"type": "reply", "handoffId": "h-1", "language": "zh-CN", "status": "completed", "text": "x"});
        let kept = about.kept(sent.clone());
        assert_eq!(kept, json!({"language": "zh-CN", "status": "completed", "text": "x"}));
        let whole = about.whole(kept, Utc::now());
        assert_eq!(
            (whole["language"].clone(), whole["status"].clone(), whole.get("replyToChatId")),
            (json!("zh-CN"), json!("completed"), None)
        );
    }

    #[test]
    fn a_status_message_is_rendered_from_its_status_number_and_time() {
        let at = DateTime::parse_from_rfc3339("2026-12-05T12:07:47.443912Z").unwrap().with_timezone(&Utc);
        let (id, body) = status_message("h-1", Some("chat-9"), HandoffStatus::Running, 7, at);
        assert_eq!(id, "status:h-1:7");
        assert_eq!(
            body,
            serde_json::json!({"type": "status", "handoffId": "h-1", "status": "running", "seq": 7,
                               "replyToChatId": "chat-9", "at": "2026-12-05T12:07:47.443Z"})
        );
    }
}
