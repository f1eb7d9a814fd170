//! Invocation workers: claim an invocation under a row lock, ack the
//! delivery once the claim commits (from then on the Postgres lease owns the
//! work), renew the lease by heartbeat, and run the agent loop.

mod claim;
pub(crate) mod eager;
mod lease;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_agent::providers::BuiltinProviders;
use baton_agent::runner::{DeferredClaim, Exit, LoopCaps, Preloaded, Runner};
use baton_agent::tools::AsClaimed;
use baton_bus::consume::{consume_until, Broken, More};
use baton_bus::{DeadLetters, Delivery};
use baton_domain::fleet::{FleetMessage, InvocationQueue, RunInvocation};
use baton_domain::protocol::request::Priority;
use baton_domain::run::state::InvocationKind;
use baton_store::after_commit::{scope, Known};
use baton_store::group_commit::{job, GroupCommit};
use baton_store::invocations::{self, Invocation};
use baton_store::Pool;
use baton_store::{begin, client as db, commit, Transaction};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::Settings;
use crate::roles::invocation::claim::{claim_failure, fail_claimed, first_start, started_events};
use crate::roles::invocation::lease::heartbeat;
use crate::roles::publish_after_commit::PublishAfterCommit;
use crate::roles::{connect_with, retry_transient, Role};
use baton_agent::slots::{Slot, Slots};

/// What one worker process shares across its invocations.
#[derive(Clone)]
pub struct Worker {
    pub pool: Pool,
    pub runner: Runner,
    pub settings: Settings,
    /// Heartbeats' own connections: a lease is renewed even while the agent
    /// loops wait for the main pool, so a pool wait never becomes a takeover.
    leases: Pool,
    /// The profiles file as of the version the last claim read: a claim
    /// takes its profile from here, and reads the file again only after an apply.
    profiles: baton_store::profiles::Cache,
    /// Claims ready at the same time commit together (`BATON_GROUP_COMMIT_*`).
    commits: GroupCommit<Option<ClaimDone>, anyhow::Error>,
}

impl Worker {
    pub fn new(pool: Pool, settings: Settings) -> Self {
        let session = settings.db_session_of("invocation-leases");
        let leases = baton_store::pool_with(&settings.database_url, 2, &session).unwrap_or_else(|_| pool.clone());
        // Model-limit slots are renewed like leases, on the leases' own pool.
        let limiter = Arc::new(baton_agent::limiter::Limiter::new(pool.clone()).renewing_on(leases.clone()));
        let providers = BuiltinProviders::with_work_root(settings.agent_work_dir.clone())
            .with_limiter(limiter)
            .with_pool(pool.clone())
            .with_jail(settings.agent_jail.clone());
        let stale = settings.holding.remove_stale(settings.persist_patience);
        if stale > 0 {
            tracing::info!(stale, dir = %settings.holding.dir.display(), "removed held turns that dead workers left behind");
        }
        let runner = Runner::new(pool.clone(), Arc::new(providers), LoopCaps::default())
            .with_persist_patience(settings.persist_patience)
            .with_holding(settings.holding.clone());
        let commits = GroupCommit::start(pool.clone(), settings.group_commit);
        Self { pool, runner, settings, leases, profiles: Default::default(), commits }
    }
}

/// What an invocation role keeps across broker reconnects: agent loops
/// outlive a lost connection (they only need Postgres), so their slots, pool
/// and tracker do too, and a reconnect never doubles the concurrency.
pub struct State {
    worker: Worker,
    /// Given out by priority: see [`Slots`].
    slots: Slots,
    loops: TaskTracker,
    /// Fires `shutdown_grace` after shutdown: external agents still running
    /// are killed, and claims still running are handed back.
    deadline: CancellationToken,
}

/// After the deadline, how long a loop may take to record what its killed
/// external agent became (failed, or handed back) before it is dropped
/// wherever it is and its claim handed back.
const HANDBACK_MARGIN: Duration = Duration::from_secs(1);

