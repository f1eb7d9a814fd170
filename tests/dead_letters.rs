//! Dead letters keep what identifies them: a refused body is kept redacted
//! and cut, so the letter carries the original's AMQP properties and the
//! SHA-256 and length of the body that was delivered, and two originals
//! cut or redacted to the same text are still two letters.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::dead::{self, BODY_BYTES, BODY_SHA256, ORIGINAL_USER_ID};
use baton_bus::publish::header;
use baton_domain::fleet::Queue;
use baton_tests::{profile, sample_request_json, TestEnv};
use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicPublishOptions};
use lapin::BasicProperties;
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(30);

fn sha256(body: &[u8]) -> String {
    Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// The next message on `consumer`, acked.
async fn next(consumer: &mut lapin::Consumer) -> Delivery {
    let d = tokio::time::timeout(WAIT, consumer.next()).await.expect("a dead letter").unwrap().unwrap();
    d.acker.ack(BasicAckOptions::default()).await.unwrap();
    d
}

fn text(value: &Option<lapin::types::ShortString>) -> Option<&str> {
    value.as_ref().map(lapin::types::ShortString::as_str)
}

/// The user of the test's broker URL: the only `user_id` the broker lets
/// this connection publish.
fn broker_user(env: &TestEnv) -> String {
    let first = baton_bus::broker_urls(&env.settings.amqp_url).next().unwrap().to_string();
    let uri: lapin::uri::AMQPUri = first.parse().unwrap();
    uri.authority.userinfo.username
}

#[tokio::test]
async fn a_refused_body_is_dead_lettered_with_its_originals_properties_digest_and_length() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start(&[Role::Intake]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let user = broker_user(&env);
    // Two bodies that are no request and carry no message_id, differing
    // only in a key the strict policy removes: kept, they read the same.
    let bodies = [
        br#"{"note": "not a request", "key": "sk-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#.to_vec(),
        br#"{"note": "not a request", "key": "sk-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}"#.to_vec(),
    ];
    let channel = env.conn.create_channel().await.unwrap();
    let queue = env.queue(Queue::BridgeRequests);
    for (i, body) in bodies.iter().enumerate() {
        let props = BasicProperties::default()
            .with_correlation_id(format!("corr-{i}").into())
            .with_reply_to(env.reply_queue.as_str().into())
            .with_user_id(user.as_str().into())
            .with_timestamp(1_700_000_000 + i as u64);
        let confirm = channel
            .basic_publish("".into(), queue.as_str().into(), BasicPublishOptions::default(), body, props)
            .await
            .unwrap();
        confirm.await.unwrap();
    }
    let letters = [next(&mut dead).await, next(&mut dead).await];
    for (i, (letter, body)) in letters.iter().zip(&bodies).enumerate() {
        let props = &letter.properties;
        assert_ne!(letter.data, *body, "kept redacted");
        assert!(!String::from_utf8_lossy(&letter.data).contains("sk-"), "kept redacted");
        assert_eq!(text(props.message_id()), None, "the original had none");
        assert_eq!(text(props.correlation_id()), Some(format!("corr-{i}").as_str()));
        assert_eq!(text(props.reply_to()), Some(env.reply_queue.as_str()));
        assert_eq!(*props.timestamp(), Some(1_700_000_000 + i as u64));
        assert_eq!(header(props, ORIGINAL_USER_ID), Some(user.clone()));
        assert_eq!(header(props, BODY_SHA256), Some(sha256(body)), "the digest of the body delivered");
        assert_eq!(header(props, BODY_BYTES), Some(body.len().to_string()));
        assert_eq!(header(props, "x-baton-source-queue").as_deref(), Some(Queue::BridgeRequests.as_str()));
    }
    assert_eq!(letters[0].data, letters[1].data, "the same text kept for both");

    // Put back, they are two letters for an operator, not one.
    let publisher = baton_bus::Publisher::open(&env.conn).await.unwrap();
    let dead_queue = env.queue(Queue::Dead);
    for letter in &letters {
        let confirm = publisher
            .channel()
            .basic_publish(
                "".into(),
                dead_queue.as_str().into(),
                BasicPublishOptions::default(),
                &letter.data,
                letter.properties.clone(),
            )
            .await
            .unwrap();
        confirm.await.unwrap();
    }
    drop(dead);
    fleet.stop().await;
    let bus = baton_bus::Connection::open(&env.settings.amqp_url, "baton-test-dead").await.unwrap();
    let listed = dead::list(&bus, &env.settings.queues(), 10).await.unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_ne!(listed[0].id, listed[1].id, "two originals, two ids");
    bus.close("done").await;
}

#[tokio::test]
async fn a_bridge_message_no_queue_takes_is_dead_lettered_with_its_ids_digest_and_length() {
    let env = TestEnv::new().await;
    let write = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }"#;
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    let script = [write, r#"{ tool = "workspace_commit" }"#, r#"{ tool = "workspace_finish" }"#];
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"solo\"\n\n{}", profile("solo", &tools, "", &script))).await;
    let fleet = env.start(&[Role::Intake, Role::Relay]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let gone = format!("{}bridge.gone", env.settings.queue_prefix);
    let request = serde_json::to_vec(&sample_request_json("gone-1", "docs_agent", "en")).unwrap();
    env.send_raw(&request, Some(&gone)).await;
    let letter = next(&mut dead).await;
    fleet.stop().await;
    let props = &letter.properties;
    assert_eq!(text(props.message_id()), Some("status:gone-1:1"));
    assert_eq!(text(props.correlation_id()), Some("gone-1"));
    assert_eq!(header(props, BODY_SHA256), Some(sha256(&letter.data)), "kept whole: its own digest");
    assert_eq!(header(props, BODY_BYTES), Some(letter.data.len().to_string()));
}
