//! Baton's Postgres store. One function per query; each takes a client or a
//! transaction, so a state change, its journal events and its outbox rows
//! commit together. Writes made on behalf of a claimed invocation go through
//! [`invocations::fence`] first: a worker whose claim was taken over changes
//! nothing.
//!
//! # Layout
//! - [`requests`]: bridge requests, their events and status messages.
//! - [`runs`]: runs and their terminal states.
//! - [`budgets`]: run budgets and what each run has spent.
//! - [`invocations`]: claims, leases, the fence, invocation transitions.
//! - [`tasks`]: handoff and delegated task records.
//! - [`steps`]: the persisted transcript of each invocation.
//! - [`journal`]: run events.
//! - [`workspace`]: files, read marks and the commit ledger.
//! - [`outbox`]: messages waiting for the relay.
//! - [`profiles`]: agent profiles, skills and routes.
//! - [`callbacks`]: HTTP status callbacks waiting for delivery.
//! - [`settings`]: fleet-wide settings (the disclosure policy).

pub mod budgets;
pub mod callbacks;
pub mod invocations;
pub mod journal;
pub mod outbox;
pub mod profiles;
pub mod requests;
pub mod runs;
pub mod settings;
pub mod steps;
pub mod tasks;
pub mod workspace;
mod sql;

use std::str::FromStr;

pub use deadpool_postgres::{Client, GenericClient, Pool, PoolError, Transaction};
pub use tokio_postgres;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database error: {}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    #[error("database pool error: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
    #[error("invalid database url: {0}")]
    Config(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A stored profile or skill this version cannot read (written by a newer
    /// version during a rolling upgrade, or edited by hand): permanent for
    /// whatever needs it, so it fails visibly instead of being retried.
    #[error("the {kind} `{id}` cannot be read by this version of Baton: {reason}")]
    Unreadable { kind: &'static str, id: String, reason: String },
    /// The claim this worker held was taken over (or the invocation ended):
    /// the write was refused and the worker must stop.
    #[error("claim lost: invocation {0} is no longer held at this epoch")]
    Fenced(uuid::Uuid),
}

/// A database error with the server's own words (tokio-postgres shows only "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

impl Error {
    /// Whether the database itself went away or is failing over (worth a
    /// reconnect and a later retry): SQLSTATE classes 08 (connection), 53
    /// (resources) and 57P (operator intervention), or a closed client.
    pub fn is_connection(&self) -> bool {
        match self {
            Error::Pool(_) => true,
            Error::Db(e) => match e.code() {
                Some(code) => ["08", "53", "57P"].iter().any(|class| code.code().starts_with(class)),
                None => e.is_closed() || e.to_string().contains("connection"),
            },
            _ => false,
        }
    }

    /// Whether the server aborted the transaction so it can simply be run
    /// again: class 40 (deadlock, serialization failure).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Db(e) if e.code().is_some_and(|c| c.code().starts_with("40")))
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Builds a small pool; roles size it for what they do.
pub fn pool(database_url: &str, max_size: usize) -> Result<Pool> {
    let pg = tokio_postgres::Config::from_str(database_url).map_err(|e| Error::Config(e.to_string()))?;
    let manager = deadpool_postgres::Manager::from_config(
        pg,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(std::time::Duration::from_secs(10)))
        .create_timeout(Some(std::time::Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| Error::Config(e.to_string()))
}

/// Applies the embedded migrations (refinery keeps track of what ran).
pub async fn migrate(pool: &Pool) -> Result<usize> {
    let mut client = pool.get().await?;
    let report = embedded::migrations::runner().run_async(&mut **client).await?;
    Ok(report.applied_migrations().len())
}

/// Creates the database named in `database_url` if it does not exist, by
/// connecting to the server's `postgres` database.
pub async fn ensure_database(database_url: &str) -> Result<()> {
    let cfg = tokio_postgres::Config::from_str(database_url).map_err(|e| Error::Config(e.to_string()))?;
    let name = cfg.get_dbname().unwrap_or("postgres").to_string();
    let mut admin = cfg.clone();
    admin.dbname("postgres");
    let (client, conn) = admin.connect(tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await?.is_some();
    if !exists {
        let sql = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
        if let Err(e) = client.batch_execute(&sql).await {
            // Another process may have created it meanwhile.
            if e.code() != Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) {
                return Err(e.into());
            }
        }
    }
    drop(client);
    let _ = conn.await;
    Ok(())
}
