//! Bridge requests: stored once per id, with their events and status counter.
//!
//! - [`bridge`]: what the bridge hears (status changes, questions, the final reply), through the outbox.
//! - [`conversations`]: a bridge's cancels, and one chat's requests taking turns under a row lock.
//! - [`questions`]: questions agents ask their users (`ask_user`), and the answers received.
//! - [`callbacks`]: HTTP status callbacks waiting for delivery.
//! - [`packed`]: a request's body as stored, compressed.

pub mod bridge;
pub mod callbacks;
pub mod conversations;
pub mod packed;
pub mod questions;

use crate::GenericClient;
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus, Source, TargetAgent};
use baton_domain::Language;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::decode::RowOf;
use crate::{sql, Result};

pub struct NewRequest<'a> {
    pub id: &'a str,
    pub body: &'a Value,
    pub source: Source,
    pub target_agent: TargetAgent,
    pub status: HandoffStatus,
    pub language: Language,
    pub reply_to: Option<&'a str>,
    pub reply_chat_id: Option<&'a str>,
    pub status_url: Option<&'a str>,
    /// The bridge that sent it, with `[[bridges]]` (its id is then `<bridge>:<own id>`).
    pub bridge: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub body: Value,
    pub source: Source,
    pub target_agent: TargetAgent,
    pub status: HandoffStatus,
    pub language: Language,
    pub reply_to: Option<String>,
    pub reply_chat_id: Option<String>,
    pub status_url: Option<String>,
    pub run_id: Option<Uuid>,
    pub deliveries: i32,
    pub reply_sent_at: Option<DateTime<Utc>>,
    /// The bridge that sent it, with `[[bridges]]`.
    pub bridge: Option<String>,
}

impl Request {
    /// The id its bridge knows it by: the one in every message to the bridge.
    pub fn wire_id(&self) -> &str {
        baton_domain::protocol::bridges::unqualified(self.bridge.as_deref(), &self.id)
    }
}

/// A stored handoff event.
#[derive(Debug, Clone)]
pub struct EventRow {
    /// The event's name as stored: a [`HandoffEvent`] this version may not
    /// know (an older or newer binary wrote it), so it stays a string.
    pub kind: String,
    pub status: Option<HandoffStatus>,
    pub message: Option<String>,
    pub at: DateTime<Utc>,
}

/// Inserts the request, or counts one more delivery of a request already
/// stored. Returns whether this delivery was the first.
pub async fn insert_or_count(c: &impl GenericClient, r: &NewRequest<'_>) -> Result<bool> {
    Ok(insert_or_count_reading(c, r).await?.0)
}

/// A cancel kept for a handoff and not applied yet: its id and reason.
pub type PendingCancel = Option<(String, Option<String>)>;

/// [`insert_or_count`], also returning the request as stored now and the
/// oldest cancel kept for it and not applied yet
/// ([`conversations::pending_cancel`]), read by the same statement. The
/// caller holds the handoff's lock ([`conversations::lock_handoff`]) since
/// an earlier statement, so this one sees every cancel committed before,
/// and no other stores the request meanwhile.
pub async fn insert_or_count_reading(
    c: &impl GenericClient,
    r: &NewRequest<'_>,
) -> Result<(bool, Request, PendingCancel)> {
    let args = InsertArgs::of(r)?;
    let params = args.params(r);
    let row = sql::query_one(c, INSERT_OR_COUNT, &params).await?;
    inserted(&row)
}

/// [`conversations::lock_handoff_reading_version`] and then
/// [`insert_or_count_reading`], two statements sent at once (one round
/// trip): for a caller that knows the request's body before it knows the
/// profiles' version, and does the transaction again should that version
/// filter the body otherwise. The insert still runs after the lock is
/// taken, so it reads every cancel committed before.
///
/// With `chat` (a conversation's key and the run the request would start),
/// a third statement goes out with them: [`conversations::start_new`],
/// whose answer (`Some(true)`: a new chat, now live with that run) is the
/// caller's to use only if the request was new and had no cancel waiting;
/// otherwise, if it made the chat, the caller rolls the transaction back.
pub async fn lock_then_insert_reading(
    c: &impl GenericClient,
    r: &NewRequest<'_>,
    chat: Option<(&str, Uuid)>,
) -> Result<(i64, (bool, Request, PendingCancel), Option<bool>)> {
    let args = InsertArgs::of(r)?;
    // All prepared first (from the cache after the first time), so the
    // statements below are sent on their first poll, in this order.
    let (lock, insert, start) = tokio::try_join!(
        c.prepare_cached(conversations::LOCK_READING_VERSION),
        c.prepare_cached(INSERT_OR_COUNT),
        c.prepare_cached(conversations::START_NEW)
    )?;
    let lock_params: sql::Params = &[&conversations::HANDOFF_LOCK, &r.id];
    let params = args.params(r);
    let started = async {
        match chat {
            Some((key, run)) => Ok(Some(c.query_opt(&start, &[&key, &run]).await?.is_some())),
            None => Ok::<_, tokio_postgres::Error>(None),
        }
    };
    // Errors in the order the statements ran: a later one fails only
    // because an earlier one aborted the transaction.
    let (locked, row, started) = tokio::join!(c.query_one(&lock, lock_params), c.query_one(&insert, &params), started);
    let (locked, row, started) = (locked?, row?, started?);
    Ok((locked.get(1), inserted(&row)?, started))
}

