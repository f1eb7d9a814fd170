//! A saturated worker does not hoard invocation messages: what it cannot
//! start stays in the queue for an idle worker, which takes it at once
//! instead of after the relay's sweep.

use std::time::Duration;

use baton::fleet::Fleet;
use baton::roles::Role;
use baton_tests::paced::{profiles, request, Paced, PacedModelServer};
use baton_tests::{eventually, TestEnv};

const WAIT: Duration = Duration::from_secs(120);

/// One invocation worker of this test's fleet, with its own id and slots
/// and every other setting at its default.
fn worker(env: &TestEnv, id: &str, slots: usize) -> Fleet {
    let mut settings = env.settings.clone();
    settings.worker_id = id.to_string();
    settings.max_concurrent_invocations = slots;
    Fleet::start(&settings, &[Role::Invocation])
}

async fn completed(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM runs WHERE status = 'completed'", &[]).await
}

#[tokio::test]
async fn an_idle_worker_takes_the_work_a_saturated_worker_cannot_start() {
    // One slow run fills the first worker's only slot for ten seconds.
    let server = PacedModelServer::start(Paced { slow: Duration::from_secs(5), ..Default::default() }).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&server, "")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let busy = worker(&env, "busy", 1);
    env.send_request(&request("slow", "normal", true)).await;
    eventually(WAIT, "the slow run's first call", || async { (!server.arrivals().is_empty()).then_some(()) }).await;
    // Five more, queued while the busy worker's slot is taken.
    for i in 0..5 {
        env.send_request(&request(&format!("quick-{i}"), "normal", false)).await;
    }
    eventually(WAIT, "six runs created and their messages published", || async {
        let runs = env.scalar_i64("SELECT count(*) FROM runs", &[]).await;
        let queued = env.scalar_i64("SELECT count(*) FROM outbox WHERE queue LIKE '%.invocations.%'", &[]).await;
        (runs == 6 && queued == 0).then_some(())
    })
    .await;
    let idle = worker(&env, "idle", 4);
    eventually(WAIT, "every run completed", || async { (completed(&env).await == 6).then_some(()) }).await;
    idle.stop().await;
    busy.stop().await;
    fleet.stop().await;

    // The busy worker holds at most the one delivery waiting for its slot;
    // the idle one ran the rest, all before the slow run ended.
    let finished = "SELECT r.finished_at < s.finished_at FROM runs r, runs s
                     WHERE r.handoff_id = $1 AND s.handoff_id = 'slow'";
    let mut taken = vec![];
    for i in 0..5 {
        let id = format!("quick-{i}");
        let early: bool = env.db().await.query_one(finished, &[&id]).await.unwrap().get(0);
        if env.workers_that_started(&id).await == ["idle"] && early {
            taken.push(id);
        }
    }
    assert!(taken.len() >= 4, "the idle worker ran only {taken:?} while the busy one was saturated");
    assert_eq!(env.workers_that_started("slow").await, ["busy"]);
}
