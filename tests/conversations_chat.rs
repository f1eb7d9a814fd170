//! A bridge can cancel, and one chat runs one thing at a time (docs/bridge-protocol.md#conversations):
//! cancels during a model call, during delegated children and before their
//! request; two requests of one chat under each strategy, with two intake
//! processes deciding in Postgres.

use std::collections::HashMap;
use std::time::Duration;

use baton::roles::Role;
use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::Consumer;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::RunStatus;
use baton_store::runs::finish_releasing;
use baton_tests::{eventually, logs, next_json, profile, sample_request_json, until_reply, TestEnv};
use serde_json::{json, Value};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);
const LEAD_TOOLS: &[&str] =
    &["agent_delegate", "agent_await", "workspace_write", "workspace_commit", "workspace_finish"];
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

/// A lead whose first model call takes `delay_ms`, then writes, commits and finishes.
fn slow_lead(delay_ms: u64) -> String {
    let write = format!(
        r#"{{ tool = "workspace_write", args = {{ path = "output/main.md", content = "Done." }}, delay_ms = {delay_ms} }}"#
    );
    profile("lead", LEAD_TOOLS, "can_delegate = true", &[&write, COMMIT, FINISH])
}

fn routed(profiles: &[String], extra: &str) -> String {
    format!("[routes]\ndocs_agent = \"lead\"\n{extra}\n{}", profiles.join("\n"))
}

fn cancel(id: &str, handoff: &str) -> Value {
    json!({"type": "cancel", "id": id, "handoffId": handoff, "reason": "The user said stop.", "at": "2026-11-30T10:00:00Z"})
}

async fn send_cancel(env: &TestEnv, id: &str, handoff: &str) {
    env.send_raw(&serde_json::to_vec(&cancel(id, handoff)).unwrap(), Some(&env.reply_queue.clone())).await;
}

async fn request_status(env: &TestEnv, id: &str) -> Option<String> {
    let request = baton_store::requests::get(&env.db().await, id).await.unwrap()?;
    Some(request.status.as_str().to_string())
}

/// Steps written for a run's invocations, and its workspace files.
async fn activity(env: &TestEnv, run: Uuid) -> (i64, i64) {
    let steps = env
        .scalar_i64(
            "SELECT count(*) FROM steps s JOIN invocations i ON i.id = s.invocation_id WHERE i.run_id = $1",
            &[&run],
        )
        .await;
    let files = env.scalar_i64("SELECT count(*) FROM workspace_files WHERE run_id = $1", &[&run]).await;
    (steps, files)
}

#[tokio::test]
async fn a_cancel_during_a_model_call_stops_the_run_and_nothing_runs_afterwards() {
    logs::capture();
    let env = TestEnv::new().await;
    env.apply_profiles(&routed(&[slow_lead(2_500)], "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("cancel-model", "docs_agent", "en")).await;
    eventually(WAIT, "the model call is under way", || async {
        (request_status(&env, "cancel-model").await? == "running").then_some(())
    })
    .await;
    send_cancel(&env, "stop-1", "cancel-model").await;
    let messages = until_reply(&mut replies, WAIT).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled", "{reply}");
    assert!(reply["text"].as_str().unwrap().contains("The user said stop."), "{reply}");
    let run = env.run_of("cancel-model").await;
    let before = activity(&env, run).await;
    // Once the cancelled loop has ended (however long its model call would
    // have taken), nothing of the run can write any more.
    env.wait_for_loops_to_end(run, WAIT).await;
    assert_eq!(activity(&env, run).await, before, "no step and no file after the cancel");
    assert_eq!(before.1, 0, "the slow model call's write never happened");
    // The same cancel again, and another for the ended handoff: recorded, nothing sent.
    send_cancel(&env, "stop-1", "cancel-model").await;
    send_cancel(&env, "stop-2", "cancel-model").await;
    eventually(WAIT, "both recorded", || async {
        let events = env.handoff_events("cancel-model").await;
        (events.contains(&HandoffEvent::CancelDuplicate) && events.contains(&HandoffEvent::CancelIgnored)).then_some(())
    })
    .await;
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::RunCancelled), "{journal:?}");
    let by = "SELECT (error->>'by' = 'bridge')::int::bigint FROM runs WHERE id = $1";
    assert_eq!(env.scalar_i64(by, &[&run]).await, 1, "the bridge's cancel is recorded as the bridge's");
    fleet.stop().await;
}

