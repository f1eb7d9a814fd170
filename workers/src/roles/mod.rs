//! The fleet's roles. Each runs until `shutdown` fires, reconnecting with
//! backoff when the broker or the database goes away.

pub mod callbacks;
pub mod collector;
pub mod intake;
pub mod invocation;
pub mod relay;

use std::future::Future;
use std::time::Duration;

use backon::BackoffBuilder;
use baton_bus::lapin::message::Delivery;
use baton_bus::lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions};
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::{Channel, Connection};
use baton_bus::{Outgoing, Publisher};
use futures_lite::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    Intake,
    Invocation,
    Relay,
    Collector,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Intake, Role::Invocation, Role::Relay, Role::Collector];

    pub fn name(self) -> &'static str {
        match self {
            Role::Intake => "intake",
            Role::Invocation => "invocation",
            Role::Relay => "relay",
            Role::Collector => "collector",
        }
    }
}

/// Runs one role until shutdown, restarting it with exponential backoff
/// (and jitter) whenever it fails: a lost broker or database connection ends
/// an attempt, and the next attempt reconnects.
pub async fn run(role: Role, settings: Settings, shutdown: CancellationToken) {
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times()
        .build();
    let state = match role {
        Role::Invocation => match invocation::State::new(&settings, &shutdown) {
            Ok(side) => Some(side),
            Err(e) => return tracing::error!(error = %format!("{e:#}"), "invocation role cannot start"),
        },
        _ => None,
    };
    run_attempts(role, &settings, &shutdown, state.as_ref(), &mut delays).await;
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
    delays: &mut impl Iterator<Item = Duration>,
) {
    loop {
        let attempt = match role {
            Role::Intake => intake::run(settings, shutdown).await,
            Role::Invocation => invocation::run(state.expect("built for this role"), settings, shutdown).await,
            Role::Relay => relay::run(settings, shutdown).await,
            Role::Collector => collector::run(settings, shutdown).await,
        };
        match attempt {
            Ok(()) => return,
            Err(e) if shutdown.is_cancelled() => {
                tracing::info!(role = role.name(), error = %format!("{e:#}"), "stopped");
                return;
            }
            Err(e) => {
                let delay = delays.next().unwrap_or(Duration::from_secs(10));
                tracing::warn!(role = role.name(), error = %format!("{e:#}"), ?delay, "role failed; reconnecting");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Connects to both services and declares the topology.
pub(crate) async fn connect(settings: &Settings, role: Role) -> anyhow::Result<(Connection, baton_store::Pool)> {
    let pool = baton_store::pool(&settings.database_url, settings.pool_size)?;
    Ok((connect_with(settings, role, &pool).await?, pool))
}

/// Connects to the broker, declares the topology, and checks that the
/// database answers through a pool the caller keeps.
pub(crate) async fn connect_with(settings: &Settings, role: Role, pool: &baton_store::Pool) -> anyhow::Result<Connection> {
    use anyhow::Context;
    let name = format!("baton-{}-{}", role.name(), settings.worker_id);
    let conn = baton_bus::connect(&settings.amqp_url, &name)
        .await
        .with_context(|| format!("connecting to RabbitMQ at {}", settings.amqp_url_redacted()))?;
    let channel = conn.create_channel().await?;
    settings.queues().declare(&channel).await?;
    let _ = channel.close(200, "declared".into()).await;
    drop(pool.get().await.with_context(|| format!("connecting to PostgreSQL at {}", settings.database_url_redacted()))?);
    Ok(conn)
}

/// Consumes a queue, handing each delivery to `handle`, until shutdown. The
/// handler acks; on shutdown the channel closes before the connection, so no
/// ack in flight is lost.
pub(crate) async fn consume<F, Fut>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
    handle: F,
) -> anyhow::Result<()>
where
    F: Fn(Delivery) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    consume_until(conn, queue, prefetch, shutdown, &Broken::default(), handle).await
}

/// A failure seen by work the consumer handed off to another task: it ends
/// the consumer (the role then reconnects), and unacked deliveries return
/// to the queue when the channel closes.
#[derive(Clone, Default)]
pub(crate) struct Broken {
    token: CancellationToken,
    why: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Broken {
    pub(crate) fn fail(&self, e: &anyhow::Error) {
        self.why.lock().expect("not poisoned").get_or_insert_with(|| format!("{e:#}"));
        self.token.cancel();
    }

    fn error(&self) -> anyhow::Error {
        anyhow::anyhow!(self.why.lock().expect("not poisoned").clone().unwrap_or_default())
    }
}

/// [`consume`], also ended by `broken`.
pub(crate) async fn consume_until<F, Fut>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
    broken: &Broken,
    handle: F,
) -> anyhow::Result<()>
where
    F: Fn(Delivery) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let channel = conn.create_channel().await?;
    channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
    let mut consumer = channel
        .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await?;
    let result = loop {
        let next = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ok(()),
            _ = broken.token.cancelled() => break Err(broken.error()),
            next = consumer.next() => next,
        };
        match next {
            Some(Ok(delivery)) => {
                if let Err(e) = handle(delivery).await {
                    break Err(e);
                }
            }
            Some(Err(e)) => break Err(e.into()),
            None => break Err(anyhow::anyhow!("the broker closed the consumer on {queue}")),
        }
    };
    close(&channel).await;
    result
}

pub(crate) async fn close(channel: &Channel) {
    let _ = channel.close(200, "shutting down".into()).await;
}

pub(crate) async fn ack(delivery: &Delivery) -> anyhow::Result<()> {
    delivery.acker.ack(BasicAckOptions::default()).await?;
    Ok(())
}

/// Sends a rejected message to `baton.dead` with the reason in
/// `x-baton-error`, then acks it: nothing is dropped silently.
pub(crate) async fn dead_letter(
    publisher: &Publisher,
    settings: &Settings,
    delivery: &Delivery,
    source_queue: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let dead = settings.queues().name(baton_bus::topology::DEAD);
    let message_id = delivery.properties.message_id().as_ref().map(|m| m.as_str().to_string());
    let out = Outgoing {
        queue: &dead,
        body: &delivery.data,
        message_id: message_id.as_deref(),
        headers: vec![("x-baton-error", reason.to_string()), ("x-baton-source-queue", source_queue.to_string())],
        ..Default::default()
    };
    publisher.publish(&out).await?;
    tracing::warn!(queue = source_queue, reason, "message dead-lettered");
    ack(delivery).await
}

/// Whether an error will likely pass on its own (a service went away, the
/// database aborted a transaction): the role reconnects and the message is
/// redelivered. Anything else is permanent for this message.
pub(crate) fn is_transient(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        if let Some(store) = cause.downcast_ref::<baton_store::Error>() {
            return store.is_connection() || store.is_retryable();
        }
        if let Some(agent) = cause.downcast_ref::<baton_agent::Error>() {
            return agent.is_connection() || agent.is_retryable();
        }
        cause.downcast_ref::<baton_store::PoolError>().is_some()
            || cause.downcast_ref::<baton_bus::lapin::Error>().is_some()
            || cause.downcast_ref::<baton_bus::Error>().is_some()
            || cause.downcast_ref::<baton_store::tokio_postgres::Error>().is_some_and(|e| e.is_closed() || e.code().is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("40")))
    })
}
