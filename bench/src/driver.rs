//! The closed-loop driver: one task per in-flight slot, each starting a
//! chain, waiting for its end and starting the next at once, so the driver
//! is never what limits a measurement. One consumer per cell reads the
//! ends (the raw loop's done queue, or the bridge replies) and hands each to
//! its slot. Raw chain heads are inserted before the cell starts, so a raw
//! chain starts with one publish, as a Baton chain starts with one request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use baton_bus::{Outgoing, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::{sample_request_json, HandoffStatus};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::oneshot;

use super::profiles::Chain;
use super::raw::{self, RawHop};
use super::Bench;

/// Which loop a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Raw,
    /// The raw loop with an outbox row written in its transaction and
    /// deleted after the broker's confirm.
    RawOutbox,
    Baton,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Raw => "raw",
            Side::RawOutbox => "raw + outbox",
            Side::Baton => "baton",
        }
    }

    pub fn is_raw(self) -> bool {
        self != Side::Baton
    }
}

/// One chain as the driver saw it: started (request or head published) and
/// ended (reply or done message received).
#[derive(Debug, Clone, Copy)]
pub struct ChainTime {
    pub started: DateTime<Utc>,
    pub ended: DateTime<Utc>,
}

/// What the slots did: the chains' keys and times, and the window in which
/// every slot was busy (from the last slot's first start to the first
/// slot's last end).
pub struct Drive {
    pub keys: Vec<String>,
    pub chains: Vec<ChainTime>,
    pub all_busy: (DateTime<Utc>, DateTime<Utc>),
}

type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<Result<(), String>>>>>;

struct Shared {
    side: Side,
    chain: Chain,
    heads: Vec<RawHop>,
    budget: usize,
    started: AtomicUsize,
    stop_at: Instant,
    waiting: Waiting,
    keys: Mutex<Vec<String>>,
}

/// How long one chain may take before the cell fails.
const CHAIN_TIMEOUT: Duration = Duration::from_secs(120);

/// A raw side's chain heads, inserted before its cell (none for Baton).
pub async fn heads(bench: &Bench, side: Side, chain: Chain, chains: usize) -> anyhow::Result<Vec<RawHop>> {
    match side {
        Side::Baton => Ok(vec![]),
        _ => raw::prepare_heads(&bench.pool, chains, chain.stages(), side == Side::RawOutbox).await,
    }
}

/// Runs `chains` chains with `in_flight` slots (no new chain after `max`).
pub async fn drive(
    bench: &Bench,
    side: Side,
    chain: Chain,
    in_flight: usize,
    heads: Vec<RawHop>,
    chains: usize,
    max: Duration,
) -> anyhow::Result<Drive> {
    let waiting: Waiting = Arc::default();
    let ends = match side {
        Side::Baton => bench.reply_queue.clone(),
        _ => raw::done_queue(&bench.settings),
    };
    let sub = bench.conn.subscribe(&ends, 0).await?;
    let (stop, stopped) = oneshot::channel();
    let listener = tokio::spawn(listen(sub, side, waiting.clone(), stopped));
    let shared = Arc::new(Shared {
        side,
        chain,
        heads,
        budget: chains,
        started: AtomicUsize::new(0),
        stop_at: Instant::now() + max,
        waiting,
        keys: Mutex::default(),
    });
    let mut slots = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (shared, publisher, bench) = (shared.clone(), bench.publisher.clone(), bench.clone_for_slot());
        slots.spawn(async move { slot(&shared, &publisher, &bench).await });
    }
    let mut per_slot = vec![];
    while let Some(done) = slots.join_next().await {
        per_slot.push(done??);
    }
    let _ = stop.send(());
    let _ = listener.await;
    let first_starts = per_slot.iter().filter_map(|s: &Vec<ChainTime>| s.first().map(|c| c.started));
    let last_ends = per_slot.iter().filter_map(|s| s.last().map(|c| c.ended));
    let all_busy = (first_starts.max().context("no chain ran")?, last_ends.min().context("no chain ended")?);
    let keys = std::mem::take(&mut *shared.keys.lock().expect("not poisoned"));
    Ok(Drive { keys, chains: per_slot.into_iter().flatten().collect(), all_busy })
}

/// What a slot needs of the bench, owned.
pub struct SlotEnv {
    pub settings: baton::config::Settings,
    pub reply_queue: String,
}

async fn slot(shared: &Shared, publisher: &Publisher, env: &SlotEnv) -> anyhow::Result<Vec<ChainTime>> {
    let mut times = vec![];
    loop {
        let n = shared.started.fetch_add(1, Ordering::Relaxed);
        if n >= shared.budget || Instant::now() >= shared.stop_at {
            return Ok(times);
        }
        let key = match shared.side {
            Side::Baton => format!("bench-{}", uuid::Uuid::now_v7().simple()),
            _ => shared.heads[n].chain.to_string(),
        };
        let (tx, rx) = oneshot::channel();
        shared.waiting.lock().expect("not poisoned").insert(key.clone(), tx);
        shared.keys.lock().expect("not poisoned").push(key.clone());
        let started = Utc::now();
        match shared.side {
            Side::Baton => send_request(publisher, env, &key, shared.chain.target()).await?,
            _ => raw::start_chain(publisher, &env.settings, &shared.heads[n]).await?,
        }
        let outcome = tokio::time::timeout(CHAIN_TIMEOUT, rx)
            .await
            .with_context(|| format!("chain {key} did not end within {CHAIN_TIMEOUT:?}"))?;
        outcome.context("the listener stopped")?.map_err(|why| anyhow::anyhow!("chain {key} failed: {why}"))?;
        times.push(ChainTime { started, ended: Utc::now() });
    }
}

/// Sends a bridge request that starts a chain; each is a chat of its own.
pub async fn send_request(publisher: &Publisher, env: &SlotEnv, id: &str, target: &str) -> anyhow::Result<()> {
    let mut request = sample_request_json(id, target, "en");
    request["conversationKey"] = id.into();
    let body = serde_json::to_vec(&request)?;
    let queue = env.settings.queues().name(Queue::BridgeRequests);
    let out = Outgoing {
        queue: &queue,
        body: &body,
        message_id: Some(id),
        reply_to: Some(&env.reply_queue),
        ..Default::default()
    };
    publisher.publish(&out).await?;
    Ok(())
}

async fn listen(
    mut sub: baton_bus::consume::Subscription,
    side: Side,
    waiting: Waiting,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        let delivery = tokio::select! {
            _ = &mut stop => break,
            d = sub.next() => match d { Ok(d) => d, Err(_) => break },
        };
        let _ = delivery.ack().await;
        let Some((key, outcome)) = chain_end(side, delivery.body()) else {
            continue;
        };
        if let Some(slot) = waiting.lock().expect("not poisoned").remove(&key) {
            let _ = slot.send(outcome);
        }
    }
    sub.close().await;
}

/// The chain a message ends, and whether it ended well.
fn chain_end(side: Side, body: &[u8]) -> Option<(String, Result<(), String>)> {
    if side.is_raw() {
        let hop: RawHop = serde_json::from_slice(body).ok()?;
        return Some((hop.chain.to_string(), Ok(())));
    }
    let message: Value = serde_json::from_slice(body).ok()?;
    if message["type"] != "reply" {
        return None;
    }
    let key = message["handoffId"].as_str()?.to_string();
    let status = message["status"].as_str().and_then(HandoffStatus::parse);
    let outcome = if status == Some(HandoffStatus::Completed) {
        Ok(())
    } else {
        Err(format!("it ended {}: {}", message["status"], message["text"]))
    };
    Some((key, outcome))
}
