//! Edge cases at the bridge's side of the fleet: the order of one handoff's
//! messages under retries, refusals that must not block intake, long ids.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::{AMQPValue, FieldTable};
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::{eventually, next_json, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// Declares an exclusive queue of the test (gone with its connection); with
/// `room`, a queue that nacks what does not fit (`x-overflow: reject-publish`).
async fn bridge_queue(env: &TestEnv, name: &str, room: Option<i64>) -> String {
    let queue = format!("{}{name}", env.settings.queue_prefix);
    let mut args = FieldTable::default();
    if let Some(room) = room {
        args.insert("x-max-length".into(), AMQPValue::LongLongInt(room));
        args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
    }
    let channel = env.conn.create_channel().await.unwrap();
    let options = QueueDeclareOptions { exclusive: true, ..Default::default() };
    channel.queue_declare(queue.as_str().into(), options, args).await.unwrap();
    queue
}

async fn enqueue_bridge_message(env: &TestEnv, queue: &str, handoff: &str, message_id: &str, body: &Value) {
    env.db()
        .await
        .execute(
            "INSERT INTO bridge_messages (queue, external, message_id, handoff_id, body, mandatory, pending)
             VALUES ($1, true, $2, $3, $4, true, true)",
            &[&queue, &message_id, &handoff, body],
        )
        .await
        .unwrap();
}

/// The first message of a handoff is nacked (its queue is full) while the
/// second one would be taken (here: by another queue, so the broker's answer
/// differs for the two whatever the timing). The second must wait for the
/// first, in the batch where the first is nacked and in the later ones where
/// the first is due again, and then arrive after it.
#[tokio::test]
async fn a_nacked_message_is_not_overtaken_by_a_later_message_of_its_handoff() {
    let mut env = TestEnv::new().await;
    env.settings.relay_poll = Duration::from_millis(100);
    env.settings.unclaimed_grace = Duration::from_millis(400); // the retries' longest backoff
    let full = bridge_queue(&env, "bridge.full", Some(1)).await;
    let open = bridge_queue(&env, "bridge.open", None).await;
    let filler = baton_bus::Outgoing { queue: &full, body: b"{\"type\":\"filler\"}", ..Default::default() };
    env.publisher.publish(&filler).await.unwrap();
    let status = json!({"type": "status", "handoffId": "ord-1", "status": "completed", "seq": 3});
    let reply =
        json!({"type": "reply", "handoffId": "ord-1", "status": "completed", "text": "Done.", "parts": ["Done."]});
    enqueue_bridge_message(&env, &full, "ord-1", "status:ord-1:3", &status).await;
    enqueue_bridge_message(&env, &open, "ord-1", "reply:ord-1", &reply).await;
    let fleet = env.start(&[Role::Relay]);
    eventually(WAIT, "the status was nacked three times", || async {
        (env.scalar_i64("SELECT coalesce(max(attempts), 0)::bigint FROM unsent_messages", &[]).await >= 3).then_some(())
    })
    .await;
    let overtaken = env.publisher.ready_count(&open).await.unwrap();
    // Room again: the status goes out, then the reply.
    let mut full_consumer = env.consume(&full).await;
    assert_eq!(next_json(&mut full_consumer, WAIT).await["type"], "filler");
    assert_eq!(next_json(&mut full_consumer, WAIT).await["status"], "completed");
    let mut open_consumer = env.consume(&open).await;
    let arrived = next_json(&mut open_consumer, WAIT).await;
    fleet.stop().await;
    assert_eq!(overtaken, 0, "the reply went out while the status before it waited for a retry");
    assert_eq!(arrived["type"], "reply");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM unsent_messages", &[]).await, 0);
}

/// Sends `poison` to intake, then an ordinary request: the poison is
/// dead-lettered and answered `failed`, and intake goes on to the next one
/// (it does not restart over the poison until the broker gives up on it).
async fn intake_survives(env: &TestEnv, poison: &Value, next_id: &str) -> (Value, Value) {
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    let fleet = env.start(&[Role::Intake]);
    env.send_request(poison).await;
    let refused = next_json(&mut replies, WAIT).await;
    let letter = next_json(&mut dead, WAIT).await;
    let next = baton_tests::sample_request_json(next_id, "manual", "en");
    env.send_request(&next).await;
    eventually(WAIT, "the next request is stored", || async {
        (env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = $1", &[&next_id]).await == 1).then_some(())
    })
    .await;
    fleet.stop().await;
    let redelivered = env.handoff_event_count(HandoffEvent::DeadLetterRecovered).await;
    assert_eq!(redelivered, 0, "the poison went round until the broker dead-lettered it");
    (refused, letter)
}

#[tokio::test]
async fn an_invalid_request_whose_id_postgres_cannot_store_is_answered_not_redelivered() {
    let env = TestEnv::new().await;
    let mut poison = baton_tests::sample_request_json("nul\u{0}id", "docs_agent", "en");
    poison.as_object_mut().unwrap().remove("userIntent");
    let (refused, letter) = intake_survives(&env, &poison, "after-nul").await;
    assert_eq!(refused["status"], "failed");
    assert_eq!(refused["handoffId"], "nul\u{0}id");
    assert!(letter["_error"].as_str().unwrap().contains("NUL"), "{letter}");
}

#[tokio::test]
async fn a_refusal_quoting_a_huge_field_is_dead_lettered_with_a_bounded_reason() {
    let env = TestEnv::new().await;
    let mut poison = baton_tests::sample_request_json("huge-field", "docs_agent", "en");
    poison["taskType"] = "x".repeat(600 * 1024).into();
    let (refused, letter) = intake_survives(&env, &poison, "after-huge").await;
    assert_eq!(refused["status"], "failed");
    let reason = letter["_error"].as_str().unwrap();
    assert!(reason.contains("taskType") && reason.len() < 4096, "{} bytes", reason.len());
}

/// A bridge whose reply queue is full sends an invalid request: its `failed`
/// reply waits in the outbox for room, and intake neither fails over it nor
/// lets the broker redeliver it until the delivery limit dead-letters it.
#[tokio::test]
async fn an_invalid_request_whose_bridge_queue_is_full_is_answered_when_there_is_room() {
    let mut env = TestEnv::new().await;
    env.settings.relay_poll = Duration::from_millis(100);
    env.settings.unclaimed_grace = Duration::from_millis(500);
    let full = bridge_queue(&env, "bridge.full", Some(1)).await;
    let filler = baton_bus::Outgoing { queue: &full, body: b"{\"type\":\"filler\"}", ..Default::default() };
    env.publisher.publish(&filler).await.unwrap();
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay]);
    let mut invalid = baton_tests::sample_request_json("full-invalid", "docs_agent", "en");
    invalid.as_object_mut().unwrap().remove("userIntent");
    env.send_raw(&serde_json::to_vec(&invalid).unwrap(), Some(&full)).await;
    let letter = next_json(&mut dead, WAIT).await;
    assert!(
        letter["_error"].as_str().is_some_and(|e| e.contains("userIntent")),
        "dead-lettered by intake with its reason: {letter}"
    );
    env.send_request(&baton_tests::sample_request_json("after-full", "manual", "en")).await;
    eventually(WAIT, "the next request is stored", || async {
        (env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'after-full'", &[]).await == 1).then_some(())
    })
    .await;
    let mut consumer = env.consume(&full).await;
    assert_eq!(next_json(&mut consumer, WAIT).await["type"], "filler");
    let reply = next_json(&mut consumer, WAIT).await;
    fleet.stop().await;
    assert_eq!((&reply["handoffId"], &reply["status"]), (&json!("full-invalid"), &json!("failed")), "{reply}");
    assert_eq!(
        env.publisher.ready_count(&env.queue(Queue::Dead)).await.unwrap(),
        0,
        "one dead letter, not the broker's too"
    );
}

/// An id of 128 characters is valid (docs/bridge-protocol.md#requests), but in Chinese it takes
/// 384 bytes, more than an AMQP short string (`correlation_id`,
/// `message_id`) can hold: its messages still reach the bridge, and the
/// relay keeps publishing the others.
#[tokio::test]
async fn a_request_id_longer_than_an_amqp_short_string_still_gets_its_messages() {
    let env = TestEnv::new().await;
    let long_id = "界".repeat(128);
    let fleet = env.start(&[Role::Intake, Role::Relay]);
    let mut replies = env.replies().await;
    env.send_request(&baton_tests::sample_request_json(&long_id, "manual", "en")).await;
    let status = next_json(&mut replies, WAIT).await;
    assert_eq!((&status["handoffId"], &status["status"]), (&json!(long_id), &json!("accepted")), "{status}");
    env.send_request(&baton_tests::sample_request_json("after-long-id", "manual", "en")).await;
    let next = next_json(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(next["handoffId"], "after-long-id");
}
