//! The raw baseline: the least a hop can cost with the same I/O and the
//! same durability, written directly on lapin and deadpool-postgres. A
//! worker consumes a message, claims the row under `FOR UPDATE SKIP LOCKED`,
//! inserts the next stage's row and an event in the same transaction,
//! publishes the next message with a publisher confirm, and acks.
//!
//! With `outbox` set on a chain, the hop also writes an outbox row in its
//! transaction and deletes it once the broker confirmed the publish: the
//! price of the outbox guarantee on its own, with no Baton logic around it.

use baton_bus::lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use baton_bus::lapin::types::{AMQPValue, FieldTable};
use baton_bus::{Outgoing, Publisher};
use baton_store::Pool;
use futures_lite::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use baton::config::Settings;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS raw_items (
    id uuid PRIMARY KEY, chain uuid NOT NULL, stage int NOT NULL, status text NOT NULL,
    claimed_by text, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS raw_items_chain ON raw_items (chain, stage);
CREATE TABLE IF NOT EXISTS raw_events (
    id bigserial PRIMARY KEY, item uuid NOT NULL, kind text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS raw_events_item ON raw_events (item, kind);
CREATE TABLE IF NOT EXISTS raw_outbox (
    id uuid PRIMARY KEY, queue text NOT NULL, body bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now());";

/// One raw hop's message: the row to claim, and where its chain stands.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RawHop {
    pub id: Uuid,
    pub chain: Uuid,
    pub stage: i32,
    pub stages: i32,
    #[serde(default)]
    pub outbox: bool,
}

pub fn hop_queue(settings: &Settings) -> String {
    settings.queues().prefixed("bench.raw.hop")
}

pub fn done_queue(settings: &Settings) -> String {
    settings.queues().prefixed("bench.raw.done")
}

/// Declares the baseline's two queues like the fleet's (durable quorum).
pub async fn declare(channel: &baton_bus::lapin::Channel, settings: &Settings) -> anyhow::Result<()> {
    for name in [hop_queue(settings), done_queue(settings)] {
        let mut args = FieldTable::default();
        args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
        let opts = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(name.as_str().into(), opts, args).await?;
    }
    Ok(())
}

/// Inserts `count` chains' first rows in one statement, so starting a chain
/// during a measurement is one publish.
pub async fn prepare_heads(pool: &Pool, count: usize, stages: i32, outbox: bool) -> anyhow::Result<Vec<RawHop>> {
    let heads: Vec<RawHop> =
        (0..count).map(|_| RawHop { id: Uuid::now_v7(), chain: Uuid::now_v7(), stage: 1, stages, outbox }).collect();
    let ids: Vec<Uuid> = heads.iter().map(|h| h.id).collect();
    let chains: Vec<Uuid> = heads.iter().map(|h| h.chain).collect();
    pool.get()
        .await?
        .execute("INSERT INTO raw_items (id, chain, stage, status) SELECT i, c, 1, 'created' FROM unnest($1::uuid[], $2::uuid[]) AS t(i, c)", &[&ids, &chains])
        .await?;
    Ok(heads)
}

/// Publishes a prepared chain head.
pub async fn start_chain(publisher: &Publisher, settings: &Settings, head: &RawHop) -> anyhow::Result<()> {
    let body = serde_json::to_vec(head)?;
    let queue = hop_queue(settings);
    publisher.publish(&Outgoing { queue: &queue, body: &body, ..Default::default() }).await?;
    Ok(())
}

/// The baseline's prefetch: Baton's default before its invocation
/// consumers took a prefetch of 1 and pulled the rest of a backlog only
/// with free slots. The baseline keeps the plain pipelined consumer, the
/// fastest a raw loop gets.
const RAW_PREFETCH: u16 = 8;

/// One baseline worker process: runs hops until shutdown.
pub async fn work(settings: &Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let conn = baton_bus::connect(&settings.amqp_url, "baton-bench-raw").await?;
    let pool = baton_store::pool(&settings.database_url, settings.pool_size)?;
    let publisher = Publisher::open(&conn).await?;
    let channel = conn.create_channel().await?;
    channel.basic_qos(RAW_PREFETCH, BasicQosOptions::default()).await?;
    let queue = hop_queue(settings);
    let mut consumer = channel
        .basic_consume(queue.as_str().into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
        .await?;
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(settings.max_concurrent_invocations));
    loop {
        let delivery = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            d = consumer.next() => match d { Some(d) => d?, None => break },
        };
        let permit = slots.clone().acquire_owned().await?;
        let (pool, publisher, settings) = (pool.clone(), publisher.clone(), settings.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = hop(&pool, &publisher, &settings, &delivery.data).await {
                tracing::warn!(error = %e, "raw hop failed");
            }
            let _ = delivery.acker.ack(BasicAckOptions::default()).await;
        });
    }
    let _ = channel.close(200, "bye".into()).await;
    Ok(())
}

