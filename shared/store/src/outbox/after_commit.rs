//! Publishing right after the commit: a role that can publish in process
//! runs its work inside [`scope`]; outbox rows written there are collected
//! per transaction and handed to the role's publisher as soon as the
//! transaction that wrote them commits ([`crate::commit`]), so a message
//! leaves without waiting for the relay.
//!
//! Such rows are written due only after a grace period
//! (`next_attempt_at = now() + grace`) and raise no notification: the relay
//! leaves them to the process that wrote them and sweeps them only if they
//! are still there after the grace (the process died between its commit and
//! its publish, or the broker refused the message). Outside a scope, or when
//! the role's publisher is gone, rows are due at once and the relay is
//! notified, as before.
//!
//! The rows of a transaction are kept with the task that runs it: a
//! transaction begun through [`crate::begin`] starts an empty list, a commit
//! through [`crate::commit`] hands it over, and a transaction dropped
//! without a commit leaves its list to be cleared by the next `begin`.
//!
//! **Eager dispatch.** A role that runs invocations may also take a
//! handoff's successor itself ([`Eager`]): while the handoff's transaction
//! runs, a free slot of the process is reserved, the successor is written
//! reserved for this process (its lease, still `created`) and without an
//! outbox row, and once the transaction commits it goes to the process with
//! its slot, which claims it as a delivery would. Should the process die
//! first, the reservation lapses (it lasts what an outbox row is left to its
//! writer) and the relay's sweep of stalled invocations publishes the successor.
//!
//! **Answers.** A transaction that answers a bridge request
//! (`runs::answer::collect`) notes it here; the process's metrics hear of
//! it ([`observe_answers`]) once that transaction commits.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use uuid::Uuid;

use super::Row;

/// Where a role's committed rows go: its in-process publisher.
#[derive(Clone, Debug)]
pub struct Publishing {
    to: UnboundedSender<Vec<Row>>,
    grace: Duration,
    eager: Option<Eager>,
}

/// A slot of the process, held for a successor it takes eagerly: dropped,
/// it is free again.
pub type Slot = Box<dyn Send>;

/// A process that takes handoffs' successors itself when it has a free
/// slot (see the module's documentation).
#[derive(Clone)]
pub struct Eager {
    owner: String,
    lease: Duration,
    reserve: Arc<dyn Fn() -> Option<Slot> + Send + Sync>,
    to: UnboundedSender<Taken>,
}

impl std::fmt::Debug for Eager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Eager").field("owner", &self.owner).field("lease", &self.lease).finish_non_exhaustive()
    }
}

impl Eager {
    /// `owner` reserves a successor for `lease` with a slot `reserve` gives
    /// (`None`: no slot free, the successor is queued as usual); what it
    /// took arrives on the receiver once its transaction committed.
    pub fn new(
        owner: &str,
        lease: Duration,
        reserve: impl Fn() -> Option<Slot> + Send + Sync + 'static,
    ) -> (Self, UnboundedReceiver<Taken>) {
        let (to, taken) = unbounded_channel();
        (Self { owner: owner.to_string(), lease, reserve: Arc::new(reserve), to }, taken)
    }
}

/// A successor this process took, committed, with the slot it runs in and
/// the trace context its message would have carried.
pub struct Taken {
    pub run_id: Uuid,
    pub invocation_id: Uuid,
    pub slot: Slot,
    pub trace: Option<super::Trace>,
    /// What the transaction that wrote it knew of it, for its claim.
    pub known: Option<Known>,
}

/// What the process that took an invocation knows of it before claiming it
/// (the claims module's `claim_taken_here`): its profile, and a root's brief as
/// rendered from the request intake holds (its row stores none).
#[derive(Debug, Clone)]
pub struct Known {
    pub profile_id: String,
    pub root_brief: Option<String>,
}

/// A reservation made while a transaction runs: who holds it, for how long.
pub(crate) struct Reserved {
    pub owner: String,
    pub lease: Duration,
    slot: Slot,
}

impl Publishing {
    /// A publishing handle and the receiving end the role's publisher reads:
    /// one `Vec` per committed transaction, in commit order.
    pub fn new(grace: Duration) -> (Self, UnboundedReceiver<Vec<Row>>) {
        let (to, rows) = unbounded_channel();
        (Self { to, grace, eager: None }, rows)
    }

