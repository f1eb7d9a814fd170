//! The operator's console in a real headless Chromium (issue 11): the demo's
//! chain is listed, filtered to and opened; a slow run is cancelled with the
//! button; a `manual` handoff is answered with the paste form; a refused
//! request's dead letter is offered no replay and discarded; another site's form and a name pointed at the console are
//! refused, an error page shows a tag in its URL as text, a login's cookie
//! is out of a script's reach and logging out ends the session. Each test
//! saves a screenshot under `target/console-screenshots/`.

use std::time::Duration;

use baton::roles::Role;
use baton_bus::publish::Outgoing;
use baton_domain::fleet::Queue;
use baton_domain::run::journal::JournalEvent;
use baton_tests::browser::Browser;
use baton_tests::{eventually, next_json, profile, sample_request_json, until_reply, TestEnv};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// A test's fleet database and queues, its console and its browser (the
/// other browser tests' too).
pub(crate) struct Console {
    pub(crate) env: TestEnv,
    pub(crate) stop: CancellationToken,
    pub(crate) base: String,
    pub(crate) browser: Browser,
}

impl Console {
    /// `None` when this machine has no browser (outside CI: skipped).
    pub(crate) async fn open(test: &str) -> Option<Console> {
        Self::open_with(test, None, &[]).await
    }

    /// [`Console::open`] behind `token`, in a Chromium with `switches`.
    pub(crate) async fn open_with(test: &str, token: Option<&str>, switches: &[&str]) -> Option<Console> {
        let browser = Browser::open_with(test, switches).await?;
        let env = TestEnv::new().await;
        let mut settings = env.settings.clone();
        settings.admin_addr = ([127, 0, 0, 1], 0).into();
        settings.admin_token = token.map(baton::config::Secret::new);
        let console = baton::console::Console::bind(&settings).await.expect("the console binds");
        let base = format!("http://{}", console.local_addr());
        let stop = CancellationToken::new();
        tokio::spawn(console.serve(stop.clone()));
        Some(Console { env, stop, base, browser })
    }

    pub(crate) async fn goto(&self, path: &str) {
        self.browser.goto(&format!("{}{path}", self.base)).await;
    }

    pub(crate) async fn close(self) {
        self.browser.close().await;
        self.stop.cancel();
    }
}

/// The roles that move work, without a second console.
fn work_roles() -> [Role; 4] {
    [Role::Intake, Role::Invocation, Role::Relay, Role::Collector]
}

fn request_in_chat(id: &str, chat: &str) -> Value {
    let mut request = sample_request_json(id, "docs_agent", "en");
    request["callback"]["replyToChatId"] = chat.into();
    request
}

