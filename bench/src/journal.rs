//! Each side's hops, read off its own journal after a cell: when each
//! successor was claimed, how long after its predecessor's claim (the hop's
//! own work inside the window), and how long after the handoff's commit
//! (its last journal row, written in the committing transaction).

use baton_domain::run::journal::JournalEvent;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::driver::Side;
use super::raw;

#[derive(Debug, Clone, Copy)]
pub struct Hop {
    pub claim_to_claim_ms: f64,
    pub commit_to_claim_ms: f64,
    pub claimed: DateTime<Utc>,
}

/// A run's invocation starts in order; every start after the first is a
/// hop, matched to the handoff that created it.
const BATON_HOPS_SQL: &str = "
WITH s AS (
  SELECT e.run_id, e.invocation_id, e.created_at AS claimed,
         lag(e.created_at) OVER (PARTITION BY e.run_id ORDER BY e.created_at) AS prev
    FROM events e
   WHERE e.type = $2 AND e.run_id IN (SELECT run_id FROM handoff_requests WHERE id = ANY($1)))
SELECT extract(epoch FROM (s.claimed - s.prev))::float8 * 1000, extract(epoch FROM (s.claimed - a.created_at))::float8 * 1000, s.claimed
  FROM s JOIN events a ON a.run_id = s.run_id AND a.type = $3 AND a.payload->>'invocationId' = s.invocation_id::text
 WHERE s.prev IS NOT NULL";

/// Every hop of the chains with these keys (request ids, or raw chain ids).
pub async fn hops(pool: &baton_store::Pool, side: Side, keys: &[String]) -> anyhow::Result<Vec<Hop>> {
    let c = pool.get().await?;
    let rows = if side.is_raw() {
        let chains: Vec<Uuid> = keys.iter().map(|k| k.parse()).collect::<Result<_, _>>()?;
        c.query(raw::HOPS_SQL, &[&chains]).await?
    } else {
        let (started, accepted) = (JournalEvent::InvocationStarted.as_str(), JournalEvent::HandoffAccepted.as_str());
        c.query(BATON_HOPS_SQL, &[&keys, &started, &accepted]).await?
    };
    Ok(rows
        .iter()
        .map(|r| Hop { claim_to_claim_ms: r.get(0), commit_to_claim_ms: r.get(1), claimed: r.get(2) })
        .collect())
}

/// p50, p95, p99 of a sample (0 when empty).
pub fn percentiles(mut values: Vec<f64>) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if values.is_empty() {
            return 0.0;
        }
        let i = ((values.len() as f64 - 1.0) * q).round() as usize;
        values[i.min(values.len() - 1)]
    };
    [at(0.5), at(0.95), at(0.99)]
}

pub fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(values), [51.0, 95.0, 99.0]);
        assert_eq!(percentiles(vec![]), [0.0; 3]);
        assert_eq!(mean([1.0, 2.0, 6.0].into_iter()), 3.0);
    }
}
