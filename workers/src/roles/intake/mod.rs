//! Intake: validates bridge requests, stores them once per id, and starts a
//! run with its root invocation, all in one transaction. Cancels and answers
//! go to their own handlers by their `type`; what cannot be taken is refused
//! through `refusals.rs`.

mod answers;
pub mod cancels;
mod identity;
mod refusals;

use baton_bus::consume::consume;
use baton_bus::{Delivery, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::policy::disclosure;
use baton_domain::protocol::contract::{AnswerType, CancelType, ErrorCode};
use baton_domain::protocol::conversation::cancel::message_type;
use baton_domain::protocol::conversation::strategy::{self, Turn};
use baton_domain::protocol::request::{
    parse_request, HandoffEvent, HandoffRequest, HandoffStatus, Redaction, RequestError, TargetAgent,
};
use baton_domain::run::state::CancelledBy;
use baton_store::after_commit::{scope, Publishing};
use baton_store::profiles::Snapshot;
use baton_store::requests::{self, NewRequest, Request};
use baton_store::{begin, client as db, commit};
use baton_store::{profiles, requests::conversations, runs::ending, GenericClient, Pool};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::intake::refusals::{answer_and_dead_letter, reject};
use crate::roles::keyed_consumer::{self, consume_keyed};
use crate::roles::publish_after_commit::PublishAfterCommit;
use crate::roles::{connect, retry_transient, Role};
use baton_store::requests::bridge;

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Intake).await?;
    let publisher = conn.publisher().await?;
    let (publishing, publisher_after_commit) = PublishAfterCommit::start(&conn, &pool, settings).await?;
    let queue = settings.queues().name(Queue::BridgeRequests);
    let dead = settings.queues().name(Queue::DeadRequests);
    tracing::info!(%queue, concurrency = settings.intake_lanes(), "intake consuming");
    if profiles::settings::bridges(&pool.get().await?).await?.is_empty() {
        tracing::warn!(%queue, "no [[bridges]] in the profiles file: intake trusts every publisher of this queue as the one bridge (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other)");
    }
    // The profiles file as this process last read it, checked at each request.
    let cache = profiles::Cache::default();
    let role = Arc::new(Intake {
        pool: pool.clone(),
        publisher: publisher.clone(),
        settings: settings.clone(),
        publishing: publishing.clone(),
        cache: cache.clone(),
    });
    // Requests are handled side by side, in arrival order per handoff and per
    // conversation; each in a publishing scope of its own. The rare requests
    // the broker dead-lettered are taken one at a time.
    let requests = consume_keyed(
        &conn,
        &queue,
        settings.prefetch,
        settings.intake_lanes(),
        shutdown,
        |d| keyed_consumer::request_keys(d.body()),
        |d, stop| {
            let role = role.clone();
            async move {
                scope(
                    crate::roles::invocation::eager::lend(role.publishing.clone(), &role.settings.worker_id),
                    handle(&role.pool, &role.cache, &role.publisher, &role.settings, &stop, d),
                )
                .await
            }
        },
    );
    let result = tokio::try_join!(
        requests,
        scope(
            publishing,
            consume(&conn, &dead, settings.prefetch, shutdown, |d| answer_dead_letter(
                &pool, &cache, &publisher, settings, shutdown, d
            ))
        ),
    )
    .map(|_| ());
    publisher_after_commit.stop().await;
    publisher.close().await;
    // Closed, not only dropped: a consumer whose task ended with the
    // attempt's error (another consumer of this role failed) is cancelled
    // with it, and what it held goes back to its queue. Left open, it kept
    // a dead-lettered request unacked, out of every live consumer's reach.
    conn.close("the role's attempt ended").await;
    result
}

/// What each request's task shares.
struct Intake {
    pool: Pool,
    publisher: Publisher,
    settings: Settings,
    publishing: Publishing,
    cache: profiles::Cache,
}

