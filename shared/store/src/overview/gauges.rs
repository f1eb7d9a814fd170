//! Fleet-wide figures for the metrics gauges, read on a scrape: how many
//! invocations run or wait, how far the outbox is behind, how long a
//! successor waited for its first claim.

use crate::{sql, GenericClient, Result};

/// Invocations by state, requests blocked on a question, live runs, and
/// what waits: to be claimed (the oldest's age), for an operator.
pub struct Live {
    /// Created and not yet claimed.
    pub created: i64,
    pub running: i64,
    pub parked: i64,
    pub blocked: i64,
    /// Runs running, and running but blocked on a question ([`super::RUN_STATE_SQL`]).
    pub runs_running: i64,
    pub runs_blocked: i64,
    /// Seconds since the oldest invocation waiting to be claimed was created (0: none).
    pub unclaimed_oldest_secs: f64,
    /// `manual` handoffs waiting for a person ([`super::counts::waits`]).
    pub manual_waiting: i64,
}

pub async fn live(c: &impl GenericClient) -> Result<Live> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        format!(
            "WITH live AS (SELECT {state} AS state FROM runs r WHERE r.status = 'running')
             SELECT (SELECT count(*) FROM invocations WHERE status = 'created'),
                    (SELECT count(*) FROM invocations WHERE status = 'running'),
                    (SELECT count(*) FROM invocations WHERE status = 'parked'),
                    (SELECT count(*) FROM handoff_requests WHERE status = 'blocked'),
                    (SELECT count(*) FROM live WHERE state = 'running'),
                    (SELECT count(*) FROM live WHERE state = 'blocked'),
                    (SELECT coalesce(extract(epoch FROM now() - min(created_at))::float8, 0) FROM invocations WHERE status = 'created')",
            state = super::RUN_STATE_SQL
        )
    });
    let row = sql::query_one(c, sql, &[]).await?;
    // Counted as the console's Waiting page lists them.
    let manual_waiting = super::counts::waits(c).await?.manual;
    Ok(Live {
        created: row.get(0),
        running: row.get(1),
        parked: row.get(2),
        blocked: row.get(3),
        runs_running: row.get(4),
        runs_blocked: row.get(5),
        unclaimed_oldest_secs: row.get(6),
        manual_waiting,
    })
}

/// Messages not yet sent (fleet and bridge), and the oldest one's age in seconds (0 when empty).
pub async fn outbox(c: &impl GenericClient) -> Result<(i64, f64)> {
    let row = sql::query_one(
        c,
        "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at))::float8, 0) FROM unsent_messages",
        &[],
    )
    .await?;
    Ok((row.get(0), row.get(1)))
}
