//! The operator's views and actions (issue 11): the runs list and its
//! filters, waiting handoffs, fleet counts, retrying a failed run, and
//! dead letters listed, replayed and discarded; through the store and bus
//! functions the console uses and through the `baton` binary's `--json`.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::dead::{self, Rule, Select};
use baton_bus::lapin::options::{BasicGetOptions, BasicNackOptions};
use baton_bus::Outgoing;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::Source;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{RunState, RunStatus};
use baton_store::overview::{self, RunFilter};
use baton_tests::{eventually, sample_request_json, until_reply, TestEnv};
use serde_json::Value;

/// Runs `baton ARGS` against this test's database and queues; its stdout.
async fn baton(env: &TestEnv, args: &[&str]) -> String {
    env.baton_cli(args).await
}

async fn json_of(env: &TestEnv, args: &[&str]) -> Value {
    let out = baton(env, args).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("baton {args:?} printed no JSON ({e}): {out}"))
}

fn request(id: &str, chat: &str) -> Value {
    let mut r = sample_request_json(id, "docs_agent", "en");
    r["callback"]["replyToChatId"] = chat.into();
    r
}

#[tokio::test]
async fn runs_are_listed_newest_first_filtered_and_paged_and_the_json_matches_the_database() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    for (id, chat) in [("list-a", "chat-1"), ("list-b", "chat-2"), ("list-c", "chat-1")] {
        env.send_request(&request(id, chat)).await;
        until_reply(&mut replies, Duration::from_secs(30)).await;
    }
    fleet.stop().await;
    let c = env.db().await;

    let all = overview::runs(&c, &RunFilter::default()).await.unwrap();
    let ids: Vec<_> = all.iter().map(|r| r.handoff_id.clone().unwrap()).collect();
    assert_eq!(ids, ["list-c", "list-b", "list-a"], "newest first");
    assert!(all.iter().all(|r| r.status == RunState::Completed && r.source == Some(Source::Weixin)));
    assert_eq!(all[0].agents, ["writer", "editor", "finalizer"], "the foreground chain in order");
    assert_eq!(all[0].tokens, baton_store::runs::tokens_used(&c, all[0].run_id).await.unwrap());
    assert_eq!(all[0].attempt, 1);

    let chat1 = overview::runs(&c, &RunFilter { chat: Some("chat-1".into()), ..Default::default() }).await.unwrap();
    assert_eq!(chat1.iter().map(|r| r.handoff_id.as_deref().unwrap()).collect::<Vec<_>>(), ["list-c", "list-a"]);
    let failed = overview::runs(&c, &RunFilter { status: Some(RunState::Failed), ..Default::default() }).await.unwrap();
    assert!(failed.is_empty());
    let other = overview::runs(&c, &RunFilter { target: Some("codex".into()), ..Default::default() }).await.unwrap();
    assert!(other.is_empty());
    let future = chrono::Utc::now() + chrono::Duration::hours(1);
    assert!(overview::runs(&c, &RunFilter { since: Some(future), ..Default::default() }).await.unwrap().is_empty());

    let page1 = overview::runs(&c, &RunFilter { limit: 2, ..Default::default() }).await.unwrap();
    let page2 =
        overview::runs(&c, &RunFilter { limit: 2, before: Some(page1[1].key()), ..Default::default() }).await.unwrap();
    assert_eq!(page1.len(), 2);
    assert_eq!(
        page2.iter().map(|r| r.run_id).collect::<Vec<_>>(),
        [all[2].run_id],
        "the next page starts after the key"
    );

    let mut listed = json_of(&env, &["runs", "list", "--json", "--chat", "chat-1", "--since", "1h"]).await;
    for row in listed.as_array_mut().unwrap() {
        let row = row.as_object_mut().unwrap();
        assert_eq!(row.remove("reason"), Some(Value::Null), "a completed run has no reason");
        assert!(row.remove("durationMs").unwrap().as_i64().is_some(), "a finished run has its duration");
    }
    assert_eq!(listed, serde_json::to_value(&chat1).unwrap(), "`runs list --json` is what the database holds");
    let table = baton(&env, &["runs", "list", "--status", "completed"]).await;
    assert!(table.contains("writer → editor → finalizer") && table.contains("list-b"), "{table}");

    let run = all[0].run_id.to_string();
    let shown = json_of(&env, &["runs", "show", &run, "--json", "--transcript"]).await;
    assert_eq!(shown["run"]["status"], "completed");
    let events = baton_store::journal::timeline(&c, all[0].run_id).await.unwrap();
    assert_eq!(shown["events"].as_array().unwrap().len(), events.len());
    assert_eq!(shown["events"][0]["kind"], events[0].kind.as_str());
    let invocations = shown["invocations"].as_array().unwrap();
    let stored = baton_store::invocations::for_run(&c, all[0].run_id).await.unwrap();
    assert_eq!(invocations.len(), stored.len());
    let steps = baton_store::invocations::steps::load(&c, stored[0].id).await.unwrap();
    assert_eq!(invocations[0]["steps"].as_array().unwrap().len(), steps.len(), "--transcript includes each step");
    let text = baton(&env, &["runs", "show", &run, "--transcript"]).await;
    assert!(text.contains(JournalEvent::RunCompleted.as_str()) && text.contains("workspace_write"), "{text}");
}

