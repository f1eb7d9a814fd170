//! An idle invocation worker's memory. The guard is on what the process
//! allocated itself (`RssAnon`), not on its whole RSS: a debug binary maps
//! far more code than a release one, and how much of it is resident depends
//! on the page cache. The release figure is the bench's (`idle` in its
//! report, with the same split).

use std::time::Duration;

use baton_domain::fleet::Queue;
use baton_tests::{eventually, TestEnv};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

const WAIT: Duration = Duration::from_secs(60);

/// Measured at 5.0 MB in a debug build (2.4 MB in a release build), 20.9 MB
/// while lapin grew its buffers to the broker's frame size by writing them:
/// the ceiling, twice the measure, leaves room for noise, not for that.
const ANON_CEILING_KB: u64 = 10 * 1024;

const INVOCATION_QUEUES: [Queue; 6] = [
    Queue::InvocationsHandoff,
    Queue::InvocationsHandoffHigh,
    Queue::InvocationsHandoffLow,
    Queue::InvocationsDelegate,
    Queue::InvocationsDelegateHigh,
    Queue::InvocationsDelegateLow,
];

async fn consumers(env: &TestEnv, queue: Queue) -> u32 {
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let declared = channel.queue_declare(env.queue(queue).as_str().into(), passive, FieldTable::default()).await;
    let _ = channel.close(200, "counted".into()).await;
    declared.map_or(0, |q| q.consumer_count())
}

/// A `/proc/PID/status` field, in KiB.
fn status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line =
        status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn an_idle_invocation_worker_allocates_little() {
    let env = TestEnv::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let worker = env.spawn_baton_env("invocation", "idle", &[("BATON_METRICS_ADDR", addr.as_str())]);
    let pid = worker.child.id().expect("running");
    // Ready: connected to both services, its health probe's broker
    // connection open too; then consuming all six of its queues.
    eventually(WAIT, "the worker is ready", || async {
        let response = reqwest::get(format!("http://{addr}/readyz")).await.ok()?;
        response.status().is_success().then_some(())
    })
    .await;
    for queue in INVOCATION_QUEUES {
        eventually(WAIT, "the worker consumes its queues", || async {
            (consumers(&env, queue).await > 0).then_some(())
        })
        .await;
    }
    let (anon, rss) = (status_kb(pid, "RssAnon:"), status_kb(pid, "VmRSS:"));
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count();
    eprintln!("idle invocation worker: RssAnon {anon} KiB, VmRSS {rss} KiB, {threads} threads");
    assert!(anon < ANON_CEILING_KB, "an idle invocation worker allocated {anon} KiB (ceiling {ANON_CEILING_KB} KiB)");
    drop(worker);
}
