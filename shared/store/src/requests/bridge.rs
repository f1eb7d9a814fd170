//! What the bridge hears: status changes, questions and the final reply, always written
//! to the outbox in the same transaction as the change they report.

use crate::GenericClient;
use baton_domain::fleet::Queue;
use baton_domain::protocol::bridge;
use baton_domain::protocol::conversation::question::{self, QuestionInput};
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use chrono::{SecondsFormat, Utc};
use serde_json::Value;

use crate::journal::JsonText;
use crate::outbox::{self, Message};
use crate::requests::{self, Request};
use crate::OwnedParams;

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The bridge's own queue when it set `reply_to`, else the shared replies
/// queue. The row's correlation id is the fleet's key for the handoff (the
/// relay notes what became of it there); the message names the bridge's own id.
fn route(request: &Request, message_id: String, body: Value, mandatory: bool) -> Message {
    Message {
        queue: request.reply_to.clone().unwrap_or_else(|| Queue::BridgeReplies.as_str().to_string()),
        external: request.reply_to.is_some(),
        message_id: Some(message_id),
        correlation_id: Some(request.id.clone()),
        body,
        mandatory,
    }
}

/// What one statement writes for a request ([`update`]): handoff events,
/// then a status change (its `BridgeStatus` message and `status_changed`
/// event), then the final reply (its `BridgeReply` message, `reply_sent_at`
/// and `reply_sent` event), and the run it started.
#[derive(Default)]
pub struct Update<'a> {
    /// Events recorded before the status's own, in order.
    pub said: &'a [requests::Said<'a>],
    /// A new status, with the note of its `status_changed` event.
    pub status: Option<(HandoffStatus, Option<&'a str>)>,
    /// A second status change, right after `status` (its own message and
    /// event, the next sequence number): a root this process starts itself
    /// is `running` as its run is `accepted`.
    pub then: Option<(HandoffStatus, Option<&'a str>)>,
    /// The run the request now has.
    pub run_id: Option<uuid::Uuid>,
    /// The final reply, for the run's attempt ([`attempt`]).
    pub reply: Option<(&'a bridge::ReplyInput<'a>, i32)>,
    /// A run's journal events, written by the same statement (a run's
    /// start: at most `journal::ROW_EVENTS`): in its bridge message row
    /// (V51), or as a journal row when it writes no message.
    pub journal: Option<(uuid::Uuid, &'a [crate::journal::Event])>,
    /// The caller's transaction holds the request's row since an earlier
    /// statement (or stored the request itself): no other transaction
    /// writes a message of this handoff meanwhile, and every one written
    /// before is in this statement's snapshot. The statement then also says
    /// which earlier messages are still pending, which the publisher would
    /// otherwise ask the database after the commit (`outbox::ready_to_send`).
    pub held: bool,
}

/// Records a status change and queues the `BridgeStatus` message (mandatory,
/// like the reply: one that no queue takes goes to the dead-letter queue).
pub async fn status(
    c: &impl GenericClient,
    request: &Request,
    status: HandoffStatus,
    note: Option<&str>,
) -> crate::Result<()> {
    update(c, request, Update { status: Some((status, note)), ..Update::default() }).await
}

/// Queues the final `BridgeReply` (mandatory: if no queue takes it, it goes
/// to the dead-letter queue rather than vanishing) and records it as sent.
/// A retried run's reply has its own message id (`reply:<handoffId>:<attempt>`).
pub async fn reply(c: &impl GenericClient, request: &Request, input: &bridge::ReplyInput<'_>) -> crate::Result<()> {
    let attempt = match request.run_id {
        Some(run) => attempt(c, run).await?,
        None => 1,
    };
    reply_at(c, request, input, attempt).await
}

/// [`reply`] for the run's `attempt`, read by the caller
/// ([`attempt`]), in one round trip.
pub async fn reply_at(
    c: &impl GenericClient,
    request: &Request,
    input: &bridge::ReplyInput<'_>,
    attempt: i32,
) -> crate::Result<()> {
    update(c, request, Update { reply: Some((input, attempt)), ..Update::default() }).await
}

/// [`update`]'s statement: the request's row, then its `handoff_log` row
/// and its journal row when it writes no message, then its bridge message
/// row, which keeps them otherwise. Parameters as [`update`] lists them.
const UPDATE: &str = "WITH s AS (
             UPDATE handoff_requests
                SET status = coalesce($2::text, status),
                    status_seq = status_seq + $22::int4,
                    run_id = coalesce($3::uuid, run_id),
                    reply_sent_at = CASE WHEN $4::bool THEN now() ELSE reply_sent_at END,
                    updated_at = now()
              WHERE id = $1 RETURNING status_seq),
         l AS (
             INSERT INTO handoff_log (handoff_id, types, statuses, messages)
             SELECT $1, $9::text[], $10::text[], $11::text[]
              WHERE cardinality($9::text[]) > 0
                AND ($5::text IS NULL AND $8::jsonb IS NULL OR NOT EXISTS (SELECT FROM s))),
         j AS (
             INSERT INTO journal (run_id, invocation_id, invocations, types, payloads)
             SELECT $17, $21::uuid, $18::uuid[], $19::text[]::journal_event[], $20::json
              WHERE $17::uuid IS NOT NULL
                AND ($5::text IS NULL AND $8::jsonb IS NULL OR NOT EXISTS (SELECT FROM s)))
         INSERT INTO bridge_messages (handoff_id, status, seq, then_status, message_id, queue, body, external, mandatory,
                                      traceparent, tracestate, next_attempt_at, pending, created_at,
                                      log_types, log_statuses, log_messages,
                                      journal_run, journal_invocation, journal_invocations, journal_types, journal_payloads)
         SELECT $1, $5::text, CASE WHEN $5::text IS NOT NULL THEN s.status_seq - $22 + 1 END, $6::text, $7::text, $12,
                $8::jsonb, $13, true, $14, $15, now() + make_interval(secs => $16::float8), true, clock_timestamp(),
                CASE WHEN cardinality($9::text[]) > 0 THEN $9::text[]::handoff_event[] END,
                CASE WHEN cardinality($9::text[]) > 0 THEN $10::text[]::handoff_status[] END,
                CASE WHEN cardinality($9::text[]) > 0 THEN $11::text[] END,
                $17, $21, CASE WHEN $17::uuid IS NOT NULL THEN $18::uuid[] END,
                CASE WHEN $17::uuid IS NOT NULL THEN $19::text[]::journal_event[] END,
                CASE WHEN $17::uuid IS NOT NULL THEN $20::json END
           FROM s WHERE $5::text IS NOT NULL OR $8::jsonb IS NOT NULL
         RETURNING id, message_id, handoff_id, body, status, seq, created_at, $23::text, $24::text, then_status,
                   $25::text,
                   CASE WHEN $26::bool THEN ARRAY(SELECT w.id FROM bridge_messages w
                                                   WHERE w.pending AND w.handoff_id = $1 AND w.id < bridge_messages.id) END";

/// Writes `u` for the request in one statement: the request row once (its
/// status and the status's sequence number, its run, `reply_sent_at`), and
/// its messages to the bridge as one pending `bridge_messages` row (the
/// outbox of bridge messages, kept for operators once sent), which holds
/// them in order (the statuses before the reply, V46), the handoff events
/// (V47) and the run's journal events (V51); without a message, the events
/// are a `handoff_log` row and a journal row. A
/// status's sequence number is the row's own, taken by the same statement
/// under the row's lock; the status's body and message id get it there.
pub async fn update(c: &impl GenericClient, request: &Request, u: Update<'_>) -> crate::Result<()> {
    let written = written(c, request, u).await?;
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        written.params.iter().map(|p| p.as_ref() as _).collect();
    // A status keeps its status and number; its body and message id are
    // rendered from them and its row's time (`status_message`, V43): the
    // statement's clock, read after it took the request's row lock, so a
    // later number never has an earlier time.
    let row = crate::sql::query_opt(c, UPDATE, &params).await?;
    let Some(row) = row else { return Ok(()) };
    let messages = written.publish.messages(&row)?;
    if let Some(url) = &request.status_url {
        for (_, body) in messages.iter().take(written.statuses) {
            requests::callbacks::enqueue(c, &request.id, url, body).await?;
        }
    }
    written.publish.publish(&row, messages);
    Ok(())
}

/// [`update`] as a write nothing in the transaction reads afterwards (a
/// run's answer): its statement goes out with the commit
/// ([`crate::Transaction::write_at_commit_then`]), which costs it no round trip of
/// its own, and its messages go to this process's publisher once the
/// transaction committed. On a connection that is not the store's own
/// transaction, or for a request with a status callback (its callbacks are
/// written from the statement's rows), it is [`update`].
pub async fn update_at_commit(c: &impl GenericClient, request: &Request, u: Update<'_>) -> crate::Result<()> {
    let Some(tx) = c.as_transaction().filter(|_| request.status_url.is_none()) else {
        return update(c, request, u).await;
    };
    let written = written(tx, request, u).await?;
    let statement = tx.prepare_cached(UPDATE).await?;
    let handoff = request.id.clone();
    let Written { params, publish, .. } = written;
    tx.write_at_commit_then(
        statement,
        params,
        Box::new(move |rows| {
            let Some(row) = rows.first() else { return };
            match publish.messages(row) {
                Ok(messages) => publish.publish(row, messages),
                // Its row stays pending: the relay publishes it after the grace.
                Err(e) => tracing::error!(handoff, error = %e, "a bridge message cannot be read; the relay sends it"),
            }
        }),
    );
    Ok(())
}

/// [`UPDATE`]'s parameters for an update, once the statements it needs
/// first are written (events beyond a row's, a run's events beyond a
/// journal row's), and what to do with the row it returns.
struct Written {
    params: OwnedParams,
    publish: Publish,
    /// How many of the row's messages are statuses (they come first).
    statuses: usize,
}

/// What a written row's messages become: this process's to publish after
/// the commit, when it publishes in process.
struct Publish {
    queued: Message,
    trace: Option<outbox::Trace>,
    grace: f64,
}

impl Publish {
    /// As every reader renders a row's messages (`sent::rendered`, V43,
    /// V46): its statuses first.
    fn messages(&self, row: &tokio_postgres::Row) -> crate::Result<Vec<(Option<String>, Value)>> {
        outbox::sent::rendered(row, 1)
    }

    fn publish(self, row: &tokio_postgres::Row, messages: Vec<(Option<String>, Value)>) {
        if self.grace <= 0.0 {
            return;
        }
        let messages =
            messages.into_iter().map(|(message_id, body)| Message { message_id, body, ..self.queued.clone() });
        let waits_for: Option<Vec<i64>> = row.get(11);
        for mut part in outbox::parts(row.get(0), 0, self.trace, messages.collect(), 0) {
            part.waits_for = waits_for.clone().filter(|_| part.part.index == 0);
            outbox::after_commit::wrote(part);
        }
    }
}

/// The statements `u` needs before [`UPDATE`], written, and its parameters.
async fn written(c: &impl GenericClient, request: &Request, u: Update<'_>) -> crate::Result<Written> {
    let u = match u.status {
        None => Update { status: u.then, then: None, ..u },
        Some(_) => u,
    };
    let mut said: Vec<requests::Said<'_>> = u.said.to_vec();
    for (status, note) in [u.status, u.then].into_iter().flatten() {
        said.push((HandoffEvent::StatusChanged, Some(status), note));
    }
    let (mut reply_body, mut reply_id) = (None, None);
    if let Some((input, attempt)) = u.reply {
        said.push((HandoffEvent::ReplySent, Some(input.outcome.status()), None));
        (reply_body, reply_id) = kept_reply(request, input, attempt, u.then.or(u.status).map(|(s, _)| s));
    }
    if said.len() > requests::LOG_EVENTS {
        let (first, _) = said.split_at(said.len() - requests::LOG_EVENTS);
        requests::add_events(c, &request.id, first).await?;
        said.drain(..first.len());
    }
    let mut journal = u.journal.filter(|(_, events)| !events.is_empty());
    if let Some((run, events)) = journal.filter(|(_, events)| events.len() > crate::journal::ROW_EVENTS) {
        crate::journal::append(c, run, events).await?;
        journal = None;
    }
    let (kinds, statuses, messages) = requests::log_columns(&said);
    let queued = route(request, String::new(), Value::Null, true);
    let trace = outbox::current_trace();
    let (traceparent, tracestate) = trace.clone().map_or((None, None), |(p, s)| (Some(p), s));
    let grace = outbox::after_commit::grace().map(|g| g.as_secs_f64()).unwrap_or(0.0);
    let [first, then] = [u.status, u.then].map(|change| change.map(|(s, _)| s.as_str()));
    let changes = i32::from(u.status.is_some()) + i32::from(u.then.is_some());
    let events = journal.map_or(&[][..], |(_, events)| events);
    let logged = crate::journal::columns(events);
    let owned = |texts: &[&str]| texts.iter().map(ToString::to_string).collect::<Vec<String>>();
    let optional = |texts: &[Option<&str>]| texts.iter().map(|t| t.map(str::to_string)).collect::<Vec<_>>();
    let params: OwnedParams = vec![
        Box::new(request.id.clone()),
        Box::new(then.or(first)),
        Box::new(u.run_id),
        Box::new(u.reply.is_some()),
        Box::new(first),
        Box::new(then),
        Box::new(reply_id),
        Box::new(reply_body),
        Box::new(owned(&kinds)),
        Box::new(optional(&statuses)),
        Box::new(optional(&messages)),
        Box::new(queued.queue.clone()),
        Box::new(queued.external),
        Box::new(traceparent),
        Box::new(tracestate),
        Box::new(grace),
        Box::new(journal.map(|(run, _)| run)),
        Box::new(logged.invocations),
        Box::new(owned(&logged.kinds)),
        Box::new(JsonText::array(events.iter().map(|e| &e.payload))?),
        Box::new(logged.invocation),
        Box::new(changes),
        Box::new(request.bridge.clone()),
        Box::new(request.reply_chat_id.clone()),
        Box::new(request.language.as_str().to_string()),
        Box::new(u.held),
    ];
    let statuses = usize::from(first.is_some()) + usize::from(then.is_some());
    let publish = Publish { queued, trace, grace };
    Ok(Written { params, publish, statuses })
}

/// What a reply's row keeps, its body and message id: what its request
/// and its status (`last`, the row's last) do not say (`sent::Reply`), and
/// no message id when it is the first attempt's. A row with no status (it
/// is not joined to its request when read) keeps the whole reply.
fn kept_reply(
    request: &Request,
    input: &bridge::ReplyInput<'_>,
    attempt: i32,
    last: Option<HandoffStatus>,
) -> (Option<Value>, Option<String>) {
    let (body, id) = (bridge::reply(input), bridge::attempt_reply_message_id(request.wire_id(), attempt));
    match last {
        Some(status) => {
            let about = outbox::sent::Reply {
                wire: request.wire_id(),
                chat: request.reply_chat_id.as_deref(),
                language: Some(request.language.as_str()),
                status: Some(status),
            };
            (Some(about.kept(body)), (attempt > 1).then_some(id))
        }
        None => (Some(body), Some(id)),
    }
}

pub fn timestamp() -> String {
    now()
}

/// Queues a `BridgeQuestion` (docs/bridge-protocol.md#conversations), routed like a status, and
/// records it as asked.
pub async fn question(c: &impl GenericClient, request: &Request, input: &QuestionInput<'_>) -> crate::Result<()> {
    let body = question::message(input);
    let id = question::message_id(request.wire_id(), input.question_id);
    outbox::enqueue(c, &route(request, id, body, true)).await?;
    requests::add_event(
        c,
        &request.id,
        HandoffEvent::QuestionSent,
        Some(HandoffStatus::Blocked),
        Some(input.question_id),
    )
    .await
}

/// Which attempt a run is on: 1, and one more for each `baton runs retry`
/// (a retried run's reply has its own message id).
pub async fn attempt(c: &impl GenericClient, run_id: uuid::Uuid) -> crate::Result<i32> {
    Ok(crate::sql::query_one(c, "SELECT coalesce((SELECT attempt FROM runs WHERE id = $1), 1)", &[&run_id])
        .await?
        .get(0))
}