#[tokio::test]
async fn manual_handoffs_wait_for_a_person_and_the_fleet_is_counted() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start(&[Role::Intake, Role::Relay]);
    env.send_request(&sample_request_json("by-hand", "manual", "en")).await;
    let c = env.db().await;
    let waiting = eventually(Duration::from_secs(20), "the manual handoff waits", || async {
        Some(overview::waiting(&c).await.unwrap()).filter(|w| !w.is_empty())
    })
    .await;
    fleet.stop().await;
    assert_eq!(waiting[0].handoff_id, "by-hand");
    let listed = json_of(&env, &["handoff", "list", "--waiting", "--json"]).await;
    assert_eq!(listed, serde_json::to_value(&waiting).unwrap());
    let table = baton(&env, &["handoff", "list", "--waiting"]).await;
    assert!(table.contains("by-hand") && table.contains("manual"), "{table}");

    let counts = overview::fleet(&c).await.unwrap();
    assert_eq!((counts.invocations_running, counts.invocations_parked, counts.takeovers_last_hour), (0, 0, 0));
    assert_eq!(counts.outbox_backlog, env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await);
}

/// Publishes `body` to a fleet queue, as a peer would.
async fn publish(env: &TestEnv, queue: Queue, body: &[u8], message_id: &str) {
    let name = env.queue(queue);
    let out = Outgoing { queue: &name, body, message_id: Some(message_id), ..Default::default() };
    env.publisher.publish(&out).await.unwrap();
}

/// Rejects the message at the head of `queue` until the broker dead-letters
/// it for its delivery limit.
async fn exhaust_delivery_limit(env: &TestEnv, queue: Queue) {
    let channel = env.conn.create_channel().await.unwrap();
    let name = env.queue(queue);
    while let Some(got) = channel.basic_get(name.as_str().into(), BasicGetOptions { no_ack: false }).await.unwrap() {
        got.delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
    }
}

fn ids(letters: &[dead::DeadLetter]) -> Vec<String> {
    letters.iter().map(|l| l.id.clone()).collect()
}

