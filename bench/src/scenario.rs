//! One measurement: keep N chains in flight until M have finished, then read
//! the hop latencies each side wrote down.

use std::time::{Duration, Instant};

use anyhow::Context;
use baton_bus::Outgoing;
use baton_domain::fleet::Queue;
use baton_domain::request::{sample_request_json, HandoffStatus};
use serde_json::Value;

use super::{raw, Bench, SCENARIO_TIMEOUT};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Raw,
    Baton,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Raw => "raw",
            Side::Baton => "baton",
        }
    }
}

/// What one measurement found.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    pub chains: usize,
    pub hops: usize,
    pub wall: Duration,
    pub hops_per_sec: f64,
    /// Hop latency percentiles (p50, p95, p99), in ms.
    pub latency_ms: [f64; 3],
}

pub async fn run(bench: &Bench, side: Side, chains: usize, concurrency: usize) -> anyhow::Result<Measurement> {
    let queue = match side {
        Side::Raw => raw::done_queue(&bench.settings),
        Side::Baton => bench.reply_queue.clone(),
    };
    let mut done = bench.conn.subscribe(&queue, 0).await?;
    let mut ids = vec![];
    let started = Instant::now();
    let deadline = started + SCENARIO_TIMEOUT;
    while ids.len() < concurrency.min(chains) {
        ids.push(start(bench, side).await?);
    }
    let mut finished = 0;
    while finished < chains {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let delivery = tokio::time::timeout(remaining, done.next())
            .await
            .with_context(|| format!("{} chains of {chains} finished in time", finished))??;
        delivery.ack().await?;
        if !is_finished(side, delivery.body(), &ids)? {
            continue;
        }
        finished += 1;
        if ids.len() < chains {
            ids.push(start(bench, side).await?);
        }
    }
    let wall = started.elapsed();
    done.close().await;
    let (latency_ms, hops, span) = latencies(bench, side, &ids).await?;
    // Throughput counts the hops themselves: from the first handoff committed
    // to the last successor claimed, read off each side's own journal, so the
    // work before a chain's first hop and after its last (intake, the final
    // stage, the reply) does not count against either side.
    Ok(Measurement { chains, hops, wall, hops_per_sec: hops as f64 / span.max(1e-6), latency_ms })
}

/// Starts one chain and returns its id (a chain id, or a request id).
async fn start(bench: &Bench, side: Side) -> anyhow::Result<String> {
    match side {
        Side::Raw => Ok(raw::start_chain(&bench.pool, &bench.publisher, &bench.settings).await?.to_string()),
        Side::Baton => {
            let id = format!("bench-{}", uuid::Uuid::now_v7().simple());
            send_request(bench, &id, "docs_agent").await?;
            Ok(id)
        }
    }
}

pub async fn send_request(bench: &Bench, id: &str, target: &str) -> anyhow::Result<()> {
    let mut request = sample_request_json(id, target, "en");
    // Each chain is a chat of its own: one chat's requests take turns.
    request["conversationKey"] = id.into();
    let body = serde_json::to_vec(&request)?;
    let queue = bench.settings.queues().name(Queue::BridgeRequests);
    let out = Outgoing { queue: &queue, body: &body, message_id: Some(id), reply_to: Some(&bench.reply_queue), ..Default::default() };
    bench.publisher.publish(&out).await?;
    Ok(())
}

/// Whether this message says one of this measurement's chains finished.
fn is_finished(side: Side, data: &[u8], ids: &[String]) -> anyhow::Result<bool> {
    if side == Side::Raw {
        let hop: raw::RawHop = serde_json::from_slice(data)?;
        return Ok(ids.contains(&hop.chain.to_string()));
    }
    let message: Value = serde_json::from_slice(data)?;
    let ours = message["handoffId"].as_str().is_some_and(|id| ids.iter().any(|i| i == id));
    if message["type"] != "reply" || !ours {
        return Ok(false);
    }
    let status = message["status"].as_str().and_then(HandoffStatus::parse);
    anyhow::ensure!(status == Some(HandoffStatus::Completed), "a bench run ended {}: {}", message["status"], message["text"]);
    Ok(true)
}

const BATON_LATENCY_SQL: &str = "
SELECT extract(epoch FROM (s.created_at - a.created_at)) * 1000, a.created_at, s.created_at
  FROM handoff_requests h
  JOIN events a ON a.run_id = h.run_id AND a.type = 'agent_handoff_accepted'
  JOIN events s ON s.run_id = h.run_id AND s.type = 'agent_invocation_started'
               AND s.invocation_id = (a.payload->>'invocationId')::uuid
 WHERE h.id = ANY($1)";

/// Hop latency percentiles (ms), the number of hops, and the span (s) from
/// the first handoff committed to the last successor claimed.
async fn latencies(bench: &Bench, side: Side, ids: &[String]) -> anyhow::Result<([f64; 3], usize, f64)> {
    let c = bench.pool.get().await?;
    let summary = |hops: &str| {
        format!(
            "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ms), count(*),
                    extract(epoch FROM max(started) - min(accepted))::float8
               FROM ({hops}) l(ms, accepted, started)"
        )
    };
    let row = match side {
        Side::Raw => {
            let chains: Vec<uuid::Uuid> = ids.iter().map(|i| i.parse()).collect::<Result<_, _>>()?;
            c.query_one(&summary(raw::LATENCY_SQL), &[&chains]).await?
        }
        Side::Baton => c.query_one(&summary(BATON_LATENCY_SQL), &[&ids]).await?,
    };
    let p: Vec<f64> = row.get::<_, Option<Vec<f64>>>(0).unwrap_or_default();
    let at = |i: usize| p.get(i).copied().unwrap_or(0.0);
    let hops: i64 = row.get(1);
    let span: Option<f64> = row.get(2);
    Ok(([at(0), at(1), at(2)], hops as usize, span.unwrap_or(0.0)))
}

/// Sends `count` requests whose root delegates and waits, and returns once
/// every one of them is parked.
pub async fn park(bench: &Bench, count: usize) -> anyhow::Result<()> {
    for i in 0..count {
        send_request(bench, &format!("park-{i}"), "codex").await?;
    }
    let deadline = Instant::now() + SCENARIO_TIMEOUT * 3;
    let mut last = 0;
    loop {
        let parked: i64 = bench.pool.get().await?.query_one("SELECT count(*) FROM invocations WHERE status = 'parked'", &[]).await?.get(0);
        if parked as usize >= count {
            return Ok(());
        }
        if parked as usize / 1000 > last {
            last = parked as usize / 1000;
            println!("    {parked} parked");
        }
        anyhow::ensure!(Instant::now() < deadline, "only {parked} of {count} parents parked in time");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
