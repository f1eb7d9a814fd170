//! The in-process publisher: the outbox rows a role's transactions write
//! are published on the role's own confirm channel right after their
//! commit, and deleted in batches once confirmed (see
//! `baton_store::after_commit`). The relay is the safety net: it sweeps a
//! row only once its grace has passed (this process died between the commit
//! and the publish).
//!
//! Only the plain case is handled here. A row that needs more (a body to
//! cut or refuse, a nack, a return, a broken channel) is handed to the relay
//! at once, which settles it with its full rules. A bridge message is
//! published only when no earlier message of its handoff is left pending
//! (this process counts those it has seen confirmed as sent before it marks
//! them; the messages of one row go one after another, V46): its writer
//! says which earlier ones were still pending when it holds the request
//! (intake, a run's answer: `Row::waits_for`), else the database is asked.
//! One that has to wait for an earlier one is tried again for a while, then
//! left to the relay. Nothing is locked: the relay takes a
//! message only after its grace, by when its writer has published it or is
//! gone.

use std::time::Duration;

use baton_bus::{Connection, Publisher, Settled};
use baton_store::after_commit::Publishing;
use baton_store::outbox::{self, Row};
use baton_store::{client as db, Pool};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::outbox_message::{outgoing, prepare};

/// Rows published together at most.
const BATCH: usize = 512;
/// How long the broker may take to confirm before the rows go to the relay.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a bridge message waiting for an earlier one of its handoff is tried again.
const RECHECK: Duration = Duration::from_millis(10);
/// Confirmed rows wait this long at most, so that one statement (and one
/// commit) settles many (deletes a fleet row, marks a bridge message sent):
/// until then the relay leaves them alone anyway (their grace is seconds),
/// and a crash meanwhile only means the relay publishes them again, which a
/// hint's reader takes in its stride and a bridge knows by its message id.
const DELETE_EVERY: Duration = Duration::from_millis(25);

/// A running in-process publisher; [`PublishAfterCommit::stop`] ends it.
pub(crate) struct PublishAfterCommit {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl PublishAfterCommit {
    /// Opens a confirm channel of its own on `conn` and starts publishing.
    /// With a grace of zero, nothing is published in process.
    pub(crate) async fn start(
        conn: &Connection,
        pool: &Pool,
        settings: &Settings,
    ) -> anyhow::Result<(Publishing, Self)> {
        let (publishing, rows) = Publishing::new(settings.outbox_grace);
        let publisher = conn.publisher().await?;
        let stop = CancellationToken::new();
        let mut worker = Worker {
            pool: pool.clone(),
            publisher,
            settings: settings.clone(),
            rows,
            waiting: vec![],
            confirmed: vec![],
            parts_sent: vec![],
            delete_at: None,
        };
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = worker.serve(&stopped).await {
                // Rows from now on are the relay's at once (the sender sees the
                // receiver gone); rows already written wait for its sweep.
                tracing::warn!(error = %format!("{e:#}"), "in-process publishing stopped; the relay publishes instead");
            }
            worker.publisher.close().await;
        });
        Ok((publishing, Self { stop, task }))
    }

    /// Publishes what it has already received, then stops.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

struct Worker {
    pool: Pool,
    publisher: Publisher,
    settings: Settings,
    rows: UnboundedReceiver<Vec<Row>>,
    /// Bridge messages waiting for an earlier message of their handoff, with
    /// when they were first tried.
    waiting: Vec<(Instant, Row)>,
    /// Rows published and confirmed, to be settled together by `delete_at`
    /// (a later message of a bridge message's handoff may go meanwhile).
    confirmed: Vec<outbox::Key>,
    /// Messages confirmed of rows not sent whole yet, by row id and place:
    /// the next message of such a row may go.
    parts_sent: Vec<(i64, u8)>,
    delete_at: Option<Instant>,
}

impl Worker {
    async fn serve(&mut self, stop: &CancellationToken) -> anyhow::Result<()> {
        loop {
            let mut rows = tokio::select! {
                biased;
                received = self.rows.recv() => match received {
                    Some(rows) => rows,
                    None => return Ok(()),
                },
                _ = stop.cancelled() => {
                    self.rows.close();
                    let mut rest = vec![];
                    while let Ok(more) = self.rows.try_recv() {
                        rest.extend(more);
                    }
                    self.flush(rest).await?;
                    return self.delete_confirmed().await;
                }
                _ = tokio::time::sleep(RECHECK), if !self.waiting.is_empty() => vec![],
                _ = sleep_until(self.delete_at), if self.delete_at.is_some() => {
                    self.delete_confirmed().await?;
                    continue;
                }
            };
            // Whatever else has been committed meanwhile goes in the same batch.
            while rows.len() < BATCH {
                match self.rows.try_recv() {
                    Ok(more) => rows.extend(more),
                    Err(_) => break,
                }
            }
            self.flush(rows).await?;
        }
    }

