//! Dead letters in the console (issue 22, part 2): listed after the
//! strictest redaction, replayed as they were, and only to the fleet's own
//! queues or to a queue a stored request named as its `reply_to`, never
//! where a forged header says; and (issue 24) only those a replay can help,
//! by Replay all, a posted Replay and `baton dead replay` alike.

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
    dead_letter_for(env, source, "refused: password=hunter2", body).await;
}

/// Puts a letter in `baton.dead` that says it came from `source` for `reason`.
async fn dead_letter_for(env: &TestEnv, source: &str, reason: &str, body: &[u8]) {
    let dead = env.queue(Queue::Dead);
    let headers = vec![("x-baton-error", reason.to_string()), ("x-baton-source-queue", source.into())];
    env.publisher.publish(&Outgoing { queue: &dead, body, headers, ..Default::default() }).await.unwrap();
}

/// The `done` note of the page a POST redirects to.
fn note_of(console: &baton_tests::ServedConsole, response: &reqwest::Response) -> String {
    let location = response.headers()["location"].to_str().unwrap();
    let url = reqwest::Url::parse(&format!("{}{location}", console.base)).unwrap();
    url.query_pairs().find(|(k, _)| k == "done").map(|(_, v)| v.into_owned()).unwrap_or_default()
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
    // The collector could not process it (a replay can help that, once fixed).
    dead_letter(&env, "baton.runs.finished", body.as_bytes()).await;
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
    let mut finished = env.consume(&env.queue(Queue::RunsFinished)).await;
    let back = next_json(&mut finished, WAIT).await;
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
    let note = note_of(&console, &replayed);
    assert!(note.starts_with("Replayed 1 message(s)."), "{note}");
    assert!(note.contains(&format!("`{victim}` is neither one of the fleet's queues nor a reply queue")), "{note}");

    // Ahead of it the queue may hold the request's `accepted`, published by intake.
    while next_json(&mut replies, WAIT).await["text"] != "to a stored request's queue" {}
    assert_eq!(count(&env, &victim).await, 0, "the forged letter did not reach the other bridge's queue");
    wait_dead(&env, 2).await; // the two forged letters stay dead (handed back as the reading ends)
    let listed = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    assert_eq!(listed.matches("<tr data-dead=").count(), 2, "{listed}");
}

/// The rows of `/dead` as (id, data-replay).
fn rows(page: &str) -> Vec<(String, String)> {
    let attr = |row: &str, name: &str| {
        let at = row.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        row[at..at + row[at..].find('"').unwrap()].to_string()
    };
    page.split("<tr data-dead=\"")
        .skip(1)
        .map(|row| (row[..row.find('"').unwrap()].to_string(), attr(row, "data-replay")))
        .collect()
}

#[tokio::test]
async fn replay_all_a_posted_replay_and_the_cli_take_only_what_a_replay_can_help() {
    let env = TestEnv::new().await;
    let (finished, requests) = (env.queue(Queue::RunsFinished), env.queue(Queue::BridgeRequests));
    let collect = "could not collect the run: a corrupt row";
    dead_letter_for(&env, "baton.runs.finished", collect, b"{\"runId\": \"fixed since\"}").await;
    dead_letter_for(&env, "baton.runs.finished", "not a run-finished message: eof", b"not a run 1").await;
    dead_letter_for(&env, "baton.runs.finished", "not a run-finished message: eof", b"not a run 2").await;
    let refused = "not accepted from this publisher: no bridge of this fleet is RabbitMQ user `late`";
    dead_letter_for(&env, "baton.bridge.requests", refused, br#"{"id": "late-1"}"#).await;
    wait_dead(&env, 4).await;

    let console = env.serve_console(None).await;
    let page = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    let listed = rows(&page);
    let offered: Vec<&String> = listed.iter().filter(|(_, r)| r == "offered").map(|(id, _)| id).collect();
    assert_eq!(offered.len(), 1, "the page offers Replay for the one the collector could not process: {listed:?}");
    let csrf = hidden(&page, "csrf");

    // Replay all: the one a replay can help goes; the note says how many stay, and why.
    let form = [("csrf", csrf.clone()), ("queue", String::new())];
    let replayed = console.client().post(format!("{}/dead/replay-all", console.base)).form(&form).send().await.unwrap();
    assert_eq!(replayed.status(), StatusCode::SEE_OTHER);
    let note = note_of(&console, &replayed);
    assert!(note.starts_with("Replayed 1 message(s). Left 3 that a replay cannot help:"), "{note}");
    assert!(note.contains("2 because its body is not a message its queue's consumer reads"), "{note}");
    assert!(note.contains("1 because intake refused it"), "{note}");
    let shown = console.client().get(format!("{}/dead", console.base)).query(&[("done", &note)]);
    let shown = shown.send().await.unwrap().text().await.unwrap();
    assert!(shown.contains("Left 3 that a replay cannot help"), "the page shows the note");
    assert_eq!(count(&env, &finished).await, 1, "only the replayable letter went back");
    assert_eq!(count(&env, &requests).await, 0, "the refused request did not");
    wait_dead(&env, 3).await;

    // A Replay posted for one the page offers none for: refused, nothing changes.
    let page = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    let left = rows(&page);
    assert!(left.iter().all(|(_, r)| r == "withheld"), "{left:?}");
    for (id, _) in &left {
        let form = [("csrf", csrf.clone())];
        let posted = console.client().post(format!("{}/dead/{id}/replay", console.base)).form(&form).send().await;
        let posted = posted.unwrap();
        assert_eq!(posted.status(), StatusCode::CONFLICT, "{id}");
        let said = posted.text().await.unwrap();
        assert!(
            said.contains(&format!("Dead letter {id} is not replayed: ")) && said.contains("Nothing changed"),
            "{said}"
        );
    }
    assert_eq!((count(&env, &finished).await, count(&env, &requests).await), (1, 0), "nothing was sent");
    wait_dead(&env, 3).await;
    let page = console.client().get(format!("{}/dead", console.base)).send().await.unwrap().text().await.unwrap();
    assert_eq!(rows(&page), left, "the same letters, in the same order");

    // `baton dead replay` decides alike; `--force` replays what the rule withholds.
    let out = env.baton_cli(&["dead", "replay", "--all"]).await;
    assert!(out.contains("replayed 0") && out.contains("left 3 in baton.dead that a replay cannot help"), "{out}");
    let refused_id =
        &left.iter().find(|(id, _)| page.contains(&format!("data-dead=\"{id}\" data-queue=\"{requests}\""))).unwrap().0;
    let one = tokio::process::Command::new(baton_tests::baton_binary())
        .args(["dead", "replay", refused_id])
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &env.settings.queue_prefix)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&one.stderr);
    assert!(!one.status.success(), "a replay that cannot help exits non-zero");
    assert!(
        said.contains(&format!("dead letter `{refused_id}` is not replayed, and nothing changed: intake refused it")),
        "{said}"
    );
    assert_eq!(count(&env, &requests).await, 0);
    let out = env.baton_cli(&["dead", "replay", "--force", refused_id]).await;
    assert!(out.contains("replayed 1"), "{out}");
    assert_eq!(count(&env, &requests).await, 1, "forced, it goes back to intake's queue");
    wait_dead(&env, 2).await;
}
