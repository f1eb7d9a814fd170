//! The fleet's roles. Each runs until `shutdown` fires, reconnecting with
//! backoff when the broker or the database goes away.

pub mod collector;
pub mod intake;
pub mod invocation;
pub mod keyed_consumer;
mod outbox_message;
mod publish_after_commit;
pub mod relay;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use backon::BackoffBuilder;
use baton_bus::Connection;
use baton_store::Pool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Intake,
    Invocation,
    Relay,
    Collector,
    /// The operator's web console (`crate::console`).
    Admin,
}

impl Role {
    /// The roles that move work (the demo and the tests start these).
    pub const ALL: [Role; 4] = [Role::Intake, Role::Invocation, Role::Relay, Role::Collector];
    /// What a plain `baton up` starts: the work and the console.
    pub const UP: [Role; 5] = [Role::Intake, Role::Invocation, Role::Relay, Role::Collector, Role::Admin];

    pub fn name(self) -> &'static str {
        match self {
            Role::Intake => "intake",
            Role::Invocation => "invocation",
            Role::Relay => "relay",
            Role::Collector => "collector",
            Role::Admin => "admin",
        }
    }
}

/// A role attempt that lasted this long is counted as healthy.
const HEALTHY_ATTEMPT: Duration = Duration::from_secs(30);

/// Runs one role until shutdown, restarting it with exponential backoff
/// (and jitter) whenever it fails: a lost broker or database connection ends
/// an attempt, and the next attempt reconnects.
pub async fn run(role: Role, settings: Settings, shutdown: CancellationToken) {
    let span = tracing::info_span!("role", role = role.name(), worker = %settings.worker_id);
    run_role(role, settings, shutdown).instrument(span).await;
}

/// Which consuming roles of this process are connected, by name (`/readyz`).
static CONNECTED: Mutex<BTreeMap<&'static str, bool>> = Mutex::new(BTreeMap::new());

/// Counts a role in: the process is not ready until it has connected.
pub fn expect(role: Role) {
    if role != Role::Admin {
        CONNECTED.lock().expect("not poisoned").entry(role.name()).or_insert(false);
    }
}

/// The role connected to both services, or lost them (its attempt ended).
fn connected(role: Role, up: bool) {
    if role != Role::Admin {
        CONNECTED.lock().expect("not poisoned").insert(role.name(), up);
    }
}

/// The consuming roles of this process that are not connected now.
pub fn not_connected() -> Vec<&'static str> {
    CONNECTED.lock().expect("not poisoned").iter().filter(|(_, up)| !**up).map(|(name, _)| *name).collect()
}

async fn run_role(role: Role, settings: Settings, shutdown: CancellationToken) {
    expect(role);
    let state = match role {
        Role::Invocation => match invocation::State::new(&settings, &shutdown) {
            Ok(side) => Some(side),
            Err(e) => return tracing::error!(error = %format!("{e:#}"), "invocation role cannot start"),
        },
        Role::Admin => match crate::console::check_bind(&settings) {
            Ok(()) => None,
            Err(e) => return tracing::error!(error = %format!("{e:#}"), "admin role cannot start"),
        },
        _ => None,
    };
    run_attempts(role, &settings, &shutdown, state.as_ref()).await;
    // Also when shutdown came while the role was reconnecting: its agent
    // loops outlive connections, and stop (or are handed back) by the deadline.
    if let Some(state) = &state {
        state.drain().await;
    }
}

