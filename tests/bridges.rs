//! Bridge identity (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other) with two real RabbitMQ users, created and
//! deleted by the test: the broker-checked `user_id` decides the bridge, and
//! no bridge can squat, cancel, answer, promote or occupy another's handoff
//! or chat, or name another's reply queue; each still gets its own replies,
//! in its own ids.

use std::time::Duration;

use baton_bus::lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use baton_bus::lapin::types::FieldTable;
use baton_bus::lapin::{BasicProperties, Connection, ConnectionProperties};
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{eventually, next_json, profile, sample_request_json, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// A RabbitMQ user of this test's own, deleted when dropped.
struct BrokerUser {
    name: String,
}

fn rabbitmqctl(args: &[&str]) {
    let out = std::process::Command::new("rabbitmqctl").args(args).output().expect("rabbitmqctl runs");
    assert!(out.status.success(), "rabbitmqctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl BrokerUser {
    fn create(name: String) -> BrokerUser {
        rabbitmqctl(&["add_user", &name, "bridge-pw"]);
        let user = BrokerUser { name };
        rabbitmqctl(&["set_permissions", "-p", "/", &user.name, ".*", ".*", ".*"]);
        user
    }

    async fn connect(&self) -> Connection {
        let url = format!("amqp://{}:bridge-pw@127.0.0.1:5672/%2f", self.name);
        Connection::connect(&url, ConnectionProperties::default()).await.expect("the bridge's user connects")
    }
}

impl Drop for BrokerUser {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl").args(["delete_user", &self.name]).output();
    }
}

/// One bridge: its user's connection and its reply queue.
struct Bridge {
    conn: Connection,
    user: String,
    replies: String,
}

impl Bridge {
    /// Publishes to `baton.bridge` (routing key `requests`) as this bridge's user.
    async fn send(&self, env: &TestEnv, body: &Value, reply_to: Option<&str>, user_id: Option<&str>) {
        let channel = self.conn.create_channel().await.unwrap();
        channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let mut props = BasicProperties::default().with_delivery_mode(2);
        if let Some(user) = user_id {
            props = props.with_user_id(user.into());
        }
        if let Some(queue) = reply_to {
            props = props.with_reply_to(queue.into());
        }
        let exchange = format!("{}baton.bridge", env.settings.queue_prefix);
        let body = serde_json::to_vec(body).unwrap();
        let confirm = channel
            .basic_publish(exchange.as_str().into(), "requests".into(), BasicPublishOptions::default(), &body, props)
            .await
            .unwrap();
        confirm.await.unwrap();
    }

    async fn request(&self, env: &TestEnv, body: &Value) {
        self.send(env, body, Some(&self.replies), Some(&self.user)).await;
    }
}

struct Rig {
    env: TestEnv,
    alpha: Bridge,
    beta: Bridge,
    _users: (BrokerUser, BrokerUser),
}

async fn rig(agents: &str) -> Rig {
    let env = TestEnv::new().await;
    let base = env.settings.queue_prefix.trim_end_matches('.').to_string();
    let (a, b) = (BrokerUser::create(format!("{base}alpha")), BrokerUser::create(format!("{base}beta")));
    let replies = |name: &str| format!("{}{name}.replies", env.settings.queue_prefix);
    let text = format!(
        "{agents}\n[[bridges]]\nid = \"alpha\"\nuser = \"{}\"\nsources = [\"weixin\"]\nreply_queues = [\"{}\"]\n\n\
         [[bridges]]\nid = \"beta\"\nuser = \"{}\"\nsources = [\"weixin\"]\nreply_queues = [\"{}\"]\n",
        a.name,
        replies("alpha"),
        b.name,
        replies("beta")
    );
    env.apply_profiles(&text).await;
    let alpha = Bridge { conn: a.connect().await, user: a.name.clone(), replies: replies("alpha") };
    let beta = Bridge { conn: b.connect().await, user: b.name.clone(), replies: replies("beta") };
    for bridge in [&alpha, &beta] {
        // Each bridge's own queue, gone with its connection.
        let channel = bridge.conn.create_channel().await.unwrap();
        let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
        channel.queue_declare(bridge.replies.as_str().into(), exclusive, FieldTable::default()).await.unwrap();
    }
    Rig { env, alpha, beta, _users: (a, b) }
}

/// A writer that finishes in one turn; `slow` thinks for that long first.
fn agents(slow_ms: u64) -> String {
    let finish = format!(
        "{{ calls = [{{ tool = \"workspace_write\", args = {{ path = \"output/main.md\", content = \"Done.\" }} }}, \
         {{ tool = \"workspace_commit\", args = {{ path = \"output/main.md\" }} }}, {{ tool = \"workspace_finish\" }}], delay_ms = {slow_ms} }}"
    );
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    format!("[routes]\ndocs_agent = \"writer\"\n\n{}", profile("writer", &tools, "", &[&finish]))
}

impl Bridge {
    /// This bridge reading its own reply queue.
    async fn consume(&self) -> lapin::Consumer {
        let channel = self.conn.create_channel().await.unwrap();
        let options = lapin::options::BasicConsumeOptions::default();
        channel.basic_consume(self.replies.as_str().into(), "".into(), options, FieldTable::default()).await.unwrap()
    }
}

/// The next reply (not status) on a bridge's queue.
async fn reply_on(bridge: &Bridge) -> Value {
    let mut consumer = bridge.consume().await;
    loop {
        let message = next_json(&mut consumer, WAIT).await;
        if message["type"] == "reply" {
            return message;
        }
    }
}

fn request(id: &str, intent: &str) -> Value {
    let mut r = sample_request_json(id, "docs_agent", "en");
    r["userIntent"] = intent.into();
    r
}

#[tokio::test]
async fn no_bridge_can_squat_cancel_promote_or_occupy_another_bridges_handoff_or_chat() {
    let rig = rig(&agents(1500)).await;
    let env = &rig.env;
    let fleet = env.start_all();
    // Beta squats alpha's next id, and cancels alpha's id before it exists;
    // beta also keeps alpha's chat (the same replyToChatId) busy with a slow run.
    rig.beta.request(env, &request("h-1", "beta's own request")).await;
    let cancel = json!({"type": "cancel", "id": "c-1", "handoffId": "h-2", "reason": "beta cancels alpha"});
    rig.beta.request(env, &cancel).await;
    // Beta stores a draft under h-3; alpha's requested h-3 is alpha's own.
    let mut draft = request("h-3", "beta's draft");
    draft["status"] = "draft".into();
    rig.beta.request(env, &draft).await;
    // Beta's slow run holds beta's chat when alpha's first request comes.
    eventually(WAIT, "beta's run is live", || async {
        let running = "SELECT count(*) FROM handoff_requests WHERE id = 'beta:h-1' AND status = 'running'";
        (env.scalar_i64(running, &[]).await == 1).then_some(())
    })
    .await;
    for id in ["h-1", "h-2", "h-3"] {
        rig.alpha.request(env, &request(id, "alpha's request")).await;
    }
    // Every one of alpha's requests completes for alpha, in alpha's ids, on alpha's queue.
    let mut done = vec![];
    let mut consumer = rig.alpha.consume().await;
    while done.len() < 3 {
        let message = next_json(&mut consumer, WAIT).await;
        if message["type"] == "reply" {
            assert_eq!(message["status"], "completed", "{message}");
            done.push(message["handoffId"].as_str().unwrap().to_string());
        }
    }
    done.sort();
    assert_eq!(done, ["h-1", "h-2", "h-3"]);
    // Beta got its own reply for its own h-1, and nothing of alpha's.
    let beta = reply_on(&rig.beta).await;
    assert_eq!((beta["handoffId"].as_str(), beta["status"].as_str()), (Some("h-1"), Some("completed")));
    let stored = |id: &'static str| async move {
        env.db()
            .await
            .query_one("SELECT status FROM handoff_requests WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    assert_eq!(stored("beta:h-3").await, "draft", "beta's draft is still beta's, and still a draft");
    let first = env.handoff_events("alpha:h-1").await;
    assert!(!first.contains(&HandoffEvent::Queued), "alpha's chat was not held by beta's run: {first:?}");
    assert_eq!(stored("alpha:h-2").await, "completed", "beta's cancel reached no request of alpha's");
    fleet.stop().await;
}

#[tokio::test]
async fn a_message_from_nobody_known_or_naming_another_bridges_queue_is_dead_lettered_and_never_run() {
    let rig = rig(&agents(0)).await;
    let env = &rig.env;
    let fleet = env.start_all();
    // No user_id; the fleet's own user; and alpha naming beta's reply queue.
    rig.alpha.send(env, &request("n-1", "no user"), Some(&rig.alpha.replies), None).await;
    let guest = Connection::connect(&env.settings.amqp_url, ConnectionProperties::default()).await.unwrap();
    let fleet_user = Bridge { conn: guest, user: "guest".into(), replies: env.reply_queue.clone() };
    fleet_user.request(env, &request("n-2", "the fleet's user, but no bridge")).await;
    rig.alpha
        .send(env, &request("n-3", "alpha names beta's queue"), Some(&rig.beta.replies), Some(&rig.alpha.user))
        .await;
    // Alpha's request to a target it may use but from a source it may not.
    let mut admin = request("n-4", "another source");
    admin["source"] = "admin".into();
    rig.alpha.request(env, &admin).await;
    let mut dead = env.consume(&env.queue(baton_domain::fleet::Queue::Dead)).await;
    let mut reasons = vec![];
    while reasons.len() < 4 {
        let letter = next_json(&mut dead, WAIT).await;
        reasons.push(letter["_error"].as_str().unwrap_or_default().to_string());
    }
    reasons.sort();
    assert!(reasons.iter().any(|r| r.contains("has no user_id")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("no bridge of this fleet is RabbitMQ user `guest`")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("may not name reply queue")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("may not send source `admin`")), "{reasons:?}");
    // Nothing ran, nothing went to any reply queue.
    assert_eq!(env.scalar_i64("SELECT count(*) FROM handoff_requests", &[]).await, 0);
    for bridge in [&rig.alpha, &rig.beta] {
        let channel = bridge.conn.create_channel().await.unwrap();
        let passive = QueueDeclareOptions { passive: true, exclusive: true, ..Default::default() };
        let q = channel.queue_declare(bridge.replies.as_str().into(), passive, FieldTable::default()).await.unwrap();
        assert_eq!(q.message_count(), 0, "{} got a message", bridge.replies);
    }
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let q = channel.queue_declare(env.reply_queue.as_str().into(), passive, FieldTable::default()).await.unwrap();
    assert_eq!(q.message_count(), 0, "the fleet user's reply queue got a message");
    fleet.stop().await;
}

#[tokio::test]
async fn a_redelivery_with_another_body_is_a_conflicting_duplicate_and_the_request_stands() {
    let rig = rig(&agents(0)).await;
    let env = &rig.env;
    let fleet = env.start_all();
    rig.alpha.request(env, &request("d-1", "the first body")).await;
    assert_eq!(reply_on(&rig.alpha).await["status"], "completed");
    rig.alpha.request(env, &request("d-1", "another body under the same id")).await;
    let mut dead = env.consume(&env.queue(baton_domain::fleet::Queue::Dead)).await;
    let letter = next_json(&mut dead, WAIT).await;
    assert!(letter["_error"].as_str().unwrap().starts_with("conflicting_duplicate"), "{letter}");
    let events = env.handoff_events("alpha:d-1").await;
    assert!(events.contains(&HandoffEvent::ConflictingDuplicate), "{events:?}");
    let stored = baton_store::requests::get(&env.db().await, "alpha:d-1").await.unwrap().unwrap();
    assert_eq!(stored.body["userIntent"], "the first body");
    fleet.stop().await;
}

#[tokio::test]
async fn the_broker_refuses_a_user_id_that_is_not_the_connections_own() {
    let rig = rig(&agents(0)).await;
    let channel = rig.alpha.conn.create_channel().await.unwrap();
    channel.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let props = BasicProperties::default().with_user_id(rig.beta.user.as_str().into());
    let exchange = format!("{}baton.bridge", rig.env.settings.queue_prefix);
    let published = channel
        .basic_publish(exchange.as_str().into(), "requests".into(), BasicPublishOptions::default(), b"{}", props)
        .await;
    let refused = match published {
        Ok(confirm) => confirm.await.is_err(),
        Err(_) => true,
    };
    assert!(refused || !channel.status().connected(), "a forged user_id must be refused by RabbitMQ");
    assert_eq!(rig.env.scalar_i64("SELECT count(*) FROM handoff_requests", &[]).await, 0);
}

#[tokio::test]
async fn no_bridge_can_answer_another_bridges_question() {
    let asker = profile(
        "asker",
        &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            "{ tool = \"ask_user\", args = { question = \"Publish now?\", options = [\"yes\", \"no\"] } }",
            "{ tool = \"workspace_write\", args = { path = \"output/main.md\", content = \"Published.\" } }",
            "{ tool = \"workspace_commit\", args = {} }",
            "{ tool = \"workspace_finish\", args = {} }",
        ],
    );
    let rig = rig(&format!("[routes]\ndocs_agent = \"asker\"\n\n{asker}")).await;
    let env = &rig.env;
    let fleet = env.start_all();
    rig.alpha.request(env, &request("q-1", "alpha asks")).await;
    let mut alpha = rig.alpha.consume().await;
    let question = loop {
        let message = next_json(&mut alpha, WAIT).await;
        if message["type"] == "question" {
            break message;
        }
    };
    assert_eq!(question["handoffId"], "q-1", "alpha hears its own id");
    let answer = |id: &str, text: &str| {
        json!({"type": "answer", "id": id, "handoffId": "q-1", "questionId": question["questionId"], "text": text,
               "at": "2026-12-01T10:00:00Z"})
    };
    // Beta answers alpha's question, with alpha's ids: it changes nothing.
    rig.beta.request(env, &answer("a-beta", "yes")).await;
    eventually(WAIT, "beta's answer is recorded", || async {
        (env.scalar_i64("SELECT count(*) FROM bridge_answers WHERE id = 'beta:a-beta'", &[]).await == 1).then_some(())
    })
    .await;
    let blocked = "SELECT count(*) FROM handoff_requests WHERE id = 'alpha:q-1' AND status = 'blocked'";
    assert_eq!(env.scalar_i64(blocked, &[]).await, 1, "alpha's run still waits for alpha's user");
    // Alpha's own answer goes through.
    rig.alpha.request(env, &answer("a-alpha", "yes")).await;
    let reply = loop {
        let message = next_json(&mut alpha, WAIT).await;
        if message["type"] == "reply" {
            break message;
        }
    };
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("q-1"), Some("completed")), "{reply}");
    fleet.stop().await;
}

