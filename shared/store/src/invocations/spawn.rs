//! A new invocation, written in one place: a run's root, a handoff's
//! successor, a delegated child. The invocation row, the task that gives a
//! child its work and the journal events that say so. "Run this
//! invocation" is queued through the outbox in the caller's transaction,
//! by the statement that inserts the row; or, for a handoff's successor
//! that this process takes itself (eager dispatch, see [`after_commit`]),
//! the row is written reserved for this process, by the statement that
//! ends its predecessor, and no message is queued ([`handoff`]); a run's
//! root, likewise, by the statement that inserts it ([`invocation`]).

use crate::GenericClient;
use baton_domain::fleet::FleetMessage;
use baton_domain::profiles::brief::render_request_brief;
use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::InvocationKind;
use serde_json::json;

use crate::invocations::tasks::{self, NewTask};
use crate::invocations::{self, HandedOver, Inserted, Invocation, NewBrief, NewInvocation, INSERT};
use crate::journal::Event;
use crate::outbox::after_commit;
use crate::{outbox, Result};

/// Inserts the invocation and queues the message that runs it, in one
/// statement (a run's root that this process takes itself, eager dispatch:
/// the row reserved for it, and no message), then its task (which refers
/// to it), and returns the journal events for the caller to append with its
/// own.
pub async fn invocation(
    c: &impl GenericClient,
    new: &NewInvocation<'_>,
    task: Option<&NewTask<'_>>,
) -> Result<Vec<Event>> {
    spawned(c, new, task).await
}

/// [`invocation`] for a run's root, in two halves so that the caller can
/// send its insert with other statements: whether this process takes it
/// itself (eager dispatch, decided now: it is then claimed right after the
/// commit), and the insert. Its journal event is [`created`]'s.
pub fn root<'a>(
    c: &'a impl GenericClient,
    new: &'a NewInvocation<'a>,
    request: &'a HandoffRequest,
) -> (bool, impl std::future::Future<Output = Result<()>> + Send + 'a) {
    let reserved = after_commit::reserve();
    (reserved.is_some(), async move { insert(c, new, reserved, Some(request)).await })
}

/// What this process knows of `new` for the claim that follows its commit
/// (the claims module's `claim_taken_here`): its profile, and a root's brief,
/// rendered from `request` when its row stores none. A root is known only
/// when intake writes it (`request`), which says `running` to the bridge in
/// the same transaction; `None` otherwise: its claim reads it all itself.
fn known(new: &NewInvocation<'_>, request: Option<&HandoffRequest>) -> Option<after_commit::Known> {
    let root_brief = match (new.kind, request) {
        (InvocationKind::Root, None) => return None,
        (InvocationKind::Root, Some(request)) => {
            matches!(new.brief, NewBrief::Request).then(|| render_request_brief(request))
        }
        _ => None,
    };
    Some(after_commit::Known { profile_id: new.profile_id.to_string(), root_brief })
}

/// Inserts the invocation, reserved for this process or with the message
/// that runs it (one statement either way).
async fn insert(
    c: &impl GenericClient,
    new: &NewInvocation<'_>,
    reserved: Option<after_commit::Reserved>,
    request: Option<&HandoffRequest>,
) -> Result<()> {
    match reserved {
        Some(reserved) => {
            invocations::insert_reserved(c, new, (&reserved.owner, reserved.lease)).await?;
            after_commit::took(reserved, new.run_id, new.id, known(new, request));
        }
        None => {
            let inserted = Inserted::of(new)?;
            let run = FleetMessage::run(new.run_id, new.id, new.kind);
            outbox::enqueue_fleet_after(c, &run, Some((INSERT, &inserted.params()))).await?;
        }
    }
    Ok(())
}

async fn spawned(c: &impl GenericClient, new: &NewInvocation<'_>, task: Option<&NewTask<'_>>) -> Result<Vec<Event>> {
    let reserved = match new.kind {
        InvocationKind::Root => after_commit::reserve(),
        _ => None,
    };
    insert(c, new, reserved, None).await?;
    let mut events = vec![created(new)];
    if let Some(task) = task {
        tasks::insert(c, task).await?;
        let mut registered = json!({"continuation": task.continuation.as_str(), "workspaceKey": task.workspace_key});
        if new.incoming_task_id != Some(task.id) {
            registered["taskId"] = json!(task.id);
        }
        events.push(Event::new(JournalEvent::TaskRegistered, Some(new.id), registered));
    }
    Ok(events)
}

/// A handoff's two writes: `inv` ends transferred with what its step
/// spent ([`invocations::hand_over`]), and its successor `new` is written
/// carrying what the run has spent (which replaces `new.run_spent`). When
/// this process takes the successor itself (eager dispatch), both are one
/// statement; otherwise the successor and its message follow as in
/// [`invocation`]. Returns what the handoff found and the successor's
/// `agent_invocation_created`.
pub async fn handoff(
    c: &impl GenericClient,
    inv: &Invocation,
    new: NewInvocation<'_>,
    spending: (i64, i32, i32),
) -> Result<(HandedOver, Vec<Event>)> {
    if let Some(reserved) = after_commit::reserve() {
        let handed =
            invocations::hand_over_reserving(c, inv, spending, &new, (&reserved.owner, reserved.lease)).await?;
        after_commit::took(reserved, new.run_id, new.id, known(&new, None));
        return Ok((handed, vec![created(&new)]));
    }
    let handed = invocations::hand_over(c, inv, new.profile_id, spending).await?;
    let new = NewInvocation { run_spent: handed.run_spent, ..new };
    let events = invocation(c, &new, None).await?;
    Ok((handed, events))
}

/// `agent_invocation_created` for `new`: its kind (the seed's sequence
/// names it); its agent and parent are its row's, which every reader joins.
pub fn created(new: &NewInvocation<'_>) -> Event {
    Event::new(JournalEvent::InvocationCreated, Some(new.id), json!({"kind": new.kind.as_str()}))
}
