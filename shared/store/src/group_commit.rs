//! Group commit: units of work that are ready at the same time commit in one
//! transaction, so a busy worker pays one `BEGIN`, one `COMMIT` and one WAL
//! flush for several hops instead of one each.
//!
//! A unit ([`Job`]) is a function of a transaction that may be run again:
//! it only writes through the transaction it is given (fenced as any
//! other), and it keeps nothing of a run that rolled back. A caller hands
//! its unit to [`GroupCommit::run`] and gets its result once the
//! transaction that holds it has committed, and only then acts on it (acks
//! its delivery, starts its loop): ack-after-commit, the outbox and the
//! fence are exactly as strong as with a transaction of one's own.
//!
//! Units are collected while the batches in flight are busy (at most
//! [`Batching::in_flight`] at once), up to [`Batching::max`] per batch, and,
//! while another batch is in flight, for [`Batching::window`] at most after
//! the first one arrived (an idle worker commits a lone unit at once). When a unit
//! fails, its batch rolls back and runs again without it, and the failed
//! unit runs alone afterwards, in a transaction of its own: only a unit's
//! own failure, alone, reaches its caller. A failed commit (which names no
//! unit) runs each of the batch's units alone.
//!
//! Outbox rows a batch writes are published after its commit by the
//! publisher of the first unit's caller (each unit brings its caller's
//! [`after_commit`] handle; all of one role's units bring the same one).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use crate::outbox::after_commit::{self, Publishing};
use crate::{begin, client, commit, Error, Pool, Transaction};

/// A future borrowing the transaction it runs in.
pub type BoxFuture<'t, T> = Pin<Box<dyn Future<Output = T> + Send + 't>>;

/// A unit of work: run in a transaction it does not commit; may be run again.
pub type Job<T, E> = Arc<dyn for<'t> Fn(&'t Transaction<'t>) -> BoxFuture<'t, Result<T, E>> + Send + Sync>;

/// Makes a [`Job`] of a closure (which spells out the lifetimes a closure
/// alone would not infer).
pub fn job<T, E, F>(f: F) -> Job<T, E>
where
    F: for<'t> Fn(&'t Transaction<'t>) -> BoxFuture<'t, Result<T, E>> + Send + Sync + 'static,
{
    Arc::new(f)
}

/// How units are grouped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batching {
    /// Units per transaction at most; 1 commits each alone.
    pub max: usize,
    /// How long a batch waits for more units after its first one, at most,
    /// while another batch is in flight (with none, it takes what is waiting
    /// and goes). With zero, a batch always takes what is waiting when it
    /// starts: units group only while the batches in flight are busy.
    pub window: Duration,
    /// Batches (transactions, and pooled connections) in flight at once.
    pub in_flight: usize,
}

struct Pending<T, E> {
    job: Job<T, E>,
    span: tracing::Span,
    publishing: Option<Publishing>,
    reply: oneshot::Sender<Result<T, E>>,
}

/// Commits units together; cheap to clone (clones share the batches).
pub struct GroupCommit<T, E> {
    pool: Pool,
    to: Option<mpsc::UnboundedSender<Pending<T, E>>>,
}

impl<T, E> Clone for GroupCommit<T, E> {
    fn clone(&self) -> Self {
        Self { pool: self.pool.clone(), to: self.to.clone() }
    }
}

impl<T, E> GroupCommit<T, E>
where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    /// Starts grouping on `pool` (a task of its own, which ends when the
    /// last clone is dropped). With `batching.max` 1, nothing is started:
    /// each unit runs in its caller's task, in its own transaction.
    pub fn start(pool: Pool, batching: Batching) -> Self {
        if batching.max <= 1 {
            return Self { pool, to: None };
        }
        let (to, from) = mpsc::unbounded_channel();
        tokio::spawn(collect(from, pool.clone(), batching));
        Self { pool, to: Some(to) }
    }

    /// Runs `job` in a transaction it may share with other units, and
    /// returns its result once that transaction committed.
    pub async fn run(&self, job: Job<T, E>) -> Result<T, E> {
        let Some(to) = &self.to else {
            return alone(&self.pool, &job, &tracing::Span::current()).await;
        };
        let (reply, result) = oneshot::channel();
        let pending =
            Pending { job: job.clone(), span: tracing::Span::current(), publishing: after_commit::current(), reply };
        if to.send(pending).is_err() {
            return alone(&self.pool, &job, &tracing::Span::current()).await;
        }
        match result.await {
            Ok(result) => result,
            // The batch's task ended without an answer (a panic in another
            // unit): nothing of it committed, so this unit runs alone.
            Err(_) => alone(&self.pool, &job, &tracing::Span::current()).await,
        }
    }
}

