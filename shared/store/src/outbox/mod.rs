//! The transactional outbox: a message is a row committed with the change
//! that caused it; a publisher sends it and settles it after the confirm.
//!
//! A fleet message is an `outbox` row, deleted once confirmed. A message to
//! a bridge is a `bridge_messages` row, written once: pending until
//! confirmed, then marked sent and kept for operators. Both tables take
//! their ids from one sequence, so an id names one row in either. The
//! functions here that settle messages ([`settle`], [`give_back`],
//! [`retry_later`]) take each message's [`Key`]: a fleet row is found by its
//! id, a bridge message by its handoff and id in `bridge_messages_pending`
//! (the table has no primary key: every index without a predicate would
//! take a second entry at the row's one update, V41). A list of messages
//! is matched as "its handoff among these, its id among these", which finds
//! exactly those messages (an id is unique) through the index, rather
//! than as a join with the pairs, which Postgres may hash over a scan of
//! the table. A list of ids is read as `ARRAY(SELECT unnest($1))`:
//! Postgres then costs the statement alike for any list, so it keeps one
//! plan for it, where it would plan `= ANY($1)` afresh at every call (each
//! list's own plan looks cheaper than one plan for any).
//!
//! - [`after_commit`]: rows a role publishes itself right after the commit that wrote them.
//! - [`sent`]: what each bridge was sent, as operators read it.

pub mod after_commit;
pub mod sent;

use crate::GenericClient;
use baton_domain::fleet::FleetMessage;
use baton_domain::protocol::request::{HandoffEvent, Priority};
use baton_domain::run::journal::JournalEvent;
use serde_json::Value;

use crate::{sql, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// A logical fleet queue (`baton.invocations.handoff`), or a bridge's own
    /// queue when `external`.
    pub queue: String,
    pub external: bool,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    pub body: Value,
    /// Published `mandatory`: a message no queue takes comes back.
    pub mandatory: bool,
}

impl Message {
    /// An internal "look at this row now" message, on its fleet queue.
    pub fn fleet(m: &FleetMessage) -> Self {
        let queue = m.queue().as_str().to_string();
        Self { queue, external: false, message_id: None, correlation_id: None, body: m.body(), mandatory: false }
    }
}

/// Queues a fleet message (run this invocation, wake a parent, run finished)
/// in the caller's transaction. A run's invocation messages go to the
/// queue of the run's priority, read by the same statement (no round trip
/// of its own).
pub async fn enqueue_fleet(c: &impl GenericClient, m: &FleetMessage) -> Result<()> {
    enqueue_fleet_after(c, m, None).await
}

/// A statement to run first, as a CTE of the outbox row's own statement:
/// its SQL numbers its parameters from `$11`.
pub type Before<'a> = (&'a str, sql::Params<'a>);

/// [`enqueue_fleet`], with `before` (the write that causes the message: a
/// new invocation) in the same statement, so the row and its message cost
/// one statement, not two.
pub async fn enqueue_fleet_after(c: &impl GenericClient, m: &FleetMessage, before: Option<Before<'_>>) -> Result<()> {
    let Some(run_id) = m.prioritized_run() else {
        if let Some((write, params)) = before {
            sql::execute(c, &renumbered(write), params).await?;
        }
        return enqueue(c, &Message::fleet(m)).await;
    };
    let [high, normal, low] = [Priority::High, Priority::Normal, Priority::Low].map(|p| m.queue_at(p).as_str());
    let trace = current_trace();
    let (traceparent, tracestate) = trace.clone().map_or((None, None), |(p, s)| (Some(p), s));
    // Like `enqueue`: published by this process after the commit, the
    // relay's only after the grace.
    let grace = after_commit::grace().map(|g| g.as_secs_f64()).unwrap_or(0.0);
    let (high_p, low_p, body) = (Priority::High.as_str(), Priority::Low.as_str(), m.body());
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        vec![&high, &normal, &low, &body, &traceparent, &high_p, &low_p, &tracestate, &run_id, &grace];
    let insert = "INSERT INTO outbox (queue, external, body, mandatory, traceparent, tracestate, next_attempt_at)
         SELECT CASE r.priority WHEN $6 THEN $1 WHEN $7 THEN $3 ELSE $2 END, false, $4, false, $5, $8,
                now() + make_interval(secs => $10)
           FROM (SELECT $9::uuid AS id) k LEFT JOIN runs r ON r.id = k.id
         RETURNING id, queue";
    let statement = match before {
        Some((write, more)) => {
            params.extend_from_slice(more);
            format!("WITH before AS ({write}) {insert}")
        }
        None => insert.to_string(),
    };
    let queued = sql::query_one(c, &statement, &params).await?;
    if grace > 0.0 {
        let message = Message { queue: queued.get(1), ..Message::fleet(m) };
        after_commit::wrote(Row { id: queued.get(0), attempts: 0, message, trace, part: Part::ALONE, waits_for: None });
    }
    Ok(())
}

