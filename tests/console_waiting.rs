//! Runs blocked on an agent's question wait for a person too: the store's
//! waiting list, `baton handoff list --waiting` and the console's `/waiting`
//! show them, and an operator answers (or cancels) from the handoff page.

use std::time::Duration;

use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_store::overview::{self, WaitingFor};
use baton_tests::{next_json, profile, sample_request_json, until_reply, TestEnv};
use reqwest::{redirect, Client, StatusCode};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const ASK: &str = r#"{ tool = "ask_user", args = { question = "Publish the post now?", options = ["yes", "no"] } }"#;
const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Published." } }"#;

/// An agent that asks its user first, then writes, commits and finishes.
fn asker() -> String {
    let tools = ["ask_user", "workspace_write", "workspace_commit", "workspace_finish"];
    let script = [ASK, WRITE, r#"{ tool = "workspace_commit" }"#, r#"{ tool = "workspace_finish" }"#];
    format!("[routes]\ndocs_agent = \"asker\"\n\n{}", profile("asker", &tools, "", &script))
}

/// Starts the fleet and sends a request whose agent asks; returns once the
/// bridge has the question.
async fn blocked(env: &TestEnv, handoff: &str) -> (baton::fleet::Fleet, lapin::Consumer) {
    env.apply_profiles(&asker()).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json(handoff, "docs_agent", "en")).await;
    while next_json(&mut replies, WAIT).await["type"] != "question" {}
    (fleet, replies)
}

fn client() -> Client {
    Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

async fn get(url: &str) -> String {
    let response = client().get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{url}");
    response.text().await.unwrap()
}

/// The value of the hidden `name` input in a page.
fn hidden(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name} field in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// `baton handoff list --waiting --json` against this test's database.
async fn listed_by_the_cli(env: &TestEnv) -> Value {
    serde_json::from_str(&env.baton_cli(&["handoff", "list", "--waiting", "--json"]).await).unwrap()
}

#[tokio::test]
async fn a_question_waits_for_a_person_and_the_operators_answer_completes_the_run() {
    let env = TestEnv::new().await;
    let (fleet, mut replies) = blocked(&env, "wait-q").await;

    let waiting = overview::waiting(&env.db().await).await.unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let asked = waiting[0].question.clone().expect("the question is shown");
    assert_eq!((waiting[0].handoff_id.as_str(), waiting[0].waiting_for), ("wait-q", WaitingFor::Question));
    assert_eq!((asked.agent.as_str(), asked.options.clone()), ("asker", vec!["yes".to_string(), "no".to_string()]));
    assert!(asked.text.contains("Publish the post now?") && asked.expires_at > asked.asked_at, "{asked:?}");
    let cli = listed_by_the_cli(&env).await;
    assert_eq!(cli, serde_json::to_value(&waiting).unwrap(), "the CLI prints what the store holds");
    assert_eq!(
        (cli[0]["waitingFor"].clone(), cli[0]["question"]["options"].clone()),
        (json!("question"), json!(["yes", "no"]))
    );

    let console = env.serve_console(None).await;
    let list = get(&format!("{}/waiting", console.base)).await;
    assert!(
        list.contains("<tr data-handoff=\"wait-q\" data-kind=\"question\">") && list.contains("Publish the post now?"),
        "{list}"
    );
    let page = get(&format!("{}/handoffs/wait-q", console.base)).await;
    assert!(
        page.contains("<form id=\"answer-question\"") && page.contains("action=\"/handoffs/wait-q/answer\""),
        "{page}"
    );
    assert!(
        page.contains("name=\"choice\" value=\"yes\"")
            && page.contains(&asked.expires_at.format("%Y-%m-%d %H:%M:%S").to_string())
    );
    assert!(page.contains("<form id=\"cancel-handoff\""), "{page}");
    assert_eq!(hidden(&page, "question"), asked.question_id.to_string());

    let form = [
        ("csrf", hidden(&page, "csrf")),
        ("question", hidden(&page, "question")),
        ("text", "Yes, publish it today.".into()),
    ];
    let url = format!("{}/handoffs/wait-q/answer", console.base);
    let sent = console.client().post(&url).form(&form).send().await.unwrap();
    assert_eq!(sent.status(), StatusCode::SEE_OTHER);
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.first().unwrap()["status"], "running", "back to running once answered");
    assert_eq!(messages.last().unwrap()["status"], "completed");

    let run = env.run_of("wait-q").await;
    let inv = &env.invocations_of(run, "asker").await[0];
    let result = env.tool_results(inv.id).await[0]["content"].as_str().unwrap().to_string();
    assert!(result.starts_with("The user answered:\n> Yes, publish it today."), "{result}");
    let events = env.handoff_events("wait-q").await;
    assert!(
        events.contains(&HandoffEvent::AnswerReceived) && events.contains(&HandoffEvent::OperatorAnswered),
        "{events:?}"
    );
    let outcome = "SELECT count(*) FROM bridge_answers WHERE id LIKE 'console:%' AND outcome = 'applied'";
    assert_eq!(env.scalar_i64(outcome, &[]).await, 1);
    assert!(!get(&format!("{}/waiting", console.base)).await.contains("data-handoff=\"wait-q\""), "no longer waiting");
    let again = console.client().post(&url).form(&form).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT, "an answer to a closed question changes nothing");
}

