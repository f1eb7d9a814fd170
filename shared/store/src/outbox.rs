//! The transactional outbox: a message is a row committed with the change
//! that caused it; the relay publishes it and deletes it after the confirm.

use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::{sql, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// A logical fleet queue (`baton.invocations.handoff`), or a bridge's own
    /// queue when `external`.
    pub queue: String,
    pub external: bool,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub body: Value,
    /// Published `mandatory`: a message no queue takes comes back.
    pub mandatory: bool,
}

impl Message {
    /// An internal "look at this row now" message to a fleet queue.
    pub fn fleet(queue: &str, body: Value) -> Self {
        Self { queue: queue.to_string(), external: false, message_id: None, correlation_id: None, body, mandatory: false }
    }
}

pub async fn enqueue(c: &impl GenericClient, m: &Message) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO outbox (queue, external, message_id, correlation_id, body, mandatory) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&m.queue, &m.external, &m.message_id, &m.correlation_id, &m.body, &m.mandatory],
    )
    .await?;
    Ok(())
}

/// Takes the oldest rows, locked for this transaction; committing deletes
/// them, rolling back puts them back. Concurrent relays skip each other's rows.
pub async fn take_batch(c: &impl GenericClient, limit: i64) -> Result<Vec<(i64, Message)>> {
    let rows = sql::query(
        c,
        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
         RETURNING id, queue, external, message_id, correlation_id, body, mandatory",
        &[&limit],
    )
    .await?;
    let mut batch: Vec<(i64, Message)> = rows
        .iter()
        .map(|r| {
            let m = Message {
                queue: r.get(1),
                external: r.get(2),
                message_id: r.get(3),
                correlation_id: r.get(4),
                body: r.get(5),
                mandatory: r.get(6),
            };
            (r.get(0), m)
        })
        .collect();
    batch.sort_by_key(|(id, _)| *id);
    Ok(batch)
}

pub async fn pending(c: &impl GenericClient) -> Result<i64> {
    Ok(sql::query_one(c, "SELECT count(*) FROM outbox", &[]).await?.get(0))
}