impl State {
    pub fn new(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<Self> {
        let pool = settings.db_pool(Role::Invocation.name())?;
        let deadline = CancellationToken::new();
        tokio::spawn({
            let (shutdown, deadline, grace) = (shutdown.clone(), deadline.clone(), settings.shutdown_grace);
            async move {
                shutdown.cancelled().await;
                tokio::time::sleep(grace).await;
                deadline.cancel();
            }
        });
        Ok(Self {
            worker: Worker::new(pool, settings.clone()),
            slots: Slots::new(settings.max_concurrent_invocations),
            loops: TaskTracker::new(),
            deadline,
        })
    }

    /// On shutdown: waits for the in-flight loops, each of which stops at a
    /// persisted step or is handed back by the deadline; bounded, so the
    /// process exits within the grace (plus a little) whatever a loop does.
    pub async fn drain(&self) {
        self.loops.close();
        let bound = async {
            self.deadline.cancelled().await;
            tokio::time::sleep(HANDBACK_MARGIN * 3).await;
        };
        tokio::select! {
            _ = self.loops.wait() => {}
            _ = bound => tracing::warn!(left = self.loops.len(), "invocations did not stop by the shutdown deadline; their leases will expire"),
        }
    }
}

pub async fn run(state: &State, settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let conn = connect_with(settings, Role::Invocation, &state.worker.pool).await?;
    let publisher = conn.publisher().await?;
    let (publishing, publisher_after_commit) = PublishAfterCommit::start(&conn, &state.worker.pool, settings).await?;
    let (publishing, taken) = eager::enable(state, settings, shutdown, publishing);
    let dispatch_end = CancellationToken::new();
    let dispatch = taken.map(|taken| {
        let dispatch = eager::Dispatch {
            worker: state.worker.clone(),
            publishing: publishing.clone(),
            shutdown: shutdown.clone(),
            deadline: state.deadline.clone(),
            loops: state.loops.clone(),
        };
        tokio::spawn(dispatch.serve(taken, dispatch_end.clone()))
    });
    let publishing = &publishing;
    let dead = DeadLetters::new(&publisher, &settings.queues());
    let (worker, slots, loops, deadline) = (&state.worker, &state.slots, &state.loops, &state.deadline);
    let queues = settings.queues();
    // Each kind (handoff, delegate) has a queue per priority; a worker
    // consumes all three of each kind it takes.
    let lanes = InvocationQueue::ALL.map(|kind| Priority::ALL.map(|p| (kind, p)));
    let consumers = lanes.concat().into_iter().map(|(kind, priority)| {
        let enabled = settings.invocation_queues.contains(&kind);
        let (conn, queue) = (&conn, queues.name(kind.at(priority)));
        let dead = &dead;
        async move {
            if !enabled {
                shutdown.cancelled().await;
                return Ok(());
            }
            let broken = Broken::default();
            let lane = Arc::new(Lane {
                worker: worker.clone(),
                dead: dead.clone(),
                loops: loops.clone(),
                deadline: deadline.clone(),
                publishing: publishing.clone(),
                queue: queue.clone(),
                broken: broken.clone(),
                shutdown: shutdown.clone(),
                slots: slots.clone(),
                draining: AtomicBool::new(false),
            });
            let lane = &lane;
            consume_until(conn, &queue, settings.invocation_prefetch, shutdown, &broken, move |d, more| async move {
                // A free slot first: a saturated worker stops taking deliveries,
                // and the broker keeps them for another worker. On shutdown the
                // delivery is left unacked and goes back to the queue.
                let permit = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return Ok(()),
                    slot = slots.acquire(priority) => slot,
                };
                lane.start(d, permit);
                Lane::take_more(lane, more);
                Ok(())
            })
            .await
        }
    });
    let Ok([a, b, c, d, e, f]) = <[_; 6]>::try_from(consumers.collect::<Vec<_>>()) else {
        unreachable!("two kinds, three priorities")
    };
    let result = tokio::try_join!(a, b, c, d, e, f).map(|_| ());
    if shutdown.is_cancelled() {
        // In-flight loops see the same shutdown and stop at a persisted step,
        // or are handed back at the deadline.
        state.drain().await;
    }
    dispatch_end.cancel();
    if let Some(dispatch) = dispatch {
        let _ = dispatch.await;
    }
    publisher_after_commit.stop().await;
    publisher.close().await;
    // Closed, not only dropped: a consumer whose task ended with the
    // attempt's error (another consumer of this role failed) is cancelled
    // with it, and what it held goes back to its queue. Left open, it kept
    // a dead-lettered request unacked, out of every live consumer's reach.
    conn.close("the role's attempt ended").await;
    result
}

