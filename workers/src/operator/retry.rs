//! `baton runs retry RUN`: a failed run resumes from its last stored step.
//! The store revives the run and its last owner
//! ([`baton_store::runs::retry::retry_run`]); here, in the same transaction, the
//! journal records `run_retried` and the bridge is told `running` (the next
//! `seq`). The new final reply follows when the run ends, with the message
//! id `reply:<handoffId>:<attempt>`.

use anyhow::bail;
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use baton_store::runs::retry::{self, Retry};
use baton_store::{journal, requests, Pool};
use uuid::Uuid;

use baton_store::requests::bridge;

/// Retries a failed run; returns its new attempt number.
pub async fn retry_run(pool: &Pool, run_id: Uuid) -> anyhow::Result<i32> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let (attempt, handoff_id, events) = match retry::retry_run(&tx, run_id).await? {
        Retry::Resumed { attempt, handoff_id, events, .. } => (attempt, handoff_id, events),
        Retry::NoRun => bail!("no run {run_id}"),
        Retry::NotFailed(status) => bail!("run {run_id} is {status}: only a failed run can be retried"),
        Retry::NothingToResume => {
            bail!("run {run_id} failed before any agent started: there is no step to resume from")
        }
        Retry::ConversationBusy(live) => {
            bail!("run {run_id}'s chat has moved on: run {live} holds its turn; retry once that run ends")
        }
    };
    journal::append(&tx, run_id, &events).await?;
    if let Some(request) = match &handoff_id {
        Some(id) => requests::lock(&tx, id).await?,
        None => None,
    } {
        let note = format!("retried by an operator (attempt {attempt})");
        requests::add_event(&tx, &request.id, HandoffEvent::RunRetried, None, Some(&note)).await?;
        bridge::status(&tx, &request, HandoffStatus::Running, Some(&note)).await?;
    }
    tx.commit().await?;
    Ok(attempt)
}
