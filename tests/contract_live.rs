//! The contract on the wire: what a real fleet sends a bridge (the example
//! chain's statuses and reply, and the failed reply of an invalid request)
//! is valid against the committed JSON Schemas, with the AMQP properties
//! `contract/asyncapi.yaml` documents.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use baton_bus::lapin::options::BasicAckOptions;
use baton_tests::{sample_request_json, TestEnv};
use futures_lite::StreamExt;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

fn validator(name: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../contract/schema/{name}.schema.json"));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::options().should_validate_formats(true).build(&schema).unwrap()
}

/// One message as the bridge received it: body and AMQP properties.
struct Received {
    body: Value,
    message_id: String,
    correlation_id: String,
    content_type: String,
}

/// Every message on the bridge's queue until a reply for each handoff came.
async fn until_replies(env: &TestEnv, handoffs: &[&str]) -> Vec<Received> {
    let mut consumer = env.replies().await;
    let mut seen: Vec<Received> = vec![];
    while !handoffs.iter().all(|h| seen.iter().any(|m| m.body["type"] == "reply" && m.body["handoffId"] == *h)) {
        let delivery = tokio::time::timeout(WAIT, consumer.next()).await.expect("a message in time").unwrap().unwrap();
        delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
        let text = |v: &Option<lapin::types::ShortString>| v.as_ref().map(ToString::to_string).unwrap_or_default();
        let props = &delivery.properties;
        seen.push(Received {
            body: serde_json::from_slice(&delivery.data).unwrap(),
            message_id: text(props.message_id()),
            correlation_id: text(props.correlation_id()),
            content_type: text(props.content_type()),
        });
    }
    seen
}

/// The message id `contract/asyncapi.yaml` documents for a body.
fn documented_message_id(body: &Value) -> String {
    let handoff = body["handoffId"].as_str().unwrap();
    match body["type"].as_str().unwrap() {
        "status" => format!("status:{handoff}:{}", body["seq"]),
        "reply" => format!("reply:{handoff}"),
        "question" => format!("question:{handoff}:{}", body["questionId"].as_str().unwrap()),
        other => panic!("a bridge does not receive `{other}`"),
    }
}

#[tokio::test]
async fn what_a_live_fleet_sends_a_bridge_is_valid_against_the_contract() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    env.send_request(&sample_request_json("contract-ok", "docs_agent", "en")).await;
    let mut invalid = sample_request_json("contract-bad", "docs_agent", "en");
    invalid["context"].as_object_mut().unwrap().remove("userId");
    env.send_request(&invalid).await;
    let messages = until_replies(&env, &["contract-ok", "contract-bad"]).await;
    fleet.stop().await;

    let schemas: BTreeMap<&str, _> =
        [("status", "BridgeStatus"), ("reply", "BridgeReply"), ("question", "BridgeQuestion")]
            .into_iter()
            .map(|(kind, name)| (kind, validator(name)))
            .collect();
    let mut wrong = vec![];
    for m in &messages {
        let errors: Vec<String> =
            schemas[m.body["type"].as_str().unwrap()].iter_errors(&m.body).map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            wrong.push(format!("{}: {errors:?}", m.body));
        }
        if m.message_id != documented_message_id(&m.body)
            || m.correlation_id != m.body["handoffId"]
            || m.content_type != "application/json"
        {
            wrong.push(format!("{} came as {} / {} / {}", m.body, m.message_id, m.correlation_id, m.content_type));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));

    let reply = |id: &str| {
        messages.iter().find(|m| m.body["type"] == "reply" && m.body["handoffId"] == id).unwrap().body.clone()
    };
    assert_eq!(reply("contract-ok")["status"], "completed");
    let failed = reply("contract-bad");
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("invalid_request"))
    );
    assert_eq!(failed["error"]["message"], "missing field `context.userId`");
    let statuses =
        messages.iter().filter(|m| m.body["type"] == "status" && m.body["handoffId"] == "contract-ok").count();
    assert!(statuses >= 3, "accepted, running, completed: {statuses}");
}