    /// Publishes the rows (and the bridge messages whose turn has come),
    /// keeps those confirmed to be settled, and hands the others to the relay.
    async fn flush(&mut self, fresh: Vec<Row>) -> anyhow::Result<()> {
        let now = Instant::now();
        // A message waiting longer than this is the relay's, which takes it
        // once its grace is over and its turn has come.
        let patience = self.settings.outbox_grace / 2;
        let mut rows: Vec<(Instant, Row)> = std::mem::take(&mut self.waiting)
            .into_iter()
            .filter(|(since, _)| now.duration_since(*since) < patience)
            .collect();
        rows.extend(fresh.into_iter().map(|row| (now, row)));
        // Bridge messages leave in their handoff's order. A row's first
        // message goes only when no earlier row of its handoff is left
        // pending (or confirmed here and not yet marked sent), which the
        // database says; a later one only once the message before it in its
        // row was confirmed here (V46). A round that sends one may free the
        // next; only a row sent whole can free another row's first message.
        // A row whose writer said what it waits for (`Row::waits_for`) is
        // decided here, when those are confirmed; the others are asked.
        let mut row_sent = true;
        loop {
            let mut free = vec![];
            let mut firsts: Vec<outbox::Key> = vec![];
            for (_, r) in rows.iter().filter(|(_, r)| r.message.correlation_id.is_some() && r.part.index == 0) {
                match &r.waits_for {
                    Some(earlier) if earlier.iter().all(|id| self.confirmed.iter().any(|k| k.id == *id)) => {
                        free.push(r.id);
                    }
                    _ => firsts.push(r.key()),
                }
            }
            if !firsts.is_empty() && row_sent {
                free.extend(outbox::ready_to_send(&db(&self.pool).await?, &firsts, &self.confirmed).await?);
            }
            let (ready, later): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, r)| {
                match (r.message.correlation_id.is_some(), r.part.index.checked_sub(1)) {
                    (false, _) => true,
                    (true, None) => free.contains(&r.id),
                    (true, Some(before)) => self.parts_sent.contains(&(r.id, before)),
                }
            });
            rows = later;
            if ready.is_empty() {
                break;
            }
            let ready: Vec<Row> = ready.into_iter().map(|(_, row)| row).collect();
            let confirmed = self.publish(&ready).await?;
            row_sent = false;
            let (mut refused, mut half_sent) = (vec![], vec![]);
            for (row, confirmed) in ready.iter().zip(confirmed) {
                match (confirmed, row.part.is_last(), row.part.index) {
                    // Marked sent (a bridge message) or deleted (a fleet
                    // row) with the next batch, in one statement.
                    (true, true, _) => {
                        row_sent = true;
                        self.confirmed.push(row.key());
                    }
                    (true, false, _) => self.parts_sent.push((row.id, row.part.index)),
                    // The relay publishes the row, from this message on.
                    (false, _, 0) => refused.push(row.key()),
                    (false, _, from) => half_sent.push((row.key(), from)),
                }
            }
            if !refused.is_empty() || !half_sent.is_empty() {
                rows.retain(|(_, r)| !refused.contains(&r.key()) && !half_sent.iter().any(|(k, _)| *k == r.key()));
                let c = db(&self.pool).await?;
                outbox::give_back(&c, &refused).await?;
                for (key, from) in &half_sent {
                    outbox::give_back_from(&c, key, *from).await?;
                }
            }
            if rows.is_empty() {
                break;
            }
        }
        // What is known of a row's messages matters while the rest of it waits here.
        self.parts_sent.retain(|(id, _)| rows.iter().any(|(_, r)| r.id == *id));
        if self.confirmed.len() >= BATCH {
            self.delete_confirmed().await?;
        } else if !self.confirmed.is_empty() {
            self.delete_at.get_or_insert_with(|| Instant::now() + DELETE_EVERY);
        }
        self.waiting = rows;
        Ok(())
    }

    /// Deletes the confirmed rows waiting for it, in one statement.
    async fn delete_confirmed(&mut self) -> anyhow::Result<()> {
        self.delete_at = None;
        if !self.confirmed.is_empty() {
            outbox::settle(&db(&self.pool).await?, &self.confirmed).await?;
            self.confirmed.clear();
        }
        Ok(())
    }

    /// Sends the rows, then waits for their confirms: for each row, whether
    /// the broker confirmed it (the others are for the relay to settle). A
    /// broken channel ends the publisher.
    async fn publish(&mut self, rows: &[Row]) -> anyhow::Result<Vec<bool>> {
        let mut confirmed = vec![false; rows.len()];
        let prepared = rows
            .iter()
            .map(|r| prepare(&self.settings, &r.message).map(|p| p.traced(r)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let started = std::time::Instant::now();
        let mut sent = vec![];
        for (n, (row, p)) in rows.iter().zip(&prepared).enumerate() {
            if !p.is_plain() {
                continue;
            }
            match self.publisher.send(&outgoing(&row.message, p)).await {
                Ok(pending) => sent.push((n, pending)),
                // The rows of this round stay for the relay's sweep.
                Err(e) => return Err(e.into()),
            }
        }
        let deadline = Instant::now() + CONFIRM_TIMEOUT;
        for (n, pending) in sent {
            if let Ok(Ok(Settled::Confirmed)) = tokio::time::timeout_at(deadline, pending.settled()).await {
                crate::metrics::bridge_message_sent(&rows[n].message.body);
                confirmed[n] = true;
            }
        }
        crate::metrics::relay_published(started.elapsed());
        Ok(confirmed)
    }
}

/// Sleeps until `at` (for ever without one: its branch is disabled then).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
