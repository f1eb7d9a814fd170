//! Baton's Postgres store. One function per query; each takes a client or a
//! transaction, so a state change, its journal events and its outbox rows
//! commit together. Writes made on behalf of a claimed invocation go through
//! [`invocations::fence`] first: a worker whose claim was taken over changes
//! nothing.
//!
//! # Layout
//! - [`requests`]: bridge requests, their events and status messages.
//! - [`bridge`]: what the bridge hears (status changes, the final reply), through the outbox.
//! - [`start`]: starting a request's run (intake on arrival, the lifecycle for a chat's next request).
//! - [`conversations`]: a bridge's cancels, and one chat's requests taking turns under a row lock.
//! - [`questions`]: questions agents ask their users (`ask_user`), and the answers received.
//! - [`runs`]: runs and their terminal states.
//! - [`budgets`]: run budgets and what each run has spent.
//! - [`invocations`]: claims, leases, the fence, invocation transitions.
//! - [`tasks`]: handoff and delegated task records.
//! - [`lifecycle`]: transitions that end invocations, tasks and runs, with their events and outbox messages.
//! - [`spawn`]: a new invocation with its task and journal events (root, handoff, delegation).
//! - [`steps`]: the persisted transcript of each invocation.
//! - [`journal`]: run events.
//! - [`workspace`]: files, read marks and the commit ledger.
//! - [`outbox`]: messages waiting for the relay, fleet messages among them.
//! - [`after_commit`] (part of `outbox`): rows a role publishes itself right after the commit that wrote them.
//! - [`gauges`]: fleet-wide figures for the metrics gauges (live invocations, outbox backlog, hop waits).
//! - [`overview`]: what an operator looks at: runs listed and filtered, handoffs waiting, fleet counts.
//! - [`retry`]: a failed run resumed from its last stored step.
//! - [`sent`]: a copy of every message queued for a bridge, for operators.
//! - [`profiles`]: agent profiles, skills and routes (with the model limit each profile's calls are under).
//! - [`limits`]: fleet-wide limits on model calls: admission, end of a call, a provider's pause, usage.
//! - [`callbacks`]: HTTP status callbacks waiting for delivery.
//! - [`settings`]: fleet-wide settings (the disclosure policy).
//! - [`connect`]: pools and connections, with the fleet's session timeouts and keepalives.
//! - [`schema`]: creating the database, migrating under a lock, the startup check.
//! - `error`: the store's error and which failures are transient.
//! - `decode`: typed values out of rows; a value that does not read is `Error::Corrupt`.

pub mod bridge;
pub mod budgets;
pub mod callbacks;
pub mod connect;
pub mod conversations;
mod decode;
mod error;
pub mod gauges;
pub mod invocations;
pub mod journal;
pub mod lifecycle;
pub mod limits;
pub mod outbox;
pub mod overview;
pub mod profiles;
pub mod questions;
pub mod requests;
pub mod retry;
pub mod runs;
pub mod schema;
pub mod sent;
pub mod settings;
pub mod spawn;
mod sql;
pub mod start;
pub mod steps;
pub mod tasks;
pub mod workspace;

pub use connect::{begin, client, commit, pool, pool_with, SessionConfig};
pub use deadpool_postgres::{Client, GenericClient, Pool, PoolError, Transaction};
pub use error::{transient_pool, transient_postgres, transient_sqlstate, Error};
pub use outbox::after_commit;
pub use schema::{ensure_database, migrate};
pub use tokio_postgres;

pub type Result<T, E = Error> = std::result::Result<T, E>;
