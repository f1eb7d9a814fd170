//! One `Settings`, from environment variables with local defaults. A value
//! that is set but malformed is a startup error naming the variable, never a
//! silent default: an operator who wrote `BATON_LEASE_MS=15s` learns it at once.

use std::fmt;
use std::time::Duration;

use baton_domain::console::origin::PublicUrl;
use baton_domain::fleet::InvocationQueue;

mod redact;
pub use redact::redact;
use redact::MASK;

/// The longest pause between a role's reconnect attempts unless
/// `BATON_RECONNECT_MAX_MS` says otherwise.
pub const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// How soon the broker must notice a frozen peer unless
/// `BATON_AMQP_DEAD_PEER_SECS` says otherwise: roles propose an AMQP
/// heartbeat of a third of it (see [`Settings::amqp_heartbeat`]), and a
/// frozen process gives back what it holds within it.
pub const AMQP_DEAD_PEER_SECS: u16 = 10;

#[derive(Clone)]
pub struct Settings {
    pub database_url: String,
    /// One broker URL, or a cluster's nodes separated by commas, tried in order.
    pub amqp_url: String,
    /// Prepended to every queue name (tests use one per test).
    pub queue_prefix: String,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// Unacked deliveries per consumer (intake, collector); raised to
    /// `intake_concurrency` when lower. Every reconnect counts toward the
    /// queue's delivery limit for each unacked delivery, even one never
    /// looked at, so no higher than the concurrency needs.
    pub prefetch: u16,
    /// Deliveries intake (requests, cancels, answers) and the collector
    /// (finished runs) each handle at once. Those of one handoff, of one
    /// conversation, or of one run are still handled in arrival order.
    pub intake_concurrency: usize,
    /// Unacked deliveries per invocation queue consumer (default 1: the
    /// one waiting for a slot), so a saturated worker holds no work an
    /// idle worker could start.
    pub invocation_prefetch: u16,
    /// Invocations one worker process runs at once.
    pub max_concurrent_invocations: usize,
    /// Which invocation queues this worker consumes: both (default), or only
    /// `handoff` (foreground stages) or `delegate` (children and wake-ups),
    /// so each kind of work can be scaled on its own.
    pub invocation_queues: Vec<InvocationQueue>,
    /// Whether a worker that hands off runs the successor itself when it
    /// has a free slot (eager dispatch, default on), instead of queuing it
    /// for any worker; a successor it does not get to is published by the
    /// relay once its reservation lapses (`outbox_grace`, else the lease).
    pub eager_dispatch: bool,
    /// Takeovers of one invocation (its worker died or stalled) before it is
    /// failed: a crash loop stops here.
    pub max_takeovers: i32,
    /// How long a created invocation may go unclaimed before the relay
    /// re-publishes it (its message may have been lost).
    pub unclaimed_grace: Duration,
    pub pool_size: usize,
    /// How an invocation worker groups claims that are ready together into
    /// one transaction: `BATON_GROUP_COMMIT_MAX` claims at most (1: each
    /// alone), waiting `BATON_GROUP_COMMIT_WINDOW_MS` at most for more while
    /// another batch commits, with a quarter of the pool's connections (at
    /// least one) committing batches at once.
    pub group_commit: baton_store::group_commit::Batching,
    /// The relay's safety-net poll when no notification arrives.
    pub relay_poll: Duration,
    /// How often a `baton up` process beats its row of the fleet's registry
    /// (the console's workers page); three missed beats read as gone.
    pub heartbeat: Duration,
    /// How long an outbox row a role publishes itself right after its commit
    /// is left to it before the relay sweeps it (0: roles leave every row to
    /// the relay).
    pub outbox_grace: Duration,
    /// How long intake, the collector and a claim retry a transient database
    /// failure in place before the role gives up its connection (and the
    /// message comes back, counted toward the delivery limit).
    pub transient_patience: Duration,
    /// How long an agent loop keeps a finished model turn and retries
    /// storing it while the database is away (as long as a failover takes:
    /// 180 s by default), before it gives up and the turn is asked again. The
    /// claim's fence decides when the database is back; an external agent's
    /// result is kept until the claim is lost or the shutdown deadline.
    pub persist_patience: Duration,
    /// What a held turn spills to disk (`BATON_STATE_DIR`, its size over
    /// `BATON_HELD_SPILL_BYTES`, its wait over `BATON_HELD_SPILL_AFTER_MS`).
    pub holding: baton_agent::runner::Holding,
    /// How soon the broker notices a frozen process, in seconds (0: never):
    /// its deliveries go back to their queue within this. Roles propose an
    /// AMQP heartbeat of a third of it; each connection costs a tiny frame
    /// each way per half heartbeat.
    pub amqp_dead_peer_secs: u16,
    /// The longest pause between a role's attempts to reconnect after the
    /// broker or the database went away (and between an invocation's tries
    /// to resume or hand back its claim through a database outage).
    pub reconnect_max: Duration,
    /// The largest body the relay hands to the broker, well under RabbitMQ's
    /// `max_message_size` (128 MiB by default): a bridge message over it is
    /// cut (the full text stays in Postgres), anything else is dead-lettered.
    pub max_message_bytes: usize,
    /// The most dead letters `baton.dead` holds, oldest dropped first (set
    /// when the queue is created; an existing queue keeps its own).
    pub dead_max_length: i64,
    /// The longest wait between two re-publishes of one stalled row by the
    /// relay's sweeps (their backoff doubles up to it), and the only pace
    /// while the row's queue still holds ready messages.
    pub republish_max: Duration,
    /// A name for this process in leases and logs.
    pub worker_id: String,
    /// Timeouts and keepalives of the roles' database sessions.
    pub db_session: baton_store::SessionConfig,
    /// After SIGTERM, how long in-flight invocations may go on (an external
    /// agent may finish) before their claims are handed back. Keep it below
    /// the orchestrator's stop grace (docker-compose `stop_grace_period`).
    pub shutdown_grace: Duration,
    /// Where each external agent gets its own working directory.
    pub agent_work_dir: std::path::PathBuf,
    /// The box's outer layers for external agents: the user they run as
    /// (`BATON_AGENT_USER`; `nobody` when the worker is root) and bubblewrap
    /// (`BATON_AGENT_BWRAP`: `auto`, `off` or a path).
    pub agent_jail: baton_agent::jail::Jail,
    /// Where the `admin` role serves the operator's console.
    pub admin_addr: std::net::SocketAddr,
    /// The console's token (bearer or login cookie); required off loopback.
    pub admin_token: Option<Secret>,
    /// Where people reach the console when that is not `admin_addr` (a
    /// name behind a proxy): its host is answered to, and `https` makes the
    /// session cookie `Secure`.
    pub admin_url: Option<PublicUrl>,
    /// Where this process serves `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: std::net::SocketAddr,
}