/// `before`'s SQL with its parameters numbered from `$1`, for a statement
/// of its own.
fn renumbered(write: &str) -> String {
    let mut out = String::with_capacity(write.len());
    let mut rest = write;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..].chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<usize>() {
            Ok(n) if n > 10 => out.push_str(&format!("${}", n - 10)),
            _ => out.push_str(&format!("${digits}")),
        }
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    out
}

/// A W3C trace context: `traceparent` and, if any, `tracestate`.
pub type Trace = (String, Option<String>);

static TRACE_SOURCE: std::sync::OnceLock<fn() -> Option<Trace>> = std::sync::OnceLock::new();

/// Where [`enqueue`] reads the trace context of the span writing a row (the
/// process's telemetry sets it once); without one, rows carry none.
pub fn set_trace_source(source: fn() -> Option<Trace>) {
    let _ = TRACE_SOURCE.set(source);
}

tokio::task_local! {
    static TRACE_OF: Trace;
}

/// Runs `work` with rows written in it carrying `trace` rather than the
/// current span's: a queued request that starts when another run ends
/// continues its own trace, not the ending run's.
pub async fn with_trace<F: std::future::Future>(trace: Option<Trace>, work: F) -> F::Output {
    match trace {
        Some(trace) => TRACE_OF.scope(trace, work).await,
        None => work.await,
    }
}

/// The trace context rows written now carry: [`with_trace`]'s, else the current span's.
pub fn current_trace() -> Option<Trace> {
    TRACE_OF.try_with(Clone::clone).ok().or_else(|| TRACE_SOURCE.get().and_then(|source| source()))
}

pub async fn enqueue(c: &impl GenericClient, m: &Message) -> Result<()> {
    let trace = current_trace();
    let (traceparent, tracestate) = trace.clone().map_or((None, None), |(p, s)| (Some(p), s));
    // Published by this process right after the commit (see `after_commit`):
    // the row is the relay's only after the grace, and wakes no relay.
    let grace = after_commit::grace().map(|g| g.as_secs_f64()).unwrap_or(0.0);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
        &m.queue,
        &m.external,
        &m.message_id,
        &m.correlation_id,
        &m.body,
        &m.mandatory,
        &traceparent,
        &tracestate,
        &grace,
    ];
    // A bridge's message (it carries its handoff id) is written once, where
    // operators read it, pending until it is sent.
    let statement = match m.correlation_id {
        Some(_) => {
            "INSERT INTO bridge_messages (queue, external, message_id, handoff_id, body, mandatory, traceparent, tracestate, next_attempt_at, pending)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9), true) RETURNING id"
        }
        None => {
            "INSERT INTO outbox (queue, external, message_id, correlation_id, body, mandatory, traceparent, tracestate, next_attempt_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9)) RETURNING id"
        }
    };
    let queued = sql::query_one(c, statement, &params).await?;
    if grace > 0.0 {
        after_commit::wrote(Row {
            id: queued.get(0),
            attempts: 0,
            message: m.clone(),
            trace,
            part: Part::ALONE,
            waits_for: None,
        });
    }
    Ok(())
}

/// A message taken for publishing, with how often the broker refused its
/// row so far.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub id: i64,
    pub attempts: i32,
    pub message: Message,
    /// The trace context of the span that wrote the row.
    pub trace: Option<Trace>,
    /// Its place among its row's messages (a `bridge_messages` row holds
    /// every message one statement wrote for a request, V46): published in
    /// order, each once the one before it was confirmed; the row is settled
    /// once its last one is.
    pub part: Part,
    /// Of a bridge message row's first message, when its writer could tell:
    /// the earlier messages of its handoff still pending as it was written
    /// (none: it may go at once), so the publisher need not ask.
    pub waits_for: Option<Vec<i64>>,
}

/// A message's place in its row: `index` of `of` (0 of 1 for a row of one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Part {
    pub index: u8,
    pub of: u8,
}

impl Part {
    pub const ALONE: Part = Part { index: 0, of: 1 };

    /// The last message of its row: confirmed, the row is sent.
    pub fn is_last(self) -> bool {
        self.index + 1 >= self.of
    }
}

