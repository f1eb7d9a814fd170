//! A frozen process gives back what it holds. Two real `baton up`
//! processes share the queues; one is stopped with `SIGSTOP` (a paused VM, a
//! stuck host) while requests, answers, cancels, same-chat pairs and cancels
//! sent a second before their request arrive. What the broker had pushed to
//! the frozen one (bridge messages, invocation messages, finished runs whose
//! replies it would send) waits only until the broker notices the silence:
//! every role proposes an AMQP heartbeat of a third of
//! `BATON_AMQP_DEAD_PEER_SECS`, and RabbitMQ closes a connection two to three
//! heartbeats after the last frame it received, so within the setting. Then
//! the other process handles each at once: every message is handled within
//! twice the setting of being sent.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::Consumer;
use baton_domain::fleet::Queue;
use baton_tests::turns::TurnServer;
use baton_tests::{eventually, next_json, profile, sample_request_json, BatonProcess, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(40);
/// How soon the broker must notice a frozen process
/// (`BATON_AMQP_DEAD_PEER_SECS`: a 2 s heartbeat). Not the smallest the
/// setting takes (3, a 1 s heartbeat): the broker notices about 2.5
/// heartbeats after the freeze, and a second of slack keeps the bound
/// honest on a loaded CI machine (3 s left 0.4–0.8 s).
const DEAD_PEER: Duration = Duration::from_secs(6);
/// The promise: whatever the frozen process held is handled by the other
/// one within twice the setting of being sent.
const BOUND: Duration = Duration::from_secs(2 * DEAD_PEER.as_secs());
/// Of each kind: blocked runs answered, blocked runs cancelled, new requests.
const EACH: usize = 6;
/// Chats that get two requests at once: the second waits for the first.
const PAIRS: usize = 3;
/// Requests whose cancel is sent a second before them.
const EARLY: usize = 3;
/// How long the model of those requests takes to answer a turn: longer
/// than the bound, so a cancel that takes effect in time ends the run
/// during its first model call, and a second one is never asked.
const THINKING: Duration = Duration::from_secs(2 * DEAD_PEER.as_secs() + 2);

const ASK: &str = r#"{ tool = "ask_user", args = { question = "Go ahead?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

fn profiles(model_url: &str) -> String {
    let tools = &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];
    let asker = profile("asker", tools, "", &[ASK, WRITE, COMMIT, FINISH]);
    let quick = profile("quick", tools, "", &[WRITE, COMMIT, FINISH]);
    let thinker = baton_tests::turns::profile("thinker", tools, "", model_url);
    format!(
        "[routes]\ndocs_agent = \"asker\"\nclaude_code = \"quick\"\ncodex = \"thinker\"\n\n{asker}\n{quick}\n{thinker}"
    )
}

/// The thinker's turns, each answered after [`THINKING`].
fn thinker_script() -> Vec<(&'static str, Vec<baton_tests::turns::Call>)> {
    let write = json!({"path": "output/main.md", "content": "Done."});
    vec![(
        "thinker",
        vec![("workspace_write", write), ("workspace_commit", json!({})), ("workspace_finish", json!({}))],
    )]
}

/// A request in the chat `chat` (one live run per chat queues the others);
/// `docs_agent` routes to the asker, `claude_code` to the quick one, `codex`
/// to the thinker.
fn request(id: &str, target: &str, chat: &str) -> Value {
    let mut request = sample_request_json(id, target, "en");
    request["callback"]["replyToChatId"] = json!(chat);
    request
}

fn cancel(id: &str) -> Value {
    json!({"type": "cancel", "id": format!("c-{id}"), "handoffId": id, "reason": "not now", "at": "2026-11-30T10:00:00Z"})
}

