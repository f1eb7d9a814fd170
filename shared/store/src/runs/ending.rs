//! The run lifecycle: transitions that end an invocation, a task or a run,
//! each returning the journal events it caused, for the caller's
//! transaction to append. Intake, the relay, operator commands, the
//! invocation role and the agent's tools all move runs through these.
//! A run that ends is answered ([`runs::answer::collect`]: its bridge's
//! final status and reply; by the collector when an operator's command
//! ended it) and gives its conversation's turn to the next request there
//! (`after_run`), in the same transaction.

use crate::GenericClient;
use baton_domain::fleet::FleetMessage;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{CancelledBy, InvocationKind, InvocationStatus, RunStatus, TaskStatus};
use baton_domain::tools::delegation::{self, AwaitSpec, Awaited};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::invocations::tasks::Task;
use crate::invocations::{self, Invocation};
use crate::journal::Event;
use crate::requests::conversations;
use crate::{invocations::tasks, outbox, runs, runs::start, Error, Result};

/// The final owner finished: its unfinished children are cancelled, then its
/// incoming task, itself (with what its last step spent, `spending`:
/// tokens, model calls, tool calls) and the run complete. `delegated`:
/// whether the owner may have delegated tasks (its transcript asked to);
/// when it did not, the run has no unfinished task or other live
/// invocation to cancel (an earlier owner's children ended before it
/// handed off), and none is looked for.
pub async fn complete_run(
    c: &impl GenericClient,
    inv: &Invocation,
    spending: (i64, i32, i32),
    delegated: bool,
) -> Result<Vec<Event>> {
    let mut events = match delegated {
        true => cancel_tasks(c, inv.run_id, Some(inv.id)).await?,
        false => vec![],
    };
    if end_incoming(c, inv, TaskStatus::Completed, None).await?.is_some() {
        events.push(Event::own_task(JournalEvent::TaskCompleted, inv.id));
    }
    let completed = [
        Event::new(JournalEvent::InvocationCompleted, Some(inv.id), json!({})),
        Event::new(JournalEvent::LoopFinished, Some(inv.id), json!({"exit": "finished"})),
    ];
    let (ended, ahead) = if delegated {
        invocations::complete(c, inv, spending).await?;
        events.extend(completed);
        // Live invocations besides the owner are children it delegated to:
        // an earlier owner's ended before it handed off, and the owner is
        // the run's one foreground invocation.
        events.extend(cancel_tasks(c, inv.run_id, None).await?);
        events.extend(cancel_live(c, inv.run_id).await?);
        (runs::finish_releasing(c, inv.run_id, RunStatus::Completed, None).await?, None)
    } else {
        events.extend(completed);
        complete_then_read(c, inv, spending).await?
    };
    if let Some(released) = ended {
        events.push(Event::new(JournalEvent::RunCompleted, None, json!({})));
        answer_then_next(c, inv.run_id, released, ahead).await?;
    }
    Ok(events)
}

/// What a run's end reads ahead, with the statement that ends it: what its
/// answer reads, and the request its chat takes next, if it gave the chat back.
type ReadAhead = (Result<Option<runs::answer::ToAnswer>>, Option<String>);

/// The owner completes with its run ([`runs::complete_finishing`]) and,
/// when a role ends it, what the answer reads and the chat's next request
/// go out with it ([`runs::answer::to_answer`],
/// [`conversations::pop_released`], each run after the completion that it
/// reads): one round trip. Nothing is read ahead for an operator's command.
async fn complete_then_read(
    c: &impl GenericClient,
    inv: &Invocation,
    spending: (i64, i32, i32),
) -> Result<(Option<Option<String>>, Option<ReadAhead>)> {
    if !outbox::after_commit::in_scope() {
        return Ok((runs::complete_finishing(c, inv, spending).await?, None));
    }
    // All prepared first, so that each goes out at its first poll, in this order.
    tokio::try_join!(
        c.prepare_cached(runs::COMPLETE_FINISHING),
        c.prepare_cached(&runs::answer::TO_ANSWER),
        c.prepare_cached(conversations::POP_RELEASED)
    )?;
    let (ended, read, next) = tokio::join!(
        runs::complete_finishing(c, inv, spending),
        runs::answer::to_answer(c, inv.run_id),
        conversations::pop_released(c, inv.run_id)
    );
    // Errors in the order the statements ran; the read's, when the
    // database's, aborted the transaction (else it is the answer's to tell).
    let ended = ended?;
    let read = match read {
        Err(e @ Error::Db(_)) => return Err(e),
        read => read,
    };
    Ok((ended, Some((read, next?))))
}

/// A broken host contract (or a spent budget): the invocation fails, visibly.
/// A child's failure fails only its task, which its parent reads as a
/// result; an owner's failure fails the run, and the bridge is told.
pub async fn fail_invocation(
    c: &impl GenericClient,
    inv: &Invocation,
    code: &str,
    message: &str,
) -> Result<Vec<Event>> {
    fail_invocation_because(c, inv, code, message, None).await
}

