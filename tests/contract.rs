//! The request contract as written (docs/bridge-protocol.md#requests): what the disclosure
//! policy removes never reaches a model, an operator or the database, from
//! any field; malformed requests are refused, answered and never run; an
//! invalid re-delivery changes nothing; `reply_to` may not name a fleet queue.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::FieldTable;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::http::{ModelServer, Reply};
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};
use futures_lite::StreamExt;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

/// Every row of every table of the test database, as text.
async fn database_text(env: &TestEnv) -> String {
    let c = env.db().await;
    let tables = c
        .query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'", &[])
        .await
        .unwrap();
    let mut text = String::new();
    for table in tables {
        let name: String = table.get(0);
        for row in c.query(&format!("SELECT t::text FROM \"{name}\" t"), &[]).await.unwrap() {
            text.push_str(row.get::<_, &str>(0));
            text.push('\n');
        }
    }
    text
}

/// How many messages wait in a queue nobody consumes.
async fn messages_in(env: &TestEnv, queue: &str) -> u32 {
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    let declared = channel.queue_declare(queue.into(), passive, FieldTable::default()).await.unwrap();
    declared.message_count()
}

fn assert_none_in(secrets: &[&str], text: &str, place: &str) {
    for secret in secrets {
        assert!(!text.contains(secret), "`{secret}` found in {place}: {text}");
    }
}

fn openai_profiles(base_url: &str) -> String {
    format!(
        "[routes]\ndocs_agent = \"writer\"\n\n[[profiles]]\nid = \"writer\"\nname = \"Writer\"\ndescription = \"Writes.\"\ntools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"test-model\"\n"
    )
}

// ---------------------------------------------------------------------------
// Disclosure
// ---------------------------------------------------------------------------

#[tokio::test]
async fn what_the_policy_removes_from_any_field_never_reaches_the_model() {
    // Each class the first policy missed, in a field of its own; the
    // constraints' lists and the expected output included.
    let secrets = [
        "139 1234 5678",
        "(010) 1234 5678",
        "8f1c2d3e4b5a69788796a5b4",
        "dXNlcjpwYXNzd29yZA",
        "110101 19900307 1233",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "0755 8888 6666",
        "440304-1990-0307-123X",
        "138 1234 5678",
        "6123-4567",
        "AKIAzzzSECRETzzzACCESSzzz0123456789",
    ];
    let server = ModelServer::start(vec![
        Reply::Tool("workspace_write", json!({"path": "output/main.md", "content": "Done."})),
        Reply::Tool("workspace_commit", json!({})),
        Reply::Tool("workspace_finish", json!({})),
    ])
    .await;
    let env = TestEnv::new().await;
    env.apply_profiles(&openai_profiles(&server.base_url)).await;
    let mut request = sample_request_json("disclosure-fields", "docs_agent", "en");
    request["userIntent"] = format!("Write the notice. Reach me on +86 {} or {}.", secrets[0], secrets[1]).into();
    request["context"]["recentConversation"][0]["content"] = format!("clientSecret: {}", secrets[2]).into();
    request["context"]["recentConversation"][1]["content"] = format!("Authorization: Basic {}==", secrets[3]).into();
    request["context"]["userMemories"][0]["content"] = format!("身份证 {}", secrets[4]).into();
    request["context"]["projectMemories"] = json!([{"id": "p-1", "scope": "project", "type": "fact", "content": format!("secretAccessKey={}", secrets[5]), "sensitivity": "low"}]);
    request["context"]["sessionSummary"] = format!("the hotline is 021-{} ext 89", secrets[9]).into();
    request["constraints"]["allowedActions"] = json!(["draft_text", format!("call {}", secrets[6])]);
    request["constraints"]["forbiddenActions"] = json!(["modify_files", format!("sharing ID {}", secrets[7])]);
    request["constraints"]["requireConfirmationFor"] = json!(["publish", format!("texting {}", secrets[8])]);
    request["constraints"]["expectedOutput"] = format!("a notice signed with SecretAccessKey: {}", secrets[10]).into();
    let messages = env.run(&request).await;
    assert_eq!(messages.last().unwrap()["status"], "completed");

    let sent: String = server.bodies().iter().map(Value::to_string).collect();
    for kept in ["draft_text", "modify_files", "publish", "a notice signed with SecretAccessKey"] {
        assert!(sent.contains(kept), "`{kept}` still reaches the model: {sent}");
    }
    assert!(sent.contains("[redacted phone number]") && sent.contains("[redacted mainland China ID number]"), "{sent}");
    assert_none_in(&secrets, &sent, "what the model was sent");
    assert_none_in(&secrets, &database_text(&env).await, "the database");
    let stored = baton_store::requests::get(&env.db().await, "disclosure-fields").await.unwrap().unwrap();
    let fields: Vec<&str> =
        stored.body["context"]["redactions"].as_array().unwrap().iter().map(|r| r["field"].as_str().unwrap()).collect();
    for field in [
        "constraints.allowedActions[1]",
        "constraints.forbiddenActions[1]",
        "constraints.requireConfirmationFor[1]",
        "constraints.expectedOutput",
    ] {
        assert!(fields.contains(&field), "{field} not recorded: {fields:?}");
    }
}

