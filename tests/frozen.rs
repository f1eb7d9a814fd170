//! A frozen process gives back what it holds. Two real `baton up`
//! processes share the queues; one is stopped with `SIGSTOP` (a paused VM, a
//! stuck host) while requests, answers and cancels arrive. What the broker
//! had pushed to the frozen one (requests, answers, cancels, invocation
//! messages, finished runs whose replies it would send) waits only until the
//! broker notices the missed AMQP heartbeats and closes its connections
//! (two missed heartbeats, counted on the broker's clock: 2–3 heartbeats
//! after the freeze); then the other process handles each at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::Consumer;
use baton_domain::fleet::Queue;
use baton_tests::{eventually, next_json, profile, sample_request_json, BatonProcess, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(40);
/// The heartbeat the two processes propose (`BATON_AMQP_HEARTBEAT_SECS`).
const HEARTBEAT: Duration = Duration::from_secs(2);
/// What the other process takes to handle a message once it has it (a
/// run of scripted turns, its reply): the allowance beyond the bound.
const HANDLING: Duration = Duration::from_secs(2);
/// Of each kind: blocked runs answered, blocked runs cancelled, new requests.
const EACH: usize = 6;

const ASK: &str = r#"{ tool = "ask_user", args = { question = "Go ahead?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

fn profiles() -> String {
    let tools = &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];
    let asker = profile("asker", tools, "", &[ASK, WRITE, COMMIT, FINISH]);
    let quick = profile("quick", tools, "", &[WRITE, COMMIT, FINISH]);
    format!("[routes]\ndocs_agent = \"asker\"\nclaude_code = \"quick\"\n\n{asker}\n{quick}")
}

/// A request in a chat of its own (one live run per chat would queue them);
/// `docs_agent` routes to the asker, `claude_code` (any target would do) to
/// the quick one.
fn request(id: &str, target: &str) -> Value {
    let mut request = sample_request_json(id, target, "en");
    request["callback"]["replyToChatId"] = json!(format!("chat-{id}"));
    request
}

fn spawn(env: &TestEnv, worker: &str) -> BatonProcess {
    let beat = HEARTBEAT.as_secs().to_string();
    let extra = [
        ("BATON_AMQP_HEARTBEAT_SECS", beat.as_str()),
        ("BATON_AGENT_BWRAP", "off"),
        ("BATON_AGENT_USER", "self"),
        // A transaction it froze in gives its row locks back soon too.
        ("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "2000"),
    ];
    env.spawn_baton_roles(&["intake", "invocation", "relay", "collector"], worker, &extra)
}

async fn consumers(env: &TestEnv, logical: Queue) -> u32 {
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, durable: true, ..Default::default() };
    let queue = channel.queue_declare(env.queue(logical).as_str().into(), passive, FieldTable::default()).await;
    let _ = channel.close(200, "".into()).await;
    queue.map(|q| q.consumer_count()).unwrap_or(0)
}

/// Bridge messages by handoff until each of `ids` has its final reply.
async fn replies_of(consumer: &mut Consumer, ids: &[String]) -> HashMap<String, (Value, Instant)> {
    let mut done = HashMap::new();
    while ids.iter().any(|id| !done.contains_key(id)) {
        let message = next_json(consumer, WAIT).await;
        let id = message["handoffId"].as_str().unwrap_or_default().to_string();
        if message["type"] == "reply" {
            done.insert(id, (message, Instant::now()));
        }
    }
    done
}

