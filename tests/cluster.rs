//! A broker that loses a node. `scripts/cluster-test` starts a three-node
//! RabbitMQ cluster and the fleet on it (real `baton` processes whose
//! `AMQP_URL` lists the three nodes), then runs the ignored test here as the
//! bridge: 100 chained runs, and in the middle of them the node that leads
//! `baton.invocations.handoff` is stopped. The other test runs everywhere: a
//! fleet whose first broker is down connects to the next one in the list.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use baton::config::Settings;
use baton_bus::lapin::options::{BasicAckOptions, BasicConsumeOptions, QueueDeclareOptions};
use baton_bus::lapin::types::{AMQPValue, FieldTable};
use baton_bus::lapin::{Connection, Consumer};
use baton_bus::{Outgoing, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{sample_request_json, TestEnv};
use futures_lite::StreamExt;
use serde_json::Value;

const PROFILES: &str = include_str!("cluster-profiles.toml");
const RUNS: usize = 100;
/// Requests go out at this pace, so the node stops while runs are at every
/// stage and requests are still arriving.
const PACE: Duration = Duration::from_millis(100);
/// The node is stopped once this many replies are in.
const STOP_AFTER_REPLIES: usize = 30;
const WAIT: Duration = Duration::from_secs(120);
/// How long to keep listening after the last reply, for late duplicates.
const LISTEN_AFTER: Duration = Duration::from_secs(3);

#[tokio::test]
async fn a_fleet_whose_first_broker_is_down_connects_to_the_next() {
    let mut env = TestEnv::new().await;
    env.apply_profiles(PROFILES).await;
    // Nothing listens on port 1: every role's connect falls through to the real broker.
    env.settings.amqp_url = format!("amqp://guest:guest@127.0.0.1:1/%2f,{}", env.settings.amqp_url);
    let messages = env.run_request("first-broker-down").await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
}

#[tokio::test]
#[ignore = "needs the three-node cluster that scripts/cluster-test starts"]
async fn cluster_losing_the_handoff_leader_mid_chain_loses_no_run() {
    let settings = Settings::from_env().expect("BATON_* settings");
    let ctl = std::env::var("BATON_CLUSTER_CTL").expect("BATON_CLUSTER_CTL: run this through scripts/cluster-test");
    let reply_to = format!("{}bridge.cluster.replies", settings.queue_prefix);
    let mut replies = Replies::open(&settings.amqp_url, &reply_to).await;
    let ids: Vec<String> = (0..RUNS).map(|i| format!("cluster-{i:03}")).collect();
    let started = Instant::now();
    let requests = settings.queues().name(Queue::BridgeRequests);
    let sending = tokio::spawn(send_all(settings.amqp_url.clone(), requests, reply_to, ids.clone()));

    let mut seen = Seen::default();
    let mut stopping = None;
    while seen.replies.len() < RUNS {
        let left = WAIT.checked_sub(started.elapsed()).unwrap_or_default();
        let Some(message) = replies.next(left).await else {
            panic!("{} of {RUNS} replies after {WAIT:?}; missing: {:?}", seen.replies.len(), seen.missing(&ids));
        };
        seen.add(message, started.elapsed());
        if stopping.is_none() && seen.replies.len() >= STOP_AFTER_REPLIES {
            stopping = Some(tokio::spawn(stop_leader(
                ctl.clone(),
                settings.queues().name(Queue::InvocationsHandoff),
                started,
            )));
        }
    }
    while let Some(message) = replies.next(LISTEN_AFTER).await {
        seen.add(message, started.elapsed());
    }
    let (node, stop) = stopping.expect("the node was stopped").await.unwrap();
    let longest_confirm = sending.await.unwrap();

    println!(
        "cluster test: stopped {node} from {:.1}s to {:.1}s; all {RUNS} replies by {:.1}s",
        stop.0, stop.1, seen.last_reply
    );
    println!(
        "cluster test: longest wait for a request's confirm {longest_confirm:?}; longest gap between replies {:.1}s",
        seen.longest_gap
    );
    println!(
        "cluster test: {} messages, {} distinct; duplicates: {:?}",
        seen.messages,
        seen.counts.len(),
        seen.duplicates()
    );

    // One reply per request, each completed, after dropping duplicates by message_id as a bridge does.
    assert_eq!(seen.missing(&ids), Vec::<&str>::new(), "runs without a reply");
    for (id, reply) in &seen.replies {
        assert_eq!(reply["status"], "completed", "{id}: {reply}");
    }
    assert!(
        seen.counts.keys().all(|m| !m.starts_with("reply:") || seen.replies.contains_key(&m["reply:".len()..])),
        "a reply under another id"
    );
    // Postgres sent each reply once and ran each stage once; nothing went to the dead letters.
    let db = baton_store::pool(&settings.database_url, 1).unwrap().get().await.unwrap();
    let count = |sql: &'static str| {
        let db = &db;
        async move { db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) as usize }
    };
    assert_eq!(
        count("SELECT count(*) FROM runs WHERE status = 'completed' AND handoff_count = 2").await,
        RUNS,
        "completed 3-stage runs"
    );
    let sent_sql = "SELECT count(*) FROM handoff_events WHERE type = $1";
    let sent: i64 = db.query_one(sent_sql, &[&HandoffEvent::ReplySent.as_str()]).await.unwrap().get(0);
    assert_eq!(sent as usize, RUNS, "replies sent");
    assert_eq!(count("SELECT count(*) FROM invocations").await, 3 * RUNS, "one invocation per stage");
    let takeovers = count("SELECT count(*) FROM invocations WHERE claim_epoch > 1").await;
    println!("cluster test: {takeovers} invocations taken over by another claim");
    let (started, accepted) = (JournalEvent::InvocationStarted.as_str(), JournalEvent::HandoffAccepted.as_str());
    let hops = db.query_one(SLOWEST_HOPS, &[&started, &accepted]).await.unwrap();
    println!(
        "cluster test: hop (handoff committed -> successor claimed) p50 {:.0} ms, max {:.0} ms",
        hops.get::<_, f64>(0),
        hops.get::<_, f64>(1)
    );
    assert_eq!(message_count(&replies.conn, &settings.queues().name(Queue::Dead)).await, 0, "dead-lettered messages");
}