async fn run_attempts(
    role: Role,
    settings: &Settings,
    shutdown: &CancellationToken,
    state: Option<&invocation::State>,
) {
    let mut delays = backoff(settings.reconnect_max);
    loop {
        let started = tokio::time::Instant::now();
        let attempt = match role {
            Role::Intake => intake::run(settings, shutdown).await,
            Role::Invocation => invocation::run(state.expect("built for this role"), settings, shutdown).await,
            Role::Relay => relay::run(settings, shutdown).await,
            Role::Collector => collector::run(settings, shutdown).await,
            Role::Admin => crate::console::run(settings, shutdown).await,
        };
        connected(role, false);
        match attempt {
            Ok(()) => return,
            Err(e) if shutdown.is_cancelled() => {
                tracing::info!(error = %format!("{e:#}"), "stopped");
                return;
            }
            Err(e) => {
                // An attempt that ran a good while was healthy: the next
                // outage starts again from the shortest delay.
                if started.elapsed() > HEALTHY_ATTEMPT {
                    delays = backoff(settings.reconnect_max);
                }
                let delay = delays.next().unwrap_or(settings.reconnect_max);
                if is_transient(&e) {
                    tracing::warn!(error = %format!("{e:#}"), ?delay, "a service is unavailable; reconnecting");
                } else {
                    tracing::error!(error = %format!("{e:#}"), ?delay, "role failed; restarting");
                }
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Connects to both services and declares the topology.
pub(crate) async fn connect(settings: &Settings, role: Role) -> anyhow::Result<(Connection, Pool)> {
    let session = match role {
        Role::Relay => relay::session(settings),
        _ => settings.db_session_of(role.name()),
    };
    let pool = baton_store::pool_with(&settings.database_url, settings.pool_size, &session)?;
    Ok((connect_with(settings, role, &pool).await?, pool))
}

/// Connects to the broker, declares the topology, and checks that the
/// database answers through a pool the caller keeps.
pub(crate) async fn connect_with(settings: &Settings, role: Role, pool: &Pool) -> anyhow::Result<Connection> {
    use anyhow::Context;
    let name = format!("baton-{}-{}", role.name(), settings.worker_id);
    let conn = Connection::open_with_heartbeat(&settings.amqp_url, &name, settings.amqp_heartbeat())
        .await
        .with_context(|| format!("connecting to RabbitMQ at {}", settings.amqp_url_redacted()))?;
    conn.declare(&settings.queues()).await?;
    drop(
        baton_store::client(pool)
            .await
            .with_context(|| format!("connecting to PostgreSQL at {}", settings.database_url_redacted()))?,
    );
    connected(role, true);
    Ok(conn)
}

/// Whether an error will likely pass on its own (a service went away, the
/// database is failing over, read-only, out of connections, or aborted a
/// transaction; the pool had no connection in time): the work is tried again,
/// never failed or dead-lettered for it. The first of the crates' errors in
/// the chain decides: each says itself whether it passes.
pub(crate) fn is_transient(e: &anyhow::Error) -> bool {
    let decides = |cause: &(dyn std::error::Error + 'static)| {
        if let Some(store) = cause.downcast_ref::<baton_store::Error>() {
            return Some(store.is_transient());
        }
        if let Some(agent) = cause.downcast_ref::<baton_agent::Error>() {
            return Some(agent.is_transient());
        }
        cause.downcast_ref::<baton_bus::Error>().map(baton_bus::Error::is_transient)
    };
    e.chain().find_map(decides).unwrap_or(false)
}

/// Delays between attempts: exponential from 200 ms (or `max`, if less) to `max`, with jitter.
pub(crate) fn backoff(max: Duration) -> impl Iterator<Item = Duration> {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200).min(max))
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
}

/// Runs `attempt` again while it fails transiently, with backoff, for up to
/// `patience` (or until shutdown); any other outcome is returned at once.
/// Each attempt is whole (a transaction of its own), so running it again is safe.
pub(crate) async fn retry_transient<T, F, Fut>(
    what: &str,
    patience: Duration,
    shutdown: &CancellationToken,
    mut attempt: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let give_up = tokio::time::Instant::now() + patience;
    let mut delays = backoff(crate::config::RECONNECT_MAX);
    loop {
        let e = match attempt().await {
            Err(e) if is_transient(&e) => e,
            other => return other,
        };
        let delay = delays.next().unwrap_or(crate::config::RECONNECT_MAX);
        if shutdown.is_cancelled() || tokio::time::Instant::now() + delay > give_up {
            return Err(e);
        }
        tracing::warn!(error = %format!("{e:#}"), ?delay, "{what}: the database is unavailable for now; retrying");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.cancelled() => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn pool_wait() -> anyhow::Error {
        baton_store::Error::Pool(deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Wait)).into()
    }

    #[tokio::test]
    async fn a_transient_failure_is_retried_in_place_until_it_passes() {
        let tries = AtomicUsize::new(0);
        let done = retry_transient("test", Duration::from_secs(30), &CancellationToken::new(), || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(pool_wait()),
                _ => Ok("stored"),
            }
        })
        .await;
        assert_eq!(done.unwrap(), "stored");
        assert_eq!(tries.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_permanent_failure_is_returned_at_once() {
        let tries = AtomicUsize::new(0);
        let done: anyhow::Result<()> =
            retry_transient("test", Duration::from_secs(30), &CancellationToken::new(), || async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err(baton_store::Error::Corrupt("a bad row".into()).into())
            })
            .await;
        assert!(done.is_err() && !is_transient(&done.unwrap_err()));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn pool_waits_and_server_situations_are_transient_wherever_they_sit_in_the_chain() {
        assert!(is_transient(&pool_wait().context("storing a request")));
        let agent = baton_agent::Error::Store(baton_store::Error::Pool(deadpool_postgres::PoolError::Closed));
        assert!(is_transient(&anyhow::Error::new(agent)));
        assert!(!is_transient(&anyhow::Error::new(baton_agent::Error::Contract("no such profile".into()))));
    }

    #[test]
    fn a_broker_that_refused_for_now_is_transient_and_a_missing_broker_url_is_not() {
        assert!(is_transient(&anyhow::Error::new(baton_bus::Error::Nacked("q".into())).context("dead-lettering")));
        assert!(!is_transient(&anyhow::Error::new(baton_bus::Error::NoBrokerUrl)));
        assert!(!is_transient(&anyhow::anyhow!("a plain failure")));
    }
}