#[tokio::test]
async fn a_frozen_process_gives_back_the_requests_answers_cancels_and_replies_it_holds_once_the_broker_misses_its_heartbeats(
) {
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles()).await;
    let frozen = spawn(&env, "frozen");
    let _alive = spawn(&env, "alive");
    for queue in [Queue::BridgeRequests, Queue::RunsFinished] {
        eventually(WAIT, "both processes consume", || async { (consumers(&env, queue).await >= 2).then_some(()) })
            .await;
    }
    let mut bridge = env.replies().await;

    // Runs that wait on their user: half will be answered, half cancelled.
    let blocked: Vec<String> = (0..2 * EACH).map(|i| format!("blocked-{i}")).collect();
    for id in &blocked {
        env.send_request(&request(id, "docs_agent")).await;
    }
    let mut questions = HashMap::new();
    while questions.len() < blocked.len() {
        let message = next_json(&mut bridge, WAIT).await;
        if message["type"] == "question" {
            questions.insert(message["handoffId"].as_str().unwrap().to_string(), message);
        }
    }

    frozen.signal("STOP");
    let stopped = Instant::now();
    let mut sent: HashMap<String, (&str, Instant)> = HashMap::new();
    for (i, id) in blocked.iter().enumerate() {
        let question = &questions[id.as_str()];
        let body = if i < EACH {
            sent.insert(id.clone(), ("answer", Instant::now()));
            json!({"type": "answer", "id": format!("a-{id}"), "handoffId": id, "questionId": question["questionId"],
                   "text": "yes", "at": "2026-11-30T10:00:00Z"})
        } else {
            sent.insert(id.clone(), ("cancel", Instant::now()));
            json!({"type": "cancel", "id": format!("c-{id}"), "handoffId": id, "reason": "not now",
                   "at": "2026-11-30T10:00:00Z"})
        };
        env.send_raw(&serde_json::to_vec(&body).unwrap(), Some(&env.reply_queue)).await;
    }
    let fresh: Vec<String> = (0..EACH).map(|i| format!("fresh-{i}")).collect();
    for id in &fresh {
        sent.insert(id.clone(), ("request", Instant::now()));
        env.send_request(&request(id, "claude_code")).await;
    }
    let ids: Vec<String> = sent.keys().cloned().collect();
    // When the broker gives up on the frozen process: its consumer leaves the queue.
    let gone = eventually(WAIT, "the broker closed the frozen process's connection", || async {
        (consumers(&env, Queue::BridgeRequests).await < 2).then(Instant::now)
    });
    let (done, gone) = tokio::join!(replies_of(&mut bridge, &ids), gone);
    frozen.signal("CONT");
    let noticed = gone.duration_since(stopped);
    // RabbitMQ checks a connection's heartbeats on its own clock and drops
    // it after two missed ones: two to three heartbeats after the freeze.
    assert!(noticed <= HEARTBEAT * 3, "the broker noticed after {noticed:?}");

    let mut held: HashMap<&str, Vec<Duration>> = HashMap::new();
    let (mut longest, mut fastest) = (Duration::ZERO, Duration::MAX);
    for (id, (kind, at)) in &sent {
        let (reply, when) = &done[id];
        let took = when.duration_since(*at);
        let expected = if *kind == "cancel" { "cancelled" } else { "completed" };
        assert_eq!(reply["status"], expected, "{id}: {reply}");
        // Held no longer than until the broker closed the frozen process's connections.
        let bound = gone.saturating_duration_since(*at) + HANDLING;
        assert!(took <= bound, "{kind} {id} was handled {took:?} after it was sent, over {bound:?}");
        longest = longest.max(took);
        fastest = fastest.min(took);
        if took > HEARTBEAT / 2 {
            held.entry(kind).or_default().push(took);
        }
    }
    println!(
        "frozen test: heartbeat {HEARTBEAT:?}; the broker closed the frozen process's connections {noticed:.1?} after it froze; {} of {} messages waited on the frozen process ({:?}); the longest took {longest:.1?}, the fastest {fastest:.1?}",
        held.values().map(Vec::len).sum::<usize>(),
        sent.len(),
        held.iter().map(|(k, v)| (k, v.len())).collect::<Vec<_>>()
    );
    assert!(!held.is_empty(), "the frozen process held nothing: the test proved nothing");
    // One reply each, none lost or doubled.
    let sent_replies = env.handoff_event_count(baton_domain::protocol::request::HandoffEvent::ReplySent).await;
    assert_eq!(sent_replies as usize, sent.len(), "one reply per handoff");
}
