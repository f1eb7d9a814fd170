//! One `Settings`, from environment variables with local defaults.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    /// One broker URL, or a cluster's nodes separated by commas, tried in order.
    pub amqp_url: String,
    /// Prepended to every queue name (tests use one per test).
    pub queue_prefix: String,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// Unacked deliveries per consumer (intake, collector). They handle one
    /// delivery at a time, so 1: every reconnect counts toward the queue's
    /// delivery limit for each unacked delivery, even one never looked at.
    pub prefetch: u16,
    /// Unacked deliveries per invocation queue consumer: small, so a busy
    /// worker does not hoard work another worker could start.
    pub invocation_prefetch: u16,
    /// Invocations one worker process runs at once.
    pub max_concurrent_invocations: usize,
    /// Which invocation queues this worker consumes: both (default), or only
    /// `handoff` (foreground stages) or `delegate` (children and wake-ups),
    /// so each kind of work can be scaled on its own.
    pub invocation_queues: Vec<String>,
    /// Takeovers of one invocation (its worker died or stalled) before it is
    /// failed: a crash loop stops here.
    pub max_takeovers: i32,
    /// How long a created invocation may go unclaimed before the relay
    /// re-publishes it (its message may have been lost).
    pub unclaimed_grace: Duration,
    pub pool_size: usize,
    /// The relay's safety-net poll when no notification arrives.
    pub relay_poll: Duration,
    /// How long intake, the collector and a claim retry a transient database
    /// failure in place before the role gives up its connection (and the
    /// message comes back, counted toward the delivery limit).
    pub transient_patience: Duration,
    /// The largest body the relay hands to the broker, well under RabbitMQ's
    /// `max_message_size` (128 MiB by default): a bridge message over it is
    /// cut (the full text stays in Postgres), anything else is dead-lettered.
    pub max_message_bytes: usize,
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
}

