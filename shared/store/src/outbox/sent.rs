//! What each bridge was sent: every bridge message, kept after it was
//! published (its row is marked sent, not deleted), so an operator can read
//! statuses and replies exactly as they left.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;

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
        "SELECT message_id, queue, body, created_at, pending, last_error FROM bridge_messages
          WHERE handoff_id = $1 AND (NOT pending OR pending) ORDER BY id",
        &[&handoff_id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Sent {
            message_id: r.get(0),
            queue: r.get(1),
            body: r.get(2),
            at: r.get(3),
            pending: r.get(4),
            last_error: r.get(5),
        })
        .collect())
}