#[tokio::test]
async fn dead_letters_are_listed_in_order_replayed_to_their_queue_and_discarded() {
    let env = TestEnv::new().await;
    let bus = baton_bus::Connection::open(&env.settings.amqp_url, "baton-test-dead").await.unwrap();
    let queues = env.settings.queues();
    let fleet = env.start(&[Role::Collector]);
    for n in 1..=3 {
        publish(&env, Queue::RunsFinished, format!("not a run {n}").as_bytes(), &format!("bad-{n}")).await;
    }
    let listed = eventually(Duration::from_secs(20), "three dead letters", || async {
        Some(dead::list(&bus, &queues, 100).await.unwrap()).filter(|l| l.len() == 3)
    })
    .await;
    fleet.stop().await;
    publish(&env, Queue::InvocationsDelegate, b"poison", "poison").await;
    exhaust_delivery_limit(&env, Queue::InvocationsDelegate).await;
    let listed_again = eventually(Duration::from_secs(20), "the broker's dead letter", || async {
        Some(dead::list(&bus, &queues, 100).await.unwrap()).filter(|l| l.len() == 4)
    })
    .await;
    assert_eq!(ids(&listed_again[..3]), ids(&listed), "reading neither loses nor reorders");
    let [first, second, third, poison] = &listed_again[..] else { unreachable!() };
    assert_eq!(first.source_queue.as_deref(), Some("baton.runs.finished"));
    assert!(first.reason.contains("not a run-finished message"), "{}", first.reason);
    assert_eq!(first.body_preview, "not a run 1");
    assert_eq!(first.message_id.as_deref(), Some("bad-1"));
    assert_eq!(poison.source_queue.as_deref(), Some(env.queue(Queue::InvocationsDelegate).as_str()));
    assert!(poison.reason.contains("delivery_limit"), "{}", poison.reason);
    let json = json_of(&env, &["dead", "list", "--json"]).await;
    assert_eq!(json, serde_json::to_value(&listed_again).unwrap(), "`dead list --json` is what the queue holds");

    // A body the collector cannot read: only a forced replay takes it.
    let withheld = dead::replay(&bus, &queues, Select::Id(&second.id), None, &dead::FleetQueuesOnly, Rule::Replayable);
    let withheld = withheld.await.unwrap();
    assert!(withheld.done.is_empty() && withheld.withheld.len() == 1, "{withheld:?}");
    let forced = Rule::Forced;
    let replayed = dead::replay(&bus, &queues, Select::Id(&second.id), None, &dead::FleetQueuesOnly, forced).await;
    assert_eq!(replayed.unwrap().done, std::slice::from_ref(&second.id));
    let channel = env.conn.create_channel().await.unwrap();
    let finished = env.queue(Queue::RunsFinished);
    let back =
        channel.basic_get(finished.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("replayed");
    assert_eq!(back.delivery.data, b"not a run 2");
    assert_eq!(
        baton_bus::publish::header(&back.delivery.properties, "x-baton-error"),
        None,
        "the copy carries no death headers"
    );

    baton(&env, &["dead", "discard", &first.id]).await;
    assert_eq!(ids(&dead::list(&bus, &queues, 100).await.unwrap()), [third.id.clone(), poison.id.clone()]);
    let out = baton(&env, &["dead", "replay", "--all", "--queue", "baton.invocations.delegate"]).await;
    assert!(out.contains("replayed 1"), "{out}");
    let delegate = env.queue(Queue::InvocationsDelegate);
    let back =
        channel.basic_get(delegate.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap().expect("replayed");
    assert_eq!(back.delivery.data, b"poison");
    let acted = dead::discard(&bus, &queues, Select::All, None).await.unwrap();
    assert_eq!(acted.done, std::slice::from_ref(&third.id));
    assert!(dead::list(&bus, &queues, 100).await.unwrap().is_empty());
}

fn solo_openai(server: &baton_tests::http::ModelServer) -> String {
    format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"solo\"\ndescription = \"The solo agent.\"\n\
         tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"test-model\"\nmax_attempts = 2\n[profiles.delegation]\n",
        server.base_url
    )
}

/// The bridge's messages up to and including the reply, each with its `message_id`.
async fn bridge_until_reply(consumer: &mut lapin::Consumer) -> Vec<(String, Value)> {
    use baton_bus::lapin::options::BasicAckOptions;
    use futures_lite::StreamExt;
    let mut seen = vec![];
    loop {
        let delivery = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .expect("a bridge message")
            .unwrap()
            .unwrap();
        delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
        let id = delivery.properties.message_id().as_ref().map(ToString::to_string).unwrap_or_default();
        let body: Value = serde_json::from_slice(&delivery.data).unwrap();
        let done = body["type"] == "reply";
        seen.push((id, body));
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn a_failed_run_retried_resumes_from_its_last_step_and_the_bridge_gets_a_second_reply() {
    use baton_tests::http::{ModelServer, Reply};
    let tool = |name, args| Reply::Tool(name, args);
    let server = ModelServer::start(vec![
        tool("workspace_write", serde_json::json!({"path": "output/main.md", "content": "Kept across the retry."})),
        tool("workspace_commit", serde_json::json!({})),
        // The model is down: both attempts of the third turn fail, and so does the run.
        Reply::Status(503, None),
        Reply::Status(503, None),
        // Restored: the retried run's first call gets this.
        tool("workspace_finish", serde_json::json!({})),
    ])
    .await;
    let env = TestEnv::new().await;
    env.apply_profiles(&solo_openai(&server)).await;
    let fleet = env.start_all();
    let mut bridge = env.replies().await;
    env.send_request(&sample_request_json("retry-me", "docs_agent", "en")).await;
    let first = bridge_until_reply(&mut bridge).await;
    let (reply_id, reply) = first.last().unwrap();
    assert_eq!((reply_id.as_str(), reply["status"].as_str()), ("reply:retry-me", Some("failed")));
    let last_seq = first.iter().filter_map(|(_, m)| m["seq"].as_i64()).max().unwrap();
    assert_eq!(server.bodies().len(), 4);
    let run = env.run_of("retry-me").await;

    // While another run holds the chat's turn, the retry waits for it to end.
    let c = env.db().await;
    let other = uuid::Uuid::now_v7();
    baton_store::runs::insert(&c, other, None, "solo").await.unwrap();
    baton_store::requests::conversations::set_live(&c, "wxid_demo_chat", other).await.unwrap();
    let busy = baton::operator::retry_run(&env.pool, run).await.unwrap_err().to_string();
    assert!(busy.contains("chat has moved on") && busy.contains(&other.to_string()), "{busy}");
    baton_store::runs::finish(&c, other, RunStatus::Cancelled, None).await.unwrap();

    let out = baton(&env, &["runs", "retry", &run.to_string()]).await;
    assert!(out.contains("attempt 2"), "{out}");
    let second = bridge_until_reply(&mut bridge).await;
    fleet.stop().await;
    assert_eq!(second[0].1["status"], "running");
    assert_eq!(second[0].1["seq"].as_i64(), Some(last_seq + 1), "`running` with the next seq");
    let (reply_id, reply) = second.last().unwrap();
    assert_eq!(reply_id, "reply:retry-me:2", "a retried reply has its own message id");
    assert_eq!((reply["status"].as_str(), reply["text"].as_str()), (Some("completed"), Some("Kept across the retry.")));

    let bodies = server.bodies();
    assert_eq!(bodies.len(), 5, "one model call after the retry");
    let turns = |b: &Value| b["messages"].as_array().unwrap().len();
    assert_eq!(turns(&bodies[4]), turns(&bodies[2]), "the retried call continues the stored conversation");
    assert!(
        turns(&bodies[0]) < turns(&bodies[1]) && turns(&bodies[1]) < turns(&bodies[2]),
        "no earlier turn asked again"
    );
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::RunRetried), "{journal:?}");
    assert_eq!(journal.iter().filter(|k| **k == JournalEvent::RunCompleted).count(), 1);
    let solo = &env.invocations_of(run, "solo").await[0];
    assert_eq!(solo.takeovers, 0);
    assert_eq!(baton_store::requests::bridge::attempt(&c, run).await.unwrap(), 2);
    let refused = tokio::process::Command::new(baton_tests::baton_binary())
        .args(["runs", "retry", &run.to_string()])
        .env("DATABASE_URL", &env.settings.database_url)
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("only a failed run"));
}