/// [`fail_invocation`], with the host's own words for the cause: an owner's
/// run keeps them for operators (`cause`); a child's task does not (its
/// parent agent reads the task's error, and host details are not for agents).
pub async fn fail_invocation_because(
    c: &impl GenericClient,
    inv: &Invocation,
    code: &str,
    message: &str,
    cause: Option<&str>,
) -> Result<Vec<Event>> {
    let error: Value = json!({"code": code, "message": message});
    if inv.kind == InvocationKind::Child {
        lock_parent(c, inv).await?;
        let mut events = vec![Event::new(JournalEvent::ChildInvocationFailed, Some(inv.id), error.clone())];
        events.extend(end_child(c, inv, TaskStatus::Failed, Some(&error)).await?);
        return Ok(events);
    }
    let mut events = vec![];
    invocations::finish(c, inv.id, InvocationStatus::Failed, Some(&error)).await?;
    events.push(Event::new(JournalEvent::InvocationFailed, Some(inv.id), error.clone()));
    if let Some(task) = end_incoming(c, inv, TaskStatus::Failed, Some(&error)).await? {
        events.push(Event::new(JournalEvent::TaskFailed, Some(inv.id), json!({"taskId": task})));
    }
    let mut run_error = error;
    if let Some(cause) = cause {
        run_error[baton_domain::run::state::Failure::CAUSE] = Value::from(clip(cause, 2000));
    }
    events.extend(fail_run(c, inv.run_id, &run_error).await?);
    Ok(events)
}

/// The first `max` characters of `text`.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// Ends a run as failed (no-op when it already ended).
pub async fn fail_run(c: &impl GenericClient, run_id: Uuid, error: &Value) -> Result<Vec<Event>> {
    end_run(c, run_id, RunStatus::Failed, error).await
}

/// An operator or a bridge cancels a run: every live invocation stops at its next step
/// (its fence fails), and the bridge is told `cancelled`. Who it was (`by`)
/// is stored with the reason, on the run and in its cancel events.
pub async fn cancel_run(c: &impl GenericClient, run_id: Uuid, reason: &str, by: CancelledBy) -> Result<Vec<Event>> {
    let error = json!({"code": "cancelled", "message": reason, "by": by.as_str()});
    let mut events = vec![Event::new(JournalEvent::RunCancelRequested, None, error.clone())];
    events.extend(end_run(c, run_id, RunStatus::Cancelled, &error).await?);
    Ok(events)
}

async fn end_run(c: &impl GenericClient, run_id: Uuid, status: RunStatus, error: &Value) -> Result<Vec<Event>> {
    let Some(released) = runs::finish_releasing(c, run_id, status, Some(error)).await? else {
        return Ok(vec![]);
    };
    let mut events = cancel_tasks(c, run_id, None).await?;
    events.extend(cancel_live(c, run_id).await?);
    answer_then_next(c, run_id, released, None).await?;
    let kind = if status == RunStatus::Cancelled { JournalEvent::RunCancelled } else { JournalEvent::RunFailed };
    events.push(Event::new(kind, None, error.clone()));
    Ok(events)
}

/// A run ended: its bridge is answered ([`answer`]) and, when it gave back
/// the conversation it held (`released`), the conversation starts its next
/// request. The answer's first read and the conversation's queue are read
/// at once (two statements in flight, one round trip): neither touches
/// what the other reads.
/// (`ahead`: what the run's end read of both already, see [`complete_then_read`].)
async fn answer_then_next(
    c: &impl GenericClient,
    run_id: Uuid,
    released: Option<String>,
    ahead: Option<ReadAhead>,
) -> Result<()> {
    let Some(key) = released else { return answer(c, run_id, ahead.map(|(read, _)| read)).await };
    let next = match ahead {
        Some((read, next)) => {
            answer(c, run_id, Some(read)).await?;
            next
        }
        None => {
            let (answered, next) = tokio::join!(answer(c, run_id, None), conversations::pop(c, &key));
            answered.and(next)?
        }
    };
    start::next_in_conversation_from(c, &key, next, None).await
}

/// Answers an ended run's bridge in this transaction when a role ends it
/// (its publishing scope sends the reply and counts the answer once the
/// transaction commits); an operator's command (no scope) leaves it to the
/// collector, which answers and counts it, with a "run finished" message.
///
/// An answer whose reads this version cannot parse (a request row or a
/// coding agent's changes written by a newer version, or edited by hand)
/// does not keep the run from ending: the answer wrote nothing yet, so the
/// run ends and the collector is told, which dead-letters what it cannot
/// answer, with the reason.
async fn answer(
    c: &impl GenericClient,
    run_id: Uuid,
    read: Option<Result<Option<runs::answer::ToAnswer>>>,
) -> Result<()> {
    if !outbox::after_commit::in_scope() {
        return outbox::enqueue_fleet(c, &FleetMessage::finished(run_id)).await;
    }
    let answered = match read {
        Some(read) => match read {
            Ok(read) => runs::answer::collect_read(c, run_id, read).await,
            Err(e) => Err(e),
        },
        None => runs::answer::collect(c, run_id).await,
    };
    match answered {
        Err(e @ (Error::Corrupt(_) | Error::Unreadable { .. })) => {
            tracing::warn!(run = %run_id, error = %e, "the run's answer cannot be read; the collector is told");
            outbox::enqueue_fleet(c, &FleetMessage::finished(run_id)).await
        }
        answered => answered,
    }
}