fn var(name: &str, default: &str) -> String {
    std::env::var(name).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

impl Settings {
    pub fn from_env() -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
        Self {
            database_url: var("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/baton"),
            amqp_url: var("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            queue_prefix: var("BATON_QUEUE_PREFIX", ""),
            lease: Duration::from_millis(number("BATON_LEASE_MS", 15_000)),
            prefetch: number("BATON_PREFETCH", 1),
            invocation_prefetch: number("BATON_INVOCATION_PREFETCH", 8),
            max_concurrent_invocations: number("BATON_MAX_CONCURRENT_INVOCATIONS", 64),
            invocation_queues: var("BATON_INVOCATION_QUEUES", "handoff,delegate").split(',').map(|q| q.trim().to_string()).collect(),
            max_takeovers: number("BATON_MAX_TAKEOVERS", 3),
            unclaimed_grace: Duration::from_millis(number("BATON_UNCLAIMED_GRACE_MS", 60_000)),
            pool_size: number("BATON_DB_POOL_SIZE", 16),
            relay_poll: Duration::from_millis(number("BATON_RELAY_POLL_MS", 1_000)),
            transient_patience: Duration::from_millis(number("BATON_TRANSIENT_PATIENCE_MS", 120_000)),
            max_message_bytes: number("BATON_MAX_MESSAGE_BYTES", 4 * 1024 * 1024),
            republish_max: Duration::from_millis(number("BATON_REPUBLISH_MAX_MS", 600_000)),
            worker_id: var("BATON_WORKER_ID", &format!("{host}-{}", std::process::id())),
            db_session: db_session(),
            shutdown_grace: Duration::from_millis(number("BATON_SHUTDOWN_GRACE_MS", 20_000)),
            agent_work_dir: std::env::var_os("BATON_AGENT_WORK_DIR")
                .filter(|v| !v.is_empty())
                .map_or_else(|| std::env::temp_dir().join("baton-agents"), Into::into),
        }
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
        baton_bus::Queues::new(self.queue_prefix.clone())
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

/// `BATON_DB_*_MS`: a frozen worker's transaction ends, and its row locks
/// with it, after the idle-in-transaction timeout (keep it below the lease).
fn db_session() -> baton_store::SessionConfig {
    let defaults = baton_store::SessionConfig::default();
    let ms = |name: &str, default: Option<Duration>| {
        Some(Duration::from_millis(number(name, default.map_or(0, |d| d.as_millis() as u64))))
    };
    baton_store::SessionConfig {
        statement_timeout: ms("BATON_DB_STATEMENT_TIMEOUT_MS", defaults.statement_timeout),
        lock_timeout: ms("BATON_DB_LOCK_TIMEOUT_MS", defaults.lock_timeout),
        idle_in_transaction_timeout: ms("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", defaults.idle_in_transaction_timeout),
        keepalive: Duration::from_millis(number("BATON_DB_KEEPALIVE_MS", defaults.keepalive.as_millis() as u64)),
        application_name: None,
    }
}

/// Hides every password a connection string can carry, in any form it
/// takes: URL user info (`postgres://u:pw@h`, `amqps://:pw@h`), a
/// `password=` query parameter, and libpq's `key=value` form
/// (`host=h password=pw`, quoted or not). What is not a password stays, so
/// an operator can still tell which server a message names.
pub fn redact(dsn: &str) -> String {
    mask_password_values(&mask_user_info(dsn))
}

const MASK: &str = "***";

/// `scheme://user:password@host…` → `scheme://user:***@host…`. The last `@`
/// ends the user info, so a password holding `@` is hidden whole.
fn mask_user_info(dsn: &str) -> String {
    let Some(scheme_end) = dsn.find("://").map(|i| i + 3) else {
        return dsn.to_string();
    };
    let rest = &dsn[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return dsn.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:{MASK}{}", &dsn[..scheme_end], &rest[at..]),
        None => dsn.to_string(),
    }
}

/// Every `…password=VALUE` (query parameter or libpq keyword, any case, spaces
/// around `=` allowed) gets its value masked; a quoted value ends at its
/// closing quote (`\'` escapes one), a bare one at whitespace or `&`.
fn mask_password_values(dsn: &str) -> String {
    let lower = dsn.to_ascii_lowercase();
    let mut out = String::with_capacity(dsn.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key_end = from + found + "password".len();
        let after_key = dsn[key_end..].trim_start();
        from = key_end;
        let Some(value) = after_key.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        let value_start = dsn.len() - value.len();
        let value_end = value_start + value_len(value);
        out.push_str(&dsn[copied..value_start]);
        out.push_str(MASK);
        copied = value_end;
        from = value_end;
    }
    out.push_str(&dsn[copied..]);
    out
}

/// How many bytes of `rest` the value takes.
fn value_len(rest: &str) -> usize {
    if let Some(quoted) = rest.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '\'' => return i + 2,
                _ => {}
            }
        }
        return rest.len();
    }
    rest.find(|c: char| c.is_whitespace() || c == '&').unwrap_or(rest.len())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn url_passwords_never_print() {
        assert_eq!(redact("amqp://guest:secret@h:5672/%2f"), "amqp://guest:***@h:5672/%2f");
        assert_eq!(redact("amqps://guest:secret@h:5671/vhost"), "amqps://guest:***@h:5671/vhost");
        assert_eq!(redact("postgresql://u:secret@h:5432/db"), "postgresql://u:***@h:5432/db");
        assert_eq!(redact("postgres://:secret@h/db"), "postgres://:***@h/db");
        assert_eq!(redact("postgres://u:p@ss:w@rd@h/db"), "postgres://u:***@h/db");
    }

    #[test]
    fn urls_without_a_password_stay_as_they_are() {
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h:5432/db"), "postgres://h:5432/db");
        assert_eq!(redact("amqp://127.0.0.1:5672/%2f"), "amqp://127.0.0.1:5672/%2f");
    }

    #[test]
    fn password_query_parameters_never_print() {
        assert_eq!(redact("postgres://u@h/db?password=secret"), "postgres://u@h/db?password=***");
        assert_eq!(
            redact("postgresql:///db?host=/run/pg&password=secret&sslmode=disable"),
            "postgresql:///db?host=/run/pg&password=***&sslmode=disable"
        );
        assert_eq!(redact("postgres://u:one@h/db?PASSWORD=two"), "postgres://u:***@h/db?PASSWORD=***");
    }

    #[test]
    fn key_value_passwords_never_print() {
        assert_eq!(redact("host=h user=u password=secret dbname=d"), "host=h user=u password=*** dbname=d");
        assert_eq!(redact("host=h password = secret"), "host=h password = ***");
        assert_eq!(redact("password='se cret' host=h"), "password=*** host=h");
        assert_eq!(redact(r"host=h password='it\'s secret' port=5432"), "host=h password=*** port=5432");
        assert_eq!(redact("host=h sslpassword=keypass"), "host=h sslpassword=***");
        assert_eq!(redact("host=h user=u dbname=d"), "host=h user=u dbname=d");
    }

    #[test]
    fn nothing_secret_is_left_in_any_form() {
        let forms = [
            "postgres://u:hunter2@h/db",
            "postgresql://u:hunter2@h/db?sslmode=require",
            "host=h password=hunter2",
            "host=h password='hunter2'",
            "postgres://h/db?password=hunter2",
            "amqps://u:hunter2@h/v",
        ];
        for form in forms {
            assert!(!redact(form).contains("hunter2"), "{form} → {}", redact(form));
        }
    }

    #[test]
    fn each_broker_of_a_list_hides_its_password() {
        let mut settings = super::Settings::from_env();
        settings.amqp_url = "amqp://guest:s1@n1:5682/%2f, amqp://guest:s2@n2:5683/%2f".into();
        assert_eq!(settings.amqp_url_redacted(), "amqp://guest:***@n1:5682/%2f,amqp://guest:***@n2:5683/%2f");
    }
}