/// A value that never prints (`Debug` shows `***`).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// Every malformed or contradictory setting found, one per line, so an
/// operator fixes them all in one go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    pub problems: Vec<String>,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid settings: {}", self.problems.join("; "))
    }
}

impl std::error::Error for SettingsError {}

/// Reads variables through `get`, noting every problem instead of stopping at
/// the first. An empty value counts as unset, as it always has.
struct Reader<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
    problems: Vec<String>,
}

impl Reader<'_> {
    fn raw(&self, name: &str) -> Option<String> {
        (self.get)(name).filter(|v| !v.trim().is_empty())
    }

    fn text(&self, name: &str, default: &str) -> String {
        self.raw(name).unwrap_or_else(|| default.to_string())
    }

    /// A whole number of type `T`; `what` completes "is not …" in the error.
    fn number<T: std::str::FromStr>(&mut self, name: &str, default: T, what: &str) -> T {
        let Some(value) = self.raw(name) else { return default };
        match value.trim().parse() {
            Ok(n) => n,
            Err(_) => {
                self.problems.push(format!("{name}={value} is not {what}"));
                default
            }
        }
    }

    fn millis(&mut self, name: &str, default: Duration) -> Duration {
        Duration::from_millis(self.number(name, default.as_millis() as u64, "a whole number of milliseconds"))
    }

    /// `BATON_GROUP_COMMIT_MAX` (default 16) and `BATON_GROUP_COMMIT_WINDOW_MS` (default 0:
    /// a batch takes the claims already waiting, see docs/benchmark.md#eager-dispatch).
    fn group_commit(&mut self, pool_size: usize) -> baton_store::group_commit::Batching {
        let max = self.count("BATON_GROUP_COMMIT_MAX", 16usize);
        baton_store::group_commit::Batching {
            max: self.above_zero("BATON_GROUP_COMMIT_MAX", max, "no claim could ever commit (1 commits each alone)"),
            window: self.millis("BATON_GROUP_COMMIT_WINDOW_MS", Duration::ZERO),
            in_flight: (pool_size / 4).max(1),
        }
    }

    fn count<T: std::str::FromStr>(&mut self, name: &str, default: T) -> T {
        self.number(name, default, "a whole number")
    }

    /// `BATON_AMQP_DEAD_PEER_SECS`: 0, or at least 3, since the heartbeat
    /// is a third of it in whole seconds. The old `BATON_AMQP_HEARTBEAT_SECS`
    /// (the heartbeat itself, which the broker let a peer miss two to three
    /// times) is refused rather than read with its old meaning.
    fn dead_peer(&mut self) -> u16 {
        const NAME: &str = "BATON_AMQP_DEAD_PEER_SECS";
        if let Some(old) = self.raw("BATON_AMQP_HEARTBEAT_SECS") {
            self.problems.push(format!(
                "BATON_AMQP_HEARTBEAT_SECS={old} is no longer read: set {NAME}, how soon the broker notices a frozen process (the heartbeat is a third of it; 3 × {old} keeps the old behaviour's bound)"
            ));
        }
        let secs = self.count(NAME, AMQP_DEAD_PEER_SECS);
        if (1..3).contains(&secs) {
            self.problems.push(format!(
                "{NAME}={secs} is below 3: the AMQP heartbeat, a third of it, is whole seconds (0 turns it off)"
            ));
        }
        secs
    }

    /// Refuses zero where it cannot mean anything sensible; `why` says what zero would do.
    fn above_zero<T: Default + PartialEq>(&mut self, name: &str, value: T, why: &str) -> T {
        if value == T::default() {
            self.problems.push(format!("{name}=0 must be above zero ({why})"));
        }
        value
    }

    /// `host:port`, an IP address (a host name would hide whether it is loopback).
    fn socket_addr(&mut self, name: &str, default: &str) -> std::net::SocketAddr {
        let value = self.text(name, default);
        value.trim().parse().unwrap_or_else(|_| {
            self.problems.push(format!("{name}={value} is not an IP address with a port (127.0.0.1:8080)"));
            default.parse().expect("the default parses")
        })
    }

    /// `BATON_ADMIN_URL`, an `http(s)://host[:port]` when set.
    fn public_url(&mut self, name: &str) -> Option<PublicUrl> {
        let value = self.raw(name)?;
        PublicUrl::parse(&value).map_err(|why| self.problems.push(format!("{name}={why}"))).ok()
    }

    /// `AMQP_URL`: one broker URL or several, each a well-formed AMQP URL.
    fn amqp_url(&mut self) -> String {
        let value = self.text("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
        let bad = baton_bus::broker_urls(&value).filter_map(|url| baton_bus::check_url(url).err());
        self.problems.extend(bad.map(|why| format!("AMQP_URL: {why}")));
        value
    }

    /// The kinds of invocation queue a worker consumes: both by default.
    fn invocation_queues(&mut self) -> Vec<InvocationQueue> {
        let name = "BATON_INVOCATION_QUEUES";
        let all = InvocationQueue::ALL.map(InvocationQueue::as_str);
        let value = self.text(name, &all.join(","));
        let named: Vec<&str> = value.split(',').map(str::trim).filter(|q| !q.is_empty()).collect();
        let queues: Vec<InvocationQueue> = named.iter().filter_map(|q| InvocationQueue::parse(q)).collect();
        if queues.len() != named.len() || queues.is_empty() {
            self.problems.push(format!("{name}={value} is not a comma-separated list of {}", all.join(" and ")));
        }
        queues
    }

    /// `BATON_DB_*_MS`: zero turns a limit off, as in Postgres.
    fn db_session(&mut self) -> baton_store::SessionConfig {
        let defaults = baton_store::SessionConfig::default();
        let zero = Duration::ZERO;
        baton_store::SessionConfig {
            statement_timeout: Some(
                self.millis("BATON_DB_STATEMENT_TIMEOUT_MS", defaults.statement_timeout.unwrap_or(zero)),
            ),
            lock_timeout: Some(self.millis("BATON_DB_LOCK_TIMEOUT_MS", defaults.lock_timeout.unwrap_or(zero))),
            idle_in_transaction_timeout: Some(self.millis(
                "BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS",
                defaults.idle_in_transaction_timeout.unwrap_or(zero),
            )),
            keepalive: self.millis("BATON_DB_KEEPALIVE_MS", defaults.keepalive),
            tcp_user_timeout: self.millis("BATON_DB_TCP_USER_TIMEOUT_MS", defaults.tcp_user_timeout),
            connect_timeout: self.millis("BATON_DB_CONNECT_TIMEOUT_MS", defaults.connect_timeout),
            application_name: None,
        }
    }
}