#[tokio::test]
async fn the_demo_chain_is_listed_filtered_to_and_opened_with_its_timeline_briefs_and_reply() {
    let Some(console) = Console::open("run-page").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    env.apply_example_profiles().await;
    let fleet = env.start(&work_roles());
    let mut replies = env.replies().await;
    env.send_request(&request_in_chat("web-chain", "wxid_console_chat")).await;
    let reply = until_reply(&mut replies, WAIT).await.pop().unwrap();
    env.send_request(&request_in_chat("web-other", "wxid_other_chat")).await;
    until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(reply["status"], "completed");
    let run = env.run_of("web-chain").await.to_string();
    let other = env.run_of("web-other").await.to_string();

    // The list: both runs, newest first, each with its chain.
    console.goto("/runs").await;
    let row = format!("#runs tr[data-run=\"{run}\"]");
    browser.wait_for(&row).await;
    assert_eq!(browser.attrs("#runs tr[data-run]", "data-run").await, vec![other.clone(), run.clone()], "newest first");
    assert_eq!(browser.attrs(&row, "data-status").await, vec!["completed"]);
    assert_eq!(browser.texts(&format!("{row} .chain")).await, vec!["writer → editor → finalizer"]);
    for cell in [".tokens", ".duration", ".age"] {
        let text = browser.texts(&format!("{row} {cell}")).await;
        assert!(text.len() == 1 && !text[0].trim().is_empty(), "{cell} is shown: {text:?}");
    }

    // Filtered to its chat (and its status and target), only it is left.
    let chat = browser.wait_for("#filters input[name=chat]").await;
    chat.send_keys("wxid_console_chat").await.unwrap();
    browser.wait_for("#filters input[name=target]").await.send_keys("docs_agent").await.unwrap();
    browser.wait_for("#filters select[name=status] option[value=completed]").await.click().await.unwrap();
    browser.click("#filters button[type=submit]").await;
    eventually(WAIT, "the filtered list", || async {
        let url = browser.url().await;
        (url.contains("chat=wxid_console_chat")
            && browser.attrs("#runs tr[data-run]", "data-run").await == vec![run.clone()])
        .then_some(())
    })
    .await;

    // The run page: three agents on the timeline, the briefs, the reply's parts.
    browser.click(&format!("{row} a.run-link")).await;
    browser.wait_for("#timeline li.event").await;
    assert!(browser.url().await.ends_with(&format!("/runs/{run}")), "{}", browser.url().await);
    let agents = browser.attrs("#timeline li.event", "data-agent").await;
    for agent in ["writer", "editor", "finalizer"] {
        assert!(agents.iter().any(|a| a == agent), "{agent} has a lane on the timeline: {agents:?}");
    }
    let kinds = browser.attrs("#timeline li.event", "data-kind").await;
    assert_eq!(kinds.first().map(String::as_str), Some(JournalEvent::RunCreated.as_str()), "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some(JournalEvent::RunCompleted.as_str()), "{kinds:?}");
    let editor_brief = browser.wait_for("#briefs article.brief[data-agent=editor]").await;
    let heading = editor_brief
        .find(fantoccini::Locator::Css("h1"))
        .await
        .expect("the brief is rendered from markdown")
        .text()
        .await
        .unwrap();
    assert_eq!(heading, "Handoff Brief");
    assert!(editor_brief.text().await.unwrap().contains("Edit the draft"));
    let transcripts = browser.attrs("#transcripts details.invocation", "data-agent").await;
    assert!(["writer", "editor", "finalizer"].iter().all(|a| transcripts.iter().any(|t| t == a)), "{transcripts:?}");
    let statuses = browser.all("#bridge-messages li.bridge-message[data-type=status]").await;
    assert_eq!(statuses.len(), 3, "accepted, running, completed");
    let parts = browser.texts("#bridge-messages li.bridge-message[data-type=reply] ol.parts > li").await;
    assert_eq!(parts.len(), reply["parts"].as_array().unwrap().len(), "{parts:?}");
    assert!(parts[0].contains("Deadline: signed forms by Wednesday."), "{parts:?}");
    let buttons = browser.eval("return [document.getElementById('cancel-button').disabled, document.getElementById('retry-button').disabled];").await;
    assert_eq!(buttons, serde_json::json!([true, true]), "a completed run can be neither cancelled nor retried");
    browser.wait_for("#usage").await;
    browser.wait_for("#workspace").await;
    browser.wait_for("#request").await;
    browser.screenshot("run-page").await;
    console.close().await;
}

/// A writer that drafts, then "thinks" for a long while before going on.
fn slow_writer() -> String {
    let writer = profile(
        "writer",
        &["workspace_read", "workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "First draft." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Second draft." }, delay_ms = 15000 }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")
}

#[tokio::test]
async fn the_cancel_button_stops_a_slow_run_and_the_bridge_is_told_cancelled() {
    let Some(mut console) = Console::open("cancel").await else { return };
    console.env.settings.shutdown_grace = Duration::from_secs(1);
    let (env, browser) = (&console.env, &console.browser);
    env.apply_profiles(&slow_writer()).await;
    let fleet = env.start(&work_roles());
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("web-cancel", "docs_agent", "en")).await;
    let accepted = next_json(&mut replies, WAIT).await;
    assert_eq!(accepted["status"], "accepted");
    let run = eventually(WAIT, "the run started", || async {
        let c = env.db().await;
        baton_store::requests::get(&c, "web-cancel").await.unwrap().and_then(|r| r.run_id)
    })
    .await;

    console.goto("/runs").await;
    browser.wait_for(&format!("#runs tr[data-run=\"{run}\"][data-status=running]")).await;
    browser.wait_for("[data-refresh]").await;
    console.goto(&format!("/runs/{run}")).await;
    browser.wait_for("#timeline li.event").await;
    browser.click("form#cancel #cancel-button").await;
    let messages = until_reply(&mut replies, WAIT).await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled", "{messages:?}");
    assert_eq!(reply["handoffId"], "web-cancel");
    browser.wait_for_text(".status.big", "cancelled", true).await;
    browser.screenshot("cancel").await;
    fleet.stop().await;
    console.close().await;
}