/// What the consumer of one invocation queue hands each delivery it takes.
struct Lane {
    worker: Worker,
    dead: DeadLetters,
    loops: TaskTracker,
    deadline: CancellationToken,
    publishing: baton_store::after_commit::Publishing,
    queue: String,
    broken: Broken,
    shutdown: CancellationToken,
    slots: Slots,
    /// Whether a task is taking more of the queue (one at a time).
    draining: AtomicBool,
}

impl Lane {
    /// Claims the delivery and runs what it claimed, in a task of its own
    /// holding `permit`: one slow claim does not hold up the deliveries
    /// behind it.
    fn start(&self, d: Delivery, permit: Slot) {
        let (worker, dead, stop, deadline) =
            (self.worker.clone(), self.dead.clone(), self.shutdown.clone(), self.deadline.clone());
        let (queue, broken) = (self.queue.clone(), self.broken.clone());
        // The hop continues the trace of the span that queued it.
        let hop = tracing::info_span!("claim", queue = %self.queue, handoff_id = tracing::field::Empty,
            invocation = tracing::field::Empty, redelivered = d.redelivered());
        crate::telemetry::continue_from(&hop, &d);
        // Its outbox rows are published by this process right after each
        // commit. (Boxed: spawning moves a pointer, not the hop's state machine.)
        self.loops.spawn(Box::pin(
            scope(self.publishing.clone(), async move {
                let _permit = permit;
                if stop.is_cancelled() {
                    return; // unclaimed and unacked: it goes back to the queue
                }
                match receive(&worker, &dead, &d, &queue, &stop).await {
                    Ok(Some(Claimed::Run(inv, preloaded))) => {
                        worker.execute(inv, preloaded.map(|p| *p), stop, deadline).await;
                    }
                    Ok(Some(Claimed::Ended(_))) => {}
                    Ok(None) => {}
                    Err(e) => broken.fail(format!("{e:#}")),
                }
            })
            .instrument(hop),
        ));
    }

    /// While slots are free and nobody waits for one, takes more of the
    /// queue, each message with its slot in hand, in a task beside the
    /// consumer (which goes on with its own deliveries meanwhile): the
    /// claims of a backlog overlap, where a prefetch of 1 alone would claim
    /// them one by one, and a saturated worker takes nothing it cannot start.
    fn take_more(lane: &Arc<Lane>, more: More) {
        if lane.draining.swap(true, Ordering::AcqRel) {
            return; // one at a time; what it misses comes by the consumer
        }
        let lane = lane.clone();
        lane.loops.clone().spawn(async move {
            while !lane.shutdown.is_cancelled() {
                let Some(permit) = lane.slots.try_acquire() else { break };
                match more.take().await {
                    Ok(Some(d)) => lane.start(d, permit),
                    Ok(None) => break,
                    Err(e) => {
                        lane.broken.fail(format!("taking more of {}: {e:#}", lane.queue));
                        break;
                    }
                }
            }
            lane.draining.store(false, Ordering::Release);
        });
    }
}

