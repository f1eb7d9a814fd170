//! Request priority: a busy worker's free slots go to `high` work first,
//! and `low` work still runs within a bound.

use std::time::{Duration, Instant};

use baton::roles::Role;
use baton_domain::policy::priority::MAX_OVERTAKES;
use baton_tests::paced::{profiles, request, Arrival, Paced, PacedModelServer};
use baton_tests::{eventually, next_json, TestEnv};

const WAIT: Duration = Duration::from_secs(120);

/// Waits for `n` replies; all must be `completed`.
async fn all_complete(replies: &mut lapin::Consumer, n: usize) {
    let mut done = 0;
    while done < n {
        let message = next_json(replies, WAIT).await;
        if message["type"] == "reply" {
            assert_eq!(message["status"], "completed", "{message}");
            done += 1;
        }
    }
}

/// When each run made its first model call, by the handoff it serves.
async fn first_calls(env: &TestEnv, server: &PacedModelServer, handoff: &str) -> Instant {
    let run = env.run_of(handoff).await.to_string();
    let arrivals: Vec<Arrival> = server.arrivals();
    arrivals.iter().find(|a| a.run == run && a.turn == 1).map(|a| a.at).expect("the run called its model")
}

async fn test_env(slots: usize) -> TestEnv {
    let mut env = TestEnv::new().await;
    env.settings.max_concurrent_invocations = slots;
    env
}

#[tokio::test]
async fn a_high_request_sent_behind_forty_low_runs_starts_before_the_low_ones_still_waiting() {
    // Each low run holds its slot for two two-second calls: 40 of them on 4
    // slots take 40 seconds, so many still wait when the high one arrives.
    let server = PacedModelServer::start(Paced { delay: Duration::from_secs(2), ..Default::default() }).await;
    let env = test_env(4).await;
    env.apply_profiles(&profiles(&server, "")).await;
    // The 40 low runs are created and queued first (intake is slow on a busy
    // machine), then the worker starts: its 4 slots take 4 of them.
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    for i in 0..40 {
        env.send_request(&request(&format!("low-{i}"), "low", false)).await;
    }
    eventually(WAIT, "40 low runs created and queued", || async {
        let runs = env.scalar_i64("SELECT count(*) FROM runs", &[]).await;
        let queued = env.scalar_i64("SELECT count(*) FROM outbox WHERE queue LIKE '%.invocations.%'", &[]).await;
        (runs == 40 && queued == 0).then_some(())
    })
    .await;
    let worker = env.start(&[Role::Invocation]);
    eventually(WAIT, "every slot busy", || async { (server.arrivals().len() >= 4).then_some(()) }).await;
    env.send_request(&request("urgent", "high", false)).await;
    // Once its message is on its queue, the next free slot is the high run's.
    eventually(WAIT, "the high run's message published", || async {
        let published = env.scalar_i64("SELECT count(*) FROM runs WHERE priority = 'high'", &[]).await == 1
            && env.scalar_i64("SELECT count(*) FROM outbox WHERE queue LIKE '%.high'", &[]).await == 0;
        published.then_some(())
    })
    .await;
    let published = Instant::now();
    all_complete(&mut replies, 41).await;
    worker.stop().await;
    fleet.stop().await;

    let high = first_calls(&env, &server, "urgent").await;
    // Of the low runs still waiting when the high one's message was
    // published, only those whose slot was already changing hands (at most
    // one per slot) start first; every other starts after it.
    let (mut sneaked_in, mut waiting) = (0, 0);
    for i in 0..40 {
        let low = first_calls(&env, &server, &format!("low-{i}")).await;
        if low > published {
            waiting += 1;
            sneaked_in += usize::from(low < high);
        }
    }
    assert!(waiting >= 8, "only {waiting} low runs were still waiting: the test proves nothing");
    assert!(sneaked_in <= 4, "{sneaked_in} of the {waiting} low runs still waiting started before the high one");
}

#[tokio::test]
async fn a_low_run_sent_before_a_hundred_high_ones_waits_for_at_most_four_of_them() {
    // The blockers hold both slots until every request is queued, even when
    // a loaded machine takes seconds to send the hundred (with 2 s, the low
    // run once got a slot before any high one was there to overtake it).
    let server = PacedModelServer::start(Paced {
        delay: Duration::from_millis(20),
        slow: Duration::from_secs(5),
        ..Default::default()
    })
    .await;
    let env = test_env(2).await;
    env.apply_profiles(&profiles(&server, "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    // Two slow normal runs hold both slots, so what follows waits for one.
    for i in 0..2 {
        env.send_request(&request(&format!("blocker-{i}"), "normal", true)).await;
    }
    eventually(WAIT, "both slots busy", || async { (server.arrivals().len() >= 2).then_some(()) }).await;
    env.send_request(&request("patient", "low", false)).await;
    for i in 0..100 {
        env.send_request(&request(&format!("urgent-{i}"), "high", false)).await;
    }
    all_complete(&mut replies, 103).await;
    fleet.stop().await;

    let low = first_calls(&env, &server, "patient").await;
    let mut before = 0;
    for i in 0..100 {
        if first_calls(&env, &server, &format!("urgent-{i}")).await < low {
            before += 1;
        }
    }
    // Overtaken at most MAX_OVERTAKES times once it waited for a slot (plus
    // one high run that may have reached the worker's line first).
    assert!(before <= MAX_OVERTAKES as usize + 1, "the low run started after {before} high ones");
    // The wait was real: it started only once the blockers' second calls
    // were made, with every high request queued behind it. (Whether a high
    // run's first call comes before it is a race when both blockers free
    // their slots in the same millisecond: the first goes to a high run,
    // the second to the low one if the high queue's next delivery has not
    // reached the worker's line yet.)
    let blockers = [env.run_of("blocker-0").await.to_string(), env.run_of("blocker-1").await.to_string()];
    let arrivals = server.arrivals();
    let last_calls: Vec<Instant> =
        arrivals.iter().filter(|a| blockers.contains(&a.run) && a.turn == 2).map(|a| a.at).collect();
    assert_eq!(last_calls.len(), 2, "each blocker made its second call");
    assert!(last_calls.iter().all(|last| low > *last), "the low run did not wait for a slot");
}
