//! Dead letters in the console (issue 22, part 2): listed after the
//! strictest redaction, replayed as they were, and only to the fleet's own
//! queues or to a queue a stored request named as its `reply_to`, never
//! where a forged header says.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::publish::Outgoing;
use baton_domain::fleet::Queue;
use baton_tests::{eventually, next_json, sample_request_json, TestEnv};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use reqwest::StatusCode;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const SECRETS: [&str; 2] = ["hunter2", "sk-abcdefghijklmnopqrstuvwxyz012345"];

/// The value of the hidden `name` input in a page.
fn hidden(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name} field in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Puts a letter in `baton.dead` that says it came from `source`.
async fn dead_letter(env: &TestEnv, source: &str, body: &[u8]) {
    let dead = env.queue(Queue::Dead);
    let headers =
        vec![("x-baton-error", "refused: password=hunter2".to_string()), ("x-baton-source-queue", source.into())];
    env.publisher.publish(&Outgoing { queue: &dead, body, headers, ..Default::default() }).await.unwrap();
}

async fn count(env: &TestEnv, queue: &str) -> u32 {
    env.publisher.ready_count(queue).await.unwrap()
}

async fn wait_dead(env: &TestEnv, n: u32) {
    let dead = env.queue(Queue::Dead);
    eventually(WAIT, "the dead letters are there", || async { (count(env, &dead).await == n).then_some(()) }).await;
}

#[tokio::test]
async fn a_dead_letter_is_listed_without_its_secrets_and_replayed_as_it_was() {
    let env = TestEnv::new().await;
    let body = format!(r#"{{"userIntent": "log in with password: {} and the key {}"}}"#, SECRETS[0], SECRETS[1]);
    dead_letter(&env, "baton.bridge.requests", body.as_bytes()).await;
    wait_dead(&env, 1).await;
    let console = env.serve_console(None).await;
    let page = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    let row = &page[page.find("<tr data-dead=").expect("the letter is listed")..];
    let row = &row[..row.find("</tr>").unwrap()];
    for secret in SECRETS {
        assert!(!page.contains(secret), "{secret} is not shown: {row}");
    }
    assert!(row.contains("[redacted"), "a placeholder says something was there: {row}");
    let listed = env.baton_cli(&["dead", "list", "--json"]).await;
    assert!(SECRETS.iter().all(|s| !listed.contains(s)), "nor by `baton dead list`: {listed}");

    let id = &row["<tr data-dead=\"".len()..];
    let id = &id[..id.find('"').unwrap()];
    let form = [("csrf", hidden(&page, "csrf"))];
    let replayed = console.client().post(format!("{}/dead/{id}/replay", console.base)).form(&form).send().await;
    assert_eq!(replayed.unwrap().status(), StatusCode::SEE_OTHER);
    let mut requests = env.consume(&env.queue(Queue::BridgeRequests)).await;
    let back = next_json(&mut requests, WAIT).await;
    assert_eq!(back, serde_json::from_str::<Value>(&body).unwrap(), "the replayed copy is the message as it was");
}

#[tokio::test]
async fn a_replay_goes_only_to_fleet_queues_and_to_reply_queues_of_stored_requests() {
    let env = TestEnv::new().await;
    // A stored request names this test's reply queue as its reply_to.
    env.apply_example_profiles().await;
    let mut replies = env.replies().await;
    let intake = env.start(&[Role::Intake]);
    env.send_request(&sample_request_json("dead-replay", "docs_agent", "en")).await;
    eventually(WAIT, "the request is stored", || async {
        baton_store::requests::get(&env.db().await, "dead-replay").await.unwrap().filter(|r| r.reply_to.is_some())
    })
    .await;
    intake.stop().await;

    // Another bridge's reply queue, which no stored request named.
    let victim = format!("{}bridge.victim.replies", env.settings.queue_prefix);
    env.remove_at_end(&victim);
    let channel = env.conn.create_channel().await.unwrap();
    let durable = QueueDeclareOptions { durable: true, ..Default::default() };
    channel.queue_declare(victim.as_str().into(), durable, FieldTable::default()).await.unwrap();

    dead_letter(&env, &env.reply_queue, br#"{"text": "to a stored request's queue"}"#).await;
    dead_letter(&env, &victim, br#"{"text": "forged into another bridge's queue"}"#).await;
    dead_letter(&env, "baton.not.a.fleet.queue", br#"{"text": "forged fleet-looking name"}"#).await;
    wait_dead(&env, 3).await;

    let console = env.serve_console(None).await;
    let page = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    let form = [("csrf", hidden(&page, "csrf")), ("queue", String::new())];
    let replayed = console.client().post(format!("{}/dead/replay-all", console.base)).form(&form).send().await.unwrap();
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    let location = replayed.headers()["location"].to_str().unwrap().to_string();
    let url = reqwest::Url::parse(&format!("{}{location}", console.base)).unwrap();
    let note = url.query_pairs().find(|(k, _)| k == "done").map(|(_, v)| v.into_owned()).unwrap_or_default();
    assert!(note.starts_with("Replayed 1 message(s)."), "{note}");
    assert!(note.contains(&format!("`{victim}` is neither one of the fleet's queues nor a reply queue")), "{note}");

    // Ahead of it the queue may hold the request's `accepted`, published by intake.
    while next_json(&mut replies, WAIT).await["text"] != "to a stored request's queue" {}
    assert_eq!(count(&env, &victim).await, 0, "the forged letter did not reach the other bridge's queue");
    wait_dead(&env, 2).await; // the two forged letters stay dead (handed back as the reading ends)
    let listed = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    assert_eq!(listed.matches("<tr data-dead=").count(), 2, "{listed}");
}