/// Cancels unfinished tasks (one parent's children, or all of the run's) and
/// their invocations; a running child stops at its next step.
async fn cancel_tasks(c: &impl GenericClient, run_id: Uuid, parent: Option<Uuid>) -> Result<Vec<Event>> {
    let mut events = vec![];
    for (task, child) in tasks::cancel_unfinished(c, run_id, parent).await? {
        if invocations::cancel(c, child).await? {
            events.push(Event::new(JournalEvent::InvocationCancelled, Some(child), json!({})));
        }
        events.push(Event::new(JournalEvent::TaskCancelled, Some(child), json!({"taskId": task})));
    }
    Ok(events)
}

/// Cancels the run's live invocations; a handoff stage's task, which has
/// no row of its own (V30), is cancelled with its invocation.
async fn cancel_live(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<Event>> {
    let mut events = vec![];
    for (id, kind, task) in invocations::cancel_live(c, run_id).await? {
        if let (InvocationKind::Handoff, Some(task)) = (kind, task) {
            events.push(Event::new(JournalEvent::InvocationCancelled, Some(id), json!({})));
            events.push(Event::new(JournalEvent::TaskCancelled, Some(id), json!({"taskId": task})));
        }
    }
    Ok(events)
}

/// Ends an invocation's incoming task as `to`, returning its id when it
/// ended now: a delegated task's row moves along its state machine; a
/// handoff stage's task has no row (V30) and ends with its invocation,
/// which the caller is ending.
pub async fn end_incoming(
    c: &impl GenericClient,
    inv: &Invocation,
    to: TaskStatus,
    error: Option<&Value>,
) -> Result<Option<Uuid>> {
    let Some(task) = inv.incoming_task_id else {
        return Ok(None);
    };
    let ended = match inv.kind {
        InvocationKind::Handoff => true,
        InvocationKind::Root | InvocationKind::Child => tasks::transition(c, task, to, error).await?,
    };
    Ok(ended.then_some(task))
}

/// A child ended (returned, failed, ran out of budget): its task and itself
/// end, and its parent is woken if that was what it waited for.
pub async fn end_child(
    c: &impl GenericClient,
    inv: &Invocation,
    status: TaskStatus,
    error: Option<&Value>,
) -> Result<Vec<Event>> {
    let mut events = vec![];
    let (inv_status, inv_event) = match status {
        TaskStatus::Completed => (InvocationStatus::Completed, JournalEvent::InvocationCompleted),
        _ => (InvocationStatus::Failed, JournalEvent::InvocationFailed),
    };
    invocations::finish(c, inv.id, inv_status, error).await?;
    if let Some(task) = end_incoming(c, inv, status, error).await? {
        let kind = if status == TaskStatus::Completed { JournalEvent::TaskCompleted } else { JournalEvent::TaskFailed };
        events.push(Event::new(kind, Some(inv.id), json!({"taskId": task, "error": error})));
    }
    events.push(Event::new(inv_event, Some(inv.id), json!({})));
    events.push(Event::new(JournalEvent::LoopFinished, Some(inv.id), json!({"exit": "returned"})));
    if let Some(parent) = inv.parent_invocation_id {
        events.extend(wake_if_ready(c, inv.run_id, parent).await?);
    }
    Ok(events)
}

/// Locks a child's parent before the child touches its task: every path
/// that ends a child takes the parent's lock first, so two children ending
/// at once queue up instead of deadlocking.
pub async fn lock_parent(c: &impl GenericClient, inv: &Invocation) -> Result<()> {
    if let Some(parent) = inv.parent_invocation_id {
        invocations::lock(c, parent).await?;
    }
    Ok(())
}

/// Wakes a parked parent whose wait is over, under its row lock: a parent
/// that is parking right now holds that lock, so this waits and then sees it.
pub async fn wake_if_ready(c: &impl GenericClient, run_id: Uuid, parent: Uuid) -> Result<Vec<Event>> {
    let Some(locked) = invocations::lock(c, parent).await? else {
        return Ok(vec![]);
    };
    if locked.status != InvocationStatus::Parked {
        return Ok(vec![]);
    }
    let children = tasks::children_of(c, parent).await?;
    let over = locked.await_spec.as_ref().is_none_or(|spec| wait_is_over(spec, &children));
    if !over || !invocations::wake(c, parent).await? {
        return Ok(vec![]);
    }
    outbox::enqueue_fleet(c, &FleetMessage::wake(run_id, parent)).await?;
    Ok(vec![Event::new(JournalEvent::InvocationWoken, Some(parent), json!({}))])
}

/// Asks the domain whether a parked parent's children end its wait.
fn wait_is_over(spec: &AwaitSpec, children: &[Task]) -> bool {
    let awaited: Vec<Awaited<'_>> =
        children.iter().map(|t| Awaited { key: &t.workspace_key, status: t.status, read: t.delivered }).collect();
    delegation::wait_is_over(spec.mode, spec.keys.as_deref(), &awaited)
}
