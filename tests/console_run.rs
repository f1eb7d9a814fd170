//! The console's run page in a real headless Chromium (issue 24): a chain
//! with a delegation, run by the fleet against a model server on port 0,
//! is drawn as a waterfall (a lane per invocation, the child under its
//! parent, each model call with its latency and tokens), its event log
//! opens on demand and filters by kind, and an ended run's page stays put;
//! a model call in flight is said with its age, a run nobody has claimed
//! yet too, and a cancel says who cancelled.
//!
//! The screenshot of the waterfall in `docs/console-run.png` is this
//! test's: `BATON_DOCS_SCREENSHOTS=1 cargo nextest run -p baton-tests -E
//! 'test(/drawn_as_a_waterfall/)'` writes it there (every run writes it
//! under `target/console-screenshots/`).

use std::time::Duration;

use baton::roles::Role;
use baton_tests::browser::Browser;
use baton_tests::turns::{self, TurnServer};
use baton_tests::{eventually, next_json, sample_request_json, until_reply, TestEnv};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
/// How long the model server thinks before each answer.
const THINKING: Duration = Duration::from_millis(300);

fn chain_profiles(base_url: &str) -> String {
    let lead = turns::profile(
        "lead",
        &["agent_delegate", "agent_await", "agent_handoff"],
        "can_delegate = true\ncan_handoff = true",
        base_url,
    );
    let helper = turns::profile("helper", &["workspace_read"], "allow_as_subagent = true", base_url);
    let closer = turns::profile("closer", &["workspace_write", "workspace_commit", "workspace_finish"], "", base_url);
    format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{helper}\n{closer}")
}

fn chain_scripts() -> Vec<(&'static str, Vec<turns::Call>)> {
    vec![
        (
            "lead",
            vec![
                ("agent_delegate", json!({"agentId": "helper", "task": {"objective": "Check the dates."}})),
                ("agent_await", json!({"mode": "allCompleted"})),
                ("agent_handoff", json!({"agentId": "closer", "handoff": {"objective": "Write the notice."}})),
            ],
        ),
        ("helper", vec![("task_return", json!({"summary": "The dates hold.", "findings": ["Friday is free."]}))]),
        (
            "closer",
            vec![
                ("workspace_write", json!({"path": "output/main.md", "content": "Maintenance on Friday, 10pm."})),
                ("workspace_commit", json!({})),
                ("workspace_finish", json!({})),
            ],
        ),
    ]
}

fn work_roles() -> [Role; 4] {
    [Role::Intake, Role::Invocation, Role::Relay, Role::Collector]
}

