//! Eager dispatch: a worker that hands off runs the successor itself when
//! it has a free slot, instead of sending it round the broker to whichever
//! worker takes it next (the idea of Temporal's eager workflow dispatch).
//!
//! While the handoff's transaction runs, a free slot is reserved
//! ([`Slots::try_acquire`]: none while a delivery waits for one, so queued
//! work keeps its turn) and the successor is written reserved for this
//! worker, still `created`, with no outbox row
//! (`baton_store::after_commit`). Once the transaction commits, the
//! successor is claimed here as a delivery would be (the same lock, fence
//! and group commit; a new stage whose first turn is a script's by one
//! lookup of what its writer did not know, `claims::claim_taken_here`), in
//! the reserved slot. Nothing else
//! changes for it: it is claimable by anyone, and should this worker die
//! before claiming it, its reservation lapses (after the outbox grace, as
//! an unpublished outbox row would be swept) and the relay's sweep publishes it. On shutdown a successor not yet claimed is queued for
//! another worker at once.

use baton_agent::slots::Slots;
use baton_domain::fleet::{FleetMessage, InvocationQueue, RunInvocation};
use baton_domain::run::state::InvocationKind;
use baton_store::after_commit::{scope, Eager, Known, Publishing, Taken};
use baton_store::{begin, client as db, commit};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Claimed, State, Worker};
use crate::config::Settings;
use crate::roles::retry_transient;

/// `publishing`, taking successors eagerly when the settings allow it (the
/// worker consumes the handoff queue and `BATON_EAGER_DISPATCH` is on),
/// and the successors it took, for [`Dispatch::serve`].
pub(super) fn enable(
    state: &State,
    settings: &Settings,
    shutdown: &CancellationToken,
    publishing: Publishing,
) -> (Publishing, Option<UnboundedReceiver<Taken>>) {
    if !settings.eager_dispatch || !settings.invocation_queues.contains(&InvocationQueue::Handoff) {
        return (publishing, None);
    }
    let (slots, stop): (Slots, CancellationToken) = (state.slots.clone(), shutdown.clone());
    let reserve = move || {
        if stop.is_cancelled() {
            return None;
        }
        slots.try_acquire().map(|slot| Box::new(slot) as baton_store::after_commit::Slot)
    };
    // As long as an outbox row is left to the process that wrote it: should
    // this worker die before its claim, the successor is published as soon
    // as its message would have been (the lease when nothing publishes in process).
    let hold = if settings.outbox_grace.is_zero() { settings.lease } else { settings.outbox_grace };
    let (eager, taken) = Eager::new(&settings.worker_id, hold, reserve);
    SHARED.lock().expect("not poisoned").insert(settings.worker_id.clone(), eager.clone());
    (publishing.with_eager(eager), Some(taken))
}

/// The eager dispatch of this process's invocation role, by its worker id,
/// while the role runs it: intake, starting a request's root, lends the one
/// of its own worker.
static SHARED: std::sync::Mutex<std::collections::BTreeMap<String, Eager>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// `publishing`, also taking the roots it starts eagerly when the
/// invocation role of the same worker (`worker_id`, in this process) takes
/// successors eagerly: intake then hands a new request's root to a free
/// slot of its own process, as a handoff hands its successor (the
/// invocation role's attempt ended, or the process runs no invocation role
/// for this worker: the root is queued as usual).
pub(crate) fn lend(publishing: Publishing, worker_id: &str) -> Publishing {
    match SHARED.lock().expect("not poisoned").get(worker_id).cloned() {
        Some(eager) => publishing.with_eager(eager),
        None => publishing,
    }
}

/// Runs the successors a worker took, each in its reserved slot.
pub(super) struct Dispatch {
    pub worker: Worker,
    pub publishing: Publishing,
    pub shutdown: CancellationToken,
    pub deadline: CancellationToken,
    pub loops: tokio_util::task::TaskTracker,
}

impl Dispatch {
    /// Each successor is claimed and run in a task of the worker's loops,
    /// until `end` (the role's attempt ended): what is left then is queued
    /// for another worker, and later handoffs queue their successors.
    pub async fn serve(self, mut taken: UnboundedReceiver<Taken>, end: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                _ = end.cancelled() => break,
                successor = taken.recv() => match successor {
                    Some(successor) => self.start(successor),
                    None => return,
                },
            }
        }
        taken.close();
        while let Ok(successor) = taken.try_recv() {
            let message = RunInvocation { invocation_id: successor.invocation_id, run_id: successor.run_id };
            hand_back(&self.worker, message).await;
        }
    }

    fn start(&self, successor: Taken) {
        let (worker, stop, deadline) = (self.worker.clone(), self.shutdown.clone(), self.deadline.clone());
        let message = RunInvocation { invocation_id: successor.invocation_id, run_id: successor.run_id };
        let hop = tracing::info_span!("claim", queue = "eager", handoff_id = tracing::field::Empty,
            invocation = %message.invocation_id);
        // The hop continues the trace of the handoff that took it, as its message would.
        let (traceparent, tracestate) = successor.trace.map_or((None, None), |(p, s)| (Some(p), s));
        crate::telemetry::continue_trace(&hop, traceparent, tracestate);
        // Boxed: spawning moves a pointer, not the hop's state machine.
        self.loops.spawn(Box::pin(
            scope(self.publishing.clone(), async move {
                let _slot = successor.slot;
                run(&worker, message, successor.known, stop, deadline).await;
            })
            .instrument(hop),
        ));
    }
}

/// Claims a successor taken eagerly and runs it, as a delivery's claim
/// does; on shutdown it is queued for another worker instead.
async fn run(
    worker: &Worker,
    message: RunInvocation,
    known: Option<Known>,
    stop: CancellationToken,
    deadline: CancellationToken,
) {
    if stop.is_cancelled() {
        return hand_back(worker, message).await;
    }
    let claimed = retry_transient("claiming an invocation", worker.settings.transient_patience, &stop, || {
        worker.claim_to_run(message, known.clone())
    })
    .await;
    match claimed {
        Ok(Some(Claimed::Run(inv, preloaded))) => worker.execute(inv, preloaded.map(|p| *p), stop, deadline).await,
        Ok(_) => {}
        // Its reservation lapses and the relay publishes it for any worker.
        Err(e) if crate::roles::is_transient(&e) => {
            tracing::warn!(error = %format!("{e:#}"), "could not claim a successor taken eagerly; the relay publishes it after its reservation");
        }
        Err(e) => {
            if let Err(again) = worker.fail_unclaimable(message, &e).await {
                tracing::warn!(error = %format!("{again:#}"), "could not fail a successor that cannot be claimed; the relay publishes it after its reservation");
            }
        }
    }
}

/// Queues a successor this worker took but will not run (it is shutting
/// down), so another worker claims it at once.
async fn hand_back(worker: &Worker, message: RunInvocation) {
    let queued = async {
        let mut client = db(&worker.pool).await?;
        let tx = begin(&mut client).await?;
        let run = FleetMessage::run(message.run_id, message.invocation_id, InvocationKind::Handoff);
        baton_store::outbox::enqueue_fleet(&tx, &run).await?;
        commit(tx).await?;
        anyhow::Ok(())
    };
    match queued.await {
        Ok(()) => {
            tracing::info!(invocation = %message.invocation_id, "successor taken eagerly queued for another worker");
        }
        Err(e) => {
            tracing::warn!(invocation = %message.invocation_id, error = %format!("{e:#}"), "could not queue a successor taken eagerly; the relay publishes it after its reservation");
        }
    }
}