/// Parses and claims; acks once the claim (or the finding that there is
/// nothing to do) is committed.
async fn receive(
    worker: &Worker,
    dead: &DeadLetters,
    d: &Delivery,
    queue: &str,
    stop: &CancellationToken,
) -> anyhow::Result<Option<Claimed>> {
    let message: RunInvocation = match serde_json::from_slice(d.body()) {
        Ok(m) => m,
        Err(e) => {
            d.dead_letter(dead, queue, &format!("not an invocation message: {e}")).await?;
            return Ok(None);
        }
    };
    // Its log lines (a claim retried through an outage) name the invocation.
    tracing::Span::current().record("invocation", tracing::field::display(message.invocation_id));
    let claimed = match retry_transient("claiming an invocation", worker.settings.transient_patience, stop, || {
        worker.claim_to_run(message, None)
    })
    .await
    {
        Ok(claimed) => claimed,
        Err(e) if crate::roles::is_transient(&e) => return Err(e),
        // A claim that can never succeed (a profile this version cannot
        // read, a malformed skill): the invocation and its run fail, and the
        // bridge is told, instead of the message coming back for ever.
        Err(e) => match worker.fail_unclaimable(message, &e).await {
            Ok(()) => None,
            Err(again) if crate::roles::is_transient(&again) => return Err(again),
            // Not even that works (the invocation row itself is corrupt): say why, don't loop.
            Err(again) => {
                let reason = format!("could not claim the invocation: {e:#}; nor fail it: {again:#}");
                d.dead_letter(dead, queue, &reason).await?;
                return Ok(None);
            }
        },
    };
    // From here the Postgres lease owns the work: a failed ack (the channel
    // closed under us) only means a duplicate delivery later, which finds
    // nothing to claim, even once the lease has lapsed in an outage: only a
    // lease the relay's sweep found stalled is taken over (`CLAIMABLE`).
    // The claimed work still runs, or is handed back.
    if let Err(e) = d.ack().await {
        tracing::warn!(invocation = %message.invocation_id, error = %format!("{e:#}"), "ack failed after the claim committed");
    }
    Ok(claimed)
}

/// What a committed claim came to.
enum Claimed {
    /// A claimed invocation for the loop, with what its first claim read.
    Run(Invocation, Option<Box<Preloaded>>),
    /// The claim's transaction also took the first turn (a script's), and
    /// that ended the invocation here (handed off, finished, parked).
    Ended(Invocation),
}

/// A first turn that could not be folded into the claim's transaction for
/// a reason that is not the database's: the claim is made again without it,
/// and the loop takes the turn on its own (and says why, if it fails again).
#[derive(Debug, thiserror::Error)]
#[error("the first turn could not be taken in the claim's transaction: {0}")]
struct Unfolded(baton_agent::Error);

/// What a claim's transaction came to, acted on once it committed.
struct ClaimDone {
    inv: Invocation,
    facts: invocations::ClaimFacts,
    /// The bridge's handoff id of the run, for the hop's span.
    handoff: Option<String>,
    /// How the invocation ended within its claim, if it did.
    ended: Option<Exit>,
    preloaded: Option<Preloaded>,
    span: tracing::Span,
}

/// The span of a claimed invocation's work on this worker.
fn invocation_span(inv: &Invocation) -> tracing::Span {
    tracing::info_span!("invocation",
        run = %inv.run_id, invocation = %inv.id, epoch = inv.claim_epoch, profile = %inv.profile_id,
        run_id = %inv.run_id, invocation_id = %inv.id, agent = %inv.profile_id, kind = ?inv.kind,
    )
}

impl Worker {
    /// Claims the invocation with its journal events, in one transaction,
    /// and takes no turn. `None`: already claimed, finished, or given up on.
    pub async fn claim(&self, message: RunInvocation) -> anyhow::Result<Option<Invocation>> {
        Ok(self.claim_folding(message, false, None).await?.map(|claimed| match claimed {
            Claimed::Run(inv, _) | Claimed::Ended(inv) => inv,
        }))
    }

    /// [`Worker::claim`], with what a first claim read for the loop to
    /// start from, and a script's first turn taken in the same transaction.
    /// `known`: what the transaction that wrote it knew, when this process
    /// took it itself (eager dispatch).
    async fn claim_to_run(&self, message: RunInvocation, known: Option<Known>) -> anyhow::Result<Option<Claimed>> {
        match self.claim_folding(message, true, known.map(Arc::new)).await {
            Err(e) if e.downcast_ref::<Unfolded>().is_some() => {
                tracing::warn!(invocation = %message.invocation_id, error = %format!("{e:#}"), "claiming again, leaving the first turn to the loop");
                self.claim_folding(message, false, None).await
            }
            other => other,
        }
    }

