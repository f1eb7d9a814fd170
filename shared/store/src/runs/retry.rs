//! Retrying a failed run: its last foreground invocation resumes from its
//! last stored step. The transcript (`steps`) is kept, so the worker that
//! claims the revived invocation reads where it stands and asks the model
//! only for what was never answered: no finished model turn or tool call
//! runs again. The run counts an attempt (`runs.attempt`), which the
//! collector puts in the new reply's message id (`reply:<handoffId>:<n>`).
//!
//! The run takes its conversation's turn back; a chat that has moved on to
//! another live run refuses the retry (one chat runs one thing at a time).
//! Only the failed owner is revived. Delegated children the failure
//! cancelled stay cancelled: their parent reads them as cancelled and may
//! delegate again.

use crate::GenericClient;
use baton_domain::fleet::FleetMessage;
use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{InvocationKind, InvocationStatus, RunStatus, TaskStatus};
use serde_json::json;
use uuid::Uuid;

use crate::invocations::{self, Invocation};
use crate::journal::Event;
use crate::{outbox, requests, requests::conversations, runs, sql, Result};

/// What `retry_run` did.
#[derive(Debug)]
pub enum Retry {
    /// The run runs again as `attempt`; `invocation` resumes. Append
    /// `events` in the same transaction.
    Resumed { attempt: i32, invocation: Uuid, handoff_id: Option<String>, events: Vec<Event> },
    /// No such run.
    NoRun,
    /// Only a failed run can be retried.
    NotFailed(RunStatus),
    /// The run failed before any agent owned it (nothing to resume).
    NothingToResume,
    /// Its conversation (chat) has moved on: this other run holds its turn.
    ConversationBusy(Uuid),
}

/// Revives a failed run in the caller's transaction: the run is running
/// again (one more attempt, error cleared), its last foreground invocation
/// is `created` again with its takeover count reset and its incoming task
/// running, and a message to run it is queued. The caller tells the bridge.
pub async fn retry_run(c: &impl GenericClient, run_id: Uuid) -> Result<Retry> {
    let Some(status) = lock_status(c, run_id).await? else {
        return Ok(Retry::NoRun);
    };
    let status: RunStatus =
        status.parse().map_err(|_| crate::Error::Corrupt(format!("runs {run_id}: status '{status}'")))?;
    if status != RunStatus::Failed {
        return Ok(Retry::NotFailed(status));
    }
    let owner = invocations::for_run(c, run_id).await?.into_iter().rev().find(|i| i.kind.is_foreground());
    let Some(owner) = owner.filter(|i| i.status == InvocationStatus::Failed) else {
        return Ok(Retry::NothingToResume);
    };
    let handoff_id = runs::get(c, run_id).await?.and_then(|r| r.handoff_id);
    if let Some(busy) = take_turn(c, handoff_id.as_deref(), run_id).await? {
        return Ok(Retry::ConversationBusy(busy));
    }
    let attempt = reopen_run(c, run_id).await?;
    revive(c, &owner).await?;
    outbox::enqueue_fleet(c, &FleetMessage::run(run_id, owner.id, owner.kind)).await?;
    if let Some(handoff) = &handoff_id {
        sql::execute(c, "UPDATE handoff_requests SET reply_sent_at = NULL WHERE id = $1", &[handoff]).await?;
    }
    let steps = sql::query_one(c, "SELECT count(*) FROM steps WHERE invocation_id = $1", &[&owner.id]).await?;
    let payload = json!({"attempt": attempt, "profileId": owner.profile_id, "storedSteps": steps.get::<_, i64>(0)});
    let events = vec![Event::new(JournalEvent::RunRetried, Some(owner.id), payload)];
    Ok(Retry::Resumed { attempt, invocation: owner.id, handoff_id, events })
}

/// One chat runs one thing at a time: the retried run takes its
/// conversation's turn back, unless another run holds it now (returned).
async fn take_turn(c: &impl GenericClient, handoff_id: Option<&str>, run_id: Uuid) -> Result<Option<Uuid>> {
    let Some(id) = handoff_id else {
        return Ok(None);
    };
    let Some(request) = requests::get(c, id).await? else {
        return Ok(None);
    };
    let parsed: HandoffRequest = serde_json::from_value(request.body)
        .map_err(|e| crate::Error::Corrupt(format!("handoff_requests {}: body does not read: {e}", request.id)))?;
    let Some(key) = parsed.conversation_key() else {
        return Ok(None);
    };
    match conversations::lock(c, key).await? {
        Some(live) if live != run_id => Ok(Some(live)),
        _ => {
            conversations::set_live(c, key, run_id).await?;
            Ok(None)
        }
    }
}

async fn lock_status(c: &impl GenericClient, run_id: Uuid) -> Result<Option<String>> {
    let row = sql::query_opt(c, "SELECT status FROM runs WHERE id = $1 FOR UPDATE", &[&run_id]).await?;
    Ok(row.map(|r| r.get(0)))
}

async fn reopen_run(c: &impl GenericClient, run_id: Uuid) -> Result<i32> {
    let row = sql::query_one(
        c,
        "UPDATE runs SET status = $2, error = NULL, finished_at = NULL, attempt = attempt + 1,
                republished_at = NULL, republish_count = 0
          WHERE id = $1 RETURNING attempt",
        &[&run_id, &RunStatus::Running.as_str()],
    )
    .await?;
    Ok(row.get(0))
}

/// The failed owner is `created` again: the next claim resumes it (its
/// epoch goes on counting, so a worker of an earlier attempt stays fenced).
async fn revive(c: &impl GenericClient, inv: &Invocation) -> Result<()> {
    debug_assert!(inv.kind != InvocationKind::Child);
    sql::execute(
        c,
        "UPDATE invocations SET status = $2, error = NULL, finished_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
                takeovers = 0, republished_at = NULL, republish_count = 0
          WHERE id = $1 AND status = $3",
        &[&inv.id, &InvocationStatus::Created.as_str(), &InvocationStatus::Failed.as_str()],
    )
    .await?;
    if let Some(task) = inv.incoming_task_id {
        sql::execute(
            c,
            "UPDATE tasks SET status = $2, error = NULL, finished_at = NULL WHERE id = $1 AND status = $3",
            &[&task, &TaskStatus::Running.as_str(), &TaskStatus::Failed.as_str()],
        )
        .await?;
    }
    Ok(())
}