fn spawn(env: &TestEnv, worker: &str) -> BatonProcess {
    let secs = DEAD_PEER.as_secs().to_string();
    let extra = [
        ("BATON_AMQP_DEAD_PEER_SECS", secs.as_str()),
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
async fn a_frozen_process_gives_back_the_requests_answers_cancels_and_replies_it_holds_within_twice_the_dead_peer_setting(
) {
    let env = TestEnv::new().await;
    let model = TurnServer::start(thinker_script(), THINKING).await;
    env.apply_profiles(&profiles(&model.base_url)).await;
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
        env.send_request(&request(id, "docs_agent", &format!("chat-{id}"))).await;
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
    // What was sent, of which kind, and when the clock of its bound starts.
    // The broker hands the frozen process every other message until its
    // prefetch is full; rounds of an odd length give it some of every kind.
    let mut sent: BTreeMap<String, (&str, Instant)> = BTreeMap::new();
    let (answered, cancelled) = blocked.split_at(EACH);
    let mut order: Vec<(&str, String)> = vec![];
    for i in 0..EACH {
        if i < EARLY {
            // A cancel a second before its request: the request must not
            // run on while the cancel waits on the frozen process.
            order.push(("early cancel", format!("early-{i}")));
        }
        if i < PAIRS {
            // Two requests of one chat: one waits until the other has ended.
            order.push(("same-chat pair", format!("pair-{i}-first")));
        }
        order.push(("answer", answered[i].clone()));
        if i < PAIRS {
            order.push(("same-chat pair", format!("pair-{i}-second")));
        }
        order.push(("cancel", cancelled[i].clone()));
        order.push(("request", format!("fresh-{i}")));
    }
    let requests_due = Instant::now() + Duration::from_secs(1);
    for (kind, id) in &order {
        sent.insert(id.clone(), (kind, Instant::now()));
        match *kind {
            "early cancel" | "cancel" => {
                env.send_raw(&serde_json::to_vec(&cancel(id)).unwrap(), Some(&env.reply_queue)).await;
            }
            "answer" => {
                let question = &questions[id.as_str()];
                let body = json!({"type": "answer", "id": format!("a-{id}"), "handoffId": id,
                                  "questionId": question["questionId"], "text": "yes", "at": "2026-11-30T10:00:00Z"});
                env.send_raw(&serde_json::to_vec(&body).unwrap(), Some(&env.reply_queue)).await;
            }
            "same-chat pair" => {
                let chat = format!("chat-{}", id.rsplit_once('-').unwrap().0);
                env.send_request(&request(id, "claude_code", &chat)).await;
            }
            _ => env.send_request(&request(id, "claude_code", &format!("chat-{id}"))).await,
        }
    }
    let early: Vec<String> = (0..EARLY).map(|i| format!("early-{i}")).collect();
    tokio::time::sleep_until(requests_due.into()).await;
    for id in &early {
        env.send_request(&request(id, "codex", &format!("chat-{id}"))).await;
    }
    let ids: Vec<String> = sent.keys().cloned().collect();
    // When the broker gives up on the frozen process: its consumer leaves the queue.
    let gone = eventually(WAIT, "the broker closed the frozen process's connection", || async {
        (consumers(&env, Queue::BridgeRequests).await < 2).then(Instant::now)
    });
    let (done, gone) = tokio::join!(replies_of(&mut bridge, &ids), gone);
    frozen.signal("CONT");
    let noticed = gone.duration_since(stopped);
    // RabbitMQ checks a connection once per heartbeat (a third of the
    // setting) and drops it at the second check that found nothing new: two
    // to three heartbeats after the last frame, within the setting. The
    // queue is polled every 25 ms, which may add that much.
    assert!(noticed <= DEAD_PEER + Duration::from_millis(100), "the broker noticed after {noticed:?}");

    // How long each message took to be handled, by kind. One counts as
    // held by the frozen process when its reply came only after the broker
    // closed that process's connections (the other process answers one sent
    // right after the freeze in about a second, well before), and an early
    // cancel when its request was not cancelled on arrival (a second after).
    let mut took: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut held: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    for (id, (kind, at)) in &sent {
        let (reply, when) = &done[id];
        let spent = when.duration_since(*at);
        let expected = if kind.contains("cancel") { "cancelled" } else { "completed" };
        assert_eq!(reply["status"], expected, "{kind} {id}: {reply}");
        assert!(
            spent <= BOUND,
            "{kind} {id} was handled {spent:.1?} after it was sent, over twice the setting ({BOUND:?})"
        );
        took.entry(kind).or_default().push(spent);
        let waited = match *kind {
            "early cancel" => spent > Duration::from_millis(1_500),
            _ => *when > gone,
        };
        if waited {
            held.entry(kind).or_default().push(spent);
        }
    }
    // A same-chat pair: one run started only once the other had ended
    // (in the order intake took them: one the frozen process held comes
    // later, as any message a consumer gave back does).
    let c = env.db().await;
    for i in 0..PAIRS {
        let pair = [format!("pair-{i}-first"), format!("pair-{i}-second")];
        let row = c
            .query_one(
                "SELECT bool_and(b.created_at >= a.finished_at) FROM runs a JOIN runs b ON a.created_at < b.created_at
                  WHERE a.handoff_id = ANY($1) AND b.handoff_id = ANY($1)",
                &[&pair.to_vec()],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<bool>>(0), Some(true), "pair {i}: its two runs overlapped");
    }
    // A cancel sent before its request took effect: the request made at
    // most the one model call that was in flight when the cancel came, none
    // when the cancel was there first.
    for (session, n) in model.asked_by_session() {
        assert!(n <= 1, "an early-cancelled request's invocation {session} asked the model {n} times");
    }
    let early_calls = model.total();
    assert!(early_calls <= EARLY, "{early_calls} model calls for {EARLY} early-cancelled requests");

    // Replies: a finished run's message may have waited on the frozen
    // collector. From the run's end to its reply being sent, on the
    // database's clock.
    let rows = c
        .query(
            "SELECT r.handoff_id, extract(epoch FROM e.created_at - r.finished_at)::float8
               FROM runs r JOIN handoff_events e ON e.handoff_id = r.handoff_id AND e.type = 'reply_sent'
              WHERE r.handoff_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap();
    for row in &rows {
        let (id, secs): (String, f64) = (row.get(0), row.get(1));
        let spent = Duration::from_secs_f64(secs.max(0.0));
        assert!(spent <= BOUND, "the reply of {id} was sent {spent:.1?} after its run ended, over {BOUND:?}");
        took.entry("reply").or_default().push(spent);
        // The collector that has it sends a reply within milliseconds.
        if spent > Duration::from_millis(500) {
            held.entry("reply").or_default().push(spent);
        }
    }
    let longest = |v: &[Duration]| v.iter().max().copied().unwrap_or_default();
    println!(
        "frozen test: BATON_AMQP_DEAD_PEER_SECS={} (heartbeat {} s), bound {BOUND:?}; the broker closed the frozen process's connections {noticed:.1?} after it froze",
        DEAD_PEER.as_secs(),
        DEAD_PEER.as_secs() / 3
    );
    for (kind, all) in &took {
        let waited = held.get(kind).map_or(&[][..], Vec::as_slice);
        println!(
            "frozen test: {kind}: {} sent, {} waited on the frozen process (longest {:.1?}), every one handled within {:.1?}",
            all.len(),
            waited.len(),
            longest(waited),
            longest(all)
        );
    }
    println!("frozen test: early-cancelled requests asked the model {early_calls} times in all");
    assert!(!held.is_empty(), "the frozen process held nothing: the test proved nothing");
    // One reply each, none lost or doubled.
    let sent_replies = env.handoff_event_count(baton_domain::protocol::request::HandoffEvent::ReplySent).await;
    assert_eq!(sent_replies as usize, sent.len(), "one reply per handoff");
}
