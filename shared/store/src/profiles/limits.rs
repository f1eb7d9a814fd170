//! Fleet-wide limits on model calls, enforced in Postgres so they hold
//! across every worker process. Each function is one statement (a function
//! of migrations V22 and V11): the limit's row lock is held only while it
//! runs, so a call that must wait holds no transaction and no connection.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::policy::limits::{ModelLimit, WaitReason};
use uuid::Uuid;

use crate::{sql, Error, Result};

/// What an admission attempt came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// The call is counted (as `call`) and may start now.
    Admitted,
    /// Try again after this long (`None`: when a call in flight ends,
    /// which nobody can know: poll).
    Wait(Option<Duration>, WaitReason),
}

/// Admits call `call` under `limit`, counting `estimate` tokens while it
/// runs, or says how long to wait. An admitted call counts as in flight for
/// `hold`, and for `hold` again at each [`renew`] (a worker that dies while
/// calling stops renewing, and its call stops counting), until [`done`].
pub async fn admit(
    c: &impl GenericClient,
    limit: &ModelLimit,
    call: Uuid,
    hold: Duration,
    estimate: i64,
) -> Result<Admission> {
    let q = limit.quota();
    let (window, hold) = (q.window.as_secs_f64(), hold.as_secs_f64());
    let row = sql::query_one(
        c,
        "SELECT wait_secs, reason FROM baton_limit_admit_call($1, $2, $3, $4, $5, $6, $7, $8)",
        &[&limit.name, &call, &q.requests, &q.tokens, &q.concurrent, &window, &estimate, &hold],
    )
    .await?;
    let (wait, reason): (Option<f64>, Option<String>) = (row.get(0), row.get(1));
    let Some(reason) = reason else {
        return Ok(Admission::Admitted);
    };
    let reason = WaitReason::parse(&reason).ok_or_else(|| Error::Unreadable {
        kind: "limit admission",
        id: limit.name.clone(),
        reason: format!("unknown reason `{reason}`"),
    })?;
    let wait = wait.map(|secs| Duration::from_secs_f64(secs.clamp(0.0, 3600.0)));
    Ok(Admission::Wait(wait, reason))
}

/// Holds an admitted call in flight for `hold` more from now; `false` once
/// it has ended (or its row is gone), when there is nothing to renew.
pub async fn renew(c: &impl GenericClient, call: Uuid, hold: Duration) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE model_limit_calls SET held_until = clock_timestamp() + make_interval(secs => $2)
          WHERE id = $1 AND held_until IS NOT NULL",
        &[&call, &hold.as_secs_f64()],
    )
    .await?;
    Ok(n == 1)
}

/// Ends an admitted call: it no longer counts as in flight, and its tokens
/// become what the provider reported (`None`: the estimate stays).
pub async fn done(c: &impl GenericClient, call: Uuid, tokens: Option<i64>) -> Result<()> {
    sql::execute(c, "SELECT baton_limit_done($1, $2)", &[&call, &tokens]).await?;
    Ok(())
}

/// Pauses every call under `limit` for `pause` (a provider's `Retry-After`).
pub async fn pause(c: &impl GenericClient, limit: &str, pause: Duration) -> Result<()> {
    sql::execute(c, "SELECT baton_limit_pause($1, $2)", &[&limit, &pause.as_secs_f64()]).await?;
    Ok(())
}

/// A limit as an operator sees it now: calls in flight, calls and tokens in
/// the last minute, and until when a provider paused it.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub name: String,
    pub in_flight: i64,
    pub calls_last_minute: i64,
    pub tokens_last_minute: i64,
    pub paused_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every limit in use, by name.
pub async fn usage(c: &impl GenericClient) -> Result<Vec<Usage>> {
    let rows = sql::query(
        c,
        "SELECT l.name,
                count(*) FILTER (WHERE k.held_until > clock_timestamp()),
                count(k.id) FILTER (WHERE k.started_at > clock_timestamp() - interval '1 minute'),
                coalesce(sum(k.tokens) FILTER (WHERE k.started_at > clock_timestamp() - interval '1 minute'), 0)::bigint,
                l.paused_until
           FROM model_limits l LEFT JOIN model_limit_calls k ON k.limit_name = l.name
          GROUP BY l.name, l.paused_until ORDER BY l.name",
        &[],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Usage {
            name: r.get(0),
            in_flight: r.get(1),
            calls_last_minute: r.get(2),
            tokens_last_minute: r.get(3),
            paused_until: r.get(4),
        })
        .collect())
}