#[tokio::test]
async fn a_request_too_large_to_read_is_answered_failed_from_its_amqp_properties() {
    let env = TestEnv::new().await;
    env.apply_profiles(&agents(0)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    // 6 MB, over the body limit, with its id only in the message's properties.
    let mut big = request("big-1", "x");
    big["userIntent"] = "x".repeat(6 * 1024 * 1024).into();
    let body = serde_json::to_vec(&big).unwrap();
    let queue = env.queue(baton_domain::fleet::Queue::BridgeRequests);
    let out = baton_bus::Outgoing {
        queue: &queue,
        body: &body,
        message_id: Some("big-1"),
        reply_to: Some(&env.reply_queue),
        ..Default::default()
    };
    env.publisher.publish(&out).await.unwrap();
    let reply = next_json(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("big-1"), Some("failed")), "{reply}");
    assert_eq!(reply["error"]["code"], "invalid_request");
    assert!(reply["error"]["message"].as_str().unwrap().contains("bytes; the limit is"), "{reply}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM handoff_requests", &[]).await, 0, "it never ran");
}

#[tokio::test]
async fn a_bridge_user_confined_as_the_readme_says_can_speak_only_through_baton_bridge() {
    let env = TestEnv::new().await;
    let base = env.settings.queue_prefix.trim_end_matches('.').to_string();
    let (name, queue) = (format!("{base}confined"), format!("{}confined.replies", env.settings.queue_prefix));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rabbitmq/add-bridge-user.sh");
    let prefix = env.settings.queue_prefix.clone();
    let out =
        std::process::Command::new("sh").arg(&script).args([&name, "bridge-pw", &queue, &prefix]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let user = BrokerUser { name };
    let text = format!(
        "{}\n[[bridges]]\nid = \"confined\"\nuser = \"{}\"\nsources = [\"weixin\"]\nreply_queues = [\"{queue}\"]\n",
        agents(0),
        user.name
    );
    env.apply_profiles(&text).await;
    let bridge = Bridge { conn: user.connect().await, user: user.name.clone(), replies: queue.clone() };
    let channel = bridge.conn.create_channel().await.unwrap();
    let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
    channel
        .queue_declare(queue.as_str().into(), exclusive, FieldTable::default())
        .await
        .expect("it may declare its own queue");
    let fleet = env.start_all();
    bridge.request(&env, &request("c-1", "through the bridge exchange")).await;
    let reply = reply_on(&bridge).await;
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("c-1"), Some("completed")), "{reply}");
    // It may not publish to a fleet queue through the default exchange.
    let sneaky = bridge.conn.create_channel().await.unwrap();
    let work = env.queue(baton_domain::fleet::Queue::BridgeRequests);
    let publish = sneaky
        .basic_publish(
            "".into(),
            work.as_str().into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await;
    if publish.is_ok() {
        eventually(Duration::from_secs(5), "the broker closes the channel", || async {
            (!sneaky.status().connected()).then_some(())
        })
        .await;
    }
    assert!(!sneaky.status().connected(), "the default exchange is closed to a bridge's user");
    fleet.stop().await;
}