    /// Claims through the worker's group commit: the claim's transaction may
    /// be shared with other claims ready at the same time (see
    /// [`baton_store::group_commit`]), and what it claimed is acted on only
    /// once that transaction committed.
    async fn claim_folding(
        &self,
        message: RunInvocation,
        fold: bool,
        known: Option<Arc<Known>>,
    ) -> anyhow::Result<Option<Claimed>> {
        let worker = Arc::new(self.clone());
        let unit = job(move |tx| {
            let (worker, known) = (worker.clone(), known.clone());
            Box::pin(async move { worker.claim_in(tx, message, fold, known.as_deref()).await })
        });
        let Some(done) = self.commits.run(unit).await? else { return Ok(None) };
        let ClaimDone { inv, facts, handoff, ended, preloaded, span } = done;
        // Log lines and spans of the claimed work name the bridge's handoff.
        if let Some(handoff) = handoff {
            tracing::Span::current().record("handoff_id", handoff.as_str());
        }
        crate::metrics::claimed(inv.kind.as_str(), facts.takeover);
        if facts.takeover {
            span.in_scope(|| tracing::warn!("took over an invocation whose lease had expired"));
        }
        if inv.kind == InvocationKind::Handoff && inv.claim_epoch == 1 {
            crate::metrics::hop(facts.waited_seconds);
        }
        Ok(Some(match ended {
            Some(exit) => {
                span.in_scope(|| tracing::info!(?exit, "invocation exited within its claim"));
                Claimed::Ended(inv)
            }
            None => Claimed::Run(inv, preloaded.map(Box::new)),
        }))
    }

    /// A claim's work in `tx`, which the caller commits: `None` when there
    /// was nothing to claim or the claim failed the invocation.
    async fn claim_in(
        &self,
        tx: &Transaction<'_>,
        message: RunInvocation,
        fold: bool,
        known: Option<&Known>,
    ) -> anyhow::Result<Option<ClaimDone>> {
        // One statement claims the invocation and reads what starting it
        // needs: its run, the run's spend, the profiles' version, its task.
        // A new stage of a scripted profile is claimed with its first turn,
        // and the claim written with the invocation's end (one row version).
        let deferrable = match (fold, self.profiles.held()) {
            (true, Some(held)) => held.scripted(),
            _ => vec![],
        };
        let (owner, lease) = (self.settings.worker_id.as_str(), self.settings.lease);
        // One this process took itself, whose first turn it takes now, is
        // claimed by a lookup of what its writer did not know.
        let here = match known.filter(|k| deferrable.contains(&k.profile_id)) {
            Some(known) => baton_store::claims::claim_taken_here(tx, message.invocation_id, known).await?,
            None => None,
        };
        let start = match here {
            Some(start) => Some(start),
            None => baton_store::claims::claim_start(tx, message.invocation_id, owner, lease, &deferrable).await?,
        };
        let Some(start) = start else {
            // A duplicate delivery: already claimed (its lease live, or lapsed
            // but not yet found stalled by the relay), ended, or given up on.
            tracing::info!(invocation = %message.invocation_id, "nothing to claim");
            return Ok(None);
        };
        let baton_store::claims::ClaimStart {
            inv,
            facts,
            run,
            spend,
            profiles_version,
            task_started,
            deferred,
            request_running,
        } = start;
        let deferred = deferred.then_some(DeferredClaim { owner, lease });
        if inv.takeovers > self.settings.max_takeovers {
            // A stage whose workers keep dying stops here instead of looping.
            let text = "the agent stopped because its workers kept failing";
            // Boxed: a rare path, and a large state machine every claim would carry.
            let detail = format!("taken over {} times", inv.takeovers);
            Box::pin(fail_claimed(tx, &inv, "host.too_many_takeovers", text, &detail)).await?;
            return Ok(None);
        }
        let profiles = self.profiles.at(tx, profiles_version).await?;
        let first = first_start(tx, &inv, task_started, &profiles).await?;
        let evs = started_events(tx, &inv, &self.settings.worker_id, &first, Some(&run), request_running).await?;
        // A first claim's prompt and start events are written by the runner,
        // which may take the first turn in this transaction too.
        let preloaded = match first {
            Some((_, Some(first))) => {
                let read = AsClaimed { profiles: profiles.clone() };
                Some(Preloaded::new(first, spend).as_claimed(read))
            }
            _ => None,
        };
        let span = invocation_span(&inv);
        let (preloaded, ended) = match preloaded {
            Some(loaded) => {
                match self.runner.start_claimed(tx, &inv, loaded, evs, fold, deferred).instrument(span.clone()).await {
                    Ok((loaded, exit)) => (Some(loaded), exit),
                    Err(e) if e.is_transient() || !fold => return Err(e.into()),
                    Err(e) => return Err(Unfolded(e).into()),
                }
            }
            // (`start_claimed` writes a deferred claim itself.)
            None => {
                baton_store::journal::append(tx, inv.run_id, &evs).await?;
                if let Some(claim) = deferred {
                    invocations::record_claim(tx, inv.id, inv.claim_epoch, claim.owner, claim.lease).await?;
                }
                (None, None)
            }
        };
        Ok(Some(ClaimDone { inv, facts, handoff: run.handoff_id, ended, preloaded, span }))
    }