#[tokio::test]
async fn the_dead_letter_queue_is_bounded_when_created_and_an_existing_one_is_left_as_it_is() {
    use baton_bus::lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use baton_bus::lapin::types::{AMQPValue, FieldTable};
    let env = TestEnv::new().await;
    let bus = baton_bus::Connection::open(&env.settings.amqp_url, "baton-test-dead").await.unwrap();
    // A queue created by this version holds at most its limit, the oldest dropped first.
    let queues = baton_bus::Queues::new(format!("{}small.", env.settings.queue_prefix)).with_dead_max_length(2);
    queues.declare(&env.conn).await.unwrap();
    let name = queues.name(Queue::Dead);
    for n in 1..=3 {
        let body = format!("dead {n}");
        env.publisher.publish(&Outgoing { queue: &name, body: body.as_bytes(), ..Default::default() }).await.unwrap();
    }
    let kept: Vec<String> = dead::list(&bus, &queues, 10).await.unwrap().into_iter().map(|l| l.body_preview).collect();
    assert_eq!(kept, ["dead 2", "dead 3"]);
    queues.declare(&env.conn).await.expect("declaring again at the next start");

    // A deployment from before the limit: its baton.dead has no x-max-length,
    // and starting this version must not fail over the changed arguments.
    let old = baton_bus::Queues::new(format!("{}old.", env.settings.queue_prefix));
    let channel = env.conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(old.name(Queue::Dead).as_str().into(), durable, args).await.unwrap();
    old.declare(&env.conn).await.expect("an existing baton.dead without the limit is accepted");
    old.declare(&env.conn).await.expect("and again");
    for q in [&queues, &old] {
        let _ = q.delete(&channel).await;
    }
    let _ = channel.queue_delete(name.as_str().into(), QueueDeleteOptions::default()).await;
}
