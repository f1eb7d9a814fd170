//! Status callbacks: HTTP POSTs to a bridge's `callback.statusUrl`, queued
//! in the same transaction as the status change, delivered with retries.

use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::{sql, Result};

#[derive(Debug, Clone)]
pub struct Callback {
    pub id: i64,
    pub handoff_id: String,
    pub url: String,
    pub body: Value,
    pub attempts: i32,
}

pub async fn enqueue(c: &impl GenericClient, handoff_id: &str, url: &str, body: &Value) -> Result<()> {
    sql::execute(c, "INSERT INTO callbacks (handoff_id, url, body) VALUES ($1, $2, $3)", &[&handoff_id, &url, body]).await?;
    Ok(())
}

/// Due callbacks, each the oldest of its handoff (so one handoff's updates
/// arrive in order), locked for this transaction.
pub async fn take_due(c: &impl GenericClient, limit: i64) -> Result<Vec<Callback>> {
    let rows = sql::query(
        c,
        "SELECT cb.id, cb.handoff_id, cb.url, cb.body, cb.attempts FROM callbacks cb
          WHERE cb.next_attempt_at <= now()
            AND NOT EXISTS (SELECT 1 FROM callbacks e WHERE e.handoff_id = cb.handoff_id AND e.id < cb.id)
          ORDER BY cb.id LIMIT $1 FOR UPDATE SKIP LOCKED",
        &[&limit],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Callback { id: r.get(0), handoff_id: r.get(1), url: r.get(2), body: r.get(3), attempts: r.get(4) })
        .collect())
}

pub async fn delete(c: &impl GenericClient, id: i64) -> Result<()> {
    sql::execute(c, "DELETE FROM callbacks WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Schedules the next attempt after `delay`.
pub async fn retry_later(c: &impl GenericClient, id: i64, delay: std::time::Duration, error: &str) -> Result<()> {
    let secs = delay.as_secs_f64();
    sql::execute(
        c,
        "UPDATE callbacks SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2), last_error = $3
          WHERE id = $1",
        &[&id, &secs, &error],
    )
    .await?;
    Ok(())
}

/// Keeps a callback from being taken again while it is being delivered.
pub async fn lease(c: &impl GenericClient, id: i64, for_how_long: std::time::Duration) -> Result<()> {
    let secs = for_how_long.as_secs_f64();
    sql::execute(c, "UPDATE callbacks SET next_attempt_at = now() + make_interval(secs => $2) WHERE id = $1", &[&id, &secs]).await?;
    Ok(())
}
