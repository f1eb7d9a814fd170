//! The rest of the bridge protocol: the manual flow worked by an operator,
//! status callbacks over HTTP, and the disclosure policy.

use std::time::Duration;

use baton::operator::{self, Settle};
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::http::{CallbackServer, ModelServer, Reply};
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_manual_handoff_waits_for_an_operator_who_pastes_the_result() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("manual-ok", "manual", "zh-CN")).await;
    let accepted = next_json(&mut replies, WAIT).await;
    assert_eq!((accepted["status"].as_str(), accepted["seq"].as_i64()), (Some("accepted"), Some(1)));

    let shown = operator::handoff_show(&env.pool, "manual-ok").await.unwrap();
    assert!(shown.contains("target: manual") && shown.contains("status: accepted"), "{shown}");
    assert!(shown.contains("# Request") && shown.contains(HandoffEvent::Created.as_str()), "{shown}");
    let prompt = operator::handoff_prompt(&env.pool, "manual-ok").await.unwrap();
    assert!(
        prompt.starts_with("# Request") && prompt.contains("## How to answer") && prompt.contains("Simplified Chinese"),
        "{prompt}"
    );

    operator::settle_handoff(&env.pool, "manual-ok", Settle::Result, "通知已写好，请查收。").await.unwrap();
    let messages = until_reply(&mut replies, WAIT).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert_eq!(reply["language"], "zh-CN");
    assert_eq!(reply["text"], "通知已写好，请查收。");
    let again = operator::settle_handoff(&env.pool, "manual-ok", Settle::Result, "twice").await;
    assert!(again.unwrap_err().to_string().contains("already ended"));

    env.send_request(&sample_request_json("manual-no", "manual", "en")).await;
    next_json(&mut replies, WAIT).await;
    operator::settle_handoff(&env.pool, "manual-no", Settle::Cancel, "nobody is available today").await.unwrap();
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled");
    assert!(reply["text"].as_str().unwrap().contains("nobody is available today"));
    let events = env.handoff_events("manual-ok").await;
    for kind in [
        HandoffEvent::Created,
        HandoffEvent::ContextPackaged,
        HandoffEvent::StatusChanged,
        HandoffEvent::ResultReceived,
        HandoffEvent::ReplySent,
    ] {
        assert!(events.contains(&kind), "{kind} missing: {events:?}");
    }
}

#[tokio::test]
async fn status_updates_reach_the_callback_url_in_order_despite_failures() {
    let callback = CallbackServer::start(2).await;
    let env = TestEnv::new().await;
    env.apply_example_profiles_with_callbacks(&[callback.url.trim_end_matches("/status")]).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let mut request = sample_request_json("callback-1", "docs_agent", "en");
    request["callback"]["statusUrl"] = callback.url.clone().into();
    env.send_request(&request).await;
    until_reply(&mut replies, WAIT).await;
    let received = eventually(WAIT, "three status callbacks", || async {
        let got = callback.received();
        (got.len() == 3).then_some(got)
    })
    .await;
    fleet.stop().await;
    let statuses: Vec<(&str, i64)> =
        received.iter().map(|m| (m["status"].as_str().unwrap(), m["seq"].as_i64().unwrap())).collect();
    assert_eq!(statuses, vec![("accepted", 1), ("running", 2), ("completed", 3)]);
    assert_eq!(callback.attempts(), 5, "two failures were retried");
}

#[tokio::test]
async fn a_callback_that_never_answers_does_not_hold_up_the_run() {
    let env = TestEnv::new().await;
    env.apply_example_profiles_with_callbacks(&["http://127.0.0.1:9"]).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let mut request = sample_request_json("callback-dead", "docs_agent", "en");
    request["callback"]["statusUrl"] = "http://127.0.0.1:9/status".into();
    env.send_request(&request).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    assert!(
        env.scalar_i64("SELECT count(*) FROM callbacks WHERE handoff_id = 'callback-dead'", &[]).await >= 1,
        "still queued for retry"
    );
}