impl Settings {
    /// The settings of this process's environment; see [`Settings::from_vars`].
    pub fn from_env() -> Result<Self, SettingsError> {
        let settings = Self::from_vars(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))?;
        for warning in settings.warnings() {
            tracing::warn!("{warning}");
        }
        Ok(settings)
    }

    /// The settings that the variables `get` returns describe, with a local
    /// default for each one unset or empty; every malformed or impossible
    /// value is named in the error.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let mut r = Reader { get: &get, problems: Vec::new() };
        let host = r.text("HOSTNAME", "local");
        let lease = r.millis("BATON_LEASE_MS", Duration::from_millis(15_000));
        let max_takeovers = r.count("BATON_MAX_TAKEOVERS", 3u16);
        let pool_size = {
            let n = r.count("BATON_DB_POOL_SIZE", 16);
            r.above_zero("BATON_DB_POOL_SIZE", n, "no connection could ever be taken")
        };
        let settings = Self {
            database_url: r.text("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/baton"),
            amqp_url: r.amqp_url(),
            queue_prefix: r.text("BATON_QUEUE_PREFIX", ""),
            lease: r.above_zero("BATON_LEASE_MS", lease, "every claim would lapse at once"),
            prefetch: {
                let n = r.count("BATON_PREFETCH", 1);
                r.above_zero("BATON_PREFETCH", n, "zero means unlimited to the broker")
            },
            intake_concurrency: {
                let n = r.count("BATON_INTAKE_CONCURRENCY", 16u16);
                usize::from(r.above_zero("BATON_INTAKE_CONCURRENCY", n, "no request could ever be taken"))
            },
            invocation_prefetch: {
                let n = r.count("BATON_INVOCATION_PREFETCH", 1);
                r.above_zero("BATON_INVOCATION_PREFETCH", n, "zero means unlimited to the broker")
            },
            max_concurrent_invocations: {
                let n = r.count("BATON_MAX_CONCURRENT_INVOCATIONS", 64);
                r.above_zero("BATON_MAX_CONCURRENT_INVOCATIONS", n, "no invocation could ever run")
            },
            invocation_queues: r.invocation_queues(),
            eager_dispatch: r.number("BATON_EAGER_DISPATCH", true, "true or false"),
            max_takeovers: i32::from(max_takeovers),
            unclaimed_grace: r.millis("BATON_UNCLAIMED_GRACE_MS", Duration::from_millis(60_000)),
            pool_size,
            group_commit: r.group_commit(pool_size),
            relay_poll: {
                let d = r.millis("BATON_RELAY_POLL_MS", Duration::from_millis(1_000));
                r.above_zero("BATON_RELAY_POLL_MS", d, "the relay would poll without pause")
            },
            heartbeat: {
                let d = r.millis("BATON_HEARTBEAT_MS", Duration::from_millis(5_000));
                r.above_zero("BATON_HEARTBEAT_MS", d, "a process would beat without pause")
            },
            outbox_grace: r.millis("BATON_OUTBOX_GRACE_MS", Duration::from_millis(2_000)),
            transient_patience: r.millis("BATON_TRANSIENT_PATIENCE_MS", Duration::from_millis(120_000)),
            persist_patience: r.millis("BATON_PERSIST_PATIENCE_MS", baton_agent::runner::PERSIST_PATIENCE),
            holding: baton_agent::runner::Holding {
                dir: r.raw("BATON_STATE_DIR").map_or_else(|| std::env::temp_dir().join("baton-state"), Into::into),
                spill_bytes: r.count("BATON_HELD_SPILL_BYTES", baton_agent::runner::Holding::SPILL_BYTES),
                spill_after: r.millis("BATON_HELD_SPILL_AFTER_MS", baton_agent::runner::Holding::SPILL_AFTER),
            },
            amqp_dead_peer_secs: r.dead_peer(),
            reconnect_max: {
                let d = r.millis("BATON_RECONNECT_MAX_MS", RECONNECT_MAX);
                r.above_zero("BATON_RECONNECT_MAX_MS", d, "a role would reconnect without pause")
            },
            max_message_bytes: {
                let n = r.count("BATON_MAX_MESSAGE_BYTES", 4 * 1024 * 1024);
                r.above_zero("BATON_MAX_MESSAGE_BYTES", n, "no message would fit")
            },
            dead_max_length: {
                let n = r.count("BATON_DEAD_MAX_LENGTH", 10_000u32);
                i64::from(r.above_zero("BATON_DEAD_MAX_LENGTH", n, "every dead letter would be dropped"))
            },
            republish_max: r.millis("BATON_REPUBLISH_MAX_MS", Duration::from_millis(600_000)),
            worker_id: r.text("BATON_WORKER_ID", &format!("{host}-{}", std::process::id())),
            db_session: r.db_session(),
            shutdown_grace: r.millis("BATON_SHUTDOWN_GRACE_MS", Duration::from_millis(20_000)),
            agent_work_dir: r
                .raw("BATON_AGENT_WORK_DIR")
                .map_or_else(|| std::env::temp_dir().join("baton-agents"), Into::into),
            agent_jail: baton_agent::jail::Jail::from_settings(
                r.raw("BATON_AGENT_USER").as_deref(),
                r.raw("BATON_AGENT_BWRAP").as_deref(),
            )
            .unwrap_or_else(|why| {
                r.problems.push(why);
                Default::default()
            }),
            admin_addr: r.socket_addr("BATON_ADMIN_ADDR", "127.0.0.1:8080"),
            admin_token: r.raw("BATON_ADMIN_TOKEN").map(|t| Secret::new(t.trim())),
            admin_url: r.public_url("BATON_ADMIN_URL"),
            metrics_addr: r.socket_addr("BATON_METRICS_ADDR", "127.0.0.1:9464"),
        };
        match r.problems.is_empty() {
            true => Ok(settings),
            false => Err(SettingsError { problems: r.problems }),
        }
    }

    /// Combinations that work but defeat a guarantee, for the log at startup.
    /// An idle-in-transaction timeout at or above the lease is one: a frozen
    /// worker's row locks then outlive its claim, so the worker taking over
    /// waits on them. It only warns, since a test fleet runs a short lease
    /// with the default timeout and nothing is lost, only slower.
    pub fn warnings(&self) -> Vec<String> {
        let idle = self.db_session.idle_in_transaction_timeout.unwrap_or_default();
        let mut warnings = Vec::new();
        if !idle.is_zero() && idle >= self.lease {
            warnings.push(format!(
                "BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS={} is not below BATON_LEASE_MS={}: a frozen worker's row locks outlive its claim",
                idle.as_millis(),
                self.lease.as_millis()
            ));
        }
        warnings
    }

    /// The AMQP heartbeat to propose, in seconds: a third of
    /// `BATON_AMQP_DEAD_PEER_SECS` (rounded down; `0` asks for none).
    /// RabbitMQ checks what it received from a connection once per heartbeat
    /// and closes it at the second check that found nothing new, so a peer
    /// that went silent is dropped two to three heartbeats after the last
    /// frame it sent (measured: `tests/frozen.rs`), within the setting.
    pub fn amqp_heartbeat(&self) -> Option<u16> {
        Some(self.amqp_dead_peer_secs / 3)
    }

    /// The session limits of `role`'s connections, named after it in `pg_stat_activity`.
    pub fn db_session_of(&self, role: &str) -> baton_store::SessionConfig {
        let name = format!("baton-{role}-{}", self.worker_id);
        baton_store::SessionConfig { application_name: Some(name), ..self.db_session.clone() }
    }

    /// A pool of `role`'s connections, with the session limits.
    pub fn db_pool(&self, role: &str) -> baton_store::Result<baton_store::Pool> {
        baton_store::pool_with(&self.database_url, self.pool_size, &self.db_session_of(role))
    }

    /// The backoff cap of an outbox row the broker refused for now (a nack):
    /// the unclaimed grace, so a bridge whose queue has room again hears
    /// within about that long.
    pub fn outbox_retry_max(&self) -> Duration {
        self.unclaimed_grace.min(self.republish_max).max(self.relay_poll)
    }

    pub fn queues(&self) -> baton_bus::Queues {
        baton_bus::Queues::new(self.queue_prefix.clone()).with_dead_max_length(self.dead_max_length)
    }

    /// Deliveries intake and the collector each handle at once:
    /// `intake_concurrency`, but no more than their pool has connections.
    pub fn intake_lanes(&self) -> usize {
        self.intake_concurrency.min(self.pool_size).max(1)
    }

    /// The database URL with any password hidden, for messages.
    pub fn database_url_redacted(&self) -> String {
        redact(&self.database_url)
    }

    /// The broker URLs (`AMQP_URL` may list a cluster's nodes, comma-separated),
    /// each with its password hidden.
    pub fn amqp_url_redacted(&self) -> String {
        baton_bus::broker_urls(&self.amqp_url).map(redact).collect::<Vec<_>>().join(",")
    }
}