/// A message the broker dead-lettered. One from the request queue reached
/// its delivery limit, most likely through redeliveries after reconnects
/// (a database flap), not through any fault of its own: it is handled like
/// a fresh delivery, so it is stored and run, or refused with a `failed`
/// reply; a transient error leaves it here for the next try (this queue has
/// no limit). Messages of the fleet's other queues are only hints (Postgres
/// and the relay's sweeps re-publish what they said), so their copy in
/// `baton.dead` is enough.
async fn answer_dead_letter(
    pool: &Pool,
    cache: &profiles::Cache,
    publisher: &Publisher,
    settings: &Settings,
    shutdown: &CancellationToken,
    delivery: Delivery,
) -> anyhow::Result<()> {
    let from = delivery.header("x-first-death-queue");
    if from.as_deref() != Some(settings.queues().name(Queue::BridgeRequests).as_str()) {
        return Ok(delivery.ack().await?);
    }
    let id = delivery.message_id().unwrap_or_default().to_string();
    tracing::warn!(message_id = %id, "a request was dead-lettered by the broker; handling it again");
    handle(pool, cache, publisher, settings, shutdown, delivery).await
}

/// For a request the broker dead-lettered, what its handoff events say, so
/// an operator who finds its copy in `baton.dead` sees that it was handled.
fn dead_letter_note(settings: &Settings, delivery: &Delivery) -> Option<String> {
    let from = delivery.header("x-first-death-queue")?;
    if from != settings.queues().name(Queue::BridgeRequests) {
        return None;
    }
    let reason = delivery.header("x-first-death-reason").unwrap_or_else(|| "unknown".into());
    Some(format!("the broker dead-lettered this request ({reason}); intake took it from {}", Queue::DeadRequests))
}

async fn handle(
    pool: &Pool,
    cache: &profiles::Cache,
    publisher: &Publisher,
    settings: &Settings,
    shutdown: &CancellationToken,
    delivery: Delivery,
) -> anyhow::Result<()> {
    // With [[bridges]], the broker-checked user decides which bridge speaks.
    let bridge = match identity::speaker(pool, cache, settings, &delivery).await? {
        Ok(bridge) => bridge,
        Err(refusal) => return identity::refuse(publisher, settings, &delivery, &refusal).await,
    };
    let bridge = bridge.as_ref();
    // Control messages are told apart by `type`; a body without one is a request.
    match message_type(delivery.body()).as_deref() {
        None => {}
        Some(kind) if CancelType::parse(kind).is_some() => {
            return cancels::handle(pool, publisher, settings, shutdown, delivery, bridge).await
        }
        Some(kind) if AnswerType::parse(kind).is_some() => {
            return answers::handle(pool, publisher, settings, shutdown, delivery, bridge).await
        }
        Some(other) => {
            let (answer, cancel) = (AnswerType::Answer.as_str(), CancelType::Cancel.as_str());
            let reason =
                format!("field `type` is {other:?}; a bridge sends a request (no type), an {answer:?} or a {cancel:?}");
            let error = RequestError { reason, handoff_id: None, reply_to_chat_id: None, language: None };
            return reject(pool, publisher, settings, &delivery, error, bridge).await;
        }
    }
    let reply_to = match bridge.map(|b| b.reply_queue(delivery.reply_to())) {
        None => delivery.reply_to(),
        Some(Ok(queue)) => Some(queue),
        Some(Err(refusal)) => return identity::refuse(publisher, settings, &delivery, &refusal).await,
    };
    // A body refused unread (too large, too deep) is answered from its AMQP
    // properties: `message_id` is the request's id (docs/bridge-protocol.md#requests).
    if let Some(reason) = baton_domain::protocol::request::refused_unread(delivery.body()) {
        let id = delivery.message_id().filter(|_| reply_to.is_some()).map(str::to_string);
        let error = RequestError { reason, handoff_id: id, reply_to_chat_id: None, language: None };
        return reject(pool, publisher, settings, &delivery, error, bridge).await;
    }
    let parsed = parse_request(delivery.body()).and_then(|request| check_reply_to(settings, reply_to, request));
    let parsed = match (parsed, bridge) {
        (Ok(request), Some(bridge)) => match bridge.admits(&request) {
            Ok(()) => Ok(bridge.qualify_request(request)),
            Err(refusal) => return identity::refuse(publisher, settings, &delivery, &refusal).await,
        },
        (other, _) => other,
    };
    match parsed {
        Ok(request) => {
            let note = dead_letter_note(settings, &delivery);
            let stored = retry_transient("storing a request", settings.transient_patience, shutdown, || {
                accept(pool, cache, &request, reply_to, note.as_deref(), bridge)
            });
            // The run's trace: the bridge's `traceparent`, or a new one.
            let span = tracing::info_span!("intake", handoff_id = %request.id, agent = request.target_agent.as_str());
            crate::telemetry::continue_from(&span, &delivery);
            match tracing::Instrument::instrument(stored, span).await {
                Ok(Taken::Stored) => Ok(delivery.ack().await?),
                Ok(Taken::Conflicting) => {
                    let reason = "conflicting_duplicate: a request with this id and another body is already stored; it stands, and this one was not run";
                    tracing::warn!(handoff = %request.id, "{reason}");
                    let dead = baton_bus::DeadLetters::new(publisher, &settings.queues());
                    Ok(delivery.dead_letter(&dead, Queue::BridgeRequests.as_str(), reason).await?)
                }
                Err(e) if crate::roles::is_transient(&e) => Err(e),
                // A request the store cannot take will never be taken: tell
                // the sender and dead-letter it instead of redelivering it.
                Err(e) => {
                    tracing::error!(handoff = %request.id, error = %format!("{e:#}"), "request could not be stored");
                    let error = RequestError {
                        reason: "the request could not be stored; an operator can see why in baton.dead".into(),
                        handoff_id: Some(request.id.clone()),
                        reply_to_chat_id: request.reply_to_chat_id().map(str::to_string),
                        language: Some(request.language()),
                    };
                    answer_and_dead_letter(pool, publisher, settings, &delivery, &error, bridge).await
                }
            }
        }
        Err(error) => reject(pool, publisher, settings, &delivery, error, bridge).await,
    }
}