#[tokio::test]
async fn nothing_the_disclosure_policy_removes_reaches_the_model() {
    let secrets = [
        "sk-proj-Abc123Def456Ghi789Jkl012",
        "zhang.wei@example.com",
        "13812345678",
        "4111 1111 1111 1111",
        "hunter2pass",
        "the vault code is 0451",
    ];
    let server = ModelServer::start(vec![
        Reply::Tool("workspace_write", json!({"path": "output/main.md", "content": "Done."})),
        Reply::Tool("workspace_commit", json!({})),
        Reply::Tool("workspace_finish", json!({})),
    ])
    .await;
    let profiles = format!(
        "[routes]\ndocs_agent = \"writer\"\n\n[disclosure.default]\nmax_sensitivity = \"medium\"\n\n[[profiles]]\nid = \"writer\"\nname = \"Writer\"\ndescription = \"Writes.\"\ntools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n",
        server.base_url
    );
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles).await;
    let mut request = sample_request_json("disclosure-1", "docs_agent", "en");
    request["userIntent"] =
        format!("Email {} or call {} about the notice; my key is {}", secrets[1], secrets[2], secrets[0]).into();
    request["context"]["recentConversation"][0]["content"] =
        format!("Pay with card {} and log in at https://ops:{}@intranet.example.com", secrets[3], secrets[4]).into();
    request["context"]["userMemories"] = json!([
        {"id": "m-secret", "scope": "user", "type": "fact", "content": secrets[5], "sensitivity": "high"},
        {"id": "m-ok", "scope": "user", "type": "preference", "content": "Prefers short notices.", "sensitivity": "low"}
    ]);
    let messages = env.run(&request).await;
    assert_eq!(messages.last().unwrap()["status"], "completed");

    let sent = server.bodies().iter().map(ToString::to_string).collect::<String>();
    assert!(
        sent.contains("Prefers short notices."),
        "what is allowed still reaches the model: {}",
        server.bodies()[0]["messages"][1]
    );
    for secret in secrets {
        assert!(!sent.contains(secret), "`{secret}` reached the model");
    }
    let c = env.db().await;
    let stored = baton_store::requests::get(&c, "disclosure-1").await.unwrap().unwrap();
    let stored_text = stored.body.to_string();
    for secret in secrets {
        assert!(!stored_text.contains(secret), "`{secret}` was stored");
    }
    let redactions = stored.body["context"]["redactions"].as_array().unwrap();
    let fields: Vec<&str> = redactions.iter().map(|r| r["field"].as_str().unwrap()).collect();
    assert!(fields.contains(&"userIntent") && fields.contains(&"context.userMemories[m-secret]"), "{fields:?}");
    let events = env.handoff_events("disclosure-1").await;
    assert!(events.contains(&HandoffEvent::DisclosureFiltered), "{events:?}");
}

/// Intake stores a request as the profiles file it holds filters it, in
/// the round trip that takes the handoff's lock and reads the version
/// applied. A file applied since (here a stricter disclosure policy, while
/// the fleet runs) has the transaction done again with it: the next
/// request is stored and run as the new file filters it.
#[tokio::test]
async fn a_disclosure_policy_applied_while_intake_runs_filters_the_next_request() {
    let server = ModelServer::start(
        [0, 1]
            .iter()
            .flat_map(|_| {
                [
                    Reply::Tool("workspace_write", json!({"path": "output/main.md", "content": "Done."})),
                    Reply::Tool("workspace_commit", json!({})),
                    Reply::Tool("workspace_finish", json!({})),
                ]
            })
            .collect(),
    )
    .await;
    let profiles = |sensitivity: &str| {
        format!(
            "[routes]\ndocs_agent = \"writer\"\n\n[disclosure.default]\nmax_sensitivity = \"{sensitivity}\"\n\n[[profiles]]\nid = \"writer\"\nname = \"Writer\"\ndescription = \"Writes.\"\ntools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n",
            server.base_url
        )
    };
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles("high")).await;
    let request = |id: &str| {
        let mut request = sample_request_json(id, "docs_agent", "en");
        request["context"]["userMemories"] = json!([{"id": "m-high", "scope": "user", "type": "fact", "content": "the vault code is 0451", "sensitivity": "high"}]);
        request
    };
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request("policy-before")).await;
    assert_eq!(until_reply(&mut replies, Duration::from_secs(30)).await.last().unwrap()["status"], "completed");
    env.apply_profiles(&profiles("medium")).await;
    env.send_request(&request("policy-after")).await;
    assert_eq!(until_reply(&mut replies, Duration::from_secs(30)).await.last().unwrap()["status"], "completed");
    fleet.stop().await;

    let c = env.db().await;
    let before = baton_store::requests::get(&c, "policy-before").await.unwrap().unwrap();
    let after = baton_store::requests::get(&c, "policy-after").await.unwrap().unwrap();
    assert!(before.body.to_string().contains("0451"), "the first file allows it: {}", before.body);
    assert!(!after.body.to_string().contains("0451"), "the file applied since removes it: {}", after.body);
    assert!(env.handoff_events("policy-after").await.contains(&HandoffEvent::DisclosureFiltered));
    let second_run = server.bodies().iter().skip(3).map(ToString::to_string).collect::<String>();
    assert!(!second_run.is_empty() && !second_run.contains("0451"), "the model never saw it");
}