/// How long the successor of a handoff waited to be claimed: the stall the
/// election causes (`$1`: its start's journal event, `$2`: the handoff's).
const SLOWEST_HOPS: &str = "
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), max(ms)::float8
  FROM (SELECT extract(epoch FROM (s.created_at - a.created_at))::float8 * 1000 AS ms
          FROM events a
          JOIN events s ON s.run_id = a.run_id AND s.type = $1
                       AND s.invocation_id = (a.payload->>'invocationId')::uuid
         WHERE a.type = $2) hops";

/// Publishes the requests at [`PACE`] and returns the longest wait for a
/// confirm. A publish that fails (the broker refused it, or the bridge's own
/// node went away) is sent again, on a new connection if need be: intake
/// stores each id once.
async fn send_all(urls: String, queue: String, reply_to: String, ids: Vec<String>) -> Duration {
    let mut longest = Duration::ZERO;
    let mut publisher = open_publisher(&urls).await;
    for id in &ids {
        let body = serde_json::to_vec(&sample_request_json(id, "docs_agent", "en")).unwrap();
        let out = Outgoing {
            queue: &queue,
            body: &body,
            message_id: Some(id),
            reply_to: Some(&reply_to),
            ..Default::default()
        };
        let sent = Instant::now();
        while let Err(e) = publisher.publish(&out).await {
            assert!(sent.elapsed() < WAIT, "could not publish {id}: {e}");
            println!("cluster test: publishing {id} failed ({e}); again");
            tokio::time::sleep(PACE).await;
            if !publisher.channel().status().connected() {
                publisher = open_publisher(&urls).await;
            }
        }
        longest = longest.max(sent.elapsed());
        tokio::time::sleep(PACE).await;
    }
    longest
}

