//! What an operator can do to a run from the command line.

use baton_store::Pool;
use uuid::Uuid;

/// Cancels a run in one transaction; `false` when it had already ended.
pub async fn cancel_run(pool: &Pool, run_id: Uuid, reason: &str) -> anyhow::Result<bool> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let events = baton_agent::lifecycle::cancel_run(&tx, run_id, reason).await?;
    let cancelled = events.len() > 1;
    baton_store::journal::append(&tx, run_id, &events).await?;
    tx.commit().await?;
    Ok(cancelled)
}