/// What storing a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Stored and started (or kept as a draft), or a duplicate acknowledged.
    Stored,
    /// Its id is stored with another body (`[[bridges]]`): dead-lettered, recorded.
    Conflicting,
}

/// A bridge's `reply_to` must be its own queue: a status or reply published
/// to one of the fleet's queues would be read there as work.
fn check_reply_to(
    settings: &Settings,
    reply_to: Option<&str>,
    request: HandoffRequest,
) -> Result<HandoffRequest, RequestError> {
    match reply_to {
        Some(queue) if settings.queues().is_fleet_queue(queue) => Err(RequestError {
            reason: format!("the reply_to property names `{queue}`, one of the fleet's own queues; name the bridge's own reply queue, or none"),
            handoff_id: Some(request.id.clone()),
            reply_to_chat_id: request.reply_to_chat_id().map(str::to_string),
            language: Some(request.language()),
        }),
        _ => Ok(request),
    }
}

#[tracing::instrument(name = "handoff", skip_all, fields(handoff = %original.id, handoff_id = %original.id))]
async fn accept(
    pool: &Pool,
    cache: &profiles::Cache,
    original: &HandoffRequest,
    reply_to: Option<&str>,
    dead_lettered: Option<&str>,
    bridge: Option<&baton_domain::protocol::bridges::Bridge>,
) -> anyhow::Result<Taken> {
    let mut client = db(pool).await?;
    // The disclosure policy runs before anything is stored or shown: no
    // agent, prompt, external tool or operator view sees what it removes.
    // It runs with the policy of the profiles file as last read, before the
    // transaction opens (its CPU time on a large body never counts as
    // idle-in-transaction time), and again in the rare transaction that
    // finds a newer file applied since.
    let target = original.target_agent.as_str();
    let held = cache.held();
    let early = held.as_ref().map(|known| disclosure::apply(known.disclosure.for_target(target), original));
    // With a file held, the request is stored as that file filters it, in
    // the round trip that takes the handoff's lock (and reads the version
    // applied); should a newer one have been applied since, the transaction
    // is done again, filtering with it.
    let held_body = early.as_ref().map(|early| serde_json::to_value(&early.request)).transpose()?;
    let (tx, known, filtered, (first, stored, cancel), chat) = match (held, early, held_body) {
        (Some(held), Some(early), Some(body)) => {
            let tx = begin(&mut client).await?;
            let new = new_request(&early.request, &body, reply_to, bridge);
            // A new request in a chat starts it in the same round trip, if
            // the chat is new: should the request turn out a duplicate, or
            // cancelled already, a chat made for it is rolled back.
            let run_id = uuid::Uuid::now_v7();
            let key = chat_key(&early.request).filter(|_| early.request.is_runnable());
            // A cancel for this handoff waits, or sees the request, never neither.
            let (version, read, started) =
                requests::lock_then_insert_reading(&tx, &new, key.map(|key| (key, run_id))).await?;
            let (first, _, cancel) = &read;
            let starts = *first && cancel.is_none();
            if version == held.version && (starts || started != Some(true)) {
                let chat = started.filter(|_| starts).map(|started| (run_id, started));
                (tx, held, early, read, chat)
            } else {
                drop(tx); // rolled back
                let (tx, known, filtered, read) = sequential(&mut client, cache, original, reply_to, bridge).await?;
                (tx, known, filtered, read, None)
            }
        }
        _ => {
            let (tx, known, filtered, read) = sequential(&mut client, cache, original, reply_to, bridge).await?;
            (tx, known, filtered, read, None)
        }
    };
    let request = &filtered.request;
    let taken = if first {
        let read = (stored, cancel);
        take_first(&tx, request, &filtered.removed, &known, dead_lettered, read, chat).await?;
        Taken::Stored
    } else {
        let body = serde_json::to_value(request)?;
        let known_bridges = bridge.is_some() && !known.bridges.is_empty();
        // Boxed: a duplicate's path, which every request's state machine would carry.
        Box::pin(take_again(&tx, request, (stored, &body), &filtered.removed, &known, dead_lettered, known_bridges))
            .await?
    };
    commit(tx).await?;
    if matches!(taken, Taken::Stored) {
        crate::metrics::request_accepted(request.source.as_str(), request.target_agent.as_str());
    }
    Ok(taken)
}

