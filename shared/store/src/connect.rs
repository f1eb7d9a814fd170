//! Connections and pools. The fleet's sessions carry server-side timeouts
//! and TCP keepalives, so a worker frozen inside a transaction (`SIGSTOP`, a
//! paused container) or a peer that vanished cannot hold a row lock, and with
//! it takeovers, fences and cancels, for ever.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Client, Pool, Transaction};

use crate::{Error, Result};

/// Per-session limits, sent as startup options (no extra round trip, and a
/// reconnected session gets them too). `None` leaves the server's own
/// setting; zero turns a timeout off, as in Postgres.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Longest a single statement may run.
    pub statement_timeout: Option<Duration>,
    /// Longest a statement may wait for a lock (a row held by a stalled worker).
    pub lock_timeout: Option<Duration>,
    /// A session idle inside a transaction this long is ended by the server,
    /// releasing its locks: a frozen worker's transaction is rolled back.
    pub idle_in_transaction_timeout: Option<Duration>,
    /// Idle time before TCP keepalive probes start, on both ends.
    pub keepalive: Duration,
    /// How long the client waits for a silent server (a crashed host, a
    /// partition: no reset, packets just vanish) before it drops the
    /// connection: sent data left unacknowledged this long, or keepalive
    /// probes unanswered (`TCP_USER_TIMEOUT`). With the keepalive, the bound
    /// on how long a statement hangs on a host that went quiet.
    pub tcp_user_timeout: Duration,
    /// How long one host of `DATABASE_URL` may take to accept a connection
    /// before the next one is tried: a host that went quiet costs every new
    /// connection this much before the promoted standby is reached.
    pub connect_timeout: Duration,
    /// Shown in `pg_stat_activity`, so operators see which process holds what.
    pub application_name: Option<String>,
}

impl Default for SessionConfig {
    /// The fleet's defaults: every statement on the hot path takes
    /// milliseconds, and no transaction waits on anything but Postgres.
    fn default() -> Self {
        Self {
            statement_timeout: Some(Duration::from_secs(30)),
            lock_timeout: Some(Duration::from_secs(10)),
            idle_in_transaction_timeout: Some(Duration::from_secs(10)),
            keepalive: Duration::from_secs(10),
            tcp_user_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            application_name: None,
        }
    }
}

impl SessionConfig {
    /// A session with the server's own statement limits (migrations, operator
    /// commands that may legitimately run long), still with keepalives.
    pub fn unlimited() -> Self {
        Self { statement_timeout: None, lock_timeout: None, idle_in_transaction_timeout: None, ..Self::default() }
    }

    /// The `-c name=value` startup options for these limits.
    fn options(&self) -> String {
        let secs = |d: Duration| d.as_secs().max(1);
        let mut options = vec![];
        let limits = [
            ("statement_timeout", self.statement_timeout),
            ("lock_timeout", self.lock_timeout),
            ("idle_in_transaction_session_timeout", self.idle_in_transaction_timeout),
        ];
        for (name, limit) in limits {
            if let Some(limit) = limit {
                options.push(format!("-c {name}={}", limit.as_millis()));
            }
        }
        options.push(format!("-c tcp_keepalives_idle={}", secs(self.keepalive)));
        options.push(format!("-c tcp_keepalives_interval={}", secs(self.keepalive / 3)));
        options.push("-c tcp_keepalives_count=3".into());
        options.push(format!("-c tcp_user_timeout={}", self.tcp_user_timeout.as_millis()));
        options.join(" ")
    }
}

/// The connection config for `database_url` with these session limits,
/// keeping any options the URL already sets (they come first, ours win).
pub fn config(database_url: &str, session: &SessionConfig) -> Result<tokio_postgres::Config> {
    let mut pg = tokio_postgres::Config::from_str(database_url).map_err(|e| Error::Config(e.to_string()))?;
    let options = match pg.get_options() {
        Some(given) if !given.trim().is_empty() => format!("{given} {}", session.options()),
        _ => session.options(),
    };
    pg.options(options);
    // The client's side: probe an idle socket, and give up on one whose
    // peer stopped answering, instead of waiting for the kernel's hours.
    pg.keepalives(true)
        .keepalives_idle(session.keepalive)
        .keepalives_interval((session.keepalive / 3).max(Duration::from_secs(1)))
        .keepalives_retries(3)
        .tcp_user_timeout(session.tcp_user_timeout)
        .connect_timeout(session.connect_timeout);
    if let Some(name) = &session.application_name {
        pg.application_name(name.as_str());
    }
    Ok(pg)
}

