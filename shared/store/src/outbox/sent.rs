//! What each bridge was sent: every bridge message, kept after it was
//! published (its row is marked sent, not deleted), so an operator can read
//! statuses and replies exactly as they left.

use chrono::{DateTime, SecondsFormat, Utc};
use deadpool_postgres::GenericClient;
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
                b.created_at, h.bridge_id, h.reply_chat_id, b.then_status, b.sent_parts
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
        let left = usize::try_from(r.get::<_, Option<i16>>(13).unwrap_or(0)).unwrap_or(0);
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
/// reply_chat_id`, and its `then_status`. A status keeps only what its body
/// is rendered from (V43), every other message its body.
pub(crate) fn rendered(r: &tokio_postgres::Row, from: usize) -> Result<Vec<(Option<String>, Value)>> {
    let handoff: String = r.get(from + 1);
    let at = RowOf { table: "bridge_messages of", id: &handoff };
    let statuses = [at.wire_opt::<HandoffStatus>(r, from + 3)?, at.wire_opt::<HandoffStatus>(r, from + 8)?];
    let mut messages = Vec::with_capacity(2);
    if statuses.iter().any(Option::is_some) {
        let bridge: Option<String> = r.get(from + 6);
        let wire = baton_domain::protocol::bridges::unqualified(bridge.as_deref(), &handoff);
        let chat: Option<String> = r.get(from + 7);
        let (seq, written): (i32, DateTime<Utc>) = (r.get(from + 4), r.get(from + 5));
        for (status, seq) in statuses.into_iter().zip(seq..).filter_map(|(s, n)| s.map(|s| (s, n))) {
            let (id, body) = status_message(wire, chat.as_deref(), status, seq, written);
            messages.push((Some(id), body));
        }
    }
    if let Some(body) = r.get::<_, Option<Value>>(from + 2) {
        messages.push((r.get(from), body));
    }
    Ok(messages)
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
