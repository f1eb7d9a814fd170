//! Fleet-wide figures for the metrics gauges, read on a scrape: how many
//! invocations run or wait, how far the outbox is behind, how long a
//! successor waited for its first claim.

use crate::{sql, GenericClient, Result};

/// Invocations running and parked, and requests blocked on a question.
pub struct Live {
    pub running: i64,
    pub parked: i64,
    pub blocked: i64,
}

pub async fn live(c: &impl GenericClient) -> Result<Live> {
    let row = sql::query_one(
        c,
        "SELECT (SELECT count(*) FROM invocations WHERE status = 'running'),
                (SELECT count(*) FROM invocations WHERE status = 'parked'),
                (SELECT count(*) FROM handoff_requests WHERE status = 'blocked')",
        &[],
    )
    .await?;
    Ok(Live { running: row.get(0), parked: row.get(1), blocked: row.get(2) })
}

/// Rows waiting in the outbox, and the oldest one's age in seconds (0 when empty).
pub async fn outbox(c: &impl GenericClient) -> Result<(i64, f64)> {
    let row = sql::query_one(
        c,
        "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at))::float8, 0) FROM outbox",
        &[],
    )
    .await?;
    Ok((row.get(0), row.get(1)))
}