// A bridge's reply queue is kept the first time a stored request names it
// (`reply_queues`, V45: replaying a dead letter there checks it); a
// repeated delivery's own `reply_to` is not stored.
//
// The caller's lock keeps any other transaction from storing this request
// meanwhile, so a plain insert when the count finds no row does what
// `ON CONFLICT` did, without its speculative insert's confirmation record
// in the WAL.
const INSERT_OR_COUNT: &str = "WITH counted AS (
             UPDATE handoff_requests SET deliveries = deliveries + 1, updated_at = now() WHERE id = $1
             RETURNING id, body, source, target_agent, status, language, reply_to, reply_chat_id, run_id, deliveries,
                       reply_sent_at, status_url, bridge_id),
         stored AS (
             INSERT INTO handoff_requests (id, body, source, target_agent, status, language, reply_to, reply_chat_id,
                                           status_url, traceparent, tracestate, bridge_id)
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 WHERE NOT EXISTS (SELECT FROM counted)
             RETURNING id, body, source, target_agent, status, language, reply_to, reply_chat_id, run_id, deliveries,
                       reply_sent_at, status_url, bridge_id),
         i AS (SELECT * FROM counted UNION ALL SELECT * FROM stored),
         q AS (INSERT INTO reply_queues (queue) SELECT reply_to FROM i WHERE reply_to IS NOT NULL ON CONFLICT DO NOTHING)
         SELECT i.*, k.id, k.reason
           FROM i LEFT JOIN LATERAL (
                SELECT id, reason FROM bridge_cancels WHERE handoff_id = i.id AND applied_at IS NULL
                 ORDER BY received_at LIMIT 1) k ON true";

/// What [`INSERT_OR_COUNT`] stores besides the request's own fields: its
/// body packed, and the trace context of the span storing it (intake's, a
/// child of the bridge's `traceparent`).
struct InsertArgs {
    body: Vec<u8>,
    traceparent: Option<String>,
    tracestate: Option<String>,
    /// The source, target agent, status and language, as stored.
    texts: [&'static str; 4],
}

impl InsertArgs {
    fn of(r: &NewRequest<'_>) -> Result<Self> {
        let (traceparent, tracestate) = crate::outbox::current_trace().map_or((None, None), |(p, s)| (Some(p), s));
        let texts = [r.source.as_str(), r.target_agent.as_str(), r.status.as_str(), r.language.as_str()];
        Ok(Self { body: packed::pack(r.body)?, traceparent, tracestate, texts })
    }

    fn params<'a>(&'a self, r: &'a NewRequest<'_>) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 12] {
        [
            &r.id,
            &self.body,
            &self.texts[0],
            &self.texts[1],
            &self.texts[2],
            &self.texts[3],
            &r.reply_to,
            &r.reply_chat_id,
            &r.status_url,
            &self.traceparent,
            &self.tracestate,
            &r.bridge,
        ]
    }
}

/// The request [`INSERT_OR_COUNT`] read back, whether this delivery stored
/// it (its first), and a cancel that came before it.
fn inserted(row: &tokio_postgres::Row) -> Result<(bool, Request, PendingCancel)> {
    let stored = from_row(row)?;
    let cancel = row.get::<_, Option<String>>(13).map(|id| (id, row.get(14)));
    Ok((stored.deliveries == 1, stored, cancel))
}

pub(crate) const COLUMNS: &str =
    "id, body, source, target_agent, status, language, reply_to, reply_chat_id, run_id, deliveries, reply_sent_at, status_url, bridge_id";

fn from_row(r: &tokio_postgres::Row) -> Result<Request> {
    from_row_at(r, 0)
}

/// A request read from [`COLUMNS`], starting at column `from`.
pub(crate) fn from_row_at(r: &tokio_postgres::Row, from: usize) -> Result<Request> {
    let id: String = r.get(from);
    let at = RowOf { table: "handoff_requests", id: &id };
    Ok(Request {
        body: packed::unpack(&id, r.get(from + 1))?,
        source: at.wire(r, from + 2)?,
        target_agent: at.wire(r, from + 3)?,
        status: at.wire(r, from + 4)?,
        language: at.wire(r, from + 5)?,
        reply_to: r.get(from + 6),
        reply_chat_id: r.get(from + 7),
        run_id: r.get(from + 8),
        deliveries: r.get(from + 9),
        reply_sent_at: r.get(from + 10),
        status_url: r.get(from + 11),
        bridge: r.get(from + 12),
        id,
    })
}

/// The trace context the request was stored with (see V19), if any.
pub async fn trace(c: &impl GenericClient, id: &str) -> Result<Option<crate::outbox::Trace>> {
    let row = sql::query_opt(c, "SELECT traceparent, tracestate FROM handoff_requests WHERE id = $1", &[&id]).await?;
    Ok(row.and_then(|r| r.get::<_, Option<String>>(0).map(|p| (p, r.get(1)))))
}

