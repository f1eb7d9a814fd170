//! One `Settings`, from environment variables with local defaults.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Settings {
    pub database_url: String,
    pub amqp_url: String,
    /// Prepended to every queue name (tests use one per test).
    pub queue_prefix: String,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// Unacked deliveries per consumer (intake, collector).
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
            prefetch: number("BATON_PREFETCH", 32),
            invocation_prefetch: number("BATON_INVOCATION_PREFETCH", 8),
            max_concurrent_invocations: number("BATON_MAX_CONCURRENT_INVOCATIONS", 64),
            invocation_queues: var("BATON_INVOCATION_QUEUES", "handoff,delegate").split(',').map(|q| q.trim().to_string()).collect(),
            max_takeovers: number("BATON_MAX_TAKEOVERS", 3),
            unclaimed_grace: Duration::from_millis(number("BATON_UNCLAIMED_GRACE_MS", 60_000)),
            pool_size: number("BATON_DB_POOL_SIZE", 16),
            relay_poll: Duration::from_millis(number("BATON_RELAY_POLL_MS", 1_000)),
            max_message_bytes: number("BATON_MAX_MESSAGE_BYTES", 4 * 1024 * 1024),
            republish_max: Duration::from_millis(number("BATON_REPUBLISH_MAX_MS", 600_000)),
            worker_id: var("BATON_WORKER_ID", &format!("{host}-{}", std::process::id())),
        }
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

    pub fn amqp_url_redacted(&self) -> String {
        redact(&self.amqp_url)
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_print() {
        assert_eq!(super::redact("amqp://guest:secret@h:5672/%2f"), "amqp://guest:***@h:5672/%2f");
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u:***@h/db");
    }
}
