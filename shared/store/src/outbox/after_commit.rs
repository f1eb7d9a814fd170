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

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use super::Row;

/// Where a role's committed rows go: its in-process publisher.
#[derive(Clone, Debug)]
pub struct Publishing {
    to: UnboundedSender<Vec<Row>>,
    grace: Duration,
}

impl Publishing {
    /// A publishing handle and the receiving end the role's publisher reads:
    /// one `Vec` per committed transaction, in commit order.
    pub fn new(grace: Duration) -> (Self, UnboundedReceiver<Vec<Row>>) {
        let (to, rows) = unbounded_channel();
        (Self { to, grace }, rows)
    }

    /// The grace before the relay may sweep a row, while the publisher runs.
    fn live_grace(&self) -> Option<Duration> {
        (!self.to.is_closed()).then_some(self.grace)
    }
}

struct Scope {
    publishing: Publishing,
    written: RefCell<Vec<Row>>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Runs `work` with the outbox rows its transactions write published by
/// `publishing` right after each commit.
pub async fn scope<F: Future>(publishing: Publishing, work: F) -> F::Output {
    SCOPE.scope(Scope { publishing, written: RefCell::new(vec![]) }, work).await
}

/// The publishing of the current task, for a task it spawns (task-local
/// values do not pass to spawned tasks by themselves).
pub fn current() -> Option<Publishing> {
    SCOPE.try_with(|s| s.publishing.clone()).ok()
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

/// A transaction begins: rows of one that was dropped are forgotten.
pub(crate) fn began() {
    let _ = SCOPE.try_with(|s| s.written.borrow_mut().clear());
}

/// The transaction committed: its rows go to the publisher. If it has
/// stopped, they stay in the outbox for the relay's sweep.
pub(crate) fn committed() {
    let _ = SCOPE.try_with(|s| {
        let rows = std::mem::take(&mut *s.written.borrow_mut());
        if !rows.is_empty() {
            let _ = s.publishing.to.send(rows);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Message;

    fn row(id: i64) -> Row {
        let message = Message {
            queue: "q".into(),
            external: false,
            message_id: None,
            correlation_id: None,
            body: serde_json::json!({}),
            mandatory: false,
        };
        Row { id, attempts: 0, message, trace: None }
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

    #[tokio::test]
    async fn without_a_scope_or_a_publisher_rows_are_the_relays_at_once() {
        assert_eq!(grace(), None);
        let (publishing, rows) = Publishing::new(Duration::from_secs(2));
        drop(rows);
        scope(publishing, async { assert_eq!(grace(), None) }).await;
    }
}