/// Gathers batches and starts each in a task of its own while fewer than
/// `in_flight` run.
async fn collect<T, E>(mut from: mpsc::UnboundedReceiver<Pending<T, E>>, pool: Pool, batching: Batching)
where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(batching.in_flight.clamp(1, Semaphore::MAX_PERMITS)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let Some(first) = from.recv().await else { return };
        let mut batch = vec![first];
        // The window is waited only while another batch is in flight: an
        // idle worker commits at once, a busy one gathers.
        let busy = slots.available_permits() + 1 < batching.in_flight.clamp(1, Semaphore::MAX_PERMITS);
        let until = Instant::now() + batching.window;
        while batch.len() < batching.max {
            match from.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) if batching.window.is_zero() || !busy => break,
                Err(_) => match tokio::time::timeout_at(until, from.recv()).await {
                    Ok(Some(more)) => batch.push(more),
                    Ok(None) | Err(_) => break,
                },
            }
        }
        let pool = pool.clone();
        let publishing = batch[0].publishing.clone();
        let work = async move {
            together(&pool, batch).await;
            drop(slot);
        };
        match publishing {
            Some(publishing) => tokio::spawn(after_commit::scope(publishing, work)),
            None => tokio::spawn(work),
        };
    }
}

/// How a batch's attempt failed.
enum Failed {
    /// The unit at this index failed; the transaction rolled back.
    At(usize),
    /// No transaction could begin, or the commit failed: which unit is to
    /// blame is not known.
    Whole,
}

/// Commits `batch` together, or as much of it as will, and answers each unit.
async fn together<T, E>(pool: &Pool, mut batch: Vec<Pending<T, E>>)
where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
{
    let mut by_themselves = vec![];
    while batch.len() > 1 {
        match attempt(pool, &batch).await {
            Ok(results) => {
                for (pending, result) in batch.drain(..).zip(results) {
                    let _ = pending.reply.send(Ok(result));
                }
            }
            Err(Failed::At(i)) => {
                tracing::debug!(units = batch.len(), "a unit failed in its batch; the batch runs again without it");
                by_themselves.push(batch.remove(i));
            }
            Err(Failed::Whole) => {
                tracing::debug!(units = batch.len(), "a batch could not begin or commit; each of its units runs alone");
                by_themselves.append(&mut batch);
            }
        }
    }
    by_themselves.append(&mut batch);
    for pending in by_themselves {
        let result = alone(pool, &pending.job, &pending.span).await;
        let _ = pending.reply.send(result);
    }
}

/// One transaction for every unit of `batch`, committed if all succeed.
async fn attempt<T, E>(pool: &Pool, batch: &[Pending<T, E>]) -> Result<Vec<T>, Failed>
where
    E: From<Error>,
{
    let mut client = client(pool).await.map_err(|_| Failed::Whole)?;
    let tx = begin(&mut client).await.map_err(|_| Failed::Whole)?;
    tracing::trace!(units = batch.len(), "committing a batch");
    let mut results = Vec::with_capacity(batch.len());
    for (i, pending) in batch.iter().enumerate() {
        match (pending.job)(&tx).instrument(pending.span.clone()).await {
            Ok(result) => results.push(result),
            Err(_) => return Err(Failed::At(i)), // dropped: rolled back
        }
    }
    commit(tx).await.map_err(|_| Failed::Whole)?;
    Ok(results)
}

/// `job` in a transaction of its own; its failure is its caller's.
async fn alone<T, E>(pool: &Pool, job: &Job<T, E>, span: &tracing::Span) -> Result<T, E>
where
    E: From<Error>,
{
    let mut client = client(pool).await?;
    let tx = begin(&mut client).await?;
    let result = job(&tx).instrument(span.clone()).await?;
    commit(tx).await?;
    Ok(result)
}