/// What intake stores of `request` (as filtered), with `body` its JSON.
fn new_request<'a>(
    request: &'a HandoffRequest,
    body: &'a serde_json::Value,
    reply_to: Option<&'a str>,
    bridge: Option<&'a baton_domain::protocol::bridges::Bridge>,
) -> NewRequest<'a> {
    NewRequest {
        id: &request.id,
        body,
        source: request.source,
        target_agent: request.target_agent,
        status: request.status.into(),
        language: request.language(),
        reply_to,
        reply_chat_id: request.reply_to_chat_id(),
        status_url: status_url(request),
        bridge: bridge.map(|b| b.id.as_str()),
    }
}

/// The request stored (or counted) and read back, with a cancel that came before it.
type Read = (bool, Request, PendingCancel);

/// Takes the handoff's lock reading the profiles file's version, filters
/// the request with that file, and stores it.
async fn sequential<'c>(
    client: &'c mut baton_store::Client,
    cache: &profiles::Cache,
    original: &HandoffRequest,
    reply_to: Option<&str>,
    bridge: Option<&baton_domain::protocol::bridges::Bridge>,
) -> anyhow::Result<(baton_store::Transaction<'c>, Arc<Snapshot>, disclosure::Filtered, Read)> {
    let tx = begin(client).await?;
    // A cancel for this handoff waits, or sees the request, never neither.
    // The version of the profiles file rides along (the same statement).
    let version = conversations::lock_handoff_reading_version(&tx, &original.id).await?;
    let known = cache.at(&tx, version).await?;
    let filtered = disclosure::apply(known.disclosure.for_target(original.target_agent.as_str()), original);
    let body = serde_json::to_value(&filtered.request)?;
    let read = requests::insert_or_count_reading(&tx, &new_request(&filtered.request, &body, reply_to, bridge)).await?;
    Ok((tx, known, filtered, read))
}

/// The chat whose turns a request takes: its conversation's key, unless it
/// waits for an operator.
fn chat_key(request: &HandoffRequest) -> Option<&str> {
    request.conversation_key().filter(|_| request.target_agent != TargetAgent::Manual)
}