/// Stops the node leading `queue` (through the script, which knows the
/// nodes and their cookie); returns its name and when the stop began and ended.
async fn stop_leader(ctl: String, queue: String, started: Instant) -> (String, (f64, f64)) {
    let from = started.elapsed().as_secs_f64();
    let out =
        tokio::process::Command::new(ctl).args(["stop-leader", &queue]).output().await.expect("run the cluster script");
    assert!(out.status.success(), "stop-leader: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), (from, started.elapsed().as_secs_f64()))
}

/// What the bridge received: every message counted by its message_id, the
/// first reply of each request.
#[derive(Default)]
struct Seen {
    messages: usize,
    counts: BTreeMap<String, usize>,
    replies: BTreeMap<String, Value>,
    last_reply: f64,
    longest_gap: f64,
}

impl Seen {
    fn add(&mut self, (message_id, body): (String, Value), at: Duration) {
        self.messages += 1;
        *self.counts.entry(message_id).or_default() += 1;
        if body["type"] == "reply" {
            let id = body["handoffId"].as_str().unwrap_or_default().to_string();
            if !self.replies.contains_key(&id) {
                let at = at.as_secs_f64();
                self.longest_gap = self.longest_gap.max(at - self.last_reply);
                self.last_reply = at;
                self.replies.insert(id, body);
            }
        }
    }

    fn missing<'a>(&self, ids: &'a [String]) -> Vec<&'a str> {
        ids.iter().filter(|id| !self.replies.contains_key(*id)).map(String::as_str).collect()
    }

    fn duplicates(&self) -> BTreeMap<&str, usize> {
        self.counts.iter().filter(|(_, n)| **n > 1).map(|(m, n)| (m.as_str(), *n)).collect()
    }
}

async fn open_publisher(urls: &str) -> Publisher {
    Publisher::open(&connect(urls).await).await.expect("a confirm channel")
}

/// The bridge's connection to the cluster (any node of the list: a node may
/// lead queues one moment and be stopped the next, so no node is safe).
async fn connect(urls: &str) -> Connection {
    baton_bus::connect(urls, "baton-cluster-bridge").await.expect("connect to the cluster")
}

/// The bridge's reply queue, read through whichever node is up: a quorum
/// queue, so it survives any one node; after a lost connection the bridge
/// reconnects and unacked replies come again (a duplicate by message_id).
struct Replies {
    urls: String,
    queue: String,
    conn: Connection,
    consumer: Consumer,
}

impl Replies {
    async fn open(urls: &str, queue: &str) -> Self {
        let conn = connect(urls).await;
        let consumer = quorum_consumer(&conn, queue).await;
        Self { urls: urls.to_string(), queue: queue.to_string(), conn, consumer }
    }

    /// The next message (acked) with its message_id, or `None` after `within`.
    async fn next(&mut self, within: Duration) -> Option<(String, Value)> {
        let deadline = Instant::now() + within;
        loop {
            let next = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), self.consumer.next())
                .await
                .ok()?;
            match next {
                Some(Ok(delivery)) if delivery.acker.ack(BasicAckOptions::default()).await.is_ok() => {
                    let message_id =
                        delivery.properties.message_id().as_ref().map(ToString::to_string).unwrap_or_default();
                    return Some((message_id, serde_json::from_slice(&delivery.data).expect("JSON")));
                }
                lost => {
                    println!("cluster test: the bridge lost its consumer ({:?}); reconnecting", lost.map(Result::err));
                    *self = Self::open(&self.urls, &self.queue).await;
                }
            }
        }
    }
}

/// A quorum queue and a consumer on it.
async fn quorum_consumer(conn: &Connection, queue: &str) -> Consumer {
    let channel = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(queue.into(), durable, args).await.unwrap();
    channel.basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default()).await.unwrap()
}

async fn message_count(conn: &Connection, queue: &str) -> u32 {
    let channel = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel.queue_declare(queue.into(), passive, FieldTable::default()).await.unwrap().message_count()
}
