//! The fleet's registry of processes (`fleet_workers`, V29): each `baton
//! up` upserts its row at every heartbeat, marks it stopped when it stops
//! gracefully, and prunes rows silent for longer than they are kept. What a
//! process holds is read from the claims (`invocations.lease_owner`), never
//! written here.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::run::state::InvocationStatus;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::{sql, Result};

/// What a process says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    /// This process's own id (a new one at every start).
    pub id: Uuid,
    /// `BATON_WORKER_ID`, which its claims carry as their `lease_owner`.
    pub worker_id: String,
    pub roles: Vec<String>,
    pub version: String,
    pub host: String,
    pub pid: i32,
    /// How often it beats.
    pub beat: Duration,
}

/// Records a heartbeat: the row is inserted at the first (and again if it
/// was pruned while the database was away), its `heartbeat_at` moved after.
pub async fn beat(c: &impl GenericClient, p: &Process) -> Result<()> {
    let secs = p.beat.as_secs_f64();
    sql::execute(
        c,
        "INSERT INTO fleet_workers (id, worker_id, roles, version, host, pid, beat_secs)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
        &[&p.id, &p.worker_id, &p.roles, &p.version, &p.host, &p.pid, &secs],
    )
    .await?;
    Ok(())
}

/// The process stopped gracefully (its roles have finished).
pub async fn stopped(c: &impl GenericClient, id: Uuid) -> Result<()> {
    sql::execute(c, "UPDATE fleet_workers SET stopped_at = now(), heartbeat_at = now() WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Removes the rows of processes stopped or silent for longer than `kept`.
pub async fn prune(c: &impl GenericClient, kept: Duration) -> Result<u64> {
    let secs = kept.as_secs_f64();
    sql::execute(
        c,
        "DELETE FROM fleet_workers WHERE coalesce(stopped_at, heartbeat_at) < now() - make_interval(secs => $1)",
        &[&secs],
    )
    .await
}

/// A process as the workers page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub id: Uuid,
    pub worker_id: String,
    pub roles: Vec<String>,
    pub version: String,
    pub host: String,
    pub pid: i32,
    pub beat_secs: f64,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub stopped_at: Option<DateTime<Utc>>,
    /// Invocations running under its worker id (its claims; a gone
    /// process's stay until their leases are taken over).
    pub in_flight: i64,
    /// The runs of those invocations.
    pub runs: Vec<Uuid>,
}

const LIST: &str = "
SELECT w.id, w.worker_id, w.roles, w.version, w.host, w.pid, w.beat_secs, w.started_at, w.heartbeat_at,
       w.stopped_at, coalesce(h.in_flight, 0), coalesce(h.runs, '{}')
  FROM fleet_workers w
  LEFT JOIN (SELECT lease_owner, count(*) AS in_flight, array_agg(DISTINCT run_id) AS runs
               FROM invocations WHERE status = $1 AND lease_owner IS NOT NULL
              GROUP BY lease_owner) h
         ON h.lease_owner = w.worker_id AND w.stopped_at IS NULL
 ORDER BY w.stopped_at IS NOT NULL, w.started_at DESC, w.id";

/// Every registered process, running ones first, newest first, with the
/// database's clock (liveness is judged against it, not the console's).
pub async fn list(c: &impl GenericClient) -> Result<(Vec<Listed>, DateTime<Utc>)> {
    let rows = sql::query(c, LIST, &[&InvocationStatus::Running.as_str()]).await?;
    let now: DateTime<Utc> = sql::query_one(c, "SELECT now()", &[]).await?.get(0);
    let listed = rows
        .iter()
        .map(|r| Listed {
            id: r.get(0),
            worker_id: r.get(1),
            roles: r.get(2),
            version: r.get(3),
            host: r.get(4),
            pid: r.get(5),
            beat_secs: r.get(6),
            started_at: r.get(7),
            heartbeat_at: r.get(8),
            stopped_at: r.get(9),
            in_flight: r.get(10),
            runs: r.get(11),
        })
        .collect();
    Ok((listed, now))
}