/// A row's messages as [`Row`]s, in the order they are published, but for
/// the first `sent` (those that left before the row was refused half-way).
pub fn parts(id: i64, attempts: i32, trace: Option<Trace>, messages: Vec<Message>, sent: u8) -> Vec<Row> {
    let of = u8::try_from(messages.len()).unwrap_or(u8::MAX);
    messages
        .into_iter()
        .zip(0..)
        .filter(|(_, index)| *index >= sent)
        .map(|(message, index)| Row {
            id,
            attempts,
            message,
            trace: trace.clone(),
            part: Part { index, of },
            waits_for: None,
        })
        .collect()
}

/// Which message to settle: its id, and for a message to a bridge its
/// handoff (the key it is found by, V41).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub id: i64,
    pub handoff: Option<String>,
}

impl Row {
    pub fn key(&self) -> Key {
        Key { id: self.id, handoff: self.message.correlation_id.clone() }
    }
}

/// The keys as statement parameters: fleet ids, then each bridge message's
/// handoff and id.
fn split(keys: &[Key]) -> (Vec<i64>, Vec<&str>, Vec<i64>) {
    let (mut fleet, mut handoffs, mut ids) = (vec![], vec![], vec![]);
    for key in keys {
        match &key.handoff {
            Some(handoff) => {
                handoffs.push(handoff.as_str());
                ids.push(key.id);
            }
            None => fleet.push(key.id),
        }
    }
    (fleet, handoffs, ids)
}

/// Takes the oldest rows that are due, locked for this transaction (the
/// caller deletes or reschedules each, then commits; rolling back puts them
/// back), each of its messages a [`Row`] in order. Concurrent relays skip
/// each other's rows.
///
/// Of one handoff's rows only the oldest is taken, and only once no
/// earlier one is left (waiting for a retry, or in another relay's batch):
/// the broker settles each message on its own, so a later message sent
/// beside an earlier one could be taken while the earlier one is nacked, and
/// a bridge would hear a reply before the status that came first. For the
/// same reason the caller publishes a row's messages one after another,
/// each once the one before it was confirmed.
pub async fn take_batch(c: &impl GenericClient, limit: i64) -> Result<Vec<Row>> {
    let fleet = sql::query(
        c,
        "SELECT id, queue, external, message_id, correlation_id, body, mandatory, attempts, traceparent, tracestate FROM outbox o
          WHERE next_attempt_at <= now()
            AND NOT EXISTS (SELECT 1 FROM outbox w WHERE w.correlation_id = o.correlation_id AND w.id < o.id)
          ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
        &[&limit],
    )
    .await?;
    // A status is rendered from its row and its request's (V43), and so is
    // what a reply leaves out (`sent::Reply`).
    let bridge = sql::query(
        c,
        "SELECT b.id, b.queue, b.external, b.mandatory, b.attempts, b.traceparent, b.tracestate, b.message_id,
                b.handoff_id, b.body, b.status, b.seq, b.created_at, h.bridge_id, h.reply_chat_id, b.then_status,
                h.language, b.sent_parts
           FROM bridge_messages b LEFT JOIN handoff_requests h ON b.status IS NOT NULL AND h.id = b.handoff_id
          WHERE b.pending AND b.next_attempt_at <= now()
            AND NOT EXISTS (SELECT 1 FROM bridge_messages w WHERE w.pending AND w.handoff_id = b.handoff_id AND w.id < b.id)
          ORDER BY b.id LIMIT $1 FOR UPDATE OF b SKIP LOCKED",
        &[&limit],
    )
    .await?;
    let mut rows: Vec<Row> = fleet
        .iter()
        .map(|r| Row {
            id: r.get(0),
            message: Message {
                queue: r.get(1),
                external: r.get(2),
                message_id: r.get(3),
                correlation_id: r.get(4),
                body: r.get(5),
                mandatory: r.get(6),
            },
            attempts: r.get(7),
            trace: r.get::<_, Option<String>>(8).map(|p| (p, r.get(9))),
            part: Part::ALONE,
            waits_for: None,
        })
        .collect();
    for r in &bridge {
        let rendered = match sent::rendered(r, 7) {
            Ok(rendered) => rendered,
            Err(e) => {
                put_aside(c, r, &e).await?;
                continue;
            }
        };
        let messages = rendered.into_iter().map(|(message_id, body)| Message {
            queue: r.get(1),
            external: r.get(2),
            message_id,
            correlation_id: r.get(8),
            body,
            mandatory: r.get(3),
        });
        let trace = r.get::<_, Option<String>>(5).map(|p| (p, r.get(6)));
        let sent = r.get::<_, Option<i16>>(17).map_or(0, |n| u8::try_from(n).unwrap_or(0));
        rows.extend(parts(r.get(0), r.get(4), trace, messages.collect(), sent));
    }
    rows.sort_by_key(|r| (r.id, r.part.index));
    Ok(rows)
}