#[tokio::test]
async fn a_cancel_during_delegated_children_stops_the_children_too() {
    logs::capture();
    let env = TestEnv::new().await;
    let delegate =
        r#"{ tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Look it up." } } }"#;
    let lead =
        profile("lead", LEAD_TOOLS, "can_delegate = true", &[delegate, r#"{ tool = "agent_await" }"#, COMMIT, FINISH]);
    let turn = r#"{ tool = "task_return", args = { summary = "Helped.", findings = [] }, delay_ms = 2500 }"#;
    let helper = profile("helper", &["workspace_read"], "allow_as_subagent = true", &[turn]);
    env.apply_profiles(&routed(&[lead, helper], "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("cancel-children", "docs_agent", "en")).await;
    let run = eventually(WAIT, "a run", || async {
        baton_store::requests::get(&env.db().await, "cancel-children").await.unwrap()?.run_id
    })
    .await;
    eventually(WAIT, "the child runs while its parent waits", || async {
        let running = "SELECT count(*) FROM invocations WHERE run_id = $1 AND kind = 'child' AND status = 'running'";
        (env.scalar_i64(running, &[&run]).await == 1).then_some(())
    })
    .await;
    send_cancel(&env, "stop-children", "cancel-children").await;
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(messages.last().unwrap()["status"], "cancelled");
    // The child's slow turn would have come back by the time its loop ended.
    env.wait_for_loops_to_end(run, WAIT).await;
    let live = "SELECT count(*) FROM invocations WHERE run_id = $1 AND status NOT IN ('cancelled', 'failed')";
    assert_eq!(env.scalar_i64(live, &[&run]).await, 0, "every invocation of the run stopped");
    let tasks = "SELECT count(*) FROM tasks WHERE run_id = $1 AND status <> 'cancelled'";
    assert_eq!(env.scalar_i64(tasks, &[&run]).await, 0, "the child's task was cancelled");
    let journal = env.journal(run).await;
    assert!(
        !journal.contains(&JournalEvent::TaskReturnRecorded),
        "the child returned nothing after the cancel: {journal:?}"
    );
    fleet.stop().await;
}

#[tokio::test]
async fn a_cancel_that_arrives_before_its_request_cancels_it_on_arrival() {
    let env = TestEnv::new().await;
    env.apply_profiles(&routed(&[slow_lead(10)], "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    send_cancel(&env, "early", "cancel-early").await;
    send_cancel(&env, "for-nobody", "never-sent").await;
    let kept = "SELECT count(*) FROM bridge_cancels WHERE applied_at IS NULL";
    eventually(WAIT, "both cancels kept", || async { (env.scalar_i64(kept, &[]).await == 2).then_some(()) }).await;
    env.send_request(&sample_request_json("cancel-early", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    let statuses: Vec<&str> = messages.iter().filter_map(|m| m["status"].as_str()).collect();
    assert_eq!(statuses, ["cancelled", "cancelled"], "a cancelled status, then the reply: {messages:?}");
    assert!(messages.last().unwrap()["text"].as_str().unwrap().contains("The user said stop."));
    let request = baton_store::requests::get(&env.db().await, "cancel-early").await.unwrap().unwrap();
    assert_eq!(request.run_id, None, "no run was started");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 0);
    // Intake made the chat with the request's insert, then found the cancel:
    // the chat was rolled back with it.
    assert_eq!(env.scalar_i64("SELECT count(*) FROM conversations", &[]).await, 0, "no chat was left made");
    assert_eq!(env.scalar_i64(kept, &[]).await, 1, "the cancel for a request that never came is still kept");
    fleet.stop().await;
}

#[tokio::test]
async fn a_request_delivered_again_after_its_chat_was_forgotten_starts_nothing_and_makes_no_chat() {
    let env = TestEnv::new().await;
    env.apply_profiles(&routed(&[slow_lead(10)], "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let request = sample_request_json("chat-again", "docs_agent", "en");
    env.send_request(&request).await;
    let first = until_reply(&mut replies, WAIT).await;
    assert_eq!(first.last().unwrap()["status"], "completed", "{first:?}");
    // Retention forgets an idle chat; the request itself is still kept.
    env.db().await.execute("DELETE FROM conversations", &[]).await.unwrap();
    env.send_request(&request).await;
    let deliveries = "SELECT deliveries::int8 FROM handoff_requests WHERE id = 'chat-again'";
    eventually(WAIT, "the second delivery counted", || async {
        (env.scalar_i64(deliveries, &[]).await == 2).then_some(())
    })
    .await;
    // Intake made the chat with the request's insert, found the request
    // stored already and rolled the chat back with it: a duplicate starts nothing.
    assert_eq!(env.scalar_i64("SELECT count(*) FROM conversations", &[]).await, 0, "no chat was made");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 1, "no second run");
    fleet.stop().await;
}

#[tokio::test]
async fn a_cancel_of_a_request_waiting_for_its_turn_answers_it_and_the_chat_goes_on() {
    let env = TestEnv::new().await;
    env.apply_profiles(&routed(&[slow_lead(800)], "")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    for id in ["turn-1", "turn-2", "turn-3"] {
        env.send_request(&sample_request_json(id, "docs_agent", "en")).await;
    }
    let waiting = "SELECT count(*) FROM conversation_queue";
    eventually(WAIT, "two requests wait", || async { (env.scalar_i64(waiting, &[]).await == 2).then_some(()) }).await;
    send_cancel(&env, "drop-2", "turn-2").await;
    let seen = messages_until_replies(&mut replies, 3).await;
    assert_eq!(reply_of(&seen, "turn-2")["status"], "cancelled");
    for id in ["turn-1", "turn-3"] {
        assert_eq!(reply_of(&seen, id)["status"], "completed", "{id}");
    }
    let request = baton_store::requests::get(&env.db().await, "turn-2").await.unwrap().unwrap();
    assert_eq!(request.run_id, None, "the cancelled request never ran");
    assert!(started_after_end(&env, "turn-1", "turn-3").await, "the chat's next request still waited its turn");
    fleet.stop().await;
}

#[tokio::test]
async fn a_malformed_cancel_or_an_unknown_type_is_dead_lettered_without_a_reply() {
    let env = TestEnv::new().await;
    let fleet = env.start(&[Role::Intake]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut bad = cancel("", "some-handoff");
    env.send_raw(&serde_json::to_vec(&bad).unwrap(), Some(&env.reply_queue.clone())).await;
    bad["type"] = json!("bogus");
    bad["id"] = json!("b-1");
    env.send_raw(&serde_json::to_vec(&bad).unwrap(), Some(&env.reply_queue.clone())).await;
    let reasons = [next_json(&mut dead, WAIT).await, next_json(&mut dead, WAIT).await]
        .map(|d| d["_error"].as_str().unwrap().to_string());
    fleet.stop().await;
    assert!(reasons[0].contains("field `id` must be 1 to 128"), "{reasons:?}");
    assert!(reasons[1].contains("\"bogus\""), "{reasons:?}");
    assert_eq!(env.publisher.ready_count(&env.reply_queue).await.unwrap(), 0, "the handoff's user hears nothing of it");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM bridge_cancels", &[]).await, 0);
}

/// Reads the bridge's messages until `n` replies came; returns every
/// message per handoff, in order.
async fn messages_until_replies(consumer: &mut Consumer, n: usize) -> HashMap<String, Vec<Value>> {
    let mut seen: HashMap<String, Vec<Value>> = HashMap::new();
    let mut replies = 0;
    while replies < n {
        let message = next_json(consumer, WAIT).await;
        replies += usize::from(message["type"] == "reply");
        seen.entry(message["handoffId"].as_str().unwrap_or_default().to_string()).or_default().push(message);
    }
    seen
}

/// Two intake processes and the other roles in this test; two requests of
/// one chat sent 50 ms apart. Returns the bridge's messages per handoff.
async fn two_requests_of_one_chat(env: &TestEnv, strategy: &str) -> HashMap<String, Vec<Value>> {
    env.apply_profiles(&routed(&[slow_lead(1_000)], &format!("[conversations]\ndefault = \"{strategy}\""))).await;
    let _intakes = [env.spawn_baton("intake", "intake-a"), env.spawn_baton("intake", "intake-b")];
    eventually(WAIT, "both intake processes consume", || async {
        (consumers(env, Queue::BridgeRequests).await == 2).then_some(())
    })
    .await;
    warm_up(env).await;
    let fleet = env.start(&[Role::Invocation, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("chat-first", "docs_agent", "en")).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    env.send_request(&sample_request_json("chat-second", "docs_agent", "en")).await;
    let seen = messages_until_replies(&mut replies, 2).await;
    fleet.stop().await;
    seen
}

/// A few drafts (stored, never run), so both intake processes have their
/// connections and statements ready: a cold process could otherwise take
/// longer than 50 ms over its first request, and the order under test would
/// be the processes' start-up, not the requests'.
async fn warm_up(env: &TestEnv) {
    for n in 0..6 {
        let mut draft = sample_request_json(&format!("warm-{n}"), "docs_agent", "en");
        draft["status"] = json!("draft");
        env.send_request(&draft).await;
    }
    let stored = "SELECT count(*) FROM handoff_requests WHERE id LIKE 'warm-%'";
    eventually(WAIT, "the drafts stored", || async { (env.scalar_i64(stored, &[]).await == 6).then_some(()) }).await;
}

async fn consumers(env: &TestEnv, queue: Queue) -> u32 {
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let declared =
        channel.queue_declare(env.queue(queue).as_str().into(), passive, FieldTable::default()).await.unwrap();
    declared.consumer_count()
}

fn reply_of<'a>(seen: &'a HashMap<String, Vec<Value>>, id: &str) -> &'a Value {
    seen[id].iter().find(|m| m["type"] == "reply").unwrap()
}

/// Whether `later`'s run was created once `earlier`'s had ended (database clock).
async fn started_after_end(env: &TestEnv, earlier: &str, later: &str) -> bool {
    let sql = "SELECT b.created_at >= a.finished_at FROM runs a, runs b,
               handoff_requests ha, handoff_requests hb
               WHERE ha.id = $1 AND hb.id = $2 AND a.id = ha.run_id AND b.id = hb.run_id";
    env.db().await.query_one(sql, &[&earlier, &later]).await.unwrap().get(0)
}

/// Whether intake put the request behind the chat's live run (its
/// `queued` event).
async fn waited(env: &TestEnv, id: &str) -> bool {
    env.handoff_events(id).await.contains(&HandoffEvent::Queued)
}

/// The two requests in the order intake took them: two intake processes
/// may take messages published 50 ms apart in either order on a loaded
/// machine, and that order, decided under the conversation's lock, is the
/// fleet's arrival order. Exactly one of them waited.
async fn in_arrival_order(env: &TestEnv) -> (&'static str, &'static str) {
    let (a, b) = (waited(env, "chat-first").await, waited(env, "chat-second").await);
    assert!(a != b, "exactly one request waited for the other");
    if b {
        ("chat-first", "chat-second")
    } else {
        ("chat-second", "chat-first")
    }
}

#[tokio::test]
async fn enqueue_runs_one_chat_s_requests_one_after_the_other_in_arrival_order() {
    let env = TestEnv::new().await;
    let seen = two_requests_of_one_chat(&env, "enqueue").await;
    let (first, second) = in_arrival_order(&env).await;
    assert_eq!(reply_of(&seen, first)["status"], "completed");
    assert_eq!(reply_of(&seen, second)["status"], "completed");
    assert!(
        started_after_end(&env, first, second).await,
        "the later arrival's run started when the earlier one's ended"
    );
    let statuses: Vec<&str> =
        seen[second].iter().filter(|m| m["type"] == "status").map(|m| m["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["accepted", "running", "completed"], "waiting, the request was accepted once");
}

#[tokio::test]
async fn reject_answers_busy_while_the_chat_s_run_is_live() {
    let env = TestEnv::new().await;
    let seen = two_requests_of_one_chat(&env, "reject").await;
    let status = |id: &str| reply_of(&seen, id)["status"].as_str().unwrap().to_string();
    let (kept, refused) =
        if status("chat-first") == "completed" { ("chat-first", "chat-second") } else { ("chat-second", "chat-first") };
    assert_eq!(status(kept), "completed");
    let refusal = reply_of(&seen, refused);
    assert_eq!(
        (refusal["status"].as_str(), refusal["error"]["code"].as_str()),
        (Some("failed"), Some("busy")),
        "{refusal}"
    );
    let request = baton_store::requests::get(&env.db().await, refused).await.unwrap().unwrap();
    assert_eq!(request.run_id, None, "a refused request gets no run");
}

#[tokio::test]
async fn interrupt_cancels_the_live_run_and_starts_the_new_one() {
    let env = TestEnv::new().await;
    let seen = two_requests_of_one_chat(&env, "interrupt").await;
    let (first, second) = in_arrival_order(&env).await;
    assert_eq!(reply_of(&seen, first)["status"], "cancelled");
    assert_eq!(reply_of(&seen, second)["status"], "completed");
    assert!(started_after_end(&env, first, second).await, "the new run started when the live one was cancelled");
    let run = env.run_of(first).await;
    let by = "SELECT (error->>'by' = 'new_request')::int::bigint FROM runs WHERE id = $1";
    assert_eq!(env.scalar_i64(by, &[&run]).await, 1, "cancelled by the new request in its chat");
}

/// A chat held by a run when V44 runs (the fleet stopped mid-run) is given
/// back by that run's end: the migration copies the conversation's key onto
/// the run, which its end finds the conversation by; another run's end
/// leaves the chat alone; a run of before that takes a chat later keeps
/// its key then; and only the key is indexed (a turn's update can be HOT).
#[tokio::test]
async fn a_chat_held_across_v44_is_given_back_by_its_run_s_end() {
    let env = TestEnv::migrated_to(43).await;
    let c = env.db().await;
    let (held, other) = (Uuid::now_v7(), Uuid::now_v7());
    // As V43's fleet wrote a run.
    for run in [held, other] {
        let insert = "INSERT INTO runs (id, status, root_profile_id) VALUES ($1, 'running', 'writer')";
        c.execute(insert, &[&run]).await.unwrap();
    }
    c.execute("INSERT INTO conversations (key, live_run) VALUES ('chat-v44', $1)", &[&held]).await.unwrap();
    baton_store::migrate(&env.pool).await.unwrap();
    let key: Option<String> =
        env.db().await.query_one("SELECT conversation_key FROM runs WHERE id = $1", &[&held]).await.unwrap().get(0);
    assert_eq!(key.as_deref(), Some("chat-v44"), "the run holding the chat keeps its key");
    let c = env.db().await;
    assert_eq!(
        finish_releasing(&c, other, RunStatus::Completed, None).await.unwrap(),
        Some(None),
        "a run that holds no chat gives none back"
    );
    assert_eq!(
        finish_releasing(&c, held, RunStatus::Completed, None).await.unwrap(),
        Some(Some("chat-v44".to_string()))
    );
    assert_eq!(finish_releasing(&c, held, RunStatus::Completed, None).await.unwrap(), None, "a run ends once");
    let live = "SELECT count(*) FROM conversations WHERE key = 'chat-v44' AND live_run IS NULL";
    assert_eq!(env.scalar_i64(live, &[]).await, 1, "the chat is free again");
    // A run of before V44 that held no chat then (a failed run, retried
    // since) takes one: it keeps the key, and its end gives the turn back.
    c.execute("INSERT INTO conversations (key) VALUES ('chat-v44-retried')", &[]).await.unwrap();
    c.execute("UPDATE runs SET status = 'running' WHERE id = $1", &[&other]).await.unwrap();
    baton_store::requests::conversations::set_live(&c, "chat-v44-retried", other).await.unwrap();
    let released = finish_releasing(&c, other, RunStatus::Completed, None).await.unwrap();
    assert_eq!(released, Some(Some("chat-v44-retried".into())), "a retried run gives back the chat it took");
    let indexes = "SELECT count(*) FROM pg_indexes WHERE tablename = 'conversations'";
    assert_eq!(env.scalar_i64(indexes, &[]).await, 1, "only the key is indexed: a turn's update can be HOT");
}