#[tokio::test]
async fn an_invalid_body_carrying_secrets_is_kept_redacted_and_stored_nowhere() {
    let secrets = ["138 1234 5678", "a1b2c3d4e5f6g7h8i9j0", "hunter2", "0755 8888 6666"];
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    let mut request = sample_request_json("invalid-secret", "docs_agent", "en");
    request["userIntent"] = format!("deploy with apiKey={} and dbPassword: {}", secrets[1], secrets[2]).into();
    request["constraints"]["requireConfirmationFor"] = json!([format!("calling {}", secrets[3])]);
    // Invalid, and the reason quotes the value: the reason needs redacting too.
    request["createdAt"] = format!("call {} tomorrow", secrets[0]).into();
    env.send_request(&request).await;
    let reply = next_json(&mut replies, WAIT).await;
    let dead_letter = next_json(&mut dead, WAIT).await;
    fleet.stop().await;

    assert_eq!((reply["status"].as_str(), reply["handoffId"].as_str()), (Some("failed"), Some("invalid-secret")));
    assert!(reply["error"]["message"].as_str().unwrap().contains("createdAt"), "{reply}");
    assert_none_in(&secrets, &reply.to_string(), "the failed reply");
    let error = dead_letter["_error"].as_str().unwrap();
    assert!(error.contains("createdAt") && error.contains("[redacted phone number]"), "{error}");
    let body = dead_letter["_body"].to_string();
    assert!(
        body.contains("apiKey=[redacted API key]") && body.contains("invalid-secret"),
        "the shape stays for an operator: {body}"
    );
    assert_none_in(&secrets, &dead_letter.to_string(), "baton.dead");
    assert_none_in(&secrets, &database_text(&env).await, "the database");
}

// ---------------------------------------------------------------------------
// The contract as written
// ---------------------------------------------------------------------------

/// The sample with one field removed (`None`) or replaced, by JSON pointer.
fn sample_with(id: &str, pointer: &str, to: Option<Value>) -> Value {
    let mut request = sample_request_json(id, "docs_agent", "en");
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = request.pointer_mut(parent).unwrap().as_object_mut().unwrap();
    match to {
        Some(value) => parent.insert(key.to_owned(), value),
        None => parent.remove(key),
    };
    request
}

