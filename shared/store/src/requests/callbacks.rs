//! Status callbacks: HTTP POSTs to a bridge's `callback.statusUrl`, queued
//! in the same transaction as the status change, delivered with retries.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::protocol::request::HandoffEvent;
use serde_json::Value;

use crate::{requests, sql, Result};

#[derive(Debug, Clone)]
pub struct Callback {
    pub id: i64,
    pub handoff_id: String,
    /// The request's source (`weixin` …), which picks the signing secret.
    pub source: String,
    pub url: String,
    pub body: Value,
    pub attempts: i32,
    /// The request's bridge, with `[[bridges]]`: its own secret and origins sign and bound it.
    pub bridge: Option<String>,
}

pub async fn enqueue(c: &impl GenericClient, handoff_id: &str, url: &str, body: &Value) -> Result<()> {
    sql::execute(c, "INSERT INTO callbacks (handoff_id, url, body) VALUES ($1, $2, $3)", &[&handoff_id, &url, body])
        .await?;
    Ok(())
}

/// Takes up to `limit` due callbacks, each the oldest of its handoff (so one
/// handoff's updates go one at a time, in order), and leases them for
/// `lease` so no one takes them again while they are being delivered. One
/// statement: nothing stays locked after it.
pub async fn take_due(c: &impl GenericClient, limit: i64, lease: Duration) -> Result<Vec<Callback>> {
    let secs = lease.as_secs_f64();
    let rows = sql::query(
        c,
        "WITH due AS (
             SELECT cb.id FROM callbacks cb
              WHERE cb.next_attempt_at <= now()
                AND NOT EXISTS (SELECT 1 FROM callbacks e WHERE e.handoff_id = cb.handoff_id AND e.id < cb.id)
              ORDER BY cb.id LIMIT $1 FOR UPDATE SKIP LOCKED)
         UPDATE callbacks cb SET next_attempt_at = now() + make_interval(secs => $2)
           FROM due, handoff_requests r
          WHERE cb.id = due.id AND r.id = cb.handoff_id
         RETURNING cb.id, cb.handoff_id, r.source, cb.url, cb.body, cb.attempts, r.bridge_id",
        &[&limit, &secs],
    )
    .await?;
    let mut due: Vec<Callback> = rows
        .iter()
        .map(|r| Callback {
            id: r.get(0),
            handoff_id: r.get(1),
            source: r.get(2),
            url: r.get(3),
            body: r.get(4),
            attempts: r.get(5),
            bridge: r.get(6),
        })
        .collect();
    due.sort_by_key(|cb| cb.id);
    Ok(due)
}

pub async fn delete(c: &impl GenericClient, id: i64) -> Result<()> {
    sql::execute(c, "DELETE FROM callbacks WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Schedules the next attempt after `delay`.
pub async fn retry_later(c: &impl GenericClient, id: i64, delay: Duration, error: &str) -> Result<()> {
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

/// Gives one callback up: a `callback_failed` event saying why, and the
/// callback removed (the handoff's next one goes on).
pub async fn give_up(c: &impl GenericClient, cb: &Callback, why: &str) -> Result<()> {
    requests::add_event(c, &cb.handoff_id, HandoffEvent::CallbackFailed, None, Some(why)).await?;
    delete(c, cb.id).await
}

/// Refuses every callback of a handoff: a `callback_failed` event saying
/// why, its queued callbacks removed, and no more queued for it.
pub async fn refuse(c: &impl GenericClient, handoff_id: &str, why: &str) -> Result<()> {
    // Once per handoff: a status committed while the first refusal was
    // being written can still queue one more callback; it is dropped
    // without a second event.
    let first = sql::query_opt(
        c,
        "UPDATE handoff_requests SET status_url = NULL WHERE id = $1 AND status_url IS NOT NULL RETURNING id",
        &[&handoff_id],
    )
    .await?
    .is_some();
    if first {
        requests::add_event(c, handoff_id, HandoffEvent::CallbackFailed, None, Some(why)).await?;
    }
    sql::execute(c, "DELETE FROM callbacks WHERE handoff_id = $1", &[&handoff_id]).await?;
    Ok(())
}