/// The trace context of the request a run serves, if any.
pub async fn trace_of_run(c: &impl GenericClient, run_id: Uuid) -> Result<Option<crate::outbox::Trace>> {
    let sql = "SELECT r.traceparent, r.tracestate FROM handoff_requests r JOIN runs ON runs.handoff_id = r.id WHERE runs.id = $1";
    let row = sql::query_opt(c, sql, &[&run_id]).await?;
    Ok(row.and_then(|r| r.get::<_, Option<String>>(0).map(|p| (p, r.get(1)))))
}

pub async fn get(c: &impl GenericClient, id: &str) -> Result<Option<Request>> {
    let sql = format!("SELECT {COLUMNS} FROM handoff_requests WHERE id = $1");
    sql::query_opt(c, &sql, &[&id]).await?.as_ref().map(from_row).transpose()
}

/// Locks the request for this transaction (the collector's once-only reply).
pub async fn lock(c: &impl GenericClient, id: &str) -> Result<Option<Request>> {
    let sql = format!("SELECT {COLUMNS} FROM handoff_requests WHERE id = $1 FOR UPDATE");
    sql::query_opt(c, &sql, &[&id]).await?.as_ref().map(from_row).transpose()
}

/// Locks the request of a run (as [`lock`]), found through the run: one
/// statement that needs no read of the run first.
pub async fn lock_of_run(c: &impl GenericClient, run_id: Uuid) -> Result<Option<Request>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM handoff_requests WHERE id = (SELECT handoff_id FROM runs WHERE id = $1) FOR UPDATE"
    );
    sql::query_opt(c, &sql, &[&run_id]).await?.as_ref().map(from_row).transpose()
}

pub async fn link_run(c: &impl GenericClient, id: &str, run_id: Uuid) -> Result<()> {
    sql::execute(c, "UPDATE handoff_requests SET run_id = $2 WHERE id = $1", &[&id, &run_id]).await?;
    Ok(())
}

/// A handoff event as written: its kind, the status it records, a note.
pub type Said<'a> = (HandoffEvent, Option<HandoffStatus>, Option<&'a str>);

pub async fn add_event(
    c: &impl GenericClient,
    handoff_id: &str,
    kind: HandoffEvent,
    status: Option<HandoffStatus>,
    message: Option<&str>,
) -> Result<()> {
    add_events(c, handoff_id, &[(kind, status, message)]).await
}

/// Several handoff events, in the order given, as one `handoff_log` row
/// (V32) in one statement.
pub async fn add_events(c: &impl GenericClient, handoff_id: &str, events: &[Said<'_>]) -> Result<()> {
    for events in events.chunks(LOG_EVENTS) {
        let (kinds, statuses, messages) = log_columns(events);
        sql::execute(
            c,
            "INSERT INTO handoff_log (handoff_id, types, statuses, messages) VALUES ($1, $2, $3, $4)",
            &[&handoff_id, &kinds, &statuses, &messages],
        )
        .await?;
    }
    Ok(())
}

/// The most events one `handoff_log` row holds (V32; the CHECK that held it
/// there is dropped since V52, and this is what the store writes).
pub(crate) const LOG_EVENTS: usize = 4096;

/// One `handoff_log` row's arrays: each event's type, status and note.
pub(crate) fn log_columns<'a>(
    events: &[Said<'a>],
) -> (Vec<&'static str>, Vec<Option<&'static str>>, Vec<Option<&'a str>>) {
    let kinds = events.iter().map(|e| e.0.as_str()).collect();
    let statuses = events.iter().map(|e| e.1.map(HandoffStatus::as_str)).collect();
    let messages = events.iter().map(|e| e.2).collect();
    (kinds, statuses, messages)
}

/// A handoff's events, oldest first.
pub async fn events(c: &impl GenericClient, handoff_id: &str) -> Result<Vec<EventRow>> {
    let rows = sql::query(
        c,
        "SELECT type, status, message, created_at FROM handoff_events WHERE handoff_id = $1 ORDER BY id",
        &[&handoff_id],
    )
    .await?;
    let at = RowOf { table: "handoff_events of", id: &handoff_id };
    rows.iter()
        .map(|r| Ok(EventRow { kind: r.get(0), status: at.wire_opt(r, 1)?, message: r.get(2), at: r.get(3) }))
        .collect()
}

/// A stored draft becomes the request the bridge now sends as `requested`.
pub async fn promote_draft(c: &impl GenericClient, id: &str, body: &Value, status_url: Option<&str>) -> Result<()> {
    let body = packed::pack(body)?;
    sql::execute(
        c,
        "UPDATE handoff_requests SET body = $2, status = $4, status_url = $3, updated_at = now()
          WHERE id = $1 AND status = $5",
        &[&id, &body, &status_url, &HandoffStatus::Requested.as_str(), &HandoffStatus::Draft.as_str()],
    )
    .await?;
    Ok(())
}