async fn hop(pool: &Pool, publisher: &Publisher, settings: &Settings, data: &[u8]) -> anyhow::Result<()> {
    let msg: RawHop = serde_json::from_slice(data)?;
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let claim = tx.prepare_cached(
        "UPDATE raw_items SET status = 'running', claimed_by = $2
          WHERE id = (SELECT id FROM raw_items WHERE id = $1 AND status = 'created' FOR UPDATE SKIP LOCKED) RETURNING stage",
    );
    let event = tx.prepare_cached("INSERT INTO raw_events (item, kind) VALUES ($1, $2)");
    let next_row = tx.prepare_cached("INSERT INTO raw_items (id, chain, stage, status) VALUES ($1, $2, $3, 'created')");
    let (claim, event, next_row) = (claim.await?, event.await?, next_row.await?);
    if tx.query_opt(&claim, &[&msg.id, &settings.worker_id]).await?.is_none() {
        return Ok(()); // a duplicate: nothing to do
    }
    tx.execute(&event, &[&msg.id, &"started"]).await?;
    let next = (msg.stage < msg.stages).then(|| RawHop { id: Uuid::now_v7(), stage: msg.stage + 1, ..msg });
    if let Some(next) = &next {
        tx.execute(&next_row, &[&next.id, &next.chain, &next.stage]).await?;
        tx.execute(&event, &[&msg.id, &"accepted"]).await?;
    }
    let (queue, body) = match next {
        Some(next) => (hop_queue(settings), serde_json::to_vec(&next)?),
        None => (done_queue(settings), serde_json::to_vec(&msg)?),
    };
    if msg.outbox {
        let insert = tx.prepare_cached("INSERT INTO raw_outbox (id, queue, body) VALUES ($1, $2, $3)").await?;
        tx.execute(&insert, &[&msg.id, &queue, &body]).await?;
    }
    tx.commit().await?;
    publisher.publish(&Outgoing { queue: &queue, body: &body, ..Default::default() }).await?;
    if msg.outbox {
        let delete = client.prepare_cached("DELETE FROM raw_outbox WHERE id = $1").await?;
        client.execute(&delete, &[&msg.id]).await?;
    }
    Ok(())
}

/// Every hop of the given chains: claim → successor's claim, commit →
/// successor's claim (both ms), and when the successor was claimed. "Commit"
/// is the handoff's last journal row, written in the committing transaction.
pub const HOPS_SQL: &str = "
SELECT extract(epoch FROM (s.at - ps.at))::float8 * 1000, extract(epoch FROM (s.at - a.at))::float8 * 1000, s.at
  FROM raw_items n
  JOIN raw_items p ON p.chain = n.chain AND p.stage = n.stage - 1
  JOIN raw_events s ON s.item = n.id AND s.kind = 'started'
  JOIN raw_events ps ON ps.item = p.id AND ps.kind = 'started'
  JOIN raw_events a ON a.item = p.id AND a.kind = 'accepted'
 WHERE n.chain = ANY($1)";