#[tokio::test]
async fn cancelling_a_blocked_run_from_its_handoff_page_tells_the_bridge_cancelled() {
    let env = TestEnv::new().await;
    let (fleet, mut replies) = blocked(&env, "wait-cancel").await;
    let console = env.serve_console(None).await;
    let page = get(&format!("{}/handoffs/wait-cancel", console.base)).await;
    let form = [("csrf", hidden(&page, "csrf")), ("reason", "the operator stopped it".into())];
    let done = console
        .client()
        .post(format!("{}/handoffs/wait-cancel/cancel", console.base))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled", "{messages:?}");
    assert!(overview::waiting(&env.db().await).await.unwrap().is_empty(), "nothing waits any more");
    let by = "SELECT (error->>'by' = 'console')::int::bigint FROM runs WHERE id = $1";
    assert_eq!(env.scalar_i64(by, &[&env.run_of("wait-cancel").await]).await, 1, "who cancelled is stored");
}

/// Sends a `manual` request and waits for its `accepted`.
async fn manual(env: &TestEnv, replies: &mut lapin::Consumer, handoff: &str) {
    env.send_request(&sample_request_json(handoff, "manual", "en")).await;
    while next_json(replies, WAIT).await["status"] != "accepted" {}
}

/// Who cancelled a handoff's run as stored (`runs.error.by`, and its
/// `run_cancelled` event's), the run page's words, and its own log's `cancelled` note.
async fn cancelled_by(env: &TestEnv, base: &str, handoff: &str) -> (String, String, String, String) {
    let run = env.run_of(handoff).await;
    let c = env.db().await;
    let stored: String = c.query_one("SELECT error->>'by' FROM runs WHERE id = $1", &[&run]).await.unwrap().get(0);
    let journal = baton_store::journal::timeline(&c, run).await.unwrap();
    let cancel = journal.iter().find(|e| e.is(JournalEvent::RunCancelled)).expect("a run_cancelled event");
    let journal = cancel.payload["by"].as_str().unwrap_or("(none)").to_string();
    let sql = "SELECT message FROM handoff_events WHERE handoff_id = $1 AND type = $2";
    let note: String = c.query_one(sql, &[&handoff, &HandoffEvent::Cancelled.as_str()]).await.unwrap().get(0);
    let page = get(&format!("{base}/runs/{run}")).await;
    let said = &page[page.find("<p id=\"run-cancelled\"").expect("the run page says it was cancelled")..];
    let said = &said[said.find('>').unwrap() + 1..said.find("</p>").unwrap()];
    (stored, journal, said.to_string(), note)
}

#[tokio::test]
async fn a_manual_handoff_cancelled_in_the_console_says_console_and_from_the_cli_says_cli() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let console = env.serve_console(None).await;

    manual(&env, &mut replies, "manual-console").await;
    let page = get(&format!("{}/handoffs/manual-console", console.base)).await;
    let form = [("csrf", hidden(&page, "csrf")), ("reason", "nobody is free today".into())];
    let url = format!("{}/handoffs/manual-console/cancel", console.base);
    let done = console.client().post(&url).form(&form).send().await.unwrap();
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    assert_eq!(until_reply(&mut replies, WAIT).await.last().unwrap()["status"], "cancelled");
    let (stored, journal, said, note) = cancelled_by(&env, &console.base, "manual-console").await;
    assert_eq!((stored.as_str(), journal.as_str()), ("console", "console"), "not the generic `operator`");
    assert_eq!(said, "Cancelled by an operator in the console: nobody is free today");
    assert_eq!(note, "by console: nobody is free today", "the handoff's own log says who");

    manual(&env, &mut replies, "manual-cli").await;
    env.baton_cli(&["handoff", "cancel", "manual-cli", "--reason", "done elsewhere"]).await;
    assert_eq!(until_reply(&mut replies, WAIT).await.last().unwrap()["status"], "cancelled");
    let (stored, journal, said, note) = cancelled_by(&env, &console.base, "manual-cli").await;
    assert_eq!((stored.as_str(), journal.as_str()), ("cli", "cli"));
    assert_eq!(said, "Cancelled by an operator on the command line: done elsewhere");
    assert_eq!(note, "by cli: done elsewhere");
    fleet.stop().await;
}
