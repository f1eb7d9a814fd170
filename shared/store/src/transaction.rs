//! The store's transactions, and the one trait its functions take a
//! connection or a transaction by.
//!
//! A transaction's `BEGIN` costs no round trip of its own: [`crate::begin`]
//! queues it on the connection and returns, and the transaction's first
//! statement goes out behind it. `tokio-postgres` waits for `BEGIN`'s
//! answer before it hands out a transaction, which is one round trip per
//! transaction (four of a request's 25); hence a type of the store's own.
//! A connection sends what it is given in order and the server runs it in
//! order, so the first statement runs inside the transaction as before.
//!
//! A transaction that is dropped without a commit is rolled back (its
//! `ROLLBACK` sent as it is dropped), as `tokio-postgres`'s are.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Error, Row, Statement, ToStatement};

/// A connection of the pool, or a transaction on one: what the store's
/// functions read and write through. `deadpool_postgres`'s own trait is
/// sealed: no other type may take it.
pub trait GenericClient: Sync + Send {
    /// Like `deadpool_postgres::ClientWrapper::prepare_cached`: prepared once per connection.
    fn prepare_cached(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// Like `deadpool_postgres::ClientWrapper::prepare_typed_cached`.
    fn prepare_typed_cached(
        &self,
        query: &str,
        types: &[Type],
    ) -> impl Future<Output = Result<Statement, Error>> + Send;

    /// Like `tokio_postgres::Client::query`.
    fn query<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send
    where
        T: ?Sized + ToStatement + Sync + Send;

    /// Like `tokio_postgres::Client::query_one`.
    fn query_one<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Row, Error>> + Send
    where
        T: ?Sized + ToStatement + Sync + Send;

    /// Like `tokio_postgres::Client::query_opt`.
    fn query_opt<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<Option<Row>, Error>> + Send
    where
        T: ?Sized + ToStatement + Sync + Send;

    /// Like `tokio_postgres::Client::execute`.
    fn execute<T>(
        &self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> impl Future<Output = Result<u64, Error>> + Send
    where
        T: ?Sized + ToStatement + Sync + Send;

    /// Like `tokio_postgres::Client::batch_execute`.
    fn batch_execute(&self, query: &str) -> impl Future<Output = Result<(), Error>> + Send;

    /// The store's own transaction this is, if it is one (a write can then
    /// go out with its commit: [`Transaction::write_at_commit_then`]).
    fn as_transaction(&self) -> Option<&Transaction<'_>> {
        None
    }
}

/// The methods of [`GenericClient`] on a type that has a
/// `deadpool_postgres`-cached `prepare_cached` and derefs to a
/// `tokio-postgres` client or transaction (`$pg`); `$cache`, the type
/// whose `prepare_cached` caches. Each call's future is boxed, as
/// `deadpool_postgres`'s trait boxes it: a function awaiting many
/// statements then holds a pointer for each, not the statement's state (a
/// few kilobytes in a debug build; unboxed, a test's future overflowed its
/// thread's stack).
macro_rules! generic_client {
    ($for:ty, $cache:ty, $pg:ty $(, $more:item)*) => {
        impl GenericClient for $for {
            $($more)*

            fn prepare_cached(&self, query: &str) -> impl Future<Output = Result<Statement, Error>> + Send {
                Box::pin(<$cache>::prepare_cached(self, query))
            }

            fn prepare_typed_cached(
                &self,
                query: &str,
                types: &[Type],
            ) -> impl Future<Output = Result<Statement, Error>> + Send {
                Box::pin(<$cache>::prepare_typed_cached(self, query, types))
            }

            fn query<T>(
                &self,
                statement: &T,
                params: &[&(dyn ToSql + Sync)],
            ) -> impl Future<Output = Result<Vec<Row>, Error>> + Send
            where
                T: ?Sized + ToStatement + Sync + Send,
            {
                Box::pin(<$pg>::query(self, statement, params))
            }

            fn query_one<T>(
                &self,
                statement: &T,
                params: &[&(dyn ToSql + Sync)],
            ) -> impl Future<Output = Result<Row, Error>> + Send
            where
                T: ?Sized + ToStatement + Sync + Send,
            {
                Box::pin(<$pg>::query_one(self, statement, params))
            }

            fn query_opt<T>(
                &self,
                statement: &T,
                params: &[&(dyn ToSql + Sync)],
            ) -> impl Future<Output = Result<Option<Row>, Error>> + Send
            where
                T: ?Sized + ToStatement + Sync + Send,
            {
                Box::pin(<$pg>::query_opt(self, statement, params))
            }

            fn execute<T>(
                &self,
                statement: &T,
                params: &[&(dyn ToSql + Sync)],
            ) -> impl Future<Output = Result<u64, Error>> + Send
            where
                T: ?Sized + ToStatement + Sync + Send,
            {
                Box::pin(<$pg>::execute(self, statement, params))
            }

            fn batch_execute(&self, query: &str) -> impl Future<Output = Result<(), Error>> + Send {
                Box::pin(<$pg>::batch_execute(self, query))
            }
        }
    };
}

generic_client!(deadpool_postgres::Client, deadpool_postgres::ClientWrapper, tokio_postgres::Client);
generic_client!(
    deadpool_postgres::Transaction<'_>,
    deadpool_postgres::Transaction<'_>,
    tokio_postgres::Transaction<'_>
);

/// A transaction on a pooled connection ([`crate::begin`]); committed with
/// [`crate::commit`], rolled back when dropped before.
pub struct Transaction<'a> {
    client: &'a deadpool_postgres::Client,
    done: bool,
    /// Writes that go out with the commit ([`Transaction::write_at_commit`]).
    at_commit: std::sync::Mutex<Vec<(Statement, OwnedParams, Option<Then>)>>,
}

