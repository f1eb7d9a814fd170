//! Starting a request's run: routing it to its root agent, the run with its
//! budget, the root invocation, and what the bridge hears. Intake starts a
//! request on arrival; the run lifecycle starts a conversation's next one
//! when its live run ends, in the same transaction.

use crate::GenericClient;
use baton_domain::profiles::Profile;
use baton_domain::protocol::bridge::ReplyInput;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::reply::Outcome;
use baton_domain::protocol::request::{HandoffEvent, HandoffRequest, HandoffStatus, TargetAgent};
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::InvocationKind;
use serde_json::json;
use uuid::Uuid;

use crate::invocations::{NewBrief, NewInvocation};
use crate::journal::Event;
use crate::profiles::Snapshot;
use crate::requests::{self, Request};
use crate::{invocations::spawn, profiles, requests::bridge, requests::conversations, runs, Error, Result};

/// Routes the request to its root agent and starts its run, or tells the
/// bridge why not (a `failed` reply). Returns the run it started. A request
/// already `accepted` (it waited for its conversation's turn) is not
/// announced again.
pub async fn request(c: &impl GenericClient, stored: &Request, request: &HandoffRequest) -> Result<Option<Uuid>> {
    request_as(c, stored, request, None).await
}

/// [`request`], with the route, profile and budget settings taken from
/// `known` (a current [`profiles::Snapshot`]) instead of read again.
pub async fn request_as(
    c: &impl GenericClient,
    stored: &Request,
    request: &HandoffRequest,
    known: Option<&Snapshot>,
) -> Result<Option<Uuid>> {
    request_saying(c, stored, request, known, (&[], false), Uuid::now_v7()).await
}

