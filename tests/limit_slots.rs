//! Model-limit slots that cannot be lost and a line that honours priority:
//! a call's slot is held briefly and renewed while the call runs (a worker
//! killed mid-call frees it within the hold, whatever the profile's
//! timeout), a timeout no call needs is refused when the file is loaded,
//! calls waiting in one process take turns by their runs' priority, and a
//! call counts for the tokens of its own request, not for the largest
//! usage of the last ten minutes.

use std::time::{Duration, Instant};

use baton::roles::Role;
use baton_agent::limiter::SLOT_HOLD;
use baton_domain::run::journal::JournalEvent;
use baton_tests::paced::{profiles, request, Arrival, Paced, PacedModelServer};
use baton_tests::{baton_binary, eventually, next_json, TestEnv};

const WAIT: Duration = Duration::from_secs(120);

async fn completed(env: &TestEnv, handoff: &str) -> bool {
    let sql = "SELECT count(*) FROM runs WHERE handoff_id = $1 AND status = 'completed'";
    env.scalar_i64(sql, &[&handoff]).await == 1
}

#[tokio::test]
async fn a_slot_is_renewed_while_its_call_runs_and_freed_soon_after_its_worker_is_killed() {
    let server = PacedModelServer::start(Paced { slow: Duration::from_secs(600), ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit = format!("[[limits]]\nname = \"one\"\nbase_url = \"{}\"\nconcurrent_calls = 1\n", server.base_url);
    // The longest timeout a profile may set: it no longer sets the hold.
    let file = profiles(&server, &limit).replace("max_attempts = 1", "max_attempts = 1\ntimeout_secs = 3600");
    env.apply_profiles(&file).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut doomed = env.spawn_baton("invocation", "doomed");
    env.send_request(&request("hung", "normal", true)).await;
    eventually(WAIT, "the hung call reached the provider", || async { (server.arrivals().len() == 1).then_some(()) })
        .await;
    // Past a whole hold since it was admitted, the call is still held, by
    // renewals, and never for more than a hold ahead.
    let beyond = format!(
        "SELECT count(*) FROM model_limit_calls WHERE clock_timestamp() > started_at + make_interval(secs => {})",
        SLOT_HOLD.as_secs() + 2
    );
    eventually(WAIT, "a hold's length passed", || async { (env.scalar_i64(&beyond, &[]).await == 1).then_some(()) })
        .await;
    let held = "SELECT extract(epoch FROM held_until - clock_timestamp())::float8 FROM model_limit_calls";
    let ahead: f64 = env.db().await.query_one(held, &[]).await.unwrap().get(0);
    assert!(ahead > 0.0, "renewed while the call runs ({ahead} s)");
    assert!(ahead <= SLOT_HOLD.as_secs_f64() + 1.0, "held {ahead} s ahead: for the call's timeout, not briefly");

    doomed.signal("KILL");
    let killed = Instant::now();
    doomed.exit_code(WAIT).await;
    let in_flight = "SELECT count(*) FROM model_limit_calls WHERE held_until > clock_timestamp()";
    eventually(WAIT, "the dead worker's slot free", || async {
        (env.scalar_i64(in_flight, &[]).await == 0).then_some(())
    })
    .await;
    let freed = killed.elapsed();
    assert!(freed <= SLOT_HOLD + Duration::from_secs(2), "freed {freed:?} after the kill");
    // Another worker takes the run over, and its call is admitted.
    let worker = env.start(&[Role::Invocation]);
    eventually(WAIT, "the taken-over call reached the provider", || async {
        (server.arrivals().len() == 2).then_some(())
    })
    .await;
    worker.stop().await;
    fleet.stop().await;
}

#[tokio::test]
async fn a_timeout_no_model_call_needs_is_refused_naming_its_profile() {
    let server = PacedModelServer::start(Paced::default()).await;
    let env = TestEnv::new().await;
    let file = profiles(&server, "").replace("max_attempts = 1", "max_attempts = 1\ntimeout_secs = 1000000000000");
    let path = std::env::temp_dir().join(format!("{}profiles.toml", env.settings.queue_prefix));
    std::fs::write(&path, file).unwrap();
    let out = tokio::process::Command::new(baton_binary())
        .args(["profiles", "apply"])
        .arg(&path)
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .output()
        .await
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "applied: {stderr}");
    assert!(stderr.contains("profile `solo`: timeout_secs = 1000000000000 is over the 3600 seconds"), "{stderr}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM profiles", &[]).await, 0, "nothing applied");
}

