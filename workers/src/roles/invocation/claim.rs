//! What a claim writes and reads when it starts an invocation: the journal
//! of the start, and on a first claim the incoming task started and the
//! prompt (with the profile and skills it was rendered from, which the loop
//! starts from instead of reading them again); and how a claim that cannot
//! start its invocation fails it instead.

use baton_agent::opening::Opening;
use baton_domain::protocol::request::HandoffStatus;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::InvocationKind;
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::{requests, runs, GenericClient};
use serde_json::json;

use baton_store::requests::bridge;

/// A first claim's reads: the incoming task its claim started (if it was
/// queued), and the profile, skills and prompt; `None` for a resumed claim.
pub(super) async fn first_start(
    c: &impl GenericClient,
    inv: &Invocation,
    task_started: Option<uuid::Uuid>,
    profiles: &baton_store::profiles::Snapshot,
) -> anyhow::Result<Option<(Option<uuid::Uuid>, Option<Opening>)>> {
    if inv.claim_epoch > 1 {
        return Ok(None);
    }
    Ok(Some((task_started, Opening::read(c, inv, profiles).await?)))
}

/// The journal (and, for a root's first start, the bridge status, unless
/// the request is `running` already: `request_running`) of a claim.
pub(super) async fn started_events(
    c: &impl GenericClient,
    inv: &Invocation,
    worker: &str,
    first: &Option<(Option<uuid::Uuid>, Option<Opening>)>,
    run: Option<&runs::Run>,
    request_running: bool,
) -> anyhow::Result<Vec<Event>> {
    let id = Some(inv.id);
    let Some((task, prompt)) = first else {
        let payload = json!({"resumed": true, "epoch": inv.claim_epoch, "worker": worker});
        return Ok(vec![Event::new(JournalEvent::InvocationStarted, id, payload)]);
    };
    let mut evs = vec![];
    if task.is_some() {
        evs.push(Event::own_task(JournalEvent::TaskStarted, inv.id));
    }
    // The invocation's kind and agent are its row's (every reader joins it).
    evs.push(Event::new(JournalEvent::InvocationStarted, id, json!({"worker": worker})));
    evs.extend(prompt.iter().flat_map(|p| p.events.iter().cloned()));
    if inv.kind == InvocationKind::Root && !request_running {
        if let Some(handoff) = run.and_then(|r| r.handoff_id.as_ref()) {
            if let Some(request) = requests::get(c, handoff).await? {
                bridge::status(c, &request, HandoffStatus::Running, None).await?;
            }
        }
    }
    Ok(evs)
}

/// Fails an invocation this transaction just claimed, with the host's own
/// words (`detail`) in the journal and `text` for agents and the bridge.
pub(super) async fn fail_claimed(
    tx: &impl GenericClient,
    inv: &Invocation,
    code: &str,
    text: &str,
    detail: &str,
) -> anyhow::Result<()> {
    let mut evs = vec![Event::new(JournalEvent::HostError, Some(inv.id), json!({"code": code, "detail": detail}))];
    evs.extend(runs::ending::fail_invocation(tx, inv, code, text).await?);
    baton_store::journal::append(tx, inv.run_id, &evs).await?;
    Ok(())
}

/// What agents and the bridge read when an invocation cannot start: the
/// reason itself when it is a profile or skill this version cannot read
/// (an operator can act on it), a plain sentence otherwise.
pub(super) fn claim_failure(inv: &Invocation, error: &anyhow::Error) -> (&'static str, String) {
    let unreadable = error.chain().find_map(|cause| match cause.downcast_ref::<baton_store::Error>() {
        Some(e @ baton_store::Error::Unreadable { .. }) => Some(e.to_string()),
        _ => cause.downcast_ref::<baton_agent::Error>().and_then(|e| match e {
            baton_agent::Error::Store(e @ baton_store::Error::Unreadable { .. }) => Some(e.to_string()),
            _ => None,
        }),
    });
    match unreadable {
        Some(why) => ("host.profile_unreadable", format!("the agent `{}` could not start: {why}", inv.profile_id)),
        None => ("host.claim_failed", "the agent could not start because of an internal error".to_string()),
    }
}
