//! Connections and pools. The fleet's sessions carry server-side timeouts
//! and TCP keepalives, so a worker frozen inside a transaction (`SIGSTOP`, a
//! paused container) or a peer that vanished cannot hold a row lock, and with
//! it takeovers, fences and cancels, for ever.

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Client, Pool};

use crate::Transaction;

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
    let manager = deadpool_postgres::Manager::from_connect(
        pg,
        HostsInTurn,
        deadpool_postgres::ManagerConfig { recycling_method: deadpool_postgres::RecyclingMethod::Fast },
    );
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(create_timeout))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .pre_recycle(deadpool_postgres::Hook::sync_fn(|_, metrics| match lost::since(metrics.created) {
            true => Err(deadpool_postgres::HookError::message(
                "a connection opened before another one was lost: it may hang on the same server",
            )),
            false => Ok(()),
        }))
        .build()
        .map_err(|e| Error::Config(e.to_string()))
}

/// Opens a pool's connections through [`connect_in_turn`], and notes a
/// connection that ends in a failure (see [`lost`]).
struct HostsInTurn;

impl deadpool_postgres::Connect for HostsInTurn {
    fn connect(
        &self,
        pg: &tokio_postgres::Config,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = std::result::Result<
                        (tokio_postgres::Client, tokio::task::JoinHandle<()>),
                        tokio_postgres::Error,
                    >,
                > + Send
                + '_,
        >,
    > {
        let pg = pg.clone();
        Box::pin(async move {
            let (client, connection) = connect_in_turn(&pg).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    lost::note(&e);
                    tracing::warn!(target: "deadpool.postgres", "Connection error: {e}");
                }
            });
            Ok((client, task))
        })
    }
}

/// When this process last lost a connection to a failure (a server that
/// went quiet, crashed or shut down). The pools' other connections opened
/// before it are likely on the same server: a connection that went quiet
/// is otherwise found out only when a statement on it hangs for the TCP
/// user timeout, or by keepalives, seconds after the first one was. So a
/// pool drops, rather than lends, every idle connection opened before the
/// last loss, and opens a new one (to the host that now accepts). A loss
/// of one connection alone (a backend terminated) costs only reconnects.
mod lost {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::LazyLock;
    use std::time::Instant;

    static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
    /// Microseconds since [`EPOCH`] of the last loss, plus one (0: none).
    static LAST: AtomicU64 = AtomicU64::new(0);

    fn micros(at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(*EPOCH).as_micros()).unwrap_or(u64::MAX)
    }

    /// Notes the end of a connection, if a failure ended it: an I/O error
    /// (a timeout, a reset) or the server's own end (class 57, operator
    /// intervention: a shutdown, a crash).
    pub(super) fn note(e: &tokio_postgres::Error) {
        let failed = match e.as_db_error() {
            Some(db) => db.code().code().starts_with("57"),
            None => true,
        };
        if failed {
            mark();
        }
    }

    /// Notes a loss now.
    pub(super) fn mark() {
        LAST.fetch_max(micros(Instant::now()) + 1, Ordering::Relaxed);
    }

    /// Whether a connection opened at `created` was opened before the last loss.
    pub(super) fn since(created: Instant) -> bool {
        let last = LAST.load(Ordering::Relaxed);
        last != 0 && (created < *EPOCH || micros(created) < last - 1)
    }
}

/// The hosts of a multi-host `DATABASE_URL` whose last connect attempt
/// timed out (a host gone quiet: a crash, a partition), process-wide. They
/// are tried after the others until one accepts again, so once the standby
/// is promoted a new connection reaches it at once instead of paying the
/// quiet host's connect timeout first.
mod quiet {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};

    static HOSTS: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

    pub(super) fn is(host: &str) -> bool {
        HOSTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(host)
    }

    pub(super) fn set(host: &str, quiet: bool) {
        let mut hosts = HOSTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match quiet {
            true => hosts.insert(host.to_string()),
            false => hosts.remove(host),
        };
    }
}

/// The host (and port) of `pg`'s `i`th host, as [`quiet`] knows it.
fn host_name(pg: &tokio_postgres::Config, i: usize) -> String {
    let port = pg.get_ports().get(i).or(pg.get_ports().first()).copied().unwrap_or(5432);
    let host = match (pg.get_hostaddrs().get(i), pg.get_hosts().get(i)) {
        (Some(addr), _) => addr.to_string(),
        (None, Some(tokio_postgres::config::Host::Tcp(host))) => host.clone(),
        #[cfg(unix)]
        (None, Some(tokio_postgres::config::Host::Unix(path))) => path.display().to_string(),
        (None, None) => String::new(),
    };
    format!("{host}:{port}")
}

