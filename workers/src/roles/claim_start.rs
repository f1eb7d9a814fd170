//! What a claim writes and reads when it starts an invocation: the journal
//! of the start, and on a first claim the incoming task started and the
//! prompt (with the profile and skills it was rendered from, which the loop
//! starts from instead of reading them again).

use baton_agent::first_step::FirstStep;
use baton_domain::journal;
use baton_domain::request::HandoffStatus;
use baton_domain::state::{InvocationKind, TaskStatus};
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::{requests, runs, tasks, GenericClient};
use serde_json::json;

use crate::bridge;

/// A first claim's reads: the incoming task started (if it was queued), and
/// the profile, skills and prompt; `None` for a resumed claim.
pub(super) async fn first_start(c: &impl GenericClient, inv: &Invocation) -> anyhow::Result<Option<(Option<uuid::Uuid>, Option<FirstStep>)>> {
    if inv.claim_epoch > 1 {
        return Ok(None);
    }
    let task_started = async {
        match inv.incoming_task_id {
            Some(task) => Ok::<_, anyhow::Error>(tasks::transition(c, task, TaskStatus::Running, None).await?.then_some(task)),
            None => Ok(None),
        }
    };
    Ok(Some(tokio::try_join!(task_started, async { Ok(FirstStep::read(c, inv).await?) })?))
}

/// The journal (and, for a root's first start, the bridge status) of a claim.
pub(super) async fn started_events(
    c: &impl GenericClient,
    inv: &Invocation,
    worker: &str,
    first: &Option<(Option<uuid::Uuid>, Option<FirstStep>)>,
    run: Option<&runs::Run>,
) -> anyhow::Result<Vec<Event>> {
    let id = Some(inv.id);
    let Some((task, prompt)) = first else {
        let payload = json!({"resumed": true, "epoch": inv.claim_epoch, "worker": worker});
        return Ok(vec![Event::new(journal::INVOCATION_STARTED, id, payload)]);
    };
    let mut evs = vec![];
    if let Some(task) = task {
        evs.push(Event::new(journal::TASK_STARTED, id, json!({"taskId": task})));
    }
    evs.push(Event::new(journal::INVOCATION_STARTED, id, json!({"kind": inv.kind.as_str(), "profileId": inv.profile_id, "worker": worker})));
    evs.extend(prompt.iter().flat_map(|p| p.events.iter().cloned()));
    if inv.kind == InvocationKind::Root {
        if let Some(handoff) = run.and_then(|r| r.handoff_id.as_ref()) {
            if let Some(request) = requests::get(c, handoff).await? {
                bridge::status(c, &request, HandoffStatus::Running, None).await?;
            }
        }
    }
    Ok(evs)
}
