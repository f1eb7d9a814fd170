//! Issue 8 hardening: a claim that can never succeed ends its run, a healthy
//! request that hit the delivery limit is still answered, `profiles apply`
//! never shows a moment without routes, oversized HTTP bodies are refused,
//! and a bad workspace path is the agent's error to fix.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::topology::DEAD;
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_profile_this_version_cannot_read_fails_the_run_and_the_bridge_hears_it() {
    let mut env = TestEnv::new().await;
    // A short grace, so a stuck invocation would be re-published many times
    // while the test watches.
    env.settings.unclaimed_grace = Duration::from_millis(500);
    env.apply_example_profiles().await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("unreadable-1", "docs_agent", "en")).await;
    let root: Uuid = eventually(WAIT, "the root invocation exists", || async {
        let row = env.db().await.query_opt("SELECT id FROM invocations WHERE kind = 'root'", &[]).await.unwrap();
        row.map(|r| r.get(0))
    })
    .await;
    // A newer version (a rolling upgrade) stored a provider this one does not know.
    let binding = r#"{"provider": "gemini", "model": "gemini-9"}"#;
    env.db()
        .await
        .execute("UPDATE profiles SET spec = jsonb_set(spec, '{model}', $1::text::jsonb) WHERE id = 'writer'", &[&binding])
        .await
        .unwrap();
    let workers = env.start(&[Role::Invocation]);

    let messages = until_reply(&mut replies, Duration::from_secs(60)).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "failed", "{reply}");
    let said = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("writer") && said.contains("gemini"), "a readable reason: {said}");
    assert!(reply["text"].as_str().unwrap_or_default().len() > 10, "{reply}");

    let status = || async {
        let sql = "SELECT status, republished_at::text FROM invocations WHERE id = $1";
        let row = env.db().await.query_one(sql, &[&root]).await.unwrap();
        (row.get::<_, String>(0), row.get::<_, Option<String>>(1))
    };
    let (first, republished) = status().await;
    assert_eq!(first, "failed");
    let run = env.run_of("unreadable-1").await;
    let journal = env.journal(run).await;
    assert!(journal.contains(&"host_error".to_string()) && journal.contains(&"run_failed".to_string()), "{journal:?}");

    // Several grace periods later nothing re-published it, and it is still failed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status().await, ("failed".to_string(), republished));
    let queued = env.scalar_i64("SELECT count(*) FROM outbox WHERE body->>'invocationId' = $1", &[&root.to_string()]).await;
    assert_eq!(queued, 0, "no message for the failed invocation is waiting to be sent");
    workers.stop().await;
    fleet.stop().await;
}

/// A healthy request whose every delivery meets a transient database error
/// reaches the queue's delivery limit; the broker dead-letters it with only
/// `x-death`. Intake picks it up from there and the run goes on.
#[tokio::test]
async fn a_request_dead_lettered_by_the_delivery_limit_is_still_run_and_answered() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // Every attempt to store a request fails as a serialization failure
    // would (transient: intake reconnects and the message is redelivered).
    env.db()
        .await
        .batch_execute(
            "CREATE FUNCTION refuse_request() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'injected serialization failure' USING ERRCODE = '40001'; END $$;
             CREATE TRIGGER refuse_request BEFORE INSERT ON handoff_requests FOR EACH ROW EXECUTE FUNCTION refuse_request();",
        )
        .await
        .unwrap();
    let mut dead = env.consume(&env.queue(DEAD)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("limit-1", "docs_agent", "en")).await;

    // The broker gave up on it: it reaches baton.dead through x-death, with
    // no reason of the fleet's own.
    let copy = next_json(&mut dead, Duration::from_secs(45)).await;
    assert_eq!(copy["id"], "limit-1", "the broker's dead letter, not one of the fleet's: {copy}");
    env.db().await.batch_execute("DROP TRIGGER refuse_request ON handoff_requests").await.unwrap();

    let messages = until_reply(&mut replies, Duration::from_secs(45)).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{reply}");
    let runs = env.scalar_i64("SELECT count(*) FROM runs", &[]).await;
    assert_eq!(runs, 1);
    fleet.stop().await;
}
