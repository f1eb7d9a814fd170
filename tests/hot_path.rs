//! The hot path: each role publishes the outbox rows it commits itself,
//! right after the commit, and the relay only sweeps what is left behind.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::fleet::Queue;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};

const WAIT: Duration = Duration::from_secs(30);

/// Messages not yet settled: outbox rows, and bridge messages still pending.
async fn outbox_rows(env: &TestEnv) -> i64 {
    env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await
}

/// No relay runs: every message of the chain (the invocations, "run
/// finished", each status and the reply) is published by the role whose
/// transaction wrote it, in order, and its row is settled once confirmed
/// (an outbox row deleted, a bridge message marked sent).
/// Each such row was written due only after the grace, so no relay takes it
/// (and none is woken) unless its writer fails to publish it.
#[tokio::test]
async fn a_chain_runs_end_to_end_without_a_relay_each_role_publishing_what_it_commits() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // Every row inserted is noted aside, with whether it was left to its writer.
    env.db()
        .await
        .batch_execute(
            "CREATE TABLE seen (id bigint, deferred boolean);
             CREATE FUNCTION keep() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO seen VALUES (NEW.id, NEW.next_attempt_at > NEW.created_at); RETURN NULL; END $$;
             CREATE TRIGGER keep AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION keep();
             CREATE TRIGGER keep AFTER INSERT ON bridge_messages FOR EACH ROW EXECUTE FUNCTION keep();",
        )
        .await
        .unwrap();
    let fleet = env.start(&[Role::Intake, Role::Invocation, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("direct-1", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    let statuses: Vec<(&str, i64)> = messages[..messages.len() - 1]
        .iter()
        .map(|m| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap()))
        .collect();
    assert_eq!(statuses, vec![("accepted", 1), ("running", 2), ("completed", 3)]);
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let agents = &messages.last().unwrap()["result"]["agents"];
    assert_eq!(agents, &serde_json::json!(["writer", "editor", "finalizer"]));
    eventually(WAIT, "confirmed rows are settled", || async { (outbox_rows(&env).await == 0).then_some(()) }).await;
    fleet.stop().await;
    let all = env.scalar_i64("SELECT count(*) FROM seen", &[]).await;
    let deferred = env.scalar_i64("SELECT count(*) FROM seen WHERE deferred", &[]).await;
    // The three statuses and the reply, each statement's messages in one
    // row (V46): `accepted` and `running` at intake, `completed` and the
    // reply at the end; `running` in a row of its own, with the root's
    // message, if intake took the request before its process's invocation
    // role was up to take the root itself.
    assert!(all >= 2, "the chain wrote its messages: {all}");
    let rows = "SELECT count(*) FROM bridge_messages WHERE handoff_id = 'direct-1' AND NOT pending";
    let rows = env.scalar_i64(rows, &[]).await;
    assert!((2..=3).contains(&rows), "each statement's bridge messages are one row, marked sent: {rows}");
    let kept = baton_store::outbox::sent::for_handoff(&env.db().await, "direct-1").await.unwrap();
    let kept: Vec<(Option<&str>, bool)> = kept.iter().map(|m| (m.message_id.as_deref(), m.pending)).collect();
    let ids = ["status:direct-1:1", "status:direct-1:2", "status:direct-1:3", "reply:direct-1"];
    assert_eq!(kept, ids.map(|id| (Some(id), false)).to_vec(), "each bridge message is kept, as it was sent");
    assert_eq!(deferred, all, "every row a role wrote was its own to publish");
}

/// A row whose writer died between its commit and its publish (written due
/// only after the grace, and handed to no publisher) is published by the
/// relay's sweep once the grace has passed, and deleted.
#[tokio::test]
async fn a_row_its_writer_never_published_is_swept_by_the_relay_after_the_grace() {
    let mut env = TestEnv::new().await;
    env.settings.outbox_grace = Duration::from_millis(600);
    let fleet = env.start(&[Role::Relay]);
    let mut finished = env.consume(&env.queue(Queue::RunsFinished)).await;
    let run = uuid::Uuid::now_v7();
    env.db()
        .await
        .execute(
            "INSERT INTO outbox (queue, body, next_attempt_at) VALUES ($1, jsonb_build_object('runId', $2::uuid), now() + interval '600 milliseconds')",
            &[&Queue::RunsFinished.as_str(), &run],
        )
        .await
        .unwrap();
    let message = next_json(&mut finished, WAIT).await;
    assert_eq!(message["runId"], run.to_string());
    eventually(WAIT, "the swept row is deleted", || async { (outbox_rows(&env).await == 0).then_some(()) }).await;
    fleet.stop().await;
}

/// How many transactions wrote an invocation's transcript.
async fn step_transactions(env: &TestEnv, invocation: uuid::Uuid) -> i64 {
    env.scalar_i64("SELECT count(DISTINCT xmin::text) FROM transcript WHERE invocation_id = $1", &[&invocation]).await
}

/// A scripted stage's first turn needs no I/O, so it is taken inside its
/// claim's transaction: the claim, the prompt, the turn and the handoff it
/// asks for commit once. A turn that must wait (a script's `delay_ms`, like
/// a model over HTTP) is taken by the loop after the claim commits, and
/// holds no transaction while it waits.
#[tokio::test]
async fn a_scripted_stage_claims_runs_and_hands_off_in_one_transaction() {
    let env = TestEnv::new().await;
    let handoff = |to: &str, delay: &str| {
        format!(
            r#"{{ tool = "agent_handoff", args = {{ agentId = "{to}", handoff = {{ objective = "Carry on." }} }}{delay} }}"#
        )
    };
    let first = baton_tests::profile("first", &["agent_handoff"], "can_handoff = true", &[&handoff("second", "")]);
    let second = baton_tests::profile(
        "second",
        &["agent_handoff"],
        "can_handoff = true",
        &[&handoff("third", ", delay_ms = 50")],
    );
    let third = baton_tests::profile(
        "third",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ calls = [ { tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }, { tool = "workspace_commit" }, { tool = "workspace_finish" } ] }"#,
        ],
    );
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"first\"\n\n{first}\n{second}\n{third}")).await;
    let fleet = env.start(&[Role::Intake, Role::Invocation, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("folded-1", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    let run = env.run_of("folded-1").await;
    let stage = |profile: &'static str| {
        let env = &env;
        async move { env.invocations_of(run, profile).await.first().map(|inv| inv.id).expect("the stage ran") }
    };
    // prompt, turn, tool results: one transaction, the claim's.
    assert_eq!(
        step_transactions(&env, stage("first").await).await,
        1,
        "the first stage's claim took its turn and handed off"
    );
    assert_eq!(
        step_transactions(&env, stage("third").await).await,
        1,
        "the last stage's claim took its turn and finished"
    );
    // The delayed turn waited outside the claim: prompt in one, turn + result in the next.
    assert_eq!(step_transactions(&env, stage("second").await).await, 2, "a turn that waits is the loop's");
    let journal = env.journal(run).await;
    let stored = journal.iter().filter(|e| **e == JournalEvent::ModelResponseStored).count();
    assert_eq!(stored, 3, "one model turn per stage, none taken twice: {journal:?}");
}
