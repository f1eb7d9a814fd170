//! Baton's Postgres store. One function per query; each takes a client or a
//! transaction, so a state change, its journal events and its outbox rows
//! commit together. Writes made on behalf of a claimed invocation go through
//! [`invocations::fence`] first: a worker whose claim was taken over changes
//! nothing.
//!
//! # Layout
//! - [`requests`]: bridge requests and their events; what the bridge hears
//!   ([`requests::bridge`]), conversations, questions and answers, status
//!   callbacks.
//! - [`runs`]: runs, starting one ([`runs::start`]), the transitions that end
//!   invocations, tasks and runs ([`runs::ending`]), retries, budgets and
//!   the workspace.
//! - [`invocations`]: claims, leases, the fence, transitions; a new
//!   invocation with its task ([`invocations::spawn`]), task records, the
//!   persisted transcript ([`invocations::steps`]).
//! - [`claims`]: a claim that starts an invocation, with all its first step reads.
//! - [`journal`]: run events, written beside every change (every folder writes them).
//! - [`outbox`]: messages waiting for the relay, the rows a role publishes
//!   itself right after the commit that wrote them ([`after_commit`]), and a
//!   copy of every bridge message it queued ([`outbox::sent`]).
//! - [`profiles`]: agent profiles, skills and routes; fleet-wide model limits;
//!   fleet-wide settings (the disclosure policy).
//! - [`overview`]: what an operator looks at, and the metrics gauges' figures.
//! - [`console`]: the operator console's sessions, login throttling and shared
//!   tokens, and the reply queues a dead letter may be replayed to.
//! - [`workers`]: the registry of the fleet's processes (heartbeats, stops), and what each holds.
//! - [`run_page`]: what the console's run page reads of its invocations' times and holders.
//! - [`retention`]: what `baton runs prune` deletes: old runs, their requests' trails, idle conversations.
//! - [`coding`]: coding agents' diffs and resumable sessions, and `[[projects]]`.
//! - [`group_commit`]: units of work that are ready together committed in one transaction.
//! - [`connect`]: pools and connections, with the fleet's session timeouts and keepalives.
//! - [`schema`]: creating the database, migrating under a lock, the startup check.
//! - `error`: the store's error and which failures are transient.
//! - `decode`: typed values out of rows; a value that does not read is `Error::Corrupt`.
//! - `sql`: every statement through the client's statement cache.

pub mod claims;
pub mod coding;
pub mod connect;
pub mod console;
mod decode;
mod error;
pub mod group_commit;
pub mod invocations;
pub mod journal;
pub mod outbox;
pub mod overview;
pub mod profiles;
pub mod requests;
pub mod retention;
pub mod run_page;
pub mod runs;
pub mod schema;
mod sql;
mod transaction;
pub mod workers;

pub use connect::{begin, client, commit, discard, pool, pool_with, SessionConfig};
pub use deadpool_postgres::{Client, Pool, PoolError};
pub use error::{transient_pool, transient_postgres, transient_sqlstate, Error};
pub use outbox::after_commit;
pub use schema::{ensure_database, migrate, migrate_to};
pub use tokio_postgres;
pub use transaction::{GenericClient, OwnedParams, Then, Transaction};

pub type Result<T, E = Error> = std::result::Result<T, E>;