/// What to do with a write's rows once its transaction committed
/// ([`Transaction::write_at_commit_then`]).
pub type Then = Box<dyn FnOnce(&[Row]) + Send>;

/// A queued write's answer: its rows.
type Answer<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Vec<Row>, Error>> + Send + 'a>>;

/// A statement's parameters, owned: it is sent after its caller has gone on.
pub type OwnedParams = Vec<Box<dyn ToSql + Sync + Send>>;

/// Queues `query` (simple protocol) on the connection and returns: its
/// answer is read and dropped by the connection, behind nobody.
fn send(client: &tokio_postgres::Client, query: &str) -> Result<(), Error> {
    match poll_once(std::pin::pin!(client.batch_execute(query))) {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

/// Polls `future` once (a statement's future encodes and queues its
/// messages at its first poll): its answer, or the future still waiting.
fn poll_once<F: Future + Unpin>(mut future: F) -> Result<F::Output, F> {
    match std::pin::Pin::new(&mut future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => Ok(answer),
        Poll::Pending => Err(future),
    }
}

impl<'a> Transaction<'a> {
    /// Sends `BEGIN` and returns: the first statement follows it. Its
    /// answer is not read: `BEGIN` fails only on a connection that has
    /// failed (every statement after it fails too) or that is in a failed
    /// transaction (so is every statement after it, until a rollback).
    pub(crate) fn begin(client: &'a mut deadpool_postgres::Client) -> Result<Self, Error> {
        let client: &'a deadpool_postgres::Client = client;
        send(client, "BEGIN")?;
        Ok(Self { client, done: false, at_commit: Default::default() })
    }

    /// Queues a write (`statement`, prepared on this connection) to go out
    /// with the commit, which then reads its answer: the write costs no
    /// round trip of its own. For a write that nothing in the transaction
    /// reads afterwards: the statements sent after this call run before
    /// it. Should it fail, the commit is a rollback and returns its error;
    /// a transaction dropped uncommitted never sends it.
    pub fn write_at_commit(&self, statement: Statement, params: OwnedParams) {
        self.at_commit.lock().expect("not poisoned").push((statement, params, None));
    }

    /// [`Transaction::write_at_commit`], and `then` is given the rows the
    /// write returned once the transaction committed (never if it did not).
    pub fn write_at_commit_then(&self, statement: Statement, params: OwnedParams, then: Then) {
        self.at_commit.lock().expect("not poisoned").push((statement, params, Some(then)));
    }

    /// Commits: the writes queued for it go out first, then `COMMIT`, all
    /// at once, and their answers are read in order. If a write failed, the
    /// server rolled the transaction back instead (a `COMMIT` in a failed
    /// transaction does), and the write's error is returned.
    pub(crate) async fn commit(mut self) -> Result<(), Error> {
        let writes = std::mem::take(self.at_commit.get_mut().expect("not poisoned"));
        let pg: &tokio_postgres::Client = self.client;
        let params: Vec<Vec<&(dyn ToSql + Sync)>> =
            writes.iter().map(|(_, params, _)| params.iter().map(|p| p.as_ref() as _).collect()).collect();
        let mut sent = Vec::with_capacity(writes.len());
        for ((statement, _, _), params) in writes.iter().zip(&params) {
            match poll_once(Box::pin(pg.query(statement, params))) {
                Ok(Ok(rows)) => sent.push(Box::pin(std::future::ready(Ok(rows))) as Answer<'_>),
                // Not sent (a parameter its type refused, or the connection
                // gone): dropped, the transaction rolls back.
                Ok(Err(e)) => return Err(e),
                Err(waiting) => sent.push(waiting),
            }
        }
        self.done = true;
        let commit = match poll_once(Box::pin(pg.batch_execute("COMMIT"))) {
            Ok(answer) => return answer,
            Err(waiting) => waiting,
        };
        let mut answers = Vec::with_capacity(sent.len());
        let mut failed = None;
        for answer in sent {
            match answer.await {
                Ok(rows) => answers.push(rows),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        commit.await?;
        if let Some(e) = failed {
            return Err(e);
        }
        for ((_, _, then), rows) in writes.into_iter().zip(answers) {
            if let Some(then) = then {
                then(&rows);
            }
        }
        Ok(())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            // Rolled back, as tokio-postgres does: queued now, its answer dropped.
            let _ = send(self.client, "ROLLBACK");
        }
    }
}

/// The connection, for [`GenericClient`]'s methods: a statement on it
/// goes out behind `BEGIN`.
impl std::ops::Deref for Transaction<'_> {
    type Target = deadpool_postgres::Client;

    fn deref(&self) -> &Self::Target {
        self.client
    }
}

generic_client!(
    Transaction<'_>,
    deadpool_postgres::ClientWrapper,
    tokio_postgres::Client,
    fn as_transaction(&self) -> Option<&Transaction<'_>> {
        Some(self)
    }
);