#[tokio::test]
async fn a_manual_handoff_is_answered_by_pasting_the_result_and_script_in_the_intent_stays_text() {
    let Some(console) = Console::open("paste-result").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    env.apply_example_profiles().await;
    let fleet = env.start(&work_roles());
    let mut replies = env.replies().await;
    let mut request = sample_request_json("web-manual", "manual", "en");
    request["userIntent"] = "Draft the notice <script>window.pwned = 1</script> for Friday.".into();
    env.send_request(&request).await;
    assert_eq!(next_json(&mut replies, WAIT).await["status"], "accepted");

    console.goto("/waiting").await;
    browser.click("tr[data-handoff=\"web-manual\"] a").await;
    let prompt = browser.wait_for("pre#prompt").await.text().await.unwrap();
    assert!(prompt.contains("<script>window.pwned = 1</script>"), "the intent is shown as text: {prompt}");
    assert_eq!(browser.eval("return typeof window.pwned;").await, "undefined", "the intent's script did not run");
    browser.wait_for("button#copy-prompt").await;
    let result = "Notice: maintenance on Friday from 10pm to midnight.";
    browser.wait_for("form#paste-result textarea[name=result]").await.send_keys(result).await.unwrap();
    browser.click("form#paste-result button[type=submit]").await;
    let messages = until_reply(&mut replies, WAIT).await;
    let reply = messages.last().unwrap();
    assert_eq!((reply["status"].as_str(), reply["text"].as_str()), (Some("completed"), Some(result)), "{messages:?}");
    browser.screenshot("paste-result").await;
    fleet.stop().await;
    console.close().await;
}

#[tokio::test]
async fn a_refused_request_is_shown_with_its_reason_offered_no_replay_and_discarded() {
    let Some(console) = Console::open("dead-letter").await else { return };
    let (env, browser) = (&console.env, &console.browser);
    let (requests, dead) = (env.queue(Queue::BridgeRequests), env.queue(Queue::Dead));
    let intake = env.start(&[Role::Intake]);
    env.send_raw(b"not json <b>at all</b>", None).await;
    eventually(WAIT, "intake dead-lettered the body", || async {
        (env.publisher.ready_count(&dead).await.unwrap() == 1).then_some(())
    })
    .await;
    intake.stop().await;

    console.goto("/dead").await;
    let row = browser.wait_for("tr[data-dead]").await;
    let queue = row.attr("data-queue").await.unwrap().unwrap_or_default();
    assert_eq!(queue, requests, "the original queue, as the fleet names it");
    let reason = browser.texts("tr[data-dead] .reason").await;
    assert!(reason.len() == 1 && reason[0].contains("not JSON"), "the reason is shown: {reason:?}");
    assert_eq!(browser.texts("tr[data-dead] pre.body").await, vec!["not json <b>at all</b>"], "the body, escaped");
    // Replayed, intake would refuse it again: no Replay is offered.
    assert!(browser.all("tr[data-dead] form.replay").await.is_empty());
    assert_eq!(browser.attrs("tr[data-dead]", "data-replay").await, vec!["withheld"]);
    browser.screenshot("dead-letter").await;
    browser.click("tr[data-dead] form.discard button").await;
    eventually(WAIT, "the letter is gone", || async {
        (env.publisher.ready_count(&dead).await.unwrap() == 0).then_some(())
    })
    .await;
    assert_eq!(env.publisher.ready_count(&requests).await.unwrap(), 0, "nothing went back to intake");
    console.goto("/dead").await;
    browser.wait_for("body").await;
    assert!(browser.all("tr[data-dead]").await.is_empty(), "the discarded letter left the list");
    console.close().await;
}

/// Chromium resolves `attacker.example` to this machine, as a name an
/// attacker pointed here would (DNS rebinding), and tries no HTTPS first.
const ATTACKER_NAME: [&str; 2] =
    ["--host-resolver-rules=MAP attacker.example 127.0.0.1", "--disable-features=HttpsUpgrades"];

