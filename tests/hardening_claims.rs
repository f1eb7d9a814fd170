//! Issue 8 hardening: a claim that can never succeed ends its run, a healthy
//! request that hit the delivery limit is still answered, `profiles apply`
//! never shows a moment without routes, oversized HTTP bodies are refused,
//! and a bad workspace path is the agent's error to fix.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
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
    env.count_sweeps().await;
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
        .execute(
            "UPDATE profiles SET spec = jsonb_set(spec, '{model}', $1::text::jsonb) WHERE id = 'writer'",
            &[&binding],
        )
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
    assert!(journal.contains(&JournalEvent::HostError) && journal.contains(&JournalEvent::RunFailed), "{journal:?}");

    // Several grace periods later (15 sweeps of 200 ms, 6 graces) nothing
    // re-published it, and it is still failed.
    env.wait_for_sweeps(15, WAIT).await;
    assert_eq!(status().await, ("failed".to_string(), republished));
    let queued =
        env.scalar_i64("SELECT count(*) FROM outbox WHERE body->>'invocationId' = $1", &[&root.to_string()]).await;
    assert_eq!(queued, 0, "no message for the failed invocation is waiting to be sent");
    workers.stop().await;
    fleet.stop().await;
}

/// A healthy request whose every delivery meets a transient database error
/// reaches the queue's delivery limit; the broker dead-letters it with only
/// `x-death`. Intake picks it up from there and the run goes on.
#[tokio::test]
async fn a_request_dead_lettered_by_the_delivery_limit_is_still_run_and_answered() {
    // This test failed once in CI with no reply a minute after the trigger
    // went, and never here: if it fails again, the log says where it stood.
    let _logs = baton_tests::logs::shown_on_failure();
    let mut env = TestEnv::new().await;
    // Intake retries a transient failure in place for this long, then gives
    // up its connection: the message comes back, one delivery closer to the limit.
    env.settings.transient_patience = Duration::from_millis(300);
    // And reconnects after at most this long: the test waits for the delivery
    // limit, not for the default 10 s backoff.
    env.settings.reconnect_max = Duration::from_millis(500);
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
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("limit-1", "docs_agent", "en")).await;

    // The broker gave up on it: it reaches baton.dead through x-death, with
    // no reason of the fleet's own.
    let copy = next_json(&mut dead, Duration::from_secs(45)).await;
    assert_eq!(copy["id"], "limit-1", "the broker's dead letter, not one of the fleet's: {copy}");
    env.db().await.batch_execute("DROP TRIGGER refuse_request ON handoff_requests").await.unwrap();

    // On a loaded CI box the chain takes a while after the trigger goes.
    let messages = until_reply(&mut replies, Duration::from_secs(60)).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{reply}");
    let runs = env.scalar_i64("SELECT count(*) FROM runs", &[]).await;
    assert_eq!(runs, 1);
    let events = env.handoff_events("limit-1").await;
    assert!(events.contains(&HandoffEvent::DeadLetterRecovered), "an operator can tell it was handled: {events:?}");
    fleet.stop().await;
}

#[tokio::test]
async fn a_model_server_answering_100_mib_fails_the_call_cleanly_without_holding_it() {
    let server = baton_tests::http::HugeBodyServer::start(200, 100 * 1024 * 1024).await;
    let env = TestEnv::new().await;
    let profile = format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"Solo\"\ndescription = \"Works alone.\"\n\
         tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"test-model\"\nmax_attempts = 2\n",
        server.base_url
    );
    env.apply_profiles(&profile).await;
    let messages = env.run_request("huge-1").await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(server.hits(), 2, "the oversized answer is tried again, then given up on");
    let run = env.run_of("huge-1").await;
    let timeline = baton_store::journal::timeline(&env.db().await, run).await.unwrap();
    let error =
        timeline.iter().find(|e| e.is(JournalEvent::HostError)).map(|e| e.payload.to_string()).unwrap_or_default();
    assert!(error.contains("larger than"), "the journal says why: {error}");
    // This whole test process (fleet, model server and all) peaks near 65 MiB
    // with an empty body and near 82 MiB with this one; holding the 100 MiB
    // body would take it well past 165 MiB.
    let peak = baton_tests::http::peak_rss_bytes();
    assert!(peak < 140 * 1024 * 1024, "the body was never held whole: peak RSS {} MiB", peak / (1024 * 1024));
}

