//! `ask_user` end to end: an agent asks its user through the bridge and
//! waits parked; the bridge's answer (or the question's timeout) resumes it
//! on any worker, and no model turn runs twice.

use std::collections::HashSet;
use std::time::Duration;

use baton_bus::lapin::options::BasicAckOptions;
use baton_bus::lapin::Consumer;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, profile, sample_request_json, until_reply, TestEnv};
use futures_lite::StreamExt;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
/// The journal of an asked question that was answered, in order.
const ASKED_AND_ANSWERED: [JournalEvent; 4] = [
    JournalEvent::AskUserStarted,
    JournalEvent::InvocationParked,
    JournalEvent::InvocationWoken,
    JournalEvent::AskUserAnswered,
];
const TOOLS: &[&str] = &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];
const ASK: &str = r#"{ tool = "ask_user", args = { question = "Publish the post now?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Published." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

/// An agent that asks first, then writes, commits and finishes; its
/// questions wait `timeout` seconds.
fn asker(timeout: u64) -> String {
    let profile = profile("asker", TOOLS, "", &[ASK, WRITE, COMMIT, FINISH]);
    let profile = profile.replacen("\n[profiles.model]", &format!("\nask_timeout = {timeout}\n[profiles.model]"), 1);
    format!("[routes]\ndocs_agent = \"asker\"\n\n{profile}")
}

/// The next message on the bridge's queue with its AMQP `message_id`.
async fn next_with_id(consumer: &mut Consumer) -> (Value, String) {
    let delivery = tokio::time::timeout(WAIT, consumer.next()).await.expect("a bridge message").unwrap().unwrap();
    delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
    let id = delivery.properties.message_id().as_ref().map(ToString::to_string).unwrap_or_default();
    (serde_json::from_slice(&delivery.data).unwrap(), id)
}

/// Reads the bridge's messages up to the question; returns them, question last.
async fn until_question(consumer: &mut Consumer) -> Vec<(Value, String)> {
    let mut seen = vec![];
    loop {
        let (message, id) = next_with_id(consumer).await;
        let done = message["type"] == "question";
        seen.push((message, id));
        if done {
            return seen;
        }
    }
}

fn answer(id: &str, handoff: &str, question: &str, text: &str) -> Vec<u8> {
    let body = json!({"type": "answer", "id": id, "handoffId": handoff, "questionId": question, "text": text, "at": "2026-11-30T10:00:00Z"});
    serde_json::to_vec(&body).unwrap()
}

/// The asker's invocation, its model turns and its tool results.
async fn transcript(env: &TestEnv, handoff: &str) -> (usize, Vec<Value>) {
    let run = env.run_of(handoff).await;
    let inv = &env.invocations_of(run, "asker").await[0];
    let steps = baton_store::invocations::steps::load(&env.db().await, inv.id).await.unwrap();
    let turns: Vec<&Value> = steps.iter().filter(|s| s.kind == "model_turn").map(|s| &s.payload).collect();
    let calls: HashSet<String> = turns.iter().map(|t| t["toolCalls"][0]["id"].to_string()).collect();
    assert_eq!(calls.len(), turns.len(), "a model turn ran twice");
    (turns.len(), env.tool_results(inv.id).await)
}