#[tokio::test]
async fn another_sites_form_and_a_name_pointed_at_the_console_are_refused() {
    let Some(console) = Console::open_with("cross-site", None, &ATTACKER_NAME).await else { return };
    let (env, browser) = (&console.env, &console.browser);
    let dead = env.queue(Queue::Dead);
    let headers =
        vec![("x-baton-error", "not JSON".to_string()), ("x-baton-source-queue", "baton.bridge.requests".into())];
    env.publisher.publish(&Outgoing { queue: &dead, body: b"keep me", headers, ..Default::default() }).await.unwrap();
    let count = || async { env.publisher.ready_count(&dead).await.unwrap() };
    eventually(WAIT, "the dead letter is there", || async { (count().await == 1).then_some(()) }).await;
    // The console's CSRF token, as a page that could read the console would have it.
    console.goto("/dead").await;
    let csrf = browser.wait_for("#discard-all input[name=csrf]").await.attr("value").await.unwrap().unwrap();

    // Under the attacker's name the console shows nothing, its token least of all.
    let port = console.base.rsplit(':').next().unwrap().to_string();
    browser.goto(&format!("http://attacker.example:{port}/dead")).await;
    let refused = browser.wait_for("#error").await.text().await.unwrap();
    assert!(refused.contains(&format!("not to `attacker.example:{port}`")), "{refused}");
    assert!(browser.all("input[name=csrf]").await.is_empty(), "no CSRF token under another name");

    // The attacker's own page posts the console's form, token included.
    let form = format!(
        r#"<!doctype html><form id="steal" method="post" action="{}/dead/discard-all">
           <input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="queue" value="">
           <button id="go" type="submit">Win a prize</button></form>"#,
        console.base
    );
    let page = axum::Router::new().route("/", axum::routing::get(move || async move { axum::response::Html(form) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let attacker = format!("http://attacker.example:{}/", listener.local_addr().unwrap().port());
    let server = tokio::spawn(async move { axum::serve(listener, page).await.unwrap() });
    browser.goto(&attacker).await;
    browser.click("#go").await;
    let said = browser.wait_for_text("#error", "This form was sent from", false).await.text().await.unwrap();
    assert!(said.contains("refused and changed nothing"), "{said}");
    assert_eq!(count().await, 1, "nothing was discarded");
    browser.screenshot("cross-site").await;
    server.abort();
    console.close().await;
}

#[tokio::test]
async fn an_error_page_shows_a_tag_from_its_url_as_text_and_the_browser_stays() {
    let Some(console) = Console::open("error-page").await else { return };
    let browser = &console.browser;
    let tag = "%3Cmeta%20http-equiv%3D%22refresh%22%20content%3D%220%3Burl%3Dhttp%3A%2F%2Fattacker.example%2F%22%3E";
    console.goto(&format!("/runs/{tag}")).await;
    let shown = browser.wait_for("#error").await.text().await.unwrap();
    assert!(shown.contains(r#"<meta http-equiv="refresh" content="0;url=http://attacker.example/">"#), "{shown}");
    assert!(browser.url().await.starts_with(&console.base), "no refresh was followed: {}", browser.url().await);
    assert!(browser.all("meta[http-equiv]").await.is_empty(), "the tag is text, not an element");
    browser.screenshot("error-page").await;
    console.close().await;
}

#[tokio::test]
async fn a_login_cookie_is_out_of_a_scripts_reach_and_logging_out_ends_the_session() {
    let Some(console) = Console::open_with("login", Some("s3cret"), &[]).await else { return };
    let (env, browser) = (&console.env, &console.browser);
    console.goto("/runs").await;
    browser.wait_for("form#login input[name=token]").await.send_keys("s3cret").await.unwrap();
    browser.click("form#login button[type=submit]").await;
    browser.wait_for("#filters").await;
    let cookie = browser.client.get_named_cookie("baton_session").await.expect("the session cookie");
    assert_eq!((cookie.http_only(), format!("{:?}", cookie.same_site())), (Some(true), "Some(Strict)".into()));
    assert_ne!(cookie.secure(), Some(true), "plain HTTP on loopback: not Secure");
    assert_eq!(browser.eval("return document.cookie;").await, "", "no script of the page can read it");
    let id_hash = baton_domain::console::session::id_hash(cookie.value());
    let live = "SELECT count(*) FROM console_sessions WHERE id_hash = $1 AND revoked_at IS NULL";
    assert_eq!(env.scalar_i64(live, &[&id_hash]).await, 1, "the session is in Postgres");

    browser.click("form.logout button").await;
    browser.wait_for("form#login").await;
    assert_eq!(env.scalar_i64(live, &[&id_hash]).await, 0, "logging out revoked it");
    browser.client.add_cookie(cookie.clone()).await.unwrap();
    console.goto("/runs").await;
    browser.wait_for_text("main", "Your session has ended", false).await;
    browser.screenshot("login").await;
    console.close().await;
}

/// The harness itself: a page whose element appears late is waited for,
/// read and photographed.
#[tokio::test]
async fn the_browser_harness_waits_for_late_elements_and_takes_screenshots() {
    let app = axum::Router::new().route("/", axum::routing::get(|| async { axum::response::Html(HARNESS_PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let Some(browser) = Browser::open("harness").await else { return };
    browser.goto(&url).await;
    assert_eq!(browser.texts("#runs .chain").await, vec!["writer → editor"]);
    let late = browser.wait_for("#late").await;
    assert_eq!(late.text().await.unwrap(), "late <script>");
    let shot = browser.screenshot("harness").await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 1000, "{} is a real PNG", shot.display());
    browser.close().await;
    server.abort();
}

const HARNESS_PAGE: &str = r#"<!doctype html><html><body>
<table id="runs"><tr data-run="r1"><td class="chain">writer → editor</td></tr></table>
<script>setTimeout(() => { const p = document.createElement("p"); p.id = "late"; p.textContent = "late <script>"; document.body.append(p); }, 400);</script>
</body></html>"#;