#[tokio::test]
async fn malformed_requests_are_dead_lettered_answered_failed_and_never_run() {
    // (id, field, new value or None to remove it, what the reason must name)
    let cases: [(&str, &str, Option<Value>, &str); 8] = [
        ("no-memories", "/context/userMemories", None, "missing field `context.userMemories`"),
        ("no-redactions", "/context/redactions", None, "missing field `context.redactions`"),
        ("no-allowed", "/constraints/allowedActions", None, "missing field `constraints.allowedActions`"),
        (
            "no-confirm",
            "/constraints/requireConfirmationFor",
            None,
            "missing field `constraints.requireConfirmationFor`",
        ),
        ("no-priority", "/priority", None, "missing field `priority`"),
        ("no-updated", "/updatedAt", None, "missing field `updatedAt`"),
        ("callback-list", "/callback", Some(json!([])), "field `callback` is invalid"),
        (
            "bad-sensitivity",
            "/context/userMemories/0/sensitivity",
            Some(json!(3)),
            "field `context.userMemories[0].sensitivity`",
        ),
    ];
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    for (id, field, to, _) in &cases {
        env.send_request(&sample_with(id, field, to.clone())).await;
    }
    // A valid request behind them on the same queue: once it is answered,
    // intake has handled every malformed one before it.
    env.send_request(&sample_request_json("valid-last", "docs_agent", "en")).await;
    let mut seen = vec![];
    while !seen.iter().any(|m: &Value| m["type"] == "reply" && m["handoffId"] == "valid-last") {
        seen.push(next_json(&mut replies, WAIT).await);
    }
    let mut dead_letters = vec![];
    for _ in &cases {
        dead_letters.push(next_json(&mut dead, WAIT).await);
    }
    fleet.stop().await;

    for (id, _, _, says) in &cases {
        let dead_letter =
            dead_letters.iter().find(|d| d["_body"]["id"] == *id).unwrap_or_else(|| panic!("{id} not dead-lettered"));
        assert!(dead_letter["_error"].as_str().unwrap().starts_with(says), "{id}: {dead_letter}");
        let reply = seen.iter().find(|m| m["handoffId"] == *id).unwrap_or_else(|| panic!("{id} got no reply"));
        assert_eq!((reply["type"].as_str(), reply["status"].as_str()), (Some("reply"), Some("failed")), "{id}");
        assert!(reply["error"]["message"].as_str().unwrap().starts_with(says), "{id}: {reply}");
    }
    assert_eq!(
        seen.iter().filter(|m| m["handoffId"] != "valid-last").count(),
        cases.len(),
        "one failed reply each, no status: {seen:?}"
    );
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id <> 'valid-last'", &[]).await,
        0,
        "none stored"
    );
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 1, "only the valid request ran");
}

#[tokio::test]
async fn an_invalid_redelivery_of_an_accepted_request_is_recorded_and_changes_nothing() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("redelivered", "docs_agent", "en")).await;
    let first = until_reply(&mut replies, WAIT).await;
    assert_eq!(first.last().unwrap()["status"], "completed");

    env.send_request(&sample_with("redelivered", "/priority", None)).await;
    let note = eventually(WAIT, "the invalid re-delivery is recorded", || async {
        let c = env.db().await;
        let events = baton_store::requests::events(&c, "redelivered").await.unwrap();
        events.into_iter().find(|e| e.kind == HandoffEvent::InvalidRedelivery.as_str()).and_then(|e| e.message)
    })
    .await;
    assert!(note.contains("missing field `priority`"), "{note}");
    // Measuring that nothing happens: no reply, no dead letter in a while.
    let quiet = Duration::from_millis(1500);
    assert!(tokio::time::timeout(quiet, replies.next()).await.is_err(), "no conflicting reply reaches the bridge");
    assert!(tokio::time::timeout(quiet, dead.next()).await.is_err(), "nothing is dead-lettered");
    fleet.stop().await;
    let c = env.db().await;
    let stored = baton_store::requests::get(&c, "redelivered").await.unwrap().unwrap();
    assert_eq!(stored.status, baton_domain::protocol::request::HandoffStatus::Completed);
    assert_eq!(env.scalar_i64("SELECT count(*) FROM runs", &[]).await, 1);
}

#[tokio::test]
async fn a_reply_to_naming_a_fleet_queue_is_refused_and_nothing_is_published_there() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    // No invocation worker: whatever reached the handoff queue would stay there.
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut dead = env.consume(&env.queue(Queue::Dead)).await;
    let mut default_replies = env.consume(&env.queue(Queue::BridgeReplies)).await;
    let handoff_queue = env.queue(Queue::InvocationsHandoff);
    let body = serde_json::to_vec(&sample_request_json("fleet-reply-to", "docs_agent", "en")).unwrap();
    env.send_raw(&body, Some(&handoff_queue)).await;
    let dead_letter = next_json(&mut dead, WAIT).await;
    let reply = next_json(&mut default_replies, WAIT).await;
    // A good request behind it, answered on its own queue: the relay has
    // had every chance to publish what the refused one might have queued.
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("manual-after", "manual", "en")).await;
    next_json(&mut replies, WAIT).await;
    fleet.stop().await;

    let error = dead_letter["_error"].as_str().unwrap();
    assert!(error.contains("reply_to") && error.contains(&handoff_queue), "{error}");
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("fleet-reply-to"), Some("failed")));
    assert!(reply["error"]["message"].as_str().unwrap().contains("reply_to"), "{reply}");
    assert_eq!(messages_in(&env, &handoff_queue).await, 0, "nothing was published to the fleet's queue");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE id = 'fleet-reply-to'", &[]).await, 0);
}