async fn answer_outcome(env: &TestEnv, id: &str) -> String {
    let c = env.db().await;
    c.query_one("SELECT outcome FROM bridge_answers WHERE id = $1", &[&id]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_question_blocks_the_request_and_its_answer_completes_the_run() {
    let env = TestEnv::new().await;
    env.apply_profiles(&asker(3600)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("ask-1", "docs_agent", "en")).await;

    let seen = until_question(&mut replies).await;
    let statuses: Vec<(&str, i64)> = seen
        .iter()
        .filter(|(m, _)| m["type"] == "status")
        .map(|(m, _)| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap()))
        .collect();
    assert_eq!(statuses, [("accepted", 1), ("running", 2), ("blocked", 3)]);
    let (question, message_id) = seen.last().unwrap();
    let question_id = question["questionId"].as_str().unwrap();
    assert_eq!(*message_id, format!("question:ask-1:{question_id}"));
    assert_eq!(question["handoffId"], "ask-1");
    assert_eq!(question["options"], json!(["yes", "no"]));
    assert_eq!(question["parts"], json!([question["text"]]));
    assert!(question["text"].as_str().unwrap().starts_with("Publish the post now?"));
    assert!(question["expiresAt"].as_str().unwrap() > baton_store::requests::bridge::timestamp().as_str());
    let waits = env.scalar_i64("SELECT extract(epoch FROM expires_at - now())::bigint FROM questions", &[]).await;
    assert!((3500..=3600).contains(&waits), "the profile's ask_timeout: {waits}");
    let parked =
        env.scalar_i64("SELECT count(*) FROM invocations WHERE status = 'parked' AND lease_owner IS NULL", &[]).await;
    assert_eq!(parked, 1, "while it waits, no worker holds the run");
    // Operators see the run as blocked, and can list the blocked ones.
    use baton_domain::run::state::RunState;
    use baton_store::overview::{runs, RunFilter};
    let blocked =
        runs(&env.db().await, &RunFilter { status: Some(RunState::Blocked), ..Default::default() }).await.unwrap();
    assert_eq!(blocked.iter().map(|r| r.handoff_id.as_deref()).collect::<Vec<_>>(), [Some("ask-1")]);
    let listed = env.baton_cli(&["runs", "list", "--status", "blocked", "--json"]).await;
    assert!(listed.contains("\"ask-1\"") && listed.contains("\"blocked\""), "{listed}");

    env.send_raw(&answer("a-1", "ask-1", question_id, "yes, go ahead; my key is sk-abcdefghijklmnopqrstuvwx"), None)
        .await;
    let (running, _) = next_with_id(&mut replies).await;
    assert_eq!((running["status"].as_str(), running["seq"].as_i64()), (Some("running"), Some(4)));
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let running = runs(&env.db().await, &RunFilter { status: Some(RunState::Blocked), ..Default::default() }).await;
    assert!(running.unwrap().is_empty(), "answered, it is no longer blocked");

    let (turns, results) = transcript(&env, "ask-1").await;
    assert_eq!(turns, 4, "ask, write, commit, finish: one model turn each");
    let result = results[0]["content"].as_str().unwrap();
    assert!(result.starts_with("The user answered:\n> yes, go ahead"), "{result}");
    assert!(!result.contains("sk-abcdefghijklmnopqrstuvwx"), "the disclosure policy applies: {result}");
    assert_eq!(answer_outcome(&env, "a-1").await, "applied");
    let journal = env.journal(env.run_of("ask-1").await).await;
    for kind in ASKED_AND_ANSWERED {
        assert!(journal.contains(&kind), "{kind} missing from {journal:?}");
    }
    let events = env.handoff_events("ask-1").await;
    assert!(
        events.contains(&HandoffEvent::QuestionSent) && events.contains(&HandoffEvent::AnswerReceived),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_unanswered_question_times_out_and_the_agent_goes_on() {
    let env = TestEnv::new().await;
    env.apply_profiles(&asker(1)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("ask-late", "docs_agent", "en")).await;
    let (question, _) = until_question(&mut replies).await.pop().unwrap();
    let (running, _) = next_with_id(&mut replies).await;
    assert_eq!(
        (running["status"].as_str(), running["seq"].as_i64()),
        (Some("running"), Some(4)),
        "back to running when it times out"
    );
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(messages.last().unwrap()["status"], "completed");

    let (turns, results) = transcript(&env, "ask-late").await;
    assert_eq!(turns, 4);
    assert!(results[0]["content"].as_str().unwrap().starts_with("The user did not answer in time."), "{}", results[0]);
    assert_eq!(results[0].get("isError"), None, "a tool result that is not an error says nothing of it");
    let journal = env.journal(env.run_of("ask-late").await).await;
    assert!(journal.contains(&JournalEvent::AskUserTimedOut), "{journal:?}");

    // The answer that comes after all: recorded, nothing else.
    env.send_raw(&answer("late-1", "ask-late", question["questionId"].as_str().unwrap(), "yes"), None).await;
    wait_for_outcome(&env, "late-1").await;
    assert_quiet(&mut replies).await;
    fleet.stop().await;
    assert!(env.handoff_events("ask-late").await.contains(&HandoffEvent::AnswerIgnored));
}

#[tokio::test]
async fn duplicate_closed_and_unknown_answers_are_recorded_and_change_nothing() {
    let env = TestEnv::new().await;
    // The agent thinks a while after the answer, so later answers meet a live run.
    let slow_write =
        r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Published." }, delay_ms = 1500 }"#;
    let profile = profile("asker", TOOLS, "", &[ASK, slow_write, COMMIT, FINISH]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"asker\"\n\n{profile}")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("ask-dup", "docs_agent", "en")).await;
    let (question, _) = until_question(&mut replies).await.pop().unwrap();
    let question_id = question["questionId"].as_str().unwrap();
    env.send_raw(&answer("d-1", "ask-dup", question_id, "yes"), None).await;
    let (running, _) = next_with_id(&mut replies).await;
    assert_eq!(running["status"], "running");

    env.send_raw(&answer("d-1", "ask-dup", question_id, "no, wait"), None).await;
    env.send_raw(&answer("d-2", "ask-dup", question_id, "no"), None).await;
    env.send_raw(&answer("d-3", "no-such-handoff", question_id, "no"), None).await;
    env.send_raw(&answer("d-4", "ask-dup", &uuid::Uuid::now_v7().to_string(), "no"), None).await;
    env.send_raw(&answer("d-5", "ask-dup", "not-a-question-id", "no"), None).await;
    env.send_raw(br#"{"type": "answer", "id": "d-6", "handoffId": "ask-dup"}"#, None).await;
    for id in ["d-2", "d-3", "d-4", "d-5"] {
        wait_for_outcome(&env, id).await;
    }
    assert_eq!(answer_outcome(&env, "d-1").await, "applied");
    assert_eq!(answer_outcome(&env, "d-2").await, "the question was already answered");
    assert_eq!(answer_outcome(&env, "d-3").await, "unknown handoff");
    assert_eq!(answer_outcome(&env, "d-4").await, "unknown question");
    assert_eq!(answer_outcome(&env, "d-5").await, "unknown question");
    let dead = until_dead(&env).await;
    assert!(dead["_error"].as_str().unwrap().contains("missing field `questionId`"), "{dead}");

    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.iter().filter(|m| m["type"] == "status").count(), 1, "only the final status: {messages:?}");
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let (_, results) = transcript(&env, "ask-dup").await;
    assert_eq!(results[0]["content"], "The user answered:\n> yes");
    let events = env.handoff_events("ask-dup").await;
    assert_eq!(events.iter().filter(|e| **e == HandoffEvent::AnswerDuplicate).count(), 1, "{events:?}");
    assert_eq!(events.iter().filter(|e| **e == HandoffEvent::AnswerIgnored).count(), 3, "{events:?}");
    assert_eq!(events.iter().filter(|e| **e == HandoffEvent::AnswerReceived).count(), 1, "{events:?}");
}

async fn wait_for_outcome(env: &TestEnv, id: &str) {
    let c = env.db().await;
    eventually(WAIT, &format!("answer {id} recorded"), || async {
        let row = c
            .query_opt("SELECT outcome FROM bridge_answers WHERE id = $1 AND outcome <> 'received'", &[&id])
            .await
            .unwrap();
        row.map(|_| ())
    })
    .await;
}

/// No further message reaches the bridge for a while.
async fn assert_quiet(replies: &mut Consumer) {
    if let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_millis(1500), replies.next()).await {
        panic!("unexpected bridge message: {}", String::from_utf8_lossy(&d.data));
    }
}

/// The next message in the test's dead-letter queue.
async fn until_dead(env: &TestEnv) -> Value {
    let mut dead = env.consume(&env.queue(baton_domain::fleet::Queue::Dead)).await;
    baton_tests::next_json(&mut dead, WAIT).await
}

#[tokio::test]
async fn a_worker_killed_while_the_question_is_open_changes_nothing() {
    let env = TestEnv::new().await;
    env.apply_profiles(&asker(3600)).await;
    let fleet = env.start(&[baton::roles::Role::Intake, baton::roles::Role::Relay, baton::roles::Role::Collector]);
    let mut replies = env.replies().await;
    let mut doomed = env.spawn_baton("invocation", "doomed");
    env.send_request(&sample_request_json("ask-kill", "docs_agent", "en")).await;
    let (question, _) = until_question(&mut replies).await.pop().unwrap();
    doomed.signal("KILL");
    assert_eq!(doomed.exit_code(WAIT).await, None, "killed by a signal");

    let survivor = env.spawn_baton("invocation", "survivor");
    env.send_raw(&answer("k-1", "ask-kill", question["questionId"].as_str().unwrap(), "yes"), None).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    drop(survivor);
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let (turns, results) = transcript(&env, "ask-kill").await;
    assert_eq!(turns, 4);
    assert_eq!(results[0]["content"], "The user answered:\n> yes");
    let workers = env.workers_that_started("ask-kill").await;
    assert_eq!(workers, ["doomed", "survivor"]);
}

#[tokio::test]
async fn the_demo_with_ask_answers_the_agents_question_and_completes() {
    let env = TestEnv::new().await;
    let output = tokio::process::Command::new(baton_tests::baton_binary())
        .args(["demo", "--ask", "--timeout", "30"])
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &env.settings.queue_prefix)
        .env("BATON_RELAY_POLL_MS", "200")
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    for line in [
        "bridge got status #3: blocked",
        "bridge got a question: Shall I publish",
        "bridge answered: yes",
        "bridge got status #4: running",
    ] {
        assert!(stdout.contains(line), "`{line}` missing:\n{stdout}");
    }
    // The demo ends with one row per agent; the journal holds the question and its answer.
    assert!(stdout.lines().any(|l| l.starts_with("announcer ")), "the announcer's row:\n{stdout}");
    let handoff =
        stdout.split("bridge sent request ").nth(1).and_then(|r| r.split(' ').next()).expect("the request id");
    let journal = env.journal(env.run_of(handoff).await).await;
    for event in ASKED_AND_ANSWERED {
        assert!(journal.contains(&event), "{event} missing from the journal: {journal:?}");
    }
    assert!(stdout.contains("agents:   announcer"), "{stdout}");
}