/// The URLs with their passwords hidden (see [`redact`]): settings end up in logs.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("database_url", &self.database_url_redacted())
            .field("amqp_url", &self.amqp_url_redacted())
            .field("queue_prefix", &self.queue_prefix)
            .field("lease", &self.lease)
            .field("prefetch", &self.prefetch)
            .field("intake_concurrency", &self.intake_concurrency)
            .field("invocation_prefetch", &self.invocation_prefetch)
            .field("max_concurrent_invocations", &self.max_concurrent_invocations)
            .field("invocation_queues", &self.invocation_queues)
            .field("eager_dispatch", &self.eager_dispatch)
            .field("max_takeovers", &self.max_takeovers)
            .field("unclaimed_grace", &self.unclaimed_grace)
            .field("pool_size", &self.pool_size)
            .field("group_commit", &self.group_commit)
            .field("relay_poll", &self.relay_poll)
            .field("heartbeat", &self.heartbeat)
            .field("outbox_grace", &self.outbox_grace)
            .field("transient_patience", &self.transient_patience)
            .field("persist_patience", &self.persist_patience)
            .field("holding", &self.holding)
            .field("amqp_dead_peer_secs", &self.amqp_dead_peer_secs)
            .field("reconnect_max", &self.reconnect_max)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("dead_max_length", &self.dead_max_length)
            .field("republish_max", &self.republish_max)
            .field("worker_id", &self.worker_id)
            .field("db_session", &self.db_session)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("agent_work_dir", &self.agent_work_dir)
            .field("agent_jail", &self.agent_jail)
            .field("admin_addr", &self.admin_addr)
            .field("admin_token", &self.admin_token)
            .field("admin_url", &self.admin_url)
            .field("metrics_addr", &self.metrics_addr)
            .finish()
    }
}