    /// A claim failed for a reason that will not pass (`error`): claims the
    /// invocation again without starting it, and fails it in the same
    /// transaction. An owner's run fails with it, so the collector sends the
    /// bridge a `failed` reply; a child's task fails and its parent reads why.
    pub async fn fail_unclaimable(&self, message: RunInvocation, error: &anyhow::Error) -> anyhow::Result<()> {
        let mut client = db(&self.pool).await?;
        let tx = begin(&mut client).await?;
        let Some(inv) =
            invocations::claim(&tx, message.invocation_id, &self.settings.worker_id, self.settings.lease).await?
        else {
            return Ok(()); // someone else holds or ended it meanwhile
        };
        let (code, text) = claim_failure(&inv, error);
        tracing::error!(invocation = %inv.id, profile = %inv.profile_id, error = %format!("{error:#}"), "cannot start the invocation; failing it");
        fail_claimed(&tx, &inv, code, &text, &format!("{error:#}")).await?;
        commit(tx).await?;
        Ok(())
    }

    /// Runs a claimed invocation with a heartbeat until it exits. On
    /// `shutdown` it stops at its next persisted step (an external agent
    /// already running goes on); at `deadline` an external agent is killed,
    /// and a moment later whatever still runs is dropped and handed back.
    pub async fn execute(
        &self,
        inv: Invocation,
        preloaded: Option<Preloaded>,
        shutdown: CancellationToken,
        deadline: CancellationToken,
    ) {
        let span = invocation_span(&inv);
        self.execute_claimed(inv, preloaded, shutdown, deadline).instrument(span).await;
    }