/// The first call of a run, as the provider saw it.
fn first_call(arrivals: &[Arrival], run: &str) -> Instant {
    arrivals.iter().find(|a| a.run == run && a.turn == 1).map(|a| a.at).expect("the run called its model")
}

#[tokio::test]
async fn calls_waiting_under_a_limit_take_their_turn_by_priority() {
    let server = PacedModelServer::start(Paced { delay: Duration::from_millis(300), ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit = format!("[[limits]]\nname = \"one\"\nbase_url = \"{}\"\nconcurrent_calls = 1\n", server.base_url);
    env.apply_profiles(&profiles(&server, &limit)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    for i in 0..6 {
        env.send_request(&request(&format!("low-{i}"), "low", false)).await;
    }
    // All six are claimed: their first calls wait in this worker's line.
    let started = JournalEvent::InvocationStarted.as_str();
    eventually(WAIT, "six low runs started", || async {
        (env.scalar_i64("SELECT count(*) FROM events WHERE type = $1", &[&started]).await == 6).then_some(())
    })
    .await;
    env.send_request(&request("urgent", "high", false)).await;
    eventually(WAIT, "the high run started", || async {
        (env.scalar_i64("SELECT count(*) FROM events WHERE type = $1", &[&started]).await == 7).then_some(())
    })
    .await;
    let joined = Instant::now();
    let mut done = 0;
    while done < 7 {
        let message = next_json(&mut replies, WAIT).await;
        if message["type"] == "reply" {
            assert_eq!(message["status"], "completed", "{message}");
            done += 1;
        }
    }
    fleet.stop().await;
    let arrivals = server.arrivals();
    let high = first_call(&arrivals, &env.run_of("urgent").await.to_string());
    let mut waiting = 0;
    let mut overtaken = 0;
    for i in 0..6 {
        let low = first_call(&arrivals, &env.run_of(&format!("low-{i}")).await.to_string());
        if low > joined {
            waiting += 1;
            overtaken += usize::from(low > high);
        }
    }
    assert!(waiting >= 3, "only {waiting} low calls were still waiting: the test proves nothing");
    // The one already asking the database when the high call joined may go first.
    assert!(
        overtaken + 1 >= waiting,
        "the high call went after {} of the {waiting} low ones waiting",
        waiting - overtaken
    );
}

#[tokio::test]
async fn one_huge_call_does_not_hold_back_the_small_calls_after_it() {
    // 60,000 tokens a minute; one call reports 40,000. Estimated by the
    // largest usage of the last ten minutes, every later call would count
    // 40,000 while it runs and wait for the huge one to leave the window.
    let server = PacedModelServer::start(Paced { huge: 40_000, ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit =
        format!("[[limits]]\nname = \"tokens\"\nbase_url = \"{}\"\ntokens_per_minute = 60000\n", server.base_url);
    env.apply_profiles(&profiles(&server, &limit)).await;
    let fleet = env.start_all();
    let mut huge = request("huge", "normal", false);
    huge["userIntent"] = "Write it HUGELY.".into();
    env.send_request(&huge).await;
    eventually(WAIT, "the huge run done", || async { completed(&env, "huge").await.then_some(()) }).await;
    let reported = "SELECT count(*) FROM model_limit_calls WHERE reported AND tokens = 40000";
    assert_eq!(env.scalar_i64(reported, &[]).await, 1, "the provider reported the huge call's usage");
    let sent = Instant::now();
    for i in 0..3 {
        env.send_request(&request(&format!("small-{i}"), "normal", false)).await;
    }
    for i in 0..3 {
        let id = format!("small-{i}");
        eventually(Duration::from_secs(30), &format!("{id} done"), || async {
            completed(&env, &id).await.then_some(())
        })
        .await;
    }
    fleet.stop().await;
    let waited = "SELECT count(*) FROM events WHERE type = $1";
    assert_eq!(env.scalar_i64(waited, &[&JournalEvent::ModelCallWaiting.as_str()]).await, 0, "no call waited");
    assert!(sent.elapsed() < Duration::from_secs(30));
}
