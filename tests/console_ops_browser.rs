//! The operator's first look (issue 24) in a real headless Chromium: the
//! overview and the workers page of a fleet doing a realistic mix
//! (completed chains, a model answering HTTP 500, a cancel, a run blocked
//! on a question, a manual handoff, dead letters, a process killed), with
//! the navigation's badges; the question page leading with the question;
//! dead letters with their age, their run and Replay only where it helps.
//!
//! With `BATON_DOCS_SCREENSHOTS=1` the first test also writes
//! `docs/console-workers.png` and `docs/console-overview.png`.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::publish::Outgoing;
use baton_domain::fleet::Queue;
use baton_tests::browser::Browser;
use baton_tests::http::{ModelServer, Reply};
use baton_tests::{eventually, next_json, profile, sample_request_json, until_reply, TestEnv};

use crate::console_browser::Console;

const WAIT: Duration = Duration::from_secs(30);
const ASK: &str = r#"{ tool = "ask_user", args = { question = "Publish the notice to every channel now?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Published." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;
const TOOLS: &[&str] = &["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];

/// The example profiles, with `codex` routed to an agent that asks its
/// user, `qwen_code` to a model endpoint answering 500 and `claude_code`
/// to a writer that takes a minute.
fn mixed_profiles(model: &ModelServer) -> String {
    let example = include_str!("../examples/profiles.toml")
        .replace("codex = \"writer\"", "codex = \"asker\"")
        .replace("qwen_code = \"writer\"", "qwen_code = \"flaky\"")
        .replace("claude_code = \"writer\"", "claude_code = \"slow\"");
    let asker = profile("asker", TOOLS, "", &[ASK, WRITE, COMMIT, FINISH]);
    let slow_write =
        r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Slow." }, delay_ms = 60000 }"#;
    let slow = profile("slow", TOOLS, "", &[slow_write, COMMIT, FINISH]);
    let flaky = format!(
        "[[profiles]]\nid = \"flaky\"\nname = \"flaky\"\ndescription = \"Behind an overloaded endpoint.\"\ntools = [\"workspace_write\"]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\nmax_attempts = 2\n[profiles.delegation]\n",
        model.base_url
    );
    format!("{example}\n{asker}\n{slow}\n{flaky}")
}

fn request(id: &str, target: &str, chat: &str) -> serde_json::Value {
    let mut request = sample_request_json(id, target, "en");
    request["callback"]["replyToChatId"] = chat.into();
    request
}

/// Copies a screenshot to `docs/` when `BATON_DOCS_SCREENSHOTS=1`.
fn to_docs(shot: &std::path::Path, name: &str) {
    if std::env::var("BATON_DOCS_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("docs").join(name);
        std::fs::copy(shot, &docs).unwrap();
        eprintln!("copied to {}", docs.display());
    }
}

async fn text(browser: &Browser, css: &str) -> String {
    browser.wait_for(css).await.text().await.unwrap().trim().to_string()
}

#[tokio::test]
async fn the_overview_and_the_workers_page_show_a_realistic_fleet_with_badges_on_every_page() {
    let Some(console) = Console::open("ops-overview").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    let model = ModelServer::start(vec![Reply::Status(500, None), Reply::Status(500, None)]).await;
    env.apply_profiles(&mixed_profiles(&model)).await;
    let fleet = env.start(&Role::ALL);
    let mut second = env.spawn_baton_roles(&["invocation"], "ops-worker-b", &[("BATON_HEARTBEAT_MS", "500")]);
    let mut killed = env.spawn_baton_roles(&["collector"], "ops-worker-c", &[("BATON_HEARTBEAT_MS", "300")]);
    let mut replies = env.replies().await;
    for (id, chat) in [("ops-chain-1", "chat-a"), ("ops-chain-2", "chat-b")] {
        env.send_request(&request(id, "docs_agent", chat)).await;
        assert_eq!(until_reply(&mut replies, WAIT).await.pop().unwrap()["status"], "completed");
    }
    env.send_request(&request("ops-flaky", "qwen_code", "chat-c")).await;
    assert_eq!(until_reply(&mut replies, WAIT).await.pop().unwrap()["status"], "failed");
    env.send_request(&request("ops-ask", "codex", "chat-d")).await;
    while next_json(&mut replies, WAIT).await["type"] != "question" {}
    env.send_request(&request("ops-manual", "manual", "chat-e")).await;
    env.send_request(&request("ops-slow", "claude_code", "chat-f")).await;
    env.send_raw(b"not json at all", None).await;
    env.send_raw(b"[1, 2, 3]", None).await;
    let dead = env.queue(Queue::Dead);
    eventually(WAIT, "two dead letters", || async {
        (env.publisher.ready_count(&dead).await.unwrap() == 2).then_some(())
    })
    .await;
    let slow = eventually(WAIT, "the slow run is held", || async {
        let run = baton_store::requests::get(&env.db().await, "ops-slow").await.unwrap()?.run_id?;
        let (rows, _) = baton_store::workers::list(&env.db().await).await.unwrap();
        rows.iter().any(|r| r.runs.contains(&run)).then_some(run)
    })
    .await;
    killed.signal("KILL");
    killed.exit_code(WAIT).await;

    // The workers page: three processes, one of them gone, the held run linked.
    console.goto("/workers").await;
    browser.wait_for_text("#workers tr[data-worker=\"ops-worker-c\"]", "gone", true).await;
    let inproc = format!("#workers tr[data-worker=\"{}\"]", env.settings.worker_id);
    assert_eq!(
        browser.texts(&format!("{inproc} .roles .role")).await,
        vec!["intake", "invocation", "relay", "collector"]
    );
    assert_eq!(browser.attrs("#workers tr[data-worker=\"ops-worker-b\"]", "data-liveness").await, vec!["live"]);
    assert_eq!(browser.attrs("#workers tr[data-worker=\"ops-worker-c\"]", "data-liveness").await, vec!["gone"]);
    let held = browser.attrs("#workers td.held a.run-link", "href").await;
    assert_eq!(held, vec![format!("/runs/{slow}")], "the slow run, held by whichever worker claimed it");
    assert!(text(browser, &format!("{inproc} .version")).await.starts_with(env!("CARGO_PKG_VERSION")));
    to_docs(&browser.screenshot("console-workers").await, "console-workers.png");

    // A cancel is not a failure.
    assert!(baton::operator::cancel_run(&env.pool, slow, "the operator stopped it").await.unwrap());
    while until_reply(&mut replies, WAIT).await.pop().unwrap()["handoffId"] != "ops-slow" {}

    // The overview: counts by status, the failure rate, what waits, the badges.
    console.goto("/").await;
    browser.wait_for("#by-status").await;
    assert!(browser.url().await.ends_with("/overview"), "{}", browser.url().await);
    let hour = |status: &str| format!("#by-status tr[data-status={status}] td.hour");
    assert_eq!(text(browser, &hour("completed")).await, "2");
    assert_eq!(text(browser, &hour("failed")).await, "1");
    assert_eq!(text(browser, &hour("cancelled")).await, "1");
    assert_eq!(text(browser, &hour("blocked")).await, "1", "the run blocked on its question");
    assert_eq!(text(browser, &hour("running")).await, "0");
    assert_eq!(text(browser, "#failure-rate-hour").await, "33.3%", "1 failed of the 3 that ended by themselves");
    assert_eq!(text(browser, "#waits tr[data-wait=manual] .count").await, "1");
    assert_eq!(text(browser, "#waits tr[data-wait=questions] .count").await, "1");
    assert_eq!(text(browser, "#waits tr[data-wait=dead] .count").await, "2");
    assert_eq!(text(browser, "#workers-gone").await, "1 gone");
    assert_eq!(browser.attrs("#failed tr[data-run]", "data-run").await.len(), 1);
    assert_eq!(text(browser, "#badge-waiting").await, "2");
    assert_eq!(text(browser, "#badge-dead").await, "2");
    let first_nav = browser.attrs("header.top nav a", "href").await;
    assert_eq!(first_nav.first().map(String::as_str), Some("/overview"), "{first_nav:?}");
    to_docs(&browser.screenshot("console-overview").await, "console-overview.png");

    // The badges are on every page; the runs list tells runs apart and shows a cancel as a cancel.
    console.goto("/runs").await;
    assert_eq!(text(browser, "#badge-waiting").await, "2");
    assert_eq!(text(browser, "#badge-dead").await, "2");
    let shorts = browser.texts("#runs a.run-link").await;
    let distinct: std::collections::BTreeSet<_> = shorts.iter().collect();
    assert!(shorts.len() == 5 && distinct.len() == 5, "every run (the manual handoff has none) told apart: {shorts:?}");
    assert!(shorts.iter().all(|s| s.starts_with('…') && s.chars().count() == 9), "{shorts:?}");
    let cancelled = format!("#runs tr[data-run=\"{slow}\"]");
    assert_eq!(browser.attrs(&cancelled, "data-status").await, vec!["cancelled"]);
    assert!(browser.all(&format!("{cancelled} .s-failed")).await.is_empty(), "not shown as a failure");
    assert_eq!(text(browser, &format!("{cancelled} .handoff")).await, "ops-slow");

    second.signal("TERM");
    second.exit_code(WAIT).await;
    fleet.stop().await;
    console.close().await;
}

#[tokio::test]
async fn the_question_page_leads_with_the_question_and_its_answer_form() {
    let Some(console) = Console::open("ops-question").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    let model = ModelServer::start(vec![]).await;
    env.apply_profiles(&mixed_profiles(&model)).await;
    let fleet = env.start(&Role::ALL);
    let mut replies = env.replies().await;
    env.send_request(&request("ops-q", "codex", "chat-q")).await;
    while next_json(&mut replies, WAIT).await["type"] != "question" {}

    console.goto("/waiting").await;
    browser.wait_for_text("#waiting tr[data-handoff=\"ops-q\"] .question strong", "Publish the notice", true).await;
    browser.click("tr[data-handoff=\"ops-q\"] a.handoff-link").await;
    browser.wait_for("#question-text").await;
    let order = browser.eval("return Array.from(document.querySelectorAll('main > section')).map(s => s.id || s.querySelector('h2').textContent);").await;
    assert_eq!(order[0], "ask", "the question comes first: {order}");
    assert!(text(browser, "main > section#ask #question-text")
        .await
        .contains("Publish the notice to every channel now?"));
    browser.wait_for("main > section#ask form#answer-question").await;
    assert!(browser.all("#prompt").await.is_empty(), "no copy-prompt for an external agent on a question");
    browser.screenshot("ops-question").await;
    browser.click("form#answer-question button[name=choice][value=yes]").await;
    let reply = until_reply(&mut replies, WAIT).await.pop().unwrap();
    assert_eq!((reply["handoffId"].as_str(), reply["status"].as_str()), (Some("ops-q"), Some("completed")));
    fleet.stop().await;
    console.close().await;
}

/// Puts a letter in `baton.dead` as the collector would have.
async fn finished_letter(env: &TestEnv, reason: &str, body: &[u8], minutes_ago: i64) {
    let at = (chrono::Utc::now() - chrono::TimeDelta::minutes(minutes_ago)).timestamp_millis();
    let headers = vec![
        ("x-baton-error", reason.to_string()),
        ("x-baton-source-queue", Queue::RunsFinished.as_str().to_string()),
        (baton_bus::dead::DEAD_AT, at.to_string()),
    ];
    let dead = env.queue(Queue::Dead);
    env.publisher.publish(&Outgoing { queue: &dead, body, headers, ..Default::default() }).await.unwrap();
}

#[tokio::test]
async fn dead_letters_show_their_age_their_run_and_replay_only_where_it_can_help() {
    let Some(console) = Console::open("ops-dead").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    env.apply_example_profiles().await;
    let run = {
        env.run_request("ops-dead-run").await;
        env.run_of("ops-dead-run").await
    };
    let intake = env.start(&[Role::Intake]);
    env.send_raw(b"not json <b>at all</b>", None).await;
    let body = format!(r#"{{"runId": "{run}"}}"#);
    finished_letter(env, "could not collect the run: a row that did not read", body.as_bytes(), 42).await;
    finished_letter(env, "not a run-finished message: expected value", b"garbage", 5).await;
    let dead = env.queue(Queue::Dead);
    eventually(WAIT, "three dead letters", || async {
        (env.publisher.ready_count(&dead).await.unwrap() == 3).then_some(())
    })
    .await;
    intake.stop().await;

    console.goto("/dead").await;
    browser.wait_for("tr[data-dead]").await;
    let finished = env.queue(Queue::RunsFinished);
    let offered = "tr[data-dead][data-replay=offered]";
    assert_eq!(browser.attrs(offered, "data-queue").await, vec![finished.clone()], "named as the fleet names it");
    assert_eq!(browser.attrs(&format!("{offered} a.run-link"), "href").await, vec![format!("/runs/{run}")]);
    assert!(text(browser, &format!("{offered} .age")).await.contains("dead for 42m"), "its age");
    assert_eq!(browser.all(&format!("{offered} form.replay")).await.len(), 1);
    let withheld = "tr[data-dead][data-replay=withheld]";
    assert_eq!(browser.all(withheld).await.len(), 2, "the refused request and the malformed message");
    assert!(browser.all(&format!("{withheld} form.replay")).await.is_empty(), "no Replay where it cannot help");
    let why = browser.texts(&format!("{withheld} .replay-withheld")).await;
    assert!(why.iter().any(|w| w.contains("intake refused it")), "{why:?}");
    assert!(why.iter().any(|w| w.contains("not a message its queue's consumer reads")), "{why:?}");
    let ages = browser.texts(&format!("{withheld} .age")).await;
    assert!(ages.iter().all(|a| a.starts_with("dead for")), "intake's own letter says when it died: {ages:?}");
    assert_eq!(text(browser, "#badge-dead").await, "3");
    browser.screenshot("ops-dead").await;

    browser.click(&format!("{offered} form.replay button")).await;
    eventually(WAIT, "the letter is back on runs.finished", || async {
        let back = env.publisher.ready_count(&finished).await.unwrap() == 1;
        (back && env.publisher.ready_count(&dead).await.unwrap() == 2).then_some(())
    })
    .await;
    browser.wait_for_text("#badge-dead", "2", true).await;
    console.close().await;
}
