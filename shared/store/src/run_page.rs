//! What the console's run page reads beyond the rows other modules give:
//! when each of a run's invocations was created, started and ended, whether
//! a worker holds it now, and its last transcript step. The page derives
//! what an invocation is doing from these (waiting for its model, for a
//! worker to claim it, for the user), so the hot path writes nothing for it.

use crate::GenericClient;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{sql, Result};

/// One invocation's times and holder, read with the database's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationTimes {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The worker whose lease is live now, if one holds it.
    pub holder: Option<String>,
    /// A parked invocation whose wait is over, not claimed again yet.
    pub woken: bool,
    /// Its last transcript step: its kind and when its transaction began.
    pub last_step: Option<(String, DateTime<Utc>)>,
    /// The database's clock when this was read.
    pub now: DateTime<Utc>,
}

/// Every invocation of `run_id`, in the order they were created.
pub async fn invocation_times(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<InvocationTimes>> {
    let rows = sql::query(
        c,
        "SELECT i.id, i.created_at, i.started_at, i.finished_at,
                CASE WHEN i.lease_expires_at > now() THEN i.lease_owner END, i.woken,
                t.kinds[cardinality(t.kinds)]::text, t.created_at, now()
           FROM invocations i
           LEFT JOIN LATERAL (SELECT kinds, created_at FROM transcript
                               WHERE invocation_id = i.id ORDER BY seq DESC LIMIT 1) t ON true
          WHERE i.run_id = $1 ORDER BY i.created_at, i.id",
        &[&run_id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| InvocationTimes {
            id: r.get(0),
            created_at: r.get(1),
            started_at: r.get(2),
            finished_at: r.get(3),
            holder: r.get(4),
            woken: r.get(5),
            last_step: r.get::<_, Option<String>>(6).zip(r.get::<_, Option<DateTime<Utc>>>(7)),
            now: r.get(8),
        })
        .collect())
}
