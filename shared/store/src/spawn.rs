//! A new invocation, written in one place: a run's root, a handoff's
//! successor, a delegated child. The invocation row, the task that gives it
//! its work (handoff and delegation) and the journal events that say so.
//! The caller queues "run this invocation" through the outbox in the same
//! transaction.

use baton_domain::journal;
use deadpool_postgres::GenericClient;
use serde_json::json;

use crate::invocations::{self, NewInvocation};
use crate::journal::Event;
use crate::tasks::{self, NewTask};
use crate::Result;

/// Inserts the invocation, then its task (which refers to it), and returns
/// the journal events for the caller to append with its own.
pub async fn invocation(c: &impl GenericClient, new: &NewInvocation<'_>, task: Option<&NewTask<'_>>) -> Result<Vec<Event>> {
    invocations::insert(c, new).await?;
    let mut created = json!({"kind": new.kind.as_str(), "profileId": new.profile_id});
    if let Some(parent) = new.parent_invocation_id {
        created["parentInvocationId"] = json!(parent);
    }
    let mut events = vec![Event::new(journal::INVOCATION_CREATED, Some(new.id), created)];
    if let Some(task) = task {
        tasks::insert(c, task).await?;
        let registered = json!({"taskId": task.id, "continuation": task.continuation.as_str(), "workspaceKey": task.workspace_key});
        events.push(Event::new(journal::TASK_REGISTERED, Some(new.id), registered));
    }
    Ok(events)
}