#[tokio::test]
async fn a_callback_endpoint_answering_an_endless_error_body_is_retried_with_a_short_reason() {
    let server = baton_tests::http::HugeBodyServer::start(500, 100 * 1024 * 1024).await;
    let env = TestEnv::new().await;
    env.apply_example_profiles_with_callbacks(&[server.base_url.trim_end_matches("/v1")]).await;
    let mut request = sample_request_json("cb-huge-1", "docs_agent", "en");
    request["callback"]["statusUrl"] = format!("{}/status", server.base_url).into();
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request).await;
    until_reply(&mut replies, WAIT).await;
    let reason: String = eventually(WAIT, "a callback was retried with its reason", || async {
        let row = env
            .db()
            .await
            .query_opt("SELECT last_error FROM callbacks WHERE attempts >= 1 LIMIT 1", &[])
            .await
            .unwrap();
        row.and_then(|r| r.get::<_, Option<String>>(0))
    })
    .await;
    fleet.stop().await;
    assert!(reason.starts_with("HTTP 500"), "{reason}");
    assert!(reason.len() < 300, "only a snippet of the body is kept: {} bytes", reason.len());
    let peak = baton_tests::http::peak_rss_bytes();
    assert!(peak < 140 * 1024 * 1024, "the body was never held whole: peak RSS {} MiB", peak / (1024 * 1024));
}

#[tokio::test]
async fn a_workspace_path_with_control_characters_or_too_long_is_the_agents_error_to_fix() {
    let env = TestEnv::new().await;
    let long = format!("output/{}.md", "x/".repeat(300));
    let solo = baton_tests::profile(
        "solo",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/evil\u001b[2J\nname.md", content = "x" } }"#,
            &format!(r#"{{ tool = "workspace_write", args = {{ path = "{long}", content = "x" }} }}"#),
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Written after two refusals." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"solo\"\n\n{solo}")).await;
    let messages = env.run_request("paths-1").await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "the run goes on: {reply}");
    assert_eq!(reply["text"], "Written after two refusals.");
    let run = env.run_of("paths-1").await;
    let root = &env.invocations_of(run, "solo").await[0];
    let results = env.tool_results(root.id).await;
    for (result, says) in results.iter().zip(["control characters", "longer than 512 bytes"]) {
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(result["structured"]["error"]["code"], "workspace.invalid_path", "{result}");
        let content = result["content"].as_str().unwrap();
        assert!(content.contains(says), "`{content}` should say `{says}`");
        assert!(!content.chars().any(char::is_control), "the error does not repeat control characters: {content:?}");
    }
    let stored = env.scalar_i64("SELECT count(*) FROM workspace_files WHERE path <> 'output/main.md'", &[]).await;
    assert_eq!(stored, 0, "no file was written under a bad path");
}

/// Two `baton profiles apply` at once, while a reader keeps routing: neither
/// apply fails, and the reader never finds the routes gone.
#[tokio::test]
async fn concurrent_profile_applies_never_leave_a_moment_without_routes() {
    let env = TestEnv::new().await;
    let file = |n: usize| {
        let routes: String = (0..20).map(|i| format!("target_{i} = \"p{n}\"\n")).collect();
        let p =
            baton_tests::profile(&format!("p{n}"), &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#]);
        baton_domain::profiles::ProfilesFile::parse(&format!("[routes]\n{routes}\n{p}")).unwrap()
    };
    let mut first = env.db().await;
    baton_store::profiles::apply_atomically(&mut first, &file(0)).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let reader = {
        let (pool, stop) = (env.pool.clone(), stop.clone());
        tokio::spawn(async move {
            let c = pool.get().await.unwrap();
            let (mut reads, mut empty) = (0, 0);
            while !stop.is_cancelled() {
                let n: i64 = c.query_one("SELECT count(*) FROM routes", &[]).await.unwrap().get(0);
                reads += 1;
                empty += usize::from(n != 20);
            }
            (reads, empty)
        })
    };
    for round in 0..15 {
        let (mut a, mut b) = (env.db().await, first);
        let (fa, fb) = (file(2 * round + 1), file(2 * round + 2));
        let (ra, rb) = tokio::join!(
            baton_store::profiles::apply_atomically(&mut a, &fa),
            baton_store::profiles::apply_atomically(&mut b, &fb)
        );
        ra.expect("the first apply of the pair");
        rb.expect("the second apply of the pair");
        first = b;
    }
    stop.cancel();
    let (reads, incomplete) = reader.await.unwrap();
    assert!(reads > 30, "the reader kept reading ({reads} reads)");
    assert_eq!(incomplete, 0, "{incomplete} of {reads} reads saw a partial or empty set of routes");
}