/// [`request_as`], with handoff events to record first (`said`: written
/// with the request's own, in one row), whether the caller's transaction
/// holds the handoff for itself (`held`: intake, which took the handoff's
/// lock first and finds no run writing its messages; see
/// [`bridge::Update::held`]), and the id its run gets, if it gets one
/// (`run_id`: the caller may have named it already, as a free chat's live
/// run).
pub async fn request_saying(
    c: &impl GenericClient,
    stored: &Request,
    request: &HandoffRequest,
    known: Option<&Snapshot>,
    (said, held): (&[requests::Said<'_>], bool),
    run_id: Uuid,
) -> Result<Option<Uuid>> {
    if request.target_agent == TargetAgent::Manual {
        let status = Some((HandoffStatus::Accepted, Some("waiting for an operator")));
        bridge::update(c, stored, bridge::Update { said, status, ..Default::default() }).await?;
        return Ok(None);
    }
    let Some(profile) = root_profile(c, stored, request, known, said).await? else {
        return Ok(None);
    };
    let target = request.target_agent.as_str();
    let root = Uuid::now_v7();
    // Copied onto the run now: a later `profiles apply` does not change it.
    let budget = match known {
        Some(known) => known.budgets.for_target(target),
        None => profiles::settings::budgets(c).await?.for_target(target),
    };
    let conversation = request.conversation_key();
    let insert_run = runs::insert_with_budget(
        c,
        run_id,
        Some(&request.id),
        &profile.id,
        request.priority,
        Some(&budget),
        conversation,
    );
    let new = NewInvocation {
        id: root,
        run_id,
        parent_invocation_id: None,
        incoming_task_id: None,
        profile_id: &profile.id,
        kind: InvocationKind::Root,
        // Rendered from the stored request when the row is read.
        brief: NewBrief::Request,
        budget: None,
        deadline_at: None,
        handoffs: 0,
        run_spent: Default::default(),
    };
    let (taken_here, insert_root) = spawn::root(c, &new, request);
    // The request's id, source and target agent, the budget and the root's
    // profile are the run's and the request's rows' to keep: the `events`
    // view puts them back in these payloads (`run_payload`, V48).
    let events = [
        Event::new(JournalEvent::RunCreated, None, json!({})),
        Event::new(JournalEvent::ProfileResolved, Some(root), json!({})),
        Event::new(JournalEvent::WorkspaceInitialized, None, json!({})),
        spawn::created(&new),
    ];
    let announce = stored.status != HandoffStatus::Accepted;
    let mut said = said.to_vec();
    said.push((HandoffEvent::Sent, None, Some(profile.id.as_str())));
    if announce {
        said.push((HandoffEvent::Accepted, Some(HandoffStatus::Accepted), None));
    }
    let status = announce.then_some((HandoffStatus::Accepted, None));
    // A root this process claims right after the commit is running from
    // here: its claim then writes no status (a claim that finds the request
    // already running leaves it so).
    let then = taken_here.then_some((HandoffStatus::Running, None));
    let journal = Some((run_id, events.as_slice()));
    let update = bridge::Update { said: &said, status, then, run_id: Some(run_id), reply: None, journal, held };
    // The run, then its root (whose message reads the run's priority); with
    // them, sent at once, the request's row (its run, and its status when
    // announced), its events, the bridge's status and the run's journal,
    // which read nothing the other two write (no foreign key between these
    // tables either). A root this process takes itself has no message: it
    // reads nothing of the run, and goes out with the other two.
    if taken_here {
        let (run, root, update) = tokio::join!(insert_run, insert_root, bridge::update(c, stored, update));
        run?;
        root?;
        update?;
        return Ok(Some(run_id));
    }
    let run_and_root = async {
        insert_run.await?;
        insert_root.await
    };
    let (run_and_root, update) = tokio::join!(run_and_root, bridge::update(c, stored, update));
    run_and_root?;
    update?;
    Ok(Some(run_id))
}

/// The configured profile the request's target agent routes to, from
/// `known` or read; `None` once the request is refused (a `failed` reply)
/// because no configured agent handles it, or its profile is one this
/// version cannot read.
async fn root_profile(
    c: &impl GenericClient,
    stored: &Request,
    request: &HandoffRequest,
    known: Option<&Snapshot>,
    said: &[requests::Said<'_>],
) -> Result<Option<Profile>> {
    let target = request.target_agent.as_str();
    let route = match known {
        Some(known) => known.route(target).map(str::to_string),
        None => profiles::route(c, target).await?,
    };
    let found = match (&route, known) {
        (None, _) => Ok(None),
        (Some(id), Some(known)) => known.profile(id),
        (Some(id), None) => profiles::get(c, id).await,
    };
    let profile = match route {
        Some(_) => match found {
            Ok(profile) => profile,
            // A profile this version cannot read cannot run here: say so.
            Err(e @ Error::Unreadable { .. }) => {
                let message = format!("the agent for `{target}` requests cannot run: {e}");
                requests::add_events(c, &stored.id, said).await?;
                refuse(c, stored, ErrorCode::NoAgent, &message).await?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        },
        None => None,
    };
    let Some(profile) = profile.filter(Profile::is_configured) else {
        let message = format!("no configured agent handles `{target}` requests");
        requests::add_events(c, &stored.id, said).await?;
        refuse(c, stored, ErrorCode::NoAgent, &message).await?;
        return Ok(None);
    };
    Ok(Some(profile))
}

/// Ends a request that gets no run: a `failed` status and reply with `code`.
pub async fn refuse(c: &impl GenericClient, stored: &Request, code: ErrorCode, message: &str) -> Result<()> {
    let said = [(HandoffEvent::Failed, Some(HandoffStatus::Failed), Some(message))];
    let outcome = Outcome::Failed { code, message: message.to_string() };
    end_without_run(c, stored, &said, (HandoffStatus::Failed, Some(message)), outcome).await
}

/// Ends a request that has no run (it waited for its turn, or had not
/// arrived when its cancel did): a `cancelled` status and reply.
pub async fn cancel(c: &impl GenericClient, stored: &Request, reason: Option<&str>) -> Result<()> {
    let said = [(HandoffEvent::Cancelled, Some(HandoffStatus::Cancelled), reason)];
    let outcome = Outcome::Cancelled { reason: reason.map(str::to_string) };
    end_without_run(c, stored, &said, (HandoffStatus::Cancelled, reason), outcome).await
}

/// The event, status and reply that end a request with no run, in one
/// statement (a run retried before has its own attempt's reply).
async fn end_without_run(
    c: &impl GenericClient,
    stored: &Request,
    said: &[requests::Said<'_>],
    status: (HandoffStatus, Option<&str>),
    outcome: Outcome,
) -> Result<()> {
    let attempt = match stored.run_id {
        Some(run) => bridge::attempt(c, run).await?,
        None => 1,
    };
    let input = no_run_reply(stored, outcome);
    let update = bridge::Update { said, status: Some(status), reply: Some((&input, attempt)), ..Default::default() };
    bridge::update(c, stored, update).await
}

fn no_run_reply(stored: &Request, outcome: Outcome) -> ReplyInput<'_> {
    ReplyInput {
        handoff_id: stored.wire_id(),
        chat_id: stored.reply_chat_id.as_deref(),
        source: stored.source.as_str(),
        language: stored.language,
        outcome,
        run_id: None,
        agents: vec![],
        changes: None,
        at: bridge::timestamp(),
    }
}

/// Gives a free conversation (locked by the caller) to its oldest waiting
/// request that can start; requests that cannot are answered on the way.
/// What [`request_as`] reads is taken from `known` when given.
pub async fn next_in_conversation_as(c: &impl GenericClient, key: &str, known: Option<&Snapshot>) -> Result<()> {
    let first = conversations::pop(c, key).await?;
    next_in_conversation_from(c, key, first, known).await
}

/// [`next_in_conversation_as`], given what its first `pop` took (`first`).
pub(crate) async fn next_in_conversation_from(
    c: &impl GenericClient,
    key: &str,
    first: Option<String>,
    known: Option<&Snapshot>,
) -> Result<()> {
    let mut next = first;
    while let Some(handoff) = next {
        // Boxed: starting a request is a large state machine, and this runs
        // inside every run's end, whose futures (moved as a hop goes
        // through its layers) would otherwise carry it, mostly for nothing.
        if Box::pin(started(c, key, &handoff, known)).await? {
            return Ok(());
        }
        next = conversations::pop(c, key).await?;
    }
    Ok(())
}

/// Starts `handoff`, taken from the conversation's queue, and gives it the
/// conversation's turn: false when it ended or started meanwhile, or could
/// not start (it is answered).
async fn started(c: &impl GenericClient, key: &str, handoff: &str, known: Option<&Snapshot>) -> Result<bool> {
    let Some(stored) = requests::lock(c, handoff).await? else { return Ok(false) };
    if stored.status.is_terminal() || stored.run_id.is_some() {
        return Ok(false);
    }
    let parsed: HandoffRequest = serde_json::from_value(stored.body.clone())?;
    let trace = requests::trace(c, handoff).await?;
    let Some(run) = crate::outbox::with_trace(trace, request_as(c, &stored, &parsed, known)).await? else {
        return Ok(false);
    };
    conversations::set_live(c, key, run).await?;
    Ok(true)
}