/// A bridge message the relay cannot read (a status a newer version wrote,
/// say) waits, with the reason as its last error, rather than failing the
/// batch and holding up every other message: it stays in the backlog and
/// on its run's page, and is read again after an hour, or sooner the
/// first times.
async fn put_aside(c: &impl GenericClient, r: &tokio_postgres::Row, e: &crate::Error) -> Result<()> {
    let key = Key { id: r.get(0), handoff: Some(r.get(8)) };
    let attempts: i32 = r.get(4);
    let delay = std::time::Duration::from_secs(60 << attempts.clamp(0, 6));
    tracing::error!(handoff = key.handoff.as_deref(), id = key.id, error = %e, "a bridge message cannot be read; it waits");
    retry_later(c, &key, 0, delay, &format!("this version cannot read it: {e}")).await
}

/// Settles rows the broker took (or that were moved aside): a fleet
/// message's row is deleted, a bridge message's row is marked sent. A row
/// of several messages is the caller's to settle only once its last one is
/// confirmed ([`Part::is_last`]).
pub async fn settle(c: &impl GenericClient, keys: &[Key]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let (fleet, handoffs, ids) = split(keys);
    sql::execute(
        c,
        "WITH fleet AS (DELETE FROM outbox WHERE id = ANY(ARRAY(SELECT unnest($1::int8[]))))
         UPDATE bridge_messages SET pending = false
          WHERE pending AND handoff_id = ANY(ARRAY(SELECT unnest($2::text[]))) AND id = ANY(ARRAY(SELECT unnest($3::int8[])))",
        &[&fleet, &handoffs, &ids],
    )
    .await?;
    Ok(())
}

/// Of the bridge messages this process wrote and wants to publish itself,
/// those it may publish now (their ids): the oldest left pending of their
/// handoff (as [`take_batch`] decides), counting as sent those of `sent`
/// (confirmed by the broker, not yet marked). Nothing is locked: the relay
/// takes a message only once its grace has passed, by when its writer has
/// published it or is gone, and a message published by both is a duplicate
/// a bridge already expects (its `message_id` is the same).
///
/// The statement returns each message's earlier pending ones (a subquery
/// per message, which Postgres runs as an index lookup of its handoff) and
/// this function leaves out those of `sent`: as a condition in the
/// statement, Postgres could plan it as an anti-join over every pending
/// message, comparing each with every id of `sent`.
pub async fn ready_to_send(c: &impl GenericClient, keys: &[Key], sent: &[Key]) -> Result<Vec<i64>> {
    let (_, handoffs, ids) = split(keys);
    let rows = sql::query(
        c,
        "SELECT id, ARRAY(SELECT w.id FROM bridge_messages w WHERE w.pending AND w.handoff_id = b.handoff_id AND w.id < b.id)
           FROM bridge_messages b
          WHERE pending AND handoff_id = ANY(ARRAY(SELECT unnest($1::text[]))) AND id = ANY(ARRAY(SELECT unnest($2::int8[])))
          ORDER BY id",
        &[&handoffs, &ids],
    )
    .await?;
    let sent = |id: &i64| sent.iter().any(|k| k.id == *id);
    Ok(rows.iter().filter(|r| r.get::<_, Vec<i64>>(1).iter().all(sent)).map(|r| r.get(0)).collect())
}

/// Hands rows this process could not publish to the relay now (a nack, a
/// body to cut, a broken channel), and wakes it.
pub async fn give_back(c: &impl GenericClient, keys: &[Key]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let (fleet, handoffs, ids) = split(keys);
    sql::execute(
        c,
        "WITH fleet AS (UPDATE outbox SET next_attempt_at = now() WHERE id = ANY(ARRAY(SELECT unnest($1::int8[]))))
         UPDATE bridge_messages SET next_attempt_at = now()
          WHERE pending AND handoff_id = ANY(ARRAY(SELECT unnest($2::text[]))) AND id = ANY(ARRAY(SELECT unnest($3::int8[])))",
        &[&fleet, &handoffs, &ids],
    )
    .await?;
    sql::execute(c, "SELECT pg_notify('baton_outbox', '')", &[]).await?;
    Ok(())
}

