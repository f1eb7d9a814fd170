//! Transitions that end an invocation or a run, each returning the journal
//! events it caused, for the caller's transaction to append.

use baton_bus::messages::{RunFinished, RunInvocation};
use baton_bus::topology::{INVOCATIONS_DELEGATE, INVOCATIONS_HANDOFF, RUNS_FINISHED};
use baton_domain::journal;
use baton_domain::state::{InvocationKind, InvocationStatus, RunStatus, TaskStatus};
use baton_store::invocations::{self, Invocation};
use baton_store::journal::Event;
use baton_store::outbox::{self, Message};
use baton_store::{runs, tasks, GenericClient};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::Error;

/// Queues "run this invocation" through the outbox.
pub async fn publish_invocation(c: &impl GenericClient, run_id: Uuid, invocation_id: Uuid, kind: InvocationKind) -> Result<(), Error> {
    let queue = if kind == InvocationKind::Child { INVOCATIONS_DELEGATE } else { INVOCATIONS_HANDOFF };
    let body = serde_json::to_value(RunInvocation { invocation_id, run_id }).map_err(|e| Error::Contract(e.to_string()))?;
    outbox::enqueue(c, &Message::fleet(queue, body)).await?;
    Ok(())
}

async fn publish_finished(c: &impl GenericClient, run_id: Uuid) -> Result<(), Error> {
    let body = serde_json::to_value(RunFinished { run_id }).map_err(|e| Error::Contract(e.to_string()))?;
    outbox::enqueue(c, &Message::fleet(RUNS_FINISHED, body)).await?;
    Ok(())
}

/// The final owner finished: its incoming task, itself and the run complete.
pub async fn complete_run(c: &impl GenericClient, inv: &Invocation) -> Result<Vec<Event>, Error> {
    let mut events = vec![];
    if let Some(task) = inv.incoming_task_id {
        if tasks::transition(c, task, TaskStatus::Completed, None).await? {
            events.push(Event::new(journal::TASK_COMPLETED, Some(inv.id), json!({"taskId": task})));
        }
    }
    invocations::finish(c, inv.id, InvocationStatus::Completed, None).await?;
    events.push(Event::new(journal::INVOCATION_COMPLETED, Some(inv.id), json!({})));
    events.push(Event::new(journal::LOOP_FINISHED, Some(inv.id), json!({"exit": "finished"})));
    invocations::cancel_live(c, inv.run_id).await?;
    if runs::finish(c, inv.run_id, RunStatus::Completed, None).await? {
        events.push(Event::new(journal::RUN_COMPLETED, None, json!({})));
        publish_finished(c, inv.run_id).await?;
    }
    Ok(events)
}

/// A broken host contract: the invocation, its incoming task and the run fail,
/// visibly, and the bridge is told.
pub async fn fail_invocation(c: &impl GenericClient, inv: &Invocation, code: &str, message: &str) -> Result<Vec<Event>, Error> {
    let error: Value = json!({"code": code, "message": message});
    let mut events = vec![];
    invocations::finish(c, inv.id, InvocationStatus::Failed, Some(&error)).await?;
    events.push(Event::new(journal::INVOCATION_FAILED, Some(inv.id), error.clone()));
    if let Some(task) = inv.incoming_task_id {
        if tasks::transition(c, task, TaskStatus::Failed, Some(&error)).await? {
            events.push(Event::new(journal::TASK_FAILED, Some(inv.id), json!({"taskId": task})));
        }
    }
    events.extend(fail_run(c, inv.run_id, &error).await?);
    Ok(events)
}

/// Ends a run as failed (no-op when it already ended).
pub async fn fail_run(c: &impl GenericClient, run_id: Uuid, error: &Value) -> Result<Vec<Event>, Error> {
    invocations::cancel_live(c, run_id).await?;
    if !runs::finish(c, run_id, RunStatus::Failed, Some(error)).await? {
        return Ok(vec![]);
    }
    publish_finished(c, run_id).await?;
    Ok(vec![Event::new(journal::RUN_FAILED, None, error.clone())])
}
