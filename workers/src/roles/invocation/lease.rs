//! The heartbeat that keeps a claim's lease. Through a database outage it
//! keeps trying, every second rather than every third of the lease, so that
//! the leases of healthy work are renewed as soon as the database is back,
//! before the relay's sweep (which waits a lease after it reconnects) could
//! take them for abandoned: an outage alone does not cause takeovers.

use std::time::Duration;

use baton_store::{invocations, Pool};
use tokio_util::sync::CancellationToken;

/// How soon a renewal that failed is tried again (at most a third of the lease).
const RETRY: Duration = Duration::from_secs(1);

/// Renews the lease every third of its length, and again every [`RETRY`]
/// after a failed renewal; cancels `lost` when the claim is gone, so the loop
/// stops (its writes would be refused anyway). A renewal is bounded by a
/// third of the lease: one that hangs on a host that went quiet is dropped
/// with its connection, and the next goes out on a fresh one.
pub(super) async fn heartbeat(pool: Pool, id: uuid::Uuid, epoch: i64, lease: Duration, lost: CancellationToken) {
    let every = lease / 3;
    let retry = RETRY.min(every);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(if failing_since.is_some() { retry } else { every }).await;
        match renew(&pool, id, epoch, lease, every.max(retry)).await {
            Ok(true) => {
                if let Some(since) = failing_since.take() {
                    tracing::info!(failing_for = ?since.elapsed(), "lease renewed after the database came back");
                }
            }
            Ok(false) => {
                tracing::warn!("claim lost; stopping");
                lost.cancel();
                return;
            }
            Err(e) => {
                failing_since.get_or_insert_with(tokio::time::Instant::now);
                tracing::warn!(error = %e, ?retry, "heartbeat failed; retrying");
            }
        }
    }
}

/// One renewal within `bound`; on a timeout its connection is taken out of
/// the pool and closed, since its socket may be the one that went quiet.
async fn renew(pool: &Pool, id: uuid::Uuid, epoch: i64, lease: Duration, bound: Duration) -> anyhow::Result<bool> {
    let client = tokio::time::timeout(bound, pool.get())
        .await
        .map_err(|_| anyhow::anyhow!("no database connection within {bound:?}"))??;
    match tokio::time::timeout(bound, invocations::renew(&client, id, epoch, lease)).await {
        Ok(renewed) => Ok(renewed?),
        Err(_) => {
            baton_store::discard(client);
            anyhow::bail!("the renewal got no answer within {bound:?}")
        }
    }
}