/// `pg` with its `i`th host only (the same user, database, options,
/// timeouts and `target_session_attrs`).
fn only_host(pg: &tokio_postgres::Config, i: usize) -> tokio_postgres::Config {
    let mut one = tokio_postgres::Config::new();
    if let Some(user) = pg.get_user() {
        one.user(user);
    }
    if let Some(password) = pg.get_password() {
        one.password(password);
    }
    if let Some(dbname) = pg.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = pg.get_options() {
        one.options(options);
    }
    if let Some(name) = pg.get_application_name() {
        one.application_name(name);
    }
    one.ssl_mode(pg.get_ssl_mode()).ssl_negotiation(pg.get_ssl_negotiation());
    match pg.get_hosts().get(i) {
        Some(tokio_postgres::config::Host::Tcp(host)) => {
            one.host(host);
        }
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => {
            one.host_path(path);
        }
        None => {}
    }
    if let Some(addr) = pg.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    if let Some(port) = pg.get_ports().get(i).or(pg.get_ports().first()) {
        one.port(*port);
    }
    if let Some(timeout) = pg.get_connect_timeout() {
        one.connect_timeout(*timeout);
    }
    if let Some(timeout) = pg.get_tcp_user_timeout() {
        one.tcp_user_timeout(*timeout);
    }
    one.keepalives(pg.get_keepalives()).keepalives_idle(pg.get_keepalives_idle());
    if let Some(interval) = pg.get_keepalives_interval() {
        one.keepalives_interval(interval);
    }
    if let Some(retries) = pg.get_keepalives_retries() {
        one.keepalives_retries(retries);
    }
    one.target_session_attrs(pg.get_target_session_attrs())
        .channel_binding(pg.get_channel_binding())
        .load_balance_hosts(pg.get_load_balance_hosts());
    one
}

/// Connects as tokio-postgres does with several hosts (each in turn until
/// one accepts, with `target_session_attrs`), but tries the hosts whose last
/// attempt timed out after the others: a quiet host costs the connect
/// timeout once, not at every new connection.
async fn connect_in_turn(
    pg: &tokio_postgres::Config,
) -> std::result::Result<
    (tokio_postgres::Client, tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>),
    tokio_postgres::Error,
> {
    let count = pg.get_hosts().len().max(pg.get_hostaddrs().len());
    if count < 2 {
        return pg.connect(tokio_postgres::NoTls).await;
    }
    let names: Vec<String> = (0..count).map(|i| host_name(pg, i)).collect();
    let mut order: Vec<usize> = (0..count).collect();
    order.sort_by_key(|i| quiet::is(&names[*i]));
    let mut failure = None;
    for i in order {
        match only_host(pg, i).connect(tokio_postgres::NoTls).await {
            Ok(connected) => {
                quiet::set(&names[i], false);
                return Ok(connected);
            }
            Err(e) => {
                let timed_out = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<std::io::Error>())
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
                if timed_out {
                    tracing::debug!(host = %names[i], "a database host did not answer in time; it is tried last for now");
                }
                quiet::set(&names[i], timed_out);
                failure = Some(e);
            }
        }
    }
    Err(failure.expect("at least two hosts were tried"))
}

/// One connection outside any pool (the relay's LISTEN), with its driver task.
pub async fn connect(
    database_url: &str,
    session: &SessionConfig,
) -> Result<(
    tokio_postgres::Client,
    tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
)> {
    Ok(connect_in_turn(&config(database_url, session)?).await?)
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

/// Begins a transaction (its `BEGIN` is sent, and its answer read with the
/// first statement's: see [`Transaction`]); outbox rows it writes are
/// published by this process after [`commit`] when it runs in an
/// [`after_commit::scope`](crate::outbox::after_commit::scope).
pub async fn begin(client: &mut Client) -> Result<Transaction<'_>> {
    crate::outbox::after_commit::began();
    Ok(Transaction::begin(client)?)
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
    fn one_host_of_a_multi_host_url_keeps_everything_else() {
        let session = SessionConfig { application_name: Some("baton-test".into()), ..SessionConfig::default() };
        let both = "postgres://u:pw@h1:5433,h2:5434/db?target_session_attrs=read-write&sslmode=disable";
        let pg = config(both, &session).unwrap();
        let second = config("postgres://u:pw@h2:5434/db?target_session_attrs=read-write&sslmode=disable", &session);
        assert!(only_host(&pg, 1) == second.unwrap(), "{:?}", only_host(&pg, 1));
        assert_eq!((host_name(&pg, 0), host_name(&pg, 1)), ("h1:5433".into(), "h2:5434".into()));
        let one_port = config("host=h1,h2 port=6000 dbname=db", &session).unwrap();
        assert_eq!(host_name(&one_port, 0), "h1:6000", "a single port is every host's");
    }

    #[test]
    fn connections_opened_before_a_loss_are_not_lent_again() {
        let opened = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        lost::mark();
        std::thread::sleep(Duration::from_millis(2));
        assert!(lost::since(opened), "opened before the loss");
        assert!(!lost::since(std::time::Instant::now()), "opened after it");
    }

    #[test]
    fn commands_run_without_statement_limits() {
        let options = SessionConfig::unlimited().options();
        assert!(!options.contains("statement_timeout") && !options.contains("lock_timeout"), "{options}");
        assert!(options.contains("tcp_keepalives_idle=10"), "{options}");
    }
}