#[tokio::test]
async fn time_spent_waiting_for_the_user_does_not_count_against_the_wall_clock() {
    let env = TestEnv::new().await;
    env.apply_profiles(&format!("[budgets.default]\nmax_wall_clock_secs = 2\n\n{}", asker(3600))).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("ask-slow", "docs_agent", "en")).await;
    let (question, _) = until_question(&mut replies).await.pop().unwrap();
    // Answered once the run is older than its wall clock (on the database's
    // clock, which the budget reads): only the time spent waiting for the
    // user keeps it within its budget.
    let run = env.run_of("ask-slow").await;
    let age_ms = "SELECT (extract(epoch FROM now() - created_at) * 1000)::bigint FROM runs WHERE id = $1";
    eventually(WAIT, "the run is older than its wall clock", || async {
        (env.scalar_i64(age_ms, &[&run]).await > 2_000).then_some(())
    })
    .await;
    env.send_raw(&answer("s-1", "ask-slow", question["questionId"].as_str().unwrap(), "yes"), None).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{:?}", messages.last());
}

#[tokio::test]
async fn a_delegated_child_cannot_ask_the_user() {
    let env = TestEnv::new().await;
    let lead = profile(
        "lead",
        &["agent_delegate", "agent_await", "workspace_write", "workspace_commit", "workspace_finish"],
        "can_delegate = true",
        &[
            r#"{ tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Help." } } }"#,
            r#"{ tool = "agent_await" }"#,
            WRITE,
            COMMIT,
            FINISH,
        ],
    );
    let helper = profile(
        "helper",
        &["ask_user"],
        "allow_as_subagent = true",
        &[ASK, r#"{ tool = "task_return", args = { summary = "Done." } }"#],
    );
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{helper}")).await;
    let messages = env.run_request("ask-child").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    assert!(messages.iter().all(|m| m["type"] != "question" && m["status"] != "blocked"), "{messages:?}");
    let run = env.run_of("ask-child").await;
    let helper = &env.invocations_of(run, "helper").await[0];
    let denied = &env.tool_results(helper.id).await[0];
    assert_eq!(denied["isError"], true);
    assert_eq!(denied["structured"]["error"]["code"], "agent.ask_denied", "{denied}");
}

#[tokio::test]
async fn an_answer_after_a_cancel_is_recorded_and_changes_nothing() {
    let env = TestEnv::new().await;
    env.apply_profiles(&asker(3600)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("ask-cancel", "docs_agent", "en")).await;
    let (question, _) = until_question(&mut replies).await.pop().unwrap();
    let cancel = json!({"type": "cancel", "id": "c-1", "handoffId": "ask-cancel", "reason": "The user said stop.", "at": "2026-11-30T10:00:00Z"});
    env.send_raw(&serde_json::to_vec(&cancel).unwrap(), None).await;
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(messages.last().unwrap()["status"], "cancelled");

    env.send_raw(&answer("c-a1", "ask-cancel", question["questionId"].as_str().unwrap(), "yes"), None).await;
    wait_for_outcome(&env, "c-a1").await;
    assert_quiet(&mut replies).await;
    fleet.stop().await;
    assert_eq!(answer_outcome(&env, "c-a1").await, "the run has ended");
    let (turns, results) = transcript(&env, "ask-cancel").await;
    assert_eq!((turns, results.len()), (1, 0), "nothing ran after the cancel");
}
