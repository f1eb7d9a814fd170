//! The relay: publishes outbox rows with publisher confirms, woken by
//! LISTEN/NOTIFY with a poll as a safety net, and re-publishes invocations
//! whose worker died (lease expired) or whose message was lost. Rows a role
//! publishes itself right after its commit (`crate::roles::publish_after_commit`) become due here
//! only after their grace: the relay is their safety net.
//!
//! No row holds up the others: each row's fate is settled on its own. A body
//! over `BATON_MAX_MESSAGE_BYTES` is cut (a bridge message) or moved aside
//! (anything else) before the broker sees it; a nack keeps the row for a
//! retry with backoff; a returned message, or one the broker closes the
//! channel over, is dead-lettered with its reason and its run or handoff is
//! told. Rows caught in a channel that another row broke are tried again
//! one by one on a fresh channel, so the culprit is found and only it fails.

pub mod callbacks;

use std::sync::Arc;

use baton_bus::{Connection, Outgoing, Publisher, Settled};
use baton_domain::fleet::{FleetMessage, Queue};
use baton_domain::protocol::outgoing as bound;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_store::outbox::{self, Message, Row};
use baton_store::tokio_postgres::{self, AsyncMessage};
use baton_store::{begin, client as db, commit};
use baton_store::{invocations, GenericClient, Pool};
use futures_lite::StreamExt;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::outbox_message::{outgoing, prepare, Prepared};
use crate::roles::{connect, Role};

const BATCH: i64 = 256;
/// Batches published in a row before the relay looks at its timers.
const ROUNDS: usize = 64;
/// The largest dead-letter body: see [`Relay::dead_letter`].
const DEAD_LETTER_MAX_BYTES: usize = 1024 * 1024;
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The relay's sessions: its outbox transaction stays open while the broker
/// confirms (up to [`CONFIRM_TIMEOUT`] for each of a batch's waves, one per
/// message a row holds, three at most), so it may sit idle in that
/// transaction longer than other roles' do.
pub(crate) fn session(settings: &Settings) -> baton_store::SessionConfig {
    let mut session = settings.db_session_of(Role::Relay.name());
    let floor = CONFIRM_TIMEOUT * 3 + std::time::Duration::from_secs(10);
    session.idle_in_transaction_timeout =
        session.idle_in_transaction_timeout.map(|t| if t.is_zero() { t } else { t.max(floor) });
    session
}

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Relay).await?;
    let publisher = conn.publisher().await?;
    let wake = Arc::new(Notify::new());
    let (_listening, listener) = listen(settings, wake.clone()).await?;
    // Expired leases are swept only a lease after this attempt connected:
    // after an outage (which restarted this role) every live worker renews
    // within that, so a lease that lapsed only because the database was away
    // is not taken for an abandoned one. A relay that just started waits the same.
    let leases_from = tokio::time::Instant::now() + settings.lease;
    let mut relay = Relay { pool, conn, publisher, settings: settings.clone(), leases_from };
    tracing::info!("relay publishing");
    let callbacks_stop = shutdown.child_token();
    let callbacks = tokio::spawn(callbacks::deliver(relay.pool.clone(), settings.relay_poll, callbacks_stop.clone()));
    let result = relay.serve(&wake, &listener, shutdown).await;
    callbacks_stop.cancel();
    let _ = callbacks.await;
    relay.publisher.close().await;
    result
}

