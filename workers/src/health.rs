//! The process's metrics listener on `BATON_METRICS_ADDR`, one per process
//! whatever roles it runs: `/metrics` (Prometheus text, rendered by the
//! exporter), `/healthz` (the process answers) and `/readyz` (Postgres and
//! RabbitMQ answer and every consuming role in this process is connected).
//! `baton health` asks `/readyz`, for container health checks.
//!
//! Readiness is probed in the background every `PROBE_EVERY`, so a
//! request never waits on a service that went away.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use baton_bus::Connection;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::Role;

const PROBE_EVERY: Duration = Duration::from_secs(2);
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What the last probe found: `None` is fine, `Some(why)` is not.
#[derive(Clone)]
struct Probed {
    postgres: Option<String>,
    rabbitmq: Option<String>,
}

#[derive(Clone)]
struct Listener {
    probed: Arc<Mutex<Probed>>,
    pool: baton_store::Pool,
    /// Whether this process refreshes the fleet-wide gauges on a scrape (the
    /// relay's processes do, so they are counted once per relay, not per worker).
    gauges: bool,
}

/// Binds `BATON_METRICS_ADDR` and serves until `shutdown`. A bound address
/// is returned at once (port 0 picks a free one); serving runs in the background.
pub async fn start(settings: &Settings, roles: &[Role], shutdown: CancellationToken) -> anyhow::Result<SocketAddr> {
    use anyhow::Context;
    crate::metrics::handle();
    roles.iter().for_each(|role| crate::roles::expect(*role));
    let socket = tokio::net::TcpListener::bind(settings.metrics_addr)
        .await
        .with_context(|| format!("cannot serve metrics on BATON_METRICS_ADDR={}", settings.metrics_addr))?;
    let addr = socket.local_addr()?;
    let unchecked = Some("not checked yet".to_string());
    let state = Listener {
        probed: Arc::new(Mutex::new(Probed { postgres: unchecked.clone(), rabbitmq: unchecked })),
        pool: baton_store::pool_with(&settings.database_url, 1, &baton_store::SessionConfig::unlimited())?,
        gauges: roles.contains(&Role::Relay),
    };
    tokio::spawn(probe(state.clone(), settings.clone(), shutdown.clone()));
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "alive\n" }))
        .route("/readyz", get(readyz))
        .with_state(state);
    tokio::spawn(async move {
        let stopped = async move { shutdown.cancelled().await };
        if let Err(e) = axum::serve(socket, app).with_graceful_shutdown(stopped).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    Ok(addr)
}

async fn metrics(State(state): State<Listener>) -> impl IntoResponse {
    if state.gauges {
        if let Err(e) = refresh_gauges(&state.pool).await {
            tracing::warn!(error = %format!("{e:#}"), "could not read the fleet's gauges");
        }
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], crate::metrics::handle().render())
}

async fn refresh_gauges(pool: &baton_store::Pool) -> anyhow::Result<()> {
    let read = async {
        let client = baton_store::client(pool).await?;
        let live = baton_store::overview::gauges::live(&client).await?;
        let outbox = baton_store::overview::gauges::outbox(&client).await?;
        anyhow::Ok((live, outbox))
    };
    let (live, outbox) = tokio::time::timeout(PROBE_TIMEOUT, read).await??;
    crate::metrics::live(&live, outbox);
    Ok(())
}

async fn readyz(State(state): State<Listener>) -> impl IntoResponse {
    let probed = state.probed.lock().expect("not poisoned").clone();
    let mut missing = vec![];
    if let Some(why) = probed.postgres {
        missing.push(format!("postgres: {why}"));
    }
    if let Some(why) = probed.rabbitmq {
        missing.push(format!("rabbitmq: {why}"));
    }
    let down = crate::roles::not_connected();
    if !down.is_empty() {
        missing.push(format!("consumers not up: {}", down.join(", ")));
    }
    match missing.is_empty() {
        true => (StatusCode::OK, "ready\n".to_string()),
        false => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready\n{}\n", missing.join("\n"))),
    }
}

/// Checks both services every [`PROBE_EVERY`] until shutdown. The broker
/// connection is kept open between probes and opened again once it drops.
async fn probe(state: Listener, settings: Settings, shutdown: CancellationToken) {
    let mut broker: Option<Connection> = None;
    let mut every = tokio::time::interval(PROBE_EVERY);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = shutdown.cancelled() => break,
        }
        let postgres = probe_postgres(&state.pool).await.err();
        let rabbitmq = probe_rabbitmq(&settings, &mut broker).await.err();
        *state.probed.lock().expect("not poisoned") = Probed { postgres, rabbitmq };
    }
    if let Some(conn) = broker {
        conn.close("shutting down").await;
    }
}

async fn probe_postgres(pool: &baton_store::Pool) -> Result<(), String> {
    let check = async {
        let client = baton_store::client(pool).await.map_err(|e| e.to_string())?;
        client.simple_query("SELECT 1").await.map(drop).map_err(|e| e.to_string())
    };
    tokio::time::timeout(PROBE_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {PROBE_TIMEOUT:?}")))
}

async fn probe_rabbitmq(settings: &Settings, broker: &mut Option<Connection>) -> Result<(), String> {
    if broker.as_ref().is_some_and(Connection::is_connected) {
        return Ok(());
    }
    let name = format!("baton-health-{}", settings.worker_id);
    match tokio::time::timeout(PROBE_TIMEOUT, Connection::open(&settings.amqp_url, &name)).await {
        Ok(Ok(conn)) => {
            *broker = Some(conn);
            Ok(())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// `baton health`: asks `/readyz` at `addr` (an unspecified IP such as
/// `0.0.0.0`, as a container binds, is asked on loopback). `Ok(true)`: ready.
pub async fn check(addr: SocketAddr) -> anyhow::Result<bool> {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let response = client.get(format!("http://{addr}/readyz")).send().await?;
    let ready = response.status().is_success();
    print!("{}", response.text().await?);
    Ok(ready)
}
