//! What the operator's console shares between its replicas: sessions (by
//! the SHA-256 of their id), the wrong tokens that throttle a client, and the
//! tokens of pages served without a session; which bridge queues a
//! dead letter may be replayed to, and which handoffs and runs it names. See
//! `baton_domain::console::session` for the decisions these rows feed.

use std::time::Duration;

use crate::GenericClient;
use chrono::{DateTime, Utc};

use crate::{sql, Result};

/// A live session: not expired, not revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub csrf: String,
    pub expires_at: DateTime<Utc>,
}

/// Stores a new session, which lasts `lifetime`; returns when it expires.
pub async fn open_session(
    c: &impl GenericClient,
    id_hash: &[u8],
    csrf: &str,
    client: &str,
    lifetime: Duration,
) -> Result<DateTime<Utc>> {
    let secs = lifetime.as_secs_f64();
    let row = sql::query_one(
        c,
        "INSERT INTO console_sessions (id_hash, csrf, client, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(secs => $4)) RETURNING expires_at",
        &[&id_hash, &csrf, &client, &secs],
    )
    .await?;
    Ok(row.get(0))
}

/// The session with this id hash, if it is live.
pub async fn session(c: &impl GenericClient, id_hash: &[u8]) -> Result<Option<Session>> {
    let row = sql::query_opt(
        c,
        "SELECT csrf, expires_at FROM console_sessions
          WHERE id_hash = $1 AND revoked_at IS NULL AND expires_at > now()",
        &[&id_hash],
    )
    .await?;
    Ok(row.map(|r| Session { csrf: r.get(0), expires_at: r.get(1) }))
}

/// Revokes a session (logging out); `false` if it was not live.
pub async fn revoke_session(c: &impl GenericClient, id_hash: &[u8]) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE console_sessions SET revoked_at = now() WHERE id_hash = $1 AND revoked_at IS NULL",
        &[&id_hash],
    )
    .await?;
    Ok(n == 1)
}

/// Removes sessions that ended (expired or revoked) more than `kept` ago,
/// and failure counts whose window ended more than `kept` ago.
pub async fn prune(c: &impl GenericClient, window: Duration, kept: Duration) -> Result<u64> {
    let (window, kept) = (window.as_secs_f64(), kept.as_secs_f64());
    let sessions = sql::execute(
        c,
        "DELETE FROM console_sessions
          WHERE LEAST(expires_at, COALESCE(revoked_at, expires_at)) < now() - make_interval(secs => $1)",
        &[&kept],
    )
    .await?;
    let failures = sql::execute(
        c,
        "DELETE FROM console_login_failures
          WHERE window_started_at < now() - make_interval(secs => $1) - make_interval(secs => $2)",
        &[&window, &kept],
    )
    .await?;
    Ok(sessions + failures)
}

/// Wrong tokens counted against a client, with the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    pub failures: i32,
    pub window_started_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// Counts a wrong token against `client`, in a window of `window` that
/// starts at its first failure (a window that ended starts again); returns
/// the failures in the window. One statement, so concurrent failures each
/// count.
pub async fn login_failed(c: &impl GenericClient, client: &str, window: Duration) -> Result<Failures> {
    let secs = window.as_secs_f64();
    let row = sql::query_one(
        c,
        "INSERT INTO console_login_failures AS f (client, failures, window_started_at) VALUES ($1, 1, now())
         ON CONFLICT (client) DO UPDATE SET
             failures = CASE WHEN f.window_started_at <= now() - make_interval(secs => $2) THEN 1
                             ELSE f.failures + 1 END,
             window_started_at = CASE WHEN f.window_started_at <= now() - make_interval(secs => $2) THEN now()
                                      ELSE f.window_started_at END
         RETURNING failures, window_started_at, now()",
        &[&client, &secs],
    )
    .await?;
    Ok(Failures { failures: row.get(0), window_started_at: row.get(1), now: row.get(2) })
}

/// The failures counted against `client` (none: zero, in a window starting now).
pub async fn login_failures(c: &impl GenericClient, client: &str) -> Result<Failures> {
    let row = sql::query_one(
        c,
        "SELECT COALESCE(f.failures, 0), COALESCE(f.window_started_at, now()), now()
           FROM (SELECT 1) one LEFT JOIN console_login_failures f ON f.client = $1",
        &[&client],
    )
    .await?;
    Ok(Failures { failures: row.get(0), window_started_at: row.get(1), now: row.get(2) })
}

/// A client logged in: its failures are forgotten.
pub async fn login_succeeded(c: &impl GenericClient, client: &str) -> Result<()> {
    sql::execute(c, "DELETE FROM console_login_failures WHERE client = $1", &[&client]).await?;
    Ok(())
}

/// The token every replica uses for `purpose`: the one stored, or
/// `candidate` if this is the first to ask (two first askers agree on the
/// one that was inserted).
pub async fn shared_token(c: &impl GenericClient, purpose: &str, candidate: &str) -> Result<String> {
    sql::execute(
        c,
        "INSERT INTO console_tokens (purpose, value) VALUES ($1, $2) ON CONFLICT (purpose) DO NOTHING",
        &[&purpose, &candidate],
    )
    .await?;
    let row = sql::query_one(c, "SELECT value FROM console_tokens WHERE purpose = $1", &[&purpose]).await?;
    Ok(row.get(0))
}

/// Whether a stored request named `queue` as its `reply_to` (a bridge's
/// own reply queue, where a dead letter may be replayed): intake keeps each
/// such queue once (`reply_queues`, V45).
pub async fn is_reply_queue(c: &impl GenericClient, queue: &str) -> Result<bool> {
    let row = sql::query_one(c, "SELECT EXISTS (SELECT 1 FROM reply_queues WHERE queue = $1)", &[&queue]).await?;
    Ok(row.get(0))
}

/// Which of `handoffs` and `runs` are stored (a dead letter links to them).
pub async fn known(
    c: &impl GenericClient,
    handoffs: &[String],
    runs: &[uuid::Uuid],
) -> Result<(Vec<String>, Vec<uuid::Uuid>)> {
    let stored = sql::query(c, "SELECT id FROM handoff_requests WHERE id = ANY($1)", &[&handoffs]).await?;
    let ran = sql::query(c, "SELECT id FROM runs WHERE id = ANY($1)", &[&runs]).await?;
    Ok((stored.iter().map(|r| r.get(0)).collect(), ran.iter().map(|r| r.get(0)).collect()))
}