#[tokio::test]
async fn a_replayed_dead_letter_keeps_its_bridge() {
    let rig = rig(&agents(0)).await;
    let env = &rig.env;
    // A bridge the profiles file does not know yet: its request is dead-lettered, unrun.
    let late = BrokerUser::create(format!("{}late", env.settings.queue_prefix.trim_end_matches('.')));
    let replies = format!("{}late.replies", env.settings.queue_prefix);
    let bridge = Bridge { conn: late.connect().await, user: late.name.clone(), replies: replies.clone() };
    let channel = bridge.conn.create_channel().await.unwrap();
    let exclusive = QueueDeclareOptions { exclusive: true, ..Default::default() };
    channel.queue_declare(replies.as_str().into(), exclusive, FieldTable::default()).await.unwrap();
    let fleet = env.start_all();
    bridge.request(env, &request("r-1", "sent before the bridge was configured")).await;
    let bus = baton_bus::Connection::open(&env.settings.amqp_url, "baton-test-replay").await.unwrap();
    let why = format!("no bridge of this fleet is RabbitMQ user `{}`", late.name);
    let id = eventually(WAIT, "the request is dead-lettered", || async {
        let listed = baton_bus::dead::list(&bus, &env.settings.queues(), 10).await.unwrap();
        listed.into_iter().find(|l| l.reason.contains(&why)).map(|l| l.id)
    })
    .await;
    // The operator adds the bridge, then replays the letter as the fleet's own user
    // (forced, as `baton dead replay --force` does: the console offers no Replay for a request intake refused).
    let text = format!(
        "{}\n[[bridges]]\nid = \"late\"\nuser = \"{}\"\nsources = [\"weixin\"]\nreply_queues = [\"{replies}\"]\n",
        agents(0),
        late.name
    );
    env.apply_profiles(&text).await;
    let acted = baton_bus::dead::replay(
        &bus,
        &env.settings.queues(),
        baton_bus::dead::Select::Id(&id),
        None,
        &baton_bus::dead::FleetQueuesOnly,
        baton_bus::dead::Rule::Forced,
    )
    .await
    .unwrap();
    assert_eq!(acted.done, [id], "{acted:?}");
    // It runs as the late bridge's request, and its reply reaches that bridge in its own id.
    let reply = reply_on(&bridge).await;
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("r-1"), Some("completed")), "{reply}");
    let stored =
        env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'late:r-1' AND bridge_id = 'late'", &[]).await;
    assert_eq!(stored, 1);
    fleet.stop().await;
}