/// A request just stored: its handoff events, then its run, unless it is a
/// draft. The events are written with the ones starting the run adds (one
/// row), or before whatever else happens to it.
async fn take_first(
    c: &impl GenericClient,
    request: &HandoffRequest,
    removed: &[Redaction],
    known: &Snapshot,
    dead_lettered: Option<&str>,
    read: (Request, PendingCancel),
    chat: Option<(uuid::Uuid, bool)>,
) -> anyhow::Result<()> {
    let removed = disclosure_note(removed);
    let mut said = vec![];
    if let Some(note) = dead_lettered {
        said.push((HandoffEvent::DeadLetterRecovered, None, Some(note)));
    }
    said.push((HandoffEvent::Created, Some(request.status.into()), None));
    if let Some(note) = &removed {
        said.push((HandoffEvent::DisclosureFiltered, None, Some(note.as_str())));
    }
    said.push((HandoffEvent::ContextPackaged, None, None));
    if !request.is_runnable() {
        return Ok(requests::add_events(c, &request.id, &said).await?);
    }
    start(c, request, known, Some(read), &said, chat).await
}

/// The same id again: a duplicate (acknowledged, counted, nothing more), or
/// a draft the bridge now sends as `requested`. With `[[bridges]]` a body
/// that differs from the stored one (but in `status` and `updatedAt`) is no
/// duplicate: it is recorded and refused (`conflicting_duplicate`).
/// `stored` is the request as stored, `body` the one this delivery carries.
async fn take_again(
    c: &impl GenericClient,
    request: &HandoffRequest,
    (stored, body): (Request, &serde_json::Value),
    removed: &[Redaction],
    known: &Snapshot,
    dead_lettered: Option<&str>,
    bridges: bool,
) -> anyhow::Result<Taken> {
    if let Some(note) = dead_lettered {
        requests::add_event(c, &request.id, HandoffEvent::DeadLetterRecovered, None, Some(note)).await?;
    }
    if bridges && !same_request(&stored.body, body) {
        let note = "a redelivery of this id with another body was refused; the stored request stands";
        requests::add_event(c, &request.id, HandoffEvent::ConflictingDuplicate, None, Some(note)).await?;
        return Ok(Taken::Conflicting);
    }
    if stored.status == HandoffStatus::Draft && request.is_runnable() {
        requests::promote_draft(c, &request.id, body, status_url(request)).await?;
        record_disclosure(c, &request.id, removed).await?;
        start(c, request, known, None, &[], None).await?;
    } else {
        tracing::info!("duplicate request acknowledged; no new run");
    }
    Ok(Taken::Stored)
}

/// Whether two bodies are one request: equal but in `status` (a draft
/// promoted) and `updatedAt`.
fn same_request(stored: &serde_json::Value, new: &serde_json::Value) -> bool {
    let strip = |v: &serde_json::Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("status");
            o.remove("updatedAt");
        }
        v
    };
    strip(stored) == strip(new)
}

use baton_store::requests::PendingCancel;