#[cfg(test)]
mod parsing {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::{InvocationQueue, Settings, SettingsError};

    fn parse(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_vars(|name| vars.get(name).cloned())
    }

    fn problems(vars: &[(&str, &str)]) -> Vec<String> {
        parse(vars).expect_err("should be refused").problems
    }

    #[test]
    fn nothing_set_gives_the_local_defaults() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.lease, Duration::from_millis(15_000));
        assert_eq!((s.prefetch, s.intake_concurrency, s.invocation_prefetch), (1, 16, 1));
        assert_eq!(s.invocation_queues, InvocationQueue::ALL);
        assert_eq!(s.db_session.idle_in_transaction_timeout, Some(Duration::from_secs(10)));
        assert_eq!(s.persist_patience, Duration::from_secs(180));
        assert_eq!(s.amqp_dead_peer_secs, 10);
        assert_eq!(s.amqp_heartbeat(), Some(3), "a third of the dead-peer bound, in whole seconds");
        assert_eq!(s.db_session.tcp_user_timeout, Duration::from_secs(10));
        assert_eq!(s.reconnect_max, Duration::from_secs(10));
        assert!(s.warnings().is_empty());
    }

    #[test]
    fn well_formed_values_are_taken_and_empty_ones_count_as_unset() {
        let s = parse(&[
            ("BATON_LEASE_MS", " 3000 "),
            ("BATON_PREFETCH", "2"),
            ("BATON_DB_POOL_SIZE", ""),
            ("BATON_DB_LOCK_TIMEOUT_MS", "0"),
        ])
        .unwrap();
        assert_eq!(s.lease, Duration::from_secs(3));
        assert_eq!(s.prefetch, 2);
        assert_eq!(s.pool_size, 16);
        assert_eq!(s.db_session.lock_timeout, Some(Duration::ZERO), "zero turns a Postgres limit off");
        let s = parse(&[
            ("BATON_AMQP_DEAD_PEER_SECS", "0"),
            ("BATON_STATE_DIR", "/var/lib/baton"),
            ("BATON_HELD_SPILL_BYTES", "1024"),
            ("BATON_DB_CONNECT_TIMEOUT_MS", "500"),
        ])
        .unwrap();
        assert_eq!(s.amqp_heartbeat(), Some(0), "0 asks the broker for no heartbeat");
        assert_eq!(s.holding.dir, std::path::PathBuf::from("/var/lib/baton"));
        assert_eq!(s.holding.spill_bytes, 1024);
        assert_eq!(s.db_session.connect_timeout, Duration::from_millis(500));
    }

    #[test]
    fn a_malformed_number_names_the_variable_its_value_and_what_is_expected() {
        assert_eq!(
            problems(&[("BATON_LEASE_MS", "15s")]),
            ["BATON_LEASE_MS=15s is not a whole number of milliseconds"]
        );
        assert_eq!(problems(&[("BATON_PREFETCH", "70000")]), ["BATON_PREFETCH=70000 is not a whole number"]);
        assert_eq!(problems(&[("BATON_MAX_TAKEOVERS", "-1")]), ["BATON_MAX_TAKEOVERS=-1 is not a whole number"]);
        assert_eq!(
            problems(&[("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "2.5")]),
            ["BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS=2.5 is not a whole number of milliseconds"]
        );
    }

    #[test]
    fn a_malformed_amqp_url_is_a_bad_setting_and_a_list_is_checked_url_by_url() {
        let found = problems(&[("AMQP_URL", "amqp://n1:5672/%2f,amqp//guest:pw@n2")]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("AMQP_URL: ") && found[0].contains("is not an AMQP URL"), "{found:?}");
        assert!(parse(&[("AMQP_URL", "amqp://u:p@n1:5672/%2f, amqp://u:p@n2:5673/vh")]).is_ok());
    }

    #[test]
    fn the_metrics_address_is_an_ip_and_port() {
        assert_eq!(parse(&[]).unwrap().metrics_addr, "127.0.0.1:9464".parse().unwrap());
        assert_eq!(
            parse(&[("BATON_METRICS_ADDR", "0.0.0.0:9100")]).unwrap().metrics_addr,
            "0.0.0.0:9100".parse().unwrap()
        );
        assert_eq!(
            problems(&[("BATON_METRICS_ADDR", "localhost")]),
            ["BATON_METRICS_ADDR=localhost is not an IP address with a port (127.0.0.1:8080)"]
        );
    }

    #[test]
    fn every_bad_variable_is_named_at_once() {
        let error =
            parse(&[("BATON_LEASE_MS", "abc"), ("BATON_DB_KEEPALIVE_MS", "1m"), ("BATON_INVOCATION_QUEUES", "handof")])
                .unwrap_err();
        assert_eq!(error.problems.len(), 3, "{error}");
        let text = error.to_string();
        for name in ["BATON_LEASE_MS=abc", "BATON_DB_KEEPALIVE_MS=1m", "BATON_INVOCATION_QUEUES=handof"] {
            assert!(text.contains(name), "{text}");
        }
    }

    #[test]
    fn zero_is_refused_where_it_cannot_work() {
        for name in [
            "BATON_LEASE_MS",
            "BATON_PREFETCH",
            "BATON_INTAKE_CONCURRENCY",
            "BATON_INVOCATION_PREFETCH",
            "BATON_MAX_CONCURRENT_INVOCATIONS",
            "BATON_DB_POOL_SIZE",
            "BATON_RELAY_POLL_MS",
            "BATON_MAX_MESSAGE_BYTES",
        ] {
            let found = problems(&[(name, "0")]);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].starts_with(&format!("{name}=0 must be above zero")), "{found:?}");
        }
        assert!(parse(&[("BATON_SHUTDOWN_GRACE_MS", "0"), ("BATON_MAX_TAKEOVERS", "0")]).is_ok());
    }

    #[test]
    fn the_dead_peer_bound_sets_a_heartbeat_of_a_third_of_it() {
        let beat = |secs: &str| parse(&[("BATON_AMQP_DEAD_PEER_SECS", secs)]).unwrap().amqp_heartbeat();
        assert_eq!(beat("3"), Some(1));
        assert_eq!(beat("5"), Some(1), "rounded down: the bound is kept");
        assert_eq!(beat("30"), Some(10));
        assert_eq!(beat("0"), Some(0));
        for low in ["1", "2"] {
            let found = problems(&[("BATON_AMQP_DEAD_PEER_SECS", low)]);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].contains("is below 3"), "{found:?}");
        }
        let found = problems(&[("BATON_AMQP_HEARTBEAT_SECS", "10")]);
        assert!(found[0].starts_with("BATON_AMQP_HEARTBEAT_SECS=10 is no longer read"), "{found:?}");
    }

    #[test]
    fn only_the_two_invocation_queues_can_be_chosen() {
        let chosen = |value| parse(&[("BATON_INVOCATION_QUEUES", value)]).unwrap().invocation_queues;
        assert_eq!(chosen("handoff"), [InvocationQueue::Handoff]);
        assert_eq!(chosen(" delegate , "), [InvocationQueue::Delegate]);
        let expected = "is not a comma-separated list of handoff and delegate";
        for bad in ["handoff,delegates", "Handoff", ",", "intake"] {
            let found = problems(&[("BATON_INVOCATION_QUEUES", bad)]);
            assert_eq!(found, [format!("BATON_INVOCATION_QUEUES={bad} {expected}")]);
        }
    }

    #[test]
    fn an_idle_in_transaction_timeout_not_below_the_lease_is_warned_about() {
        let s = parse(&[("BATON_LEASE_MS", "3000"), ("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "3000")]).unwrap();
        let warnings = s.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS=3000")
                && warnings[0].contains("BATON_LEASE_MS=3000")
        );
        let off = parse(&[("BATON_LEASE_MS", "3000"), ("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "0")]).unwrap();
        assert!(off.warnings().is_empty(), "a timeout turned off is not compared");
        let below = parse(&[("BATON_LEASE_MS", "3000"), ("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "2999")]).unwrap();
        assert!(below.warnings().is_empty());
    }

    #[test]
    fn the_console_address_is_an_ip_and_port_and_its_token_never_prints() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.admin_addr, "127.0.0.1:8080".parse().unwrap());
        assert!(s.admin_token.is_none());
        let s = parse(&[("BATON_ADMIN_ADDR", "0.0.0.0:9000"), ("BATON_ADMIN_TOKEN", "hunter2")]).unwrap();
        assert_eq!(s.admin_addr.port(), 9000);
        assert!(!format!("{s:?}").contains("hunter2"));
        for bad in ["localhost:8080", "8080", "127.0.0.1"] {
            let found = problems(&[("BATON_ADMIN_ADDR", bad)]);
            assert_eq!(found, [format!("BATON_ADMIN_ADDR={bad} is not an IP address with a port (127.0.0.1:8080)")]);
        }
    }

    #[test]
    fn the_console_url_is_a_scheme_and_a_host_and_nothing_more() {
        assert_eq!(parse(&[]).unwrap().admin_url, None);
        let url = parse(&[("BATON_ADMIN_URL", "https://Console.Example.org/")]).unwrap().admin_url.unwrap();
        assert!(url.https);
        assert_eq!(url.authority.to_string(), "console.example.org");
        let plain = parse(&[("BATON_ADMIN_URL", "http://10.0.0.5:8080")]).unwrap().admin_url.unwrap();
        assert!(!plain.https && plain.authority.port == Some(8080));
        for bad in ["console.example.org", "https://console.example.org/baton", "ftp://h"] {
            let found = problems(&[("BATON_ADMIN_URL", bad)]);
            assert_eq!(found.len(), 1, "{found:?}");
            assert!(found[0].starts_with(&format!("BATON_ADMIN_URL={bad} is not")), "{found:?}");
        }
    }

    #[test]
    fn debug_never_prints_a_password() {
        for (db, amqp) in [
            ("postgres://u:hunter2@h/db", "amqp://guest:hunter2@n1:5672/%2f,amqps://u:hunter2@n2/v"),
            ("host=h password='hunter2' dbname=d", "amqp://guest:hunter2@h/%2f"),
            ("postgres://u@h/db?password=hunter2", "amqp://:hunter2@h/%2f"),
        ] {
            let s = parse(&[("DATABASE_URL", db), ("AMQP_URL", amqp)]).unwrap();
            let printed = format!("{s:?}");
            assert!(!printed.contains("hunter2"), "{printed}");
            assert!(printed.contains("***") && printed.contains("lease"), "{printed}");
        }
    }
}