/// Opens a dedicated connection that LISTENs on the outbox channel. The
/// returned token is cancelled when that connection dies (keepalives notice a
/// vanished server); keep the client alive as long as notifications are wanted.
async fn listen(settings: &Settings, wake: Arc<Notify>) -> anyhow::Result<(tokio_postgres::Client, CancellationToken)> {
    let session = settings.db_session_of("relay-listen");
    let (client, mut connection) = baton_store::connect::connect(&settings.database_url, &session).await?;
    let dead = CancellationToken::new();
    let guard = dead.clone();
    tokio::spawn(async move {
        let mut messages = futures_lite::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => wake.notify_one(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        guard.cancel();
    });
    client.batch_execute("LISTEN baton_outbox").await.map_err(baton_store::Error::from)?;
    Ok((client, dead))
}

struct Relay {
    pool: Pool,
    conn: Connection,
    publisher: Publisher,
    settings: Settings,
    /// When the sweep starts taking stalled invocations (see `run`).
    leases_from: tokio::time::Instant,
}

/// What became of one row this round.
#[derive(Debug, Clone, PartialEq)]
enum Fate {
    Sent,
    /// Refused for now (a nack): kept, tried again after a backoff.
    Retry(String),
    /// Never publishable: dead-lettered with this reason, its run told.
    Dead(String),
    /// Unknown: its channel broke, maybe over another row. Tried alone.
    Unsure(String),
}

impl Relay {
    async fn serve(
        &mut self,
        wake: &Notify,
        listener: &CancellationToken,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        let mut sweep = tokio::time::interval(self.settings.relay_poll);
        loop {
            // Until nothing is due (a handoff's next message becomes due only
            // when the one before it has left the outbox: see `take_batch`),
            // within a bound, so that a steady stream of rows still leaves the
            // sweep and a shutdown their turn.
            for _ in 0..ROUNDS {
                if self.publish_batch().await? == 0 || shutdown.is_cancelled() {
                    break;
                }
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = sweep.tick() => self.sweep_stalled().await?,
                _ = listener.cancelled() => anyhow::bail!("lost the LISTEN connection to PostgreSQL"),
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
    }

    /// Publishes up to one batch of due rows. The rows stay locked until
    /// every row's fate is recorded (deleted, rescheduled, dead-lettered)
    /// and committed: a crash re-publishes, never drops. A row leaves the
    /// outbox once each of its messages did (sent or dead-lettered); the
    /// first that did not keeps it, and the messages after it wait.
    pub async fn publish_batch(&mut self) -> anyhow::Result<usize> {
        let mut client = db(&self.pool).await?;
        let tx = begin(&mut client).await?;
        let rows = outbox::take_batch(&tx, BATCH).await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let prepared = rows
            .iter()
            .map(|r| prepare(&self.settings, &r.message).map(|p| p.traced(r)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let started = std::time::Instant::now();
        let fates = self.publish_in_order(&rows, &prepared).await?;
        crate::metrics::relay_published(started.elapsed());
        let (mut done, mut kept) = (vec![], vec![]);
        for ((row, prepared), fate) in rows.iter().zip(&prepared).zip(fates) {
            // Not published: an earlier message of its row was kept.
            let Some(fate) = fate else { continue };
            if !self.record(&tx, row, prepared, fate).await? {
                kept.push(row.id);
            } else if row.part.is_last() && !kept.contains(&row.id) {
                done.push(row.key());
            }
        }
        outbox::settle(&tx, &done).await?;
        commit(tx).await?;
        Ok(rows.len())
    }

    /// Publishes the rows' messages in waves: every row's first message
    /// together, then every row's second once its first left (sent or
    /// dead-lettered), and so on, so a bridge never hears a message before
    /// the one its row holds before it. The fate of each message, `None`
    /// for one not published. Messages caught in a channel that another
    /// broke are tried again one by one on a fresh channel.
    async fn publish_in_order(&mut self, rows: &[Row], prepared: &[Prepared]) -> anyhow::Result<Vec<Option<Fate>>> {
        let mut fates: Vec<Option<Fate>> = vec![None; rows.len()];
        loop {
            // `take_batch` keeps a row's messages together, in order (from the
            // first not sent yet): a message is due once the one before it left.
            let due: Vec<usize> = (0..rows.len())
                .filter(|&n| {
                    let first = n == 0 || rows[n - 1].id != rows[n].id;
                    fates[n].is_none() && (first || matches!(fates[n - 1], Some(Fate::Sent | Fate::Dead(_))))
                })
                .collect();
            if due.is_empty() {
                break;
            }
            let mut wave_fates = self.publish_together(rows, prepared, &due).await?;
            if wave_fates.iter().any(|f| matches!(f, Fate::Unsure(_))) {
                tracing::warn!("the channel broke during a batch; trying its unconfirmed rows one by one");
                self.reopen().await?;
                for (n, fate) in due.iter().zip(wave_fates.iter_mut()) {
                    if matches!(fate, Fate::Unsure(_)) {
                        *fate = self.publish_alone(&rows[*n].message, &prepared[*n]).await?;
                    }
                }
            }
            for (n, fate) in due.into_iter().zip(wave_fates) {
                fates[n] = Some(fate);
            }
        }
        Ok(fates)
    }

    /// Sends the `due` rows, then waits for their confirms.
    async fn publish_together(&self, rows: &[Row], prepared: &[Prepared], due: &[usize]) -> anyhow::Result<Vec<Fate>> {
        let mut sent = Vec::with_capacity(due.len());
        for &n in due {
            let (row, p) = (&rows[n], &prepared[n]);
            sent.push(match &p.refused {
                Some(reason) => Err(Fate::Dead(reason.clone())),
                None => self.publisher.send(&outgoing(&row.message, p)).await.map_err(|e| Fate::Unsure(e.to_string())),
            });
        }
        let deadline = tokio::time::Instant::now() + CONFIRM_TIMEOUT;
        let mut fates = Vec::with_capacity(due.len());
        for attempt in sent {
            fates.push(match attempt {
                Err(fate) => fate,
                Ok(pending) => match tokio::time::timeout_at(deadline, pending.settled()).await {
                    Err(_) => anyhow::bail!("the broker did not confirm within {CONFIRM_TIMEOUT:?}"),
                    Ok(Ok(confirmed)) => settled(confirmed),
                    Ok(Err(e)) => Fate::Unsure(e.to_string()),
                },
            });
        }
        Ok(fates)
    }

    /// Publishes one row on its own: a channel error now is about this row.
    async fn publish_alone(&mut self, m: &Message, p: &Prepared) -> anyhow::Result<Fate> {
        let pending = match self.publisher.send(&outgoing(m, p)).await {
            Ok(pending) => pending,
            Err(e) => return self.failed_alone(e).await,
        };
        match tokio::time::timeout(CONFIRM_TIMEOUT, pending.settled()).await {
            Err(_) => anyhow::bail!("the broker did not confirm within {CONFIRM_TIMEOUT:?}"),
            Ok(Ok(confirmed)) => Ok(settled(confirmed)),
            Ok(Err(e)) => self.failed_alone(e).await,
        }
    }

    /// A lone publish failed. A lost connection is everyone's problem: the
    /// role reconnects and the batch is tried again. A channel the broker
    /// closed over this message means it will never take it.
    async fn failed_alone(&mut self, e: baton_bus::Error) -> anyhow::Result<Fate> {
        if !self.conn.is_connected() {
            return Err(e.into());
        }
        self.reopen().await?;
        Ok(match e.refusal() {
            Some(reason) => Fate::Dead(reason),
            None => Fate::Retry(e.to_string()),
        })
    }

    async fn reopen(&mut self) -> anyhow::Result<()> {
        self.publisher.close().await;
        self.publisher = self.conn.publisher().await?;
        Ok(())
    }

    /// Carries out a row's fate in the batch's transaction; `true` when the
    /// row leaves the outbox.
    async fn record(&mut self, tx: &impl GenericClient, row: &Row, p: &Prepared, fate: Fate) -> anyhow::Result<bool> {
        let m = &row.message;
        match fate {
            Fate::Sent => {
                crate::metrics::bridge_message_sent(&m.body);
                if let (Some(size), Some(handoff)) = (p.cut_from, &m.correlation_id) {
                    let what = m.body["type"].as_str().unwrap_or("message");
                    let note = format!(
                        "the {what} was {size} bytes, over the limit of {} bytes: its text was cut (the full result is kept)",
                        self.settings.max_message_bytes
                    );
                    tracing::warn!(handoff = %handoff, size, "bridge message over the bound; sent cut");
                    outbox::note_for_request(tx, handoff, HandoffEvent::MessageCut, &note).await?;
                }
                Ok(true)
            }
            Fate::Retry(reason) | Fate::Unsure(reason) => {
                let attempt = u32::try_from(row.attempts).unwrap_or(0).saturating_add(1);
                let delay = bound::backoff(attempt, self.settings.relay_poll, self.settings.outbox_retry_max());
                tracing::warn!(queue = %p.queue, attempt, ?delay, reason, "the broker refused a message for now; retrying later");
                outbox::retry_later(tx, &row.key(), row.part.index, delay, &reason).await?;
                if let (1, Some(handoff)) = (attempt, &m.correlation_id) {
                    let note = format!("delivery delayed, retrying: {reason}");
                    outbox::note_for_request(tx, handoff, HandoffEvent::DeliveryDelayed, &note).await?;
                }
                Ok(false)
            }
            Fate::Dead(reason) => {
                self.dead_letter(m, p, &reason).await?;
                self.tell(tx, m, &p.queue, &reason).await?;
                Ok(true)
            }
        }
    }

    /// Moves a row aside to `baton.dead`, its body cut to the bound if need be.
    async fn dead_letter(&mut self, m: &Message, p: &Prepared, reason: &str) -> anyhow::Result<()> {
        tracing::warn!(queue = %p.queue, reason, "message cannot be published; dead-lettering it");
        baton_bus::metrics::dead_lettered(&p.queue, "unpublishable");
        let dead = self.settings.queues().name(Queue::Dead);
        // A dead letter is for an operator to read: a reason and enough of
        // the body to recognise it (the rest is in Postgres). Kept well under
        // any broker limit, with room for the headers, so that moving a row
        // aside can never fail the way the row did.
        let max = self.settings.max_message_bytes.min(DEAD_LETTER_MAX_BYTES).saturating_sub(4096);
        let cut = if p.body.len() > max {
            // Cut from the row itself (what was sent may be a cut version already).
            let original = p.cut_from.unwrap_or(p.body.len());
            let cut = bound::fit_sized(&m.body, original, max, bound::language_of(&m.body));
            Some(serde_json::to_vec(cut.as_ref().unwrap_or(&m.body))?)
        } else {
            None
        };
        let mut headers = vec![("x-baton-error", reason.to_string()), ("x-baton-source-queue", p.queue.clone())];
        if cut.is_some() || p.cut_from.is_some() {
            headers.push(("x-baton-truncated", "true".to_string()));
        }
        // What identifies the row's whole body, whatever is kept of it.
        let whole = match p.cut_from {
            Some(_) => baton_bus::dead::original_body(&serde_json::to_vec(&m.body)?),
            None => baton_bus::dead::original_body(&p.body),
        };
        headers.extend(whole);
        headers.push(baton_bus::dead::dead_at_now());
        let mut out = Outgoing {
            queue: &dead,
            body: cut.as_deref().unwrap_or(&p.body),
            message_id: m.message_id.as_deref(),
            correlation_id: m.correlation_id.as_deref(),
            headers,
            ..Default::default()
        };
        let refused = match self.publisher.publish(&out).await {
            Ok(_) => return Ok(()),
            Err(e) => match e.refusal().filter(|_| self.conn.is_connected()) {
                Some(refused) => refused,
                None => return Err(e.into()),
            },
        };
        // The broker refused even the cut copy (its `max_message_size` is
        // below this bound): the reason and the ids alone, or the row would
        // fail its batch again and again, and every row behind it with it.
        tracing::warn!(refused, "the dead letter itself was refused; sending its reason without the body");
        self.reopen().await?;
        out.body = b"{}";
        out.headers.push(("x-baton-body-dropped", refused));
        self.publisher.publish(&out).await?;
        Ok(())
    }

    /// Leaves a trace where an operator looks: the handoff's events for a
    /// bridge message, the run's journal for a fleet message.
    async fn tell(&self, tx: &impl GenericClient, m: &Message, queue: &str, reason: &str) -> anyhow::Result<()> {
        if let Some(handoff) = &m.correlation_id {
            let what = m.body["type"].as_str().unwrap_or("message");
            let note = format!("the {what} could not be delivered to {queue} and was dead-lettered: {reason}");
            outbox::note_for_request(tx, handoff, HandoffEvent::DeliveryFailed, &note).await?;
        }
        if let Some(run_id) = m.body["runId"].as_str().and_then(|id| id.parse().ok()) {
            let payload = json!({"queue": m.queue, "messageId": m.message_id, "reason": reason});
            outbox::note_for_run(tx, run_id, JournalEvent::MessageDeadLettered, &payload).await?;
        }
        Ok(())
    }

    /// Re-publishes stalled invocations through the outbox (the next batch
    /// sends them); whoever claims one bumps its epoch and fences the old
    /// worker. Also wakes parked parents whose wait timed out. Each row is
    /// re-published on its own backoff, and a queue that still holds ready
    /// messages gets no more copies until the cap: a backlog is not a loss.
    async fn sweep_stalled(&mut self) -> anyhow::Result<()> {
        let pace = invocations::Pace {
            grace: self.settings.unclaimed_grace,
            lease: self.settings.lease,
            cap: self.settings.republish_max,
            handoff_backlog: self.has_any_backlog(false).await,
            delegate_backlog: self.has_any_backlog(true).await,
        };
        let finished_backlog = self.has_backlog(Queue::RunsFinished).await;
        let mut client = db(&self.pool).await?;
        let tx = begin(&mut client).await?;
        let stalled = match tokio::time::Instant::now() >= self.leases_from {
            true => invocations::take_stalled(&tx, &pace).await?,
            false => vec![],
        };
        for (id, run_id, kind) in stalled {
            tracing::info!(invocation = %id, "re-publishing stalled invocation");
            requeue(&tx, run_id, &FleetMessage::run(run_id, id, kind)).await?;
        }
        // Parked parents whose wait timed out: wake them to read what is done.
        for (id, run_id) in invocations::wake_timed_out(&tx).await? {
            requeue(&tx, run_id, &FleetMessage::wake(run_id, id)).await?;
        }
        // Ended runs whose reply was never written: tell the collector again.
        let unreplied = baton_store::runs::unreplied(
            &tx,
            self.settings.unclaimed_grace,
            self.settings.republish_max,
            finished_backlog,
        );
        for run_id in unreplied.await? {
            tracing::info!(run = %run_id, "re-publishing an unreplied finished run");
            requeue(&tx, run_id, &FleetMessage::finished(run_id)).await?;
        }
        commit(tx).await?;
        Ok(())
    }

    /// Whether any of one kind's invocation queues (one per priority) holds
    /// messages no consumer has taken yet.
    async fn has_any_backlog(&mut self, delegate: bool) -> bool {
        for priority in baton_domain::protocol::request::Priority::ALL {
            if self.has_backlog(Queue::invocations(delegate, priority)).await {
                return true;
            }
        }
        false
    }

    /// Whether a fleet queue holds messages no consumer has taken yet. When
    /// the broker cannot say, the sweep assumes not (and re-publishes).
    async fn has_backlog(&mut self, logical: Queue) -> bool {
        match self.publisher.ready_count(&self.settings.queues().name(logical)).await {
            Ok(ready) => ready > 0,
            Err(e) => {
                tracing::warn!(queue = %logical, error = %e, "could not read a queue's depth");
                let _ = self.reopen().await;
                false
            }
        }
    }
}

fn settled(settled: Settled) -> Fate {
    match settled {
        Settled::Confirmed => Fate::Sent,
        Settled::Returned(reason) => Fate::Dead(reason),
        Settled::Nacked => {
            crate::metrics::relay_nacked();
            Fate::Retry("the broker refused the message for now (nack)".into())
        }
    }
}

/// Re-publishes a run's message (through the outbox) in the trace of the
/// request the run serves, not the relay's own.
async fn requeue(c: &impl GenericClient, run_id: uuid::Uuid, m: &FleetMessage) -> anyhow::Result<()> {
    let trace = baton_store::requests::trace_of_run(c, run_id).await?;
    Ok(outbox::with_trace(trace, outbox::enqueue_fleet(c, m)).await?)
}