    async fn execute_claimed(
        &self,
        inv: Invocation,
        preloaded: Option<Preloaded>,
        shutdown: CancellationToken,
        deadline: CancellationToken,
    ) {
        let lost = CancellationToken::new();
        let stop = CancellationToken::new();
        let kill = CancellationToken::new();
        // Aborted when this function returns or unwinds: a panicking loop must
        // not keep its lease alive.
        let beat = heartbeat(self.leases.clone(), inv.id, inv.claim_epoch, self.settings.lease, lost.clone());
        let _heartbeat = AbortOnDrop(tokio::spawn(beat.in_current_span()));
        let _watcher = AbortOnDrop({
            let (stop, kill, lost, shutdown, deadline) =
                (stop.clone(), kill.clone(), lost.clone(), shutdown.clone(), deadline.clone());
            tokio::spawn(async move {
                tokio::select! { _ = lost.cancelled() => {}, _ = shutdown.cancelled() => {} }
                stop.cancel();
                tokio::select! { _ = lost.cancelled() => {}, _ = deadline.cancelled() => {} }
                kill.cancel();
            })
        });
        let past_deadline = async {
            deadline.cancelled().await;
            tokio::time::sleep(HANDBACK_MARGIN).await;
        };
        let exit = tokio::select! {
            exit = self.run_through_blips(&inv, preloaded, &stop, &kill) => exit,
            // Dropped wherever it is, as in a crash (an uncommitted step rolls
            // back, an external agent's group is killed), but handed back at
            // once instead of waiting for the lease.
            _ = past_deadline => {
                tracing::warn!("still running at the shutdown deadline; handing it back");
                Ok(Exit::Stopped)
            }
        };
        match exit {
            Ok(Exit::Stopped) if !lost.is_cancelled() => self.release(&inv, &deadline).await,
            Ok(Exit::Parked) => tracing::info!("parked until its delegated tasks are done"),
            Ok(exit) => tracing::info!(?exit, "invocation exited"),
            Err(e) => tracing::warn!(error = %e, "invocation interrupted; another worker resumes it after the lease"),
        }
    }

    /// Runs the loop, and again after each transient database failure: the
    /// claim still holds (the heartbeat keeps it, the fence guards it), so a
    /// database blip or a pool wait is neither a failed invocation nor a takeover.
    async fn run_through_blips(
        &self,
        inv: &Invocation,
        mut preloaded: Option<Preloaded>,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<Exit, baton_agent::Error> {
        let mut delays = crate::roles::backoff(self.settings.reconnect_max);
        loop {
            // The first attempt starts from what the claim read; a later one reads again.
            let e = match self.runner.run_from(inv, preloaded.take(), stop, kill).await {
                Err(e) if e.is_transient() => e,
                other => return other,
            };
            // Shutting down: nothing runs any more, so the claim is handed
            // back (if the database takes it) rather than left to expire and
            // be counted as a takeover.
            if stop.is_cancelled() {
                tracing::warn!(error = %e, "the database is unavailable at shutdown; handing the invocation back");
                return Ok(Exit::Stopped);
            }
            let delay = delays.next().unwrap_or(self.settings.reconnect_max);
            tracing::warn!(error = %e, ?delay, "the database is unavailable for now; resuming the invocation after it");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.cancelled() => {
                    tracing::warn!(error = %e, "shutdown during a database outage; handing the invocation back");
                    return Ok(Exit::Stopped);
                }
            }
        }
    }

    /// Hands a claim back on shutdown so another worker resumes it at once
    /// (not counted as a takeover), retried through a database outage until
    /// the shutdown deadline; after it, the lease simply expires.
    async fn release(&self, inv: &Invocation, deadline: &CancellationToken) {
        let mut delays = crate::roles::backoff(self.settings.reconnect_max);
        loop {
            let e = match self.try_release(inv).await {
                Ok(true) => return tracing::info!("claim released for another worker"),
                Ok(false) => return tracing::info!("claim already gone; nothing to release"),
                Err(e) => e,
            };
            if !crate::roles::is_transient(&e) || deadline.is_cancelled() {
                return tracing::warn!(error = %format!("{e:#}"), "could not release claim; the lease will expire");
            }
            let delay = delays.next().unwrap_or(self.settings.reconnect_max);
            tracing::warn!(error = %format!("{e:#}"), ?delay, "releasing a claim: the database is unavailable for now; retrying");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = deadline.cancelled() => {}
            }
        }
    }

    /// `false`: the claim was no longer this worker's (taken over, or ended).
    async fn try_release(&self, inv: &Invocation) -> anyhow::Result<bool> {
        let mut client = db(&self.pool).await?;
        let tx = begin(&mut client).await?;
        if !invocations::release(&tx, inv.id, inv.claim_epoch).await? {
            return Ok(false);
        }
        baton_store::outbox::enqueue_fleet(&tx, &FleetMessage::run(inv.run_id, inv.id, inv.kind)).await?;
        commit(tx).await?;
        Ok(true)
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