/// [`give_back`] for a bridge message row refused at its message `from`
/// (those before it left): the relay publishes it from there.
pub async fn give_back_from(c: &impl GenericClient, key: &Key, from: u8) -> Result<()> {
    let Some(handoff) = &key.handoff else {
        return give_back(c, std::slice::from_ref(key)).await;
    };
    sql::execute(
        c,
        "UPDATE bridge_messages SET next_attempt_at = now(), sent_parts = $3::int2
          WHERE pending AND handoff_id = $1 AND id = $2",
        &[handoff, &key.id, &i16::from(from)],
    )
    .await?;
    sql::execute(c, "SELECT pg_notify('baton_outbox', '')", &[]).await?;
    Ok(())
}

/// Keeps a row the broker refused for now, to try again after `delay`; of
/// a bridge message row, from its message `from` on (those before it left).
pub async fn retry_later(
    c: &impl GenericClient,
    key: &Key,
    from: u8,
    delay: std::time::Duration,
    error: &str,
) -> Result<()> {
    let secs = delay.as_secs_f64();
    match &key.handoff {
        None => {
            let update =
                "UPDATE outbox SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2),
                                 last_error = $3
                           WHERE id = $1";
            sql::execute(c, update, &[&key.id, &secs, &error]).await?;
        }
        Some(handoff) => {
            let update = "UPDATE bridge_messages SET attempts = attempts + 1, next_attempt_at = now() + make_interval(secs => $2),
                                 last_error = $3, sent_parts = CASE WHEN $5::int2 > 0 THEN $5::int2 ELSE sent_parts END
                           WHERE pending AND handoff_id = $4 AND id = $1";
            sql::execute(c, update, &[&key.id, &secs, &error, handoff, &i16::from(from)]).await?;
        }
    }
    Ok(())
}

/// A handoff event about one of its messages (delayed, cut, dead-lettered),
/// written only if the handoff is known: a row may name any correlation id.
pub async fn note_for_request(
    c: &impl GenericClient,
    handoff_id: &str,
    kind: HandoffEvent,
    message: &str,
) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO handoff_log (handoff_id, types, statuses, messages)
         SELECT id, ARRAY[$2::text], ARRAY[NULL::text], ARRAY[$3::text] FROM handoff_requests WHERE id = $1",
        &[&handoff_id, &kind.as_str(), &message],
    )
    .await?;
    Ok(())
}

/// A journal event about one of a run's messages, written only if the run exists.
pub async fn note_for_run(
    c: &impl GenericClient,
    run_id: uuid::Uuid,
    kind: JournalEvent,
    payload: &Value,
) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO journal (run_id, invocations, types, payloads)
         SELECT id, ARRAY[NULL::uuid], ARRAY[$2::text]::journal_event[], json_build_array($3::jsonb) FROM runs WHERE id = $1",
        &[&run_id, &kind.as_str(), &payload],
    )
    .await?;
    Ok(())
}

pub async fn pending(c: &impl GenericClient) -> Result<i64> {
    Ok(sql::query_one(c, "SELECT count(*) FROM unsent_messages", &[]).await?.get(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_row_s_messages_are_numbered_in_order_and_only_its_last_settles_it() {
        let message = |n: i32| super::Message {
            queue: "q".into(),
            external: true,
            message_id: Some(format!("m{n}")),
            correlation_id: Some("h".into()),
            body: serde_json::json!({ "n": n }),
            mandatory: true,
        };
        let rows = super::parts(7, 2, None, vec![message(1), message(2)], 0);
        let places: Vec<(i64, i32, u8, u8, bool)> =
            rows.iter().map(|r| (r.id, r.attempts, r.part.index, r.part.of, r.part.is_last())).collect();
        assert_eq!(places, [(7, 2, 0, 2, false), (7, 2, 1, 2, true)]);
        assert_eq!(rows[1].message.body["n"], 2);
        assert!(super::Part::ALONE.is_last());
        let rest = super::parts(7, 2, None, vec![message(1), message(2)], 1);
        assert_eq!(
            rest.iter().map(|r| (r.part.index, r.message.body["n"].as_i64())).collect::<Vec<_>>(),
            [(1, Some(2))]
        );
    }

    #[test]
    fn a_write_before_is_renumbered_from_one_for_a_statement_of_its_own() {
        assert_eq!(super::renumbered("INSERT INTO t VALUES ($11, $12, $20)"), "INSERT INTO t VALUES ($1, $2, $10)");
    }
}