    /// The same, taking handoffs' successors itself through `eager`.
    pub fn with_eager(self, eager: Eager) -> Self {
        Self { eager: Some(eager), ..self }
    }

    /// The grace before the relay may sweep a row, while the publisher runs.
    fn live_grace(&self) -> Option<Duration> {
        (!self.to.is_closed()).then_some(self.grace)
    }
}

/// A bridge request answered by a transaction (`runs::answer::collect`):
/// what the process's metrics count once that transaction commits.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub source: &'static str,
    pub target_agent: &'static str,
    pub outcome: &'static str,
    /// The run's time, less what it waited for its user's answers.
    pub took: Option<Duration>,
}

/// Who hears of each answer committed in a scope (the process's metrics).
static ANSWERS: std::sync::OnceLock<fn(&Answered)> = std::sync::OnceLock::new();

/// Sets who hears of each answer committed in a scope; the first call wins.
pub fn observe_answers(observer: fn(&Answered)) {
    let _ = ANSWERS.set(observer);
}

struct Scope {
    publishing: Publishing,
    written: RefCell<Vec<Row>>,
    taken: RefCell<Vec<Taken>>,
    answered: RefCell<Vec<Answered>>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Runs `work` with the outbox rows its transactions write published by
/// `publishing` right after each commit. (A plain function returning the
/// task-local future: an `async fn` would hold `work` twice, as its
/// argument and as the future it awaits, and hops are spawned in it.)
pub fn scope<F: Future>(publishing: Publishing, work: F) -> impl Future<Output = F::Output> {
    let scope = Scope {
        publishing,
        written: RefCell::new(vec![]),
        taken: RefCell::new(vec![]),
        answered: RefCell::new(vec![]),
    };
    SCOPE.scope(scope, work)
}

/// The publishing of the current task, for a task it spawns (task-local
/// values do not pass to spawned tasks by themselves).
pub fn current() -> Option<Publishing> {
    SCOPE.try_with(|s| s.publishing.clone()).ok()
}

/// Whether the current task runs in a publishing scope (a role's work, not
/// an operator's command).
pub(crate) fn in_scope() -> bool {
    SCOPE.try_with(|_| ()).is_ok()
}

/// How long a row written now is left to this process before the relay may
/// sweep it; `None` when nothing here publishes it (the relay takes it at once).
pub(crate) fn grace() -> Option<Duration> {
    SCOPE.try_with(|s| s.publishing.live_grace()).ok().flatten()
}

/// Notes a row the current transaction wrote.
pub(crate) fn wrote(row: Row) {
    let _ = SCOPE.try_with(|s| s.written.borrow_mut().push(row));
}

/// A free slot of this process for a successor the current transaction
/// writes, if the process takes successors eagerly and has one.
pub(crate) fn reserve() -> Option<Reserved> {
    let eager = SCOPE.try_with(|s| s.publishing.eager.clone()).ok().flatten()?;
    if eager.to.is_closed() {
        return None;
    }
    let slot = (eager.reserve)()?;
    Some(Reserved { owner: eager.owner, lease: eager.lease, slot })
}

/// The current transaction wrote `invocation_id` reserved with `reserved`.
pub(crate) fn took(reserved: Reserved, run_id: Uuid, invocation_id: Uuid, known: Option<Known>) {
    let taken = Taken { run_id, invocation_id, slot: reserved.slot, trace: super::current_trace(), known };
    let _ = SCOPE.try_with(|s| s.taken.borrow_mut().push(taken));
}

/// The current transaction answered a request (heard of once it commits).
pub(crate) fn answered(answer: Answered) {
    let _ = SCOPE.try_with(|s| s.answered.borrow_mut().push(answer));
}

/// A transaction begins: rows (and successors, with their slots) of one
/// that was dropped are forgotten.
pub(crate) fn began() {
    let _ = SCOPE.try_with(|s| {
        s.written.borrow_mut().clear();
        s.taken.borrow_mut().clear();
        s.answered.borrow_mut().clear();
    });
}

/// The transaction committed: its rows go to the publisher, its successors
/// to the process. If the publisher has stopped, the rows stay in the
/// outbox for the relay's sweep; if the process has, the successors'
/// reservations lapse and the relay publishes them.
pub(crate) fn committed() {
    let _ = SCOPE.try_with(|s| {
        let rows = std::mem::take(&mut *s.written.borrow_mut());
        if !rows.is_empty() {
            let _ = s.publishing.to.send(rows);
        }
        let answered = std::mem::take(&mut *s.answered.borrow_mut());
        if let Some(observer) = ANSWERS.get() {
            answered.iter().for_each(observer);
        }
        let taken = std::mem::take(&mut *s.taken.borrow_mut());
        if let Some(eager) = s.publishing.eager.as_ref() {
            for successor in taken {
                let _ = eager.to.send(successor);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::{Message, Part};

    fn row(id: i64) -> Row {
        let message = Message {
            queue: "q".into(),
            external: false,
            message_id: None,
            correlation_id: None,
            body: serde_json::json!({}),
            mandatory: false,
        };
        Row { id, attempts: 0, message, trace: None, part: Part::ALONE, waits_for: None }
    }

    #[tokio::test]
    async fn only_rows_of_committed_transactions_reach_the_publisher() {
        let (publishing, mut rows) = Publishing::new(Duration::from_secs(2));
        scope(publishing, async {
            assert_eq!(grace(), Some(Duration::from_secs(2)));
            began();
            wrote(row(1));
            // dropped without a commit
            began();
            wrote(row(2));
            wrote(row(3));
            committed();
        })
        .await;
        let ids: Vec<i64> = rows.recv().await.unwrap().iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 3]);
        assert!(rows.recv().await.is_none(), "nothing else was handed over");
    }

    /// Slots of a test: how many are held right now.
    fn slots(n: usize) -> (Arc<std::sync::atomic::AtomicUsize>, impl Fn() -> Option<Slot> + Send + Sync) {
        struct Held(Arc<std::sync::atomic::AtomicUsize>);
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = held.clone();
        let reserve = move || {
            let taken = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if taken >= n {
                counter.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                return None;
            }
            Some(Box::new(Held(counter.clone())) as Slot)
        };
        (held, reserve)
    }

    #[tokio::test]
    async fn a_successor_taken_eagerly_reaches_the_process_only_if_its_transaction_commits() {
        let (held, free) = slots(2);
        let (eager, mut taken) = Eager::new("w1", Duration::from_secs(2), free);
        let (publishing, _rows) = Publishing::new(Duration::from_secs(2));
        let (run, a, b) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let held_in = held.clone();
        scope(publishing.with_eager(eager), async move {
            began();
            let r = reserve().expect("a free slot");
            assert_eq!((r.owner.as_str(), r.lease), ("w1", Duration::from_secs(2)));
            took(r, run, a, None);
            // rolled back: its slot is free again
            began();
            assert_eq!(held_in.load(std::sync::atomic::Ordering::SeqCst), 0);
            took(reserve().expect("a free slot"), run, b, None);
            let _third = reserve().expect("the second slot");
            assert!(reserve().is_none(), "no slot left: the successor is queued instead");
            committed();
        })
        .await;
        let successor = taken.recv().await.expect("the committed successor");
        assert_eq!((successor.run_id, successor.invocation_id), (run, b));
        assert_eq!(held.load(std::sync::atomic::Ordering::SeqCst), 1, "its slot travels with it");
        drop(successor);
        assert_eq!(held.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert!(taken.try_recv().is_err(), "the rolled-back successor never arrives");
    }

    #[tokio::test]
    async fn without_eager_dispatch_nothing_is_reserved() {
        let (publishing, _rows) = Publishing::new(Duration::from_secs(2));
        scope(publishing, async { assert!(reserve().is_none()) }).await;
        assert!(reserve().is_none(), "nor outside a scope");
        let (_, reserve_slot) = slots(1);
        let (eager, taken) = Eager::new("w1", Duration::from_secs(2), reserve_slot);
        drop(taken);
        let (publishing, _rows) = Publishing::new(Duration::from_secs(2));
        scope(publishing.with_eager(eager), async { assert!(reserve().is_none(), "nobody would run it") }).await;
    }

    #[tokio::test]
    async fn without_a_scope_or_a_publisher_rows_are_the_relays_at_once() {
        assert_eq!(grace(), None);
        let (publishing, rows) = Publishing::new(Duration::from_secs(2));
        drop(rows);
        scope(publishing, async { assert_eq!(grace(), None) }).await;
    }
}