/// A small pool for a command (migrations, operator commands): keepalives,
/// no statement limits.
pub fn pool(database_url: &str, max_size: usize) -> Result<Pool> {
    pool_with(database_url, max_size, &SessionConfig::unlimited())
}

/// A pool whose sessions carry `session`'s limits; roles size it for what they do.
pub fn pool_with(database_url: &str, max_size: usize, session: &SessionConfig) -> Result<Pool> {
    let pg = config(database_url, session)?;
    // Long enough to try every host of a multi-host URL in turn, or a
    // silent first host would cut each attempt before the next is tried.
    let create_timeout = session.connect_timeout * pg.get_hosts().len().max(1) as u32 + Duration::from_secs(3);
    let manager = deadpool_postgres::Manager::from_config(
        pg,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(create_timeout))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| Error::Config(e.to_string()))
}

/// One connection outside any pool (the relay's LISTEN), with its driver task.
pub async fn connect(
    database_url: &str,
    session: &SessionConfig,
) -> Result<(
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
)> {
    Ok(config(database_url, session)?.connect(tokio_postgres::NoTls).await?)
}

/// A client from the pool. Its failure, like a transaction's through
/// [`begin`] and [`commit`], is the store's [`Error`], which
/// says whether it passes on its own (`is_transient`).
pub async fn client(pool: &Pool) -> Result<Client> {
    Ok(pool.get().await?)
}

/// Takes a connection out of its pool and closes it: one that hung on a
/// server gone quiet would only hang again for the next user.
pub fn discard(client: Client) {
    drop(deadpool_postgres::Object::take(client));
}

/// Begins a transaction; outbox rows it writes are published by this
/// process after [`commit`] when it runs in an [`after_commit::scope`](crate::outbox::after_commit::scope).
pub async fn begin(client: &mut Client) -> Result<Transaction<'_>> {
    crate::outbox::after_commit::began();
    Ok(client.transaction().await?)
}

/// Commits, then hands the outbox rows the transaction wrote to this
/// process's publisher, if it has one.
pub async fn commit(tx: Transaction<'_>) -> Result<()> {
    tx.commit().await?;
    crate::outbox::after_commit::committed();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_become_startup_options_and_keep_the_urls_own() {
        let session = SessionConfig { application_name: Some("baton-test".into()), ..SessionConfig::default() };
        let pg = config("postgres://u@h/db?options=-c%20search_path%3Dx", &session).unwrap();
        let options = pg.get_options().unwrap();
        assert!(options.starts_with("-c search_path=x "), "{options}");
        for part in [
            "statement_timeout=30000",
            "lock_timeout=10000",
            "idle_in_transaction_session_timeout=10000",
            "tcp_keepalives_idle=10",
            "tcp_user_timeout=10000",
        ] {
            assert!(options.contains(part), "{part} missing from {options}");
        }
        assert_eq!(pg.get_application_name(), Some("baton-test"));
        assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(10));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&Duration::from_secs(10)));
    }

    #[test]
    fn a_pool_tries_every_host_of_a_multi_host_url_before_it_gives_up() {
        let session = SessionConfig::default();
        let pool =
            pool_with("postgres://u@10.0.0.1:5432,10.0.0.2:5432/db?target_session_attrs=read-write", 1, &session)
                .unwrap();
        let timeouts = pool.timeouts();
        assert!(timeouts.create.unwrap() > session.connect_timeout * 2, "{timeouts:?}");
        let pg = config("postgres://u@h1,h2/db", &session).unwrap();
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(2)));
    }

    #[test]
    fn commands_run_without_statement_limits() {
        let options = SessionConfig::unlimited().options();
        assert!(!options.contains("statement_timeout") && !options.contains("lock_timeout"), "{options}");
        assert!(options.contains("tcp_keepalives_idle=10"), "{options}");
    }
}
