//! The store's error, and the one place that decides which database failures
//! are transient (retry later, as after a lost connection) and which are
//! permanent for what was being done.

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
    /// The step being written is already in the transcript: an earlier
    /// attempt's commit reached the database (and a standby that took over)
    /// though its answer was lost with the connection. Transient: the
    /// invocation carries on from what is stored, asking nothing again.
    #[error("invocation {invocation}'s step {seq} is already stored: an earlier commit went through unconfirmed")]
    StepStored { invocation: uuid::Uuid, seq: i32 },
    /// The database's migrations are not the ones this binary was built with.
    #[error("{0}")]
    Schema(#[from] baton_domain::schema::Mismatch),
}

/// A database error with the server's own words (tokio-postgres shows only "db error").
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

impl Error {
    /// Whether the failure will likely pass on its own, so the same work is
    /// worth trying again later (as after a lost connection) rather than
    /// being failed or dead-lettered: see [`transient_sqlstate`].
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Db(e) => transient_postgres(e),
            Error::Pool(e) => transient_pool(e),
            Error::StepStored { .. } => true,
            _ => false,
        }
    }

    /// Whether the server aborted the transaction so it can simply be run
    /// again at once: class 40 (deadlock, serialization failure).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Db(e) if e.code().is_some_and(|c| c.code().starts_with("40")))
    }
}

/// SQLSTATEs that describe the server's situation, not the statement: the
/// same statement succeeds once the situation passes.
///
/// - `08…` connection exceptions; `53…` insufficient resources (too many
///   connections, out of memory, disk full);
/// - `57014` query cancelled (a statement timeout, `pg_cancel_backend`),
///   `57P01`–`57P03` and `57P05` admin or crash shutdown, cannot connect now,
///   idle session timeout (`57P04`, the database was dropped, is permanent);
/// - `40…` rollbacks (serialization failure, deadlock, statement completion
///   unknown), except `40002`, a constraint that failed at commit;
/// - `25006` read-only transaction (a failover in progress, or a database set
///   read-only for maintenance), `25P03` idle-in-transaction timeout;
/// - `55P03` lock not available (a `lock_timeout`), `55006` object in use;
/// - `58000`, `58030` system and I/O errors on the server.
pub fn transient_sqlstate(code: &str) -> bool {
    const CLASSES: [&str; 3] = ["08", "53", "40"];
    const CODES: [&str; 11] =
        ["57014", "57P01", "57P02", "57P03", "57P05", "25006", "25P03", "55P03", "55006", "58000", "58030"];
    (CLASSES.iter().any(|class| code.starts_with(class)) && code != "40002") || CODES.contains(&code)
}

/// A Postgres client error: by its SQLSTATE when the server sent one,
/// otherwise by whether the connection itself failed (closed, refused,
/// reset, timed out), as opposed to a value that could not be converted.
pub fn transient_postgres(e: &tokio_postgres::Error) -> bool {
    if let Some(code) = e.code() {
        return transient_sqlstate(code.code());
    }
    if e.is_closed()
        || std::error::Error::source(e).is_some_and(<dyn std::error::Error + 'static>::is::<std::io::Error>)
    {
        return true;
    }
    // tokio-postgres exposes no error kind; these are its words for a failed
    // connection, a timeout and a server that broke the protocol mid-way.
    let text = e.to_string();
    [
        "error connecting to server",
        "error communicating with the server",
        "timeout waiting for server",
        "unexpected message from server",
    ]
    .iter()
    .any(|words| text.starts_with(words))
}

/// A pool error: waiting for a connection (the pool is busy or the server
/// slow to accept) is transient, like the connection errors behind it.
pub fn transient_pool(e: &deadpool_postgres::PoolError) -> bool {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Timeout(_) | PoolError::Closed => true,
        PoolError::Backend(e) => transient_postgres(e),
        PoolError::PostCreateHook(_) | PoolError::NoRuntimeSpecified => false,
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Corrupt(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::transient_sqlstate;

    #[test]
    fn passing_server_situations_are_transient() {
        for code in
            ["08006", "08001", "57014", "25006", "55P03", "53300", "57P03", "57P01", "57P02", "40001", "40P01", "25P03"]
        {
            assert!(transient_sqlstate(code), "{code} should be transient");
        }
    }

    #[test]
    fn statement_and_data_errors_are_permanent() {
        // unique violation, bad syntax, undefined table, invalid text, a
        // deferred constraint at commit, a dropped database, disk quota.
        for code in ["23505", "42601", "42P01", "22P02", "40002", "57P04", "23503", "42501"] {
            assert!(!transient_sqlstate(code), "{code} should be permanent");
        }
    }
}