#[tokio::test]
async fn a_chain_with_a_delegation_is_drawn_as_a_waterfall_and_its_ended_page_stays_put() {
    let Some(browser) = Browser::open("run-waterfall").await else { return };
    let env = TestEnv::new().await;
    let console = env.serve_console(None).await;
    let server = TurnServer::start(chain_scripts(), THINKING).await;
    env.apply_profiles(&chain_profiles(&server.base_url)).await;
    let fleet = env.start(&work_roles());
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("waterfall", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    let run = env.run_of("waterfall").await;
    let lead = env.invocations_of(run, "lead").await.remove(0).id.to_string();

    browser.goto(&format!("{}/runs/{run}", console.base)).await;
    browser.wait_for("#waterfall .wf-lane").await;
    let hex = run.simple().to_string();
    assert_eq!(browser.texts("#run-short").await, vec![format!("…{}", &hex[24..])], "the id's distinguishing end");
    assert_eq!(browser.texts("#run-handoff").await, vec!["waterfall"]);

    // One lane per invocation, the child under the lead that delegated it.
    let invocations = env.scalar_i64("SELECT count(*) FROM invocations WHERE run_id = $1", &[&run]).await;
    assert_eq!(invocations, 3);
    assert_eq!(browser.attrs("#waterfall .wf-lane", "data-agent").await, vec!["lead", "helper", "closer"]);
    assert_eq!(browser.attrs("#waterfall .wf-lane", "data-depth").await, vec!["0", "1", "0"]);
    assert_eq!(browser.attrs(".wf-lane[data-agent=helper]", "data-parent").await, vec![lead.clone()]);

    // Each model call a bar with its latency and tokens; the lead's wait on its child too.
    let bars = browser
        .eval(
            "return [...document.querySelectorAll('.wf-lane[data-agent=lead] g.wf-bar[data-kind=model]')]
                .map(g => [Number(g.dataset.ms), Number(g.dataset.tokens), g.querySelector('title').textContent]);",
        )
        .await;
    let bars = bars.as_array().unwrap();
    assert_eq!(bars.len(), 3, "the lead's three turns: {bars:?}");
    for bar in bars {
        assert!(bar[0].as_i64().unwrap() >= THINKING.as_millis() as i64, "the latency it measured: {bar:?}");
        assert_eq!(bar[1], 50, "the tokens its provider reported: {bar:?}");
        assert!(bar[2].as_str().unwrap().contains(" · 50 tokens"), "{bar:?}");
    }
    assert_eq!(browser.all(".wf-lane[data-agent=lead] g.wf-bar[data-kind=children]").await.len(), 1);
    assert!(!browser.all(".wf-lane[data-agent=closer] g.wf-bar[data-kind=tool]").await.is_empty());
    let metas =
        browser.eval("return [...document.querySelectorAll('#transcripts .step-meta')].map(m => m.textContent);").await;
    let metas: Vec<&str> = metas.as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(metas.len(), 7, "every model turn of the three agents: {metas:?}");
    assert!(metas.iter().all(|m| m.contains("50 tokens (40 in, 10 out)")), "{metas:?}");
    browser.screenshot("run-waterfall").await;
    keep_for_docs(&browser, "console-run.png").await;

    // An ended run's page does not reload itself.
    assert!(browser.all("[data-refresh]").await.is_empty(), "an ended run asks for no refresh");
    browser.eval("window.stillHere = true; return null;").await;
    // The page would reload after 3 s: look past that once (no condition to wait on).
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(browser.eval("return window.stillHere === true;").await, true, "the page was reloaded");

    // The event log is closed until asked for, then filters by kind.
    let log = browser.wait_for("#timeline li.event").await;
    assert!(!log.is_displayed().await.unwrap(), "the event log starts closed");
    browser.click("#event-log > summary").await;
    assert!(browser.wait_for("#timeline li.event").await.is_displayed().await.unwrap());
    browser.click("#event-kind option[value=model_response_stored]").await;
    let shown = "return [...document.querySelectorAll('#timeline li.event')].filter(e => e.offsetParent !== null).map(e => e.dataset.kind);";
    let shown = browser.eval(shown).await;
    assert_eq!(shown, json!(vec!["model_response_stored"; 7]), "only the kind chosen");
    browser.close().await;
}

#[tokio::test]
async fn what_a_live_run_waits_for_is_said_with_its_age_and_a_cancel_says_who() {
    let Some(browser) = Browser::open("run-in-flight").await else { return };
    let mut env = TestEnv::new().await;
    env.settings.shutdown_grace = Duration::from_secs(1);
    let console = env.serve_console(None).await;
    let write = json!({"path": "output/main.md", "content": "Too late."});
    // The model holds its answer far longer than the test looks.
    let server = TurnServer::start(vec![("writer", vec![("workspace_write", write)])], Duration::from_secs(120)).await;
    let writer = turns::profile("writer", &["workspace_write", "workspace_finish"], "", &server.base_url);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")).await;
    // No invocation role yet: the run's first invocation waits to be claimed.
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("in-flight", "docs_agent", "en")).await;
    assert_eq!(next_json(&mut replies, WAIT).await["status"], "accepted");
    let run = eventually(WAIT, "the run started", || async {
        baton_store::requests::get(&env.db().await, "in-flight").await.unwrap().and_then(|r| r.run_id)
    })
    .await;
    let page = format!("{}/runs/{run}", console.base);
    browser.goto(&page).await;
    let now = browser.wait_for("#now li[data-agent=writer]").await.text().await.unwrap();
    assert!(now.starts_with("writer waiting to be claimed, "), "{now}");
    assert!(!browser.all("[data-refresh]").await.is_empty(), "a live run refreshes");

    // Claimed, its model call is in flight: said, with its age, and drawn open.
    let workers = env.start(&[Role::Invocation]);
    server.until_asked(1, WAIT).await;
    browser.goto(&page).await;
    let now = browser.wait_for_text("#now", "waiting for the model, ", true).await.text().await.unwrap();
    assert!(now.chars().any(|c| c.is_ascii_digit()), "its age: {now}");
    browser.wait_for(".wf-lane[data-agent=writer] g.wf-bar.open[data-kind=model]").await;
    assert!(!browser.all("[data-refresh]").await.is_empty());
    browser.screenshot("run-in-flight").await;

    browser.click("form#cancel #cancel-button").await;
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(messages.last().unwrap()["status"], "cancelled", "{messages:?}");
    browser.wait_for_text(".status.big", "cancelled", true).await;
    let said = browser.wait_for("#run-cancelled").await.text().await.unwrap();
    assert!(said.starts_with("Cancelled by an operator in the console"), "{said}");
    assert!(browser.all("#run-error").await.is_empty(), "a cancel is not shown as a failure");
    assert!(browser.all("[data-refresh]").await.is_empty(), "a cancelled run refreshes no more");
    assert!(browser.all("#now").await.is_empty(), "nothing is in flight any more");
    let by = "SELECT (error->>'by' = 'console')::int::bigint FROM runs WHERE id = $1";
    assert_eq!(env.scalar_i64(by, &[&run]).await, 1, "who cancelled is stored with the run");
    workers.stop().await;
    fleet.stop().await;
    browser.close().await;
}

/// With `BATON_DOCS_SCREENSHOTS=1`, the page as it is now becomes `docs/NAME`.
async fn keep_for_docs(browser: &Browser, name: &str) {
    if std::env::var_os("BATON_DOCS_SCREENSHOTS").is_none() {
        return;
    }
    let png = browser.client.screenshot().await.expect("screenshot");
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("docs");
    std::fs::write(docs.join(name), png).unwrap();
}