/// Starts the request's run, unless a cancel came first or its conversation
/// is busy: then it waits, is refused or interrupts the live run, under the
/// route's strategy, decided under the conversation's row lock. `read` is
/// the stored request and its pending cancel when the caller read them;
/// `said`, handoff events to record first.
async fn start(
    c: &impl GenericClient,
    request: &HandoffRequest,
    known: &Snapshot,
    read: Option<(Request, PendingCancel)>,
    said: &[requests::Said<'_>],
    chat: Option<(uuid::Uuid, bool)>,
) -> anyhow::Result<()> {
    let (stored, pending) = match read {
        Some(read) => read,
        None => {
            let (stored, cancel) =
                tokio::join!(requests::get(c, &request.id), conversations::pending_cancel(c, &request.id));
            let (stored, cancel) = (stored?, cancel?);
            (stored.expect("inserted in this transaction"), cancel)
        }
    };
    // This transaction took the handoff's lock first, and the request has
    // no run yet whose end could write its messages: they are intake's.
    let start_run =
        |run_id| baton_store::runs::start::request_saying(c, &stored, request, Some(known), (said, true), run_id);
    if let Some((cancel, reason)) = pending {
        tracing::info!("a cancel came before the request; it is cancelled instead of run");
        requests::add_events(c, &request.id, said).await?;
        conversations::mark_applied(c, &request.id).await?;
        let note = format!("cancel {cancel}: it came before the request, which is cancelled instead of run");
        requests::add_event(c, &request.id, HandoffEvent::CancelReceived, None, Some(&note)).await?;
        return Ok(baton_store::runs::start::cancel(c, &stored, reason.as_deref()).await?);
    }
    let Some(key) = chat_key(request) else {
        start_run(uuid::Uuid::now_v7()).await?;
        return Ok(());
    };
    // A new chat is free and nobody waits in it: its row is made with this
    // request's run as its live run (one write), and the run starts. (Intake
    // may have made it already, with the request's insert: `chat`.)
    let (run_id, new_chat) = match chat {
        Some(started) => started,
        None => {
            let run_id = uuid::Uuid::now_v7();
            (run_id, conversations::start_new(c, key, run_id).await?)
        }
    };
    if new_chat {
        tracing::info!("conversation turn: a new chat");
        if start_run(run_id).await?.is_none() {
            conversations::clear_live(c, key).await?;
        }
        return Ok(());
    }
    let (live, waiting) = conversations::lock_noting_waiting(c, key).await?;
    let strategy = known.conversations.for_target(request.target_agent.as_str());
    let turn = strategy::decide(strategy, live.is_some());
    tracing::info!(strategy = %strategy, ?turn, "conversation turn");
    if turn == Turn::Refuse {
        requests::add_events(c, &request.id, said).await?;
        let message = "this chat is still busy with an earlier request; send it again when that one has ended";
        return Ok(baton_store::runs::start::refuse(c, &stored, ErrorCode::Busy, message).await?);
    }
    if live.is_none() && !waiting {
        // A free chat with nobody waiting: this request is the one its queue
        // would hand the turn to, so it takes it without queueing.
        if let Some(run) = start_run(run_id).await? {
            conversations::set_live(c, key, run).await?;
        }
        return Ok(());
    }
    requests::add_events(c, &request.id, said).await?;
    let seq = conversations::enqueue(c, key, &request.id).await?;
    let Some(run) = live.filter(|_| turn != Turn::Start) else {
        return Ok(baton_store::runs::start::next_in_conversation_as(c, key, Some(known)).await?);
    };
    let note =
        format!("waiting for this chat's live run ({strategy}; arrival {} in the chat)", seq.unwrap_or_default());
    let said = [
        (HandoffEvent::Queued, None, Some(note.as_str())),
        (HandoffEvent::Accepted, Some(HandoffStatus::Accepted), None),
    ];
    let status = Some((HandoffStatus::Accepted, Some("waiting for this chat's earlier request to end")));
    bridge::update(c, &stored, bridge::Update { said: &said, status, ..Default::default() }).await?;
    if turn == Turn::Interrupt {
        let events =
            ending::cancel_run(c, run, "the user sent a new request in this chat", CancelledBy::NewRequest).await?;
        baton_store::journal::append(c, run, &events).await?;
    }
    Ok(())
}

fn status_url(request: &HandoffRequest) -> Option<&str> {
    request.callback.as_ref().and_then(|c| c.status_url.as_deref()).filter(|u| !u.trim().is_empty())
}

/// One `disclosure_filtered` event listing what the policy removed, if anything.
async fn record_disclosure(c: &impl GenericClient, id: &str, removed: &[Redaction]) -> anyhow::Result<()> {
    if let Some(note) = disclosure_note(removed) {
        requests::add_event(c, id, HandoffEvent::DisclosureFiltered, None, Some(&note)).await?;
    }
    Ok(())
}

/// What the policy removed, for the `disclosure_filtered` event; `None` when nothing.
fn disclosure_note(removed: &[Redaction]) -> Option<String> {
    if removed.is_empty() {
        return None;
    }
    let what: Vec<String> = removed.iter().map(|r| format!("{} ({})", r.field, r.reason)).collect();
    Some(format!("{} removal(s): {}", what.len(), what.join("; ")))
}
