//! The operator's console over plain HTTP: who may use it, that what users
//! wrote is shown as text, that the runs list tells a run's chain, and that
//! its Cancel button cancels (the browser tests drive the same pages).

use std::time::Duration;

use baton::config::Secret;
use baton::console::Console;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, profile, sample_request_json, until_reply, TestEnv};
use reqwest::{redirect, Client, StatusCode};

const WAIT: Duration = Duration::from_secs(30);

fn client() -> Client {
    Client::builder().redirect(redirect::Policy::none()).build().unwrap()
}

/// The value of the hidden `name` input in a page.
fn hidden(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name} field in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn get(url: &str) -> (StatusCode, String) {
    let response = client().get(url).send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_console_off_loopback_without_a_token_refuses_to_start_and_says_why() {
    let env = TestEnv::new().await;
    let mut settings = env.settings.clone();
    settings.admin_addr = "0.0.0.0:0".parse().unwrap();
    let refused = Console::bind(&settings).await.err().expect("refused").to_string();
    assert!(refused.contains("BATON_ADMIN_TOKEN") && refused.contains("0.0.0.0"), "{refused}");

    let mut process = env.spawn_baton_env("admin", "console-open", &[("BATON_ADMIN_ADDR", "0.0.0.0:0")]);
    let code = process.exit_code(WAIT).await;
    assert_ne!(code, Some(0), "baton up exits non-zero");
    let log = std::fs::read_to_string(env.log_of("console-open")).unwrap();
    assert!(log.contains("without BATON_ADMIN_TOKEN"), "{log}");

    settings.admin_token = Some(Secret::new("s3cret"));
    assert!(Console::bind(&settings).await.is_ok(), "with a token it may bind anywhere");
}

#[tokio::test]
async fn a_wrong_token_is_401_and_a_post_without_the_csrf_token_is_403() {
    let env = TestEnv::new().await;
    let console = env.serve_console(Some("s3cret")).await;
    let runs = format!("{}/runs", console.base);
    let (status, page) = get(&runs).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(page.contains("name=\"token\""), "the login form is shown: {page}");
    let wrong = client().get(&runs).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = client().get(&runs).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(right.status(), StatusCode::OK);

    let (_, login_page) = get(&format!("{}/login", console.base)).await;
    let login_csrf = hidden(&login_page, "csrf");
    let login = |token: &'static str| {
        let form = [("token", token), ("csrf", login_csrf.as_str())];
        console.client().post(format!("{}/login", console.base)).form(&form).send()
    };
    assert_eq!(login("nope").await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let logged_in = login("s3cret").await.unwrap();
    assert_eq!(logged_in.status(), StatusCode::SEE_OTHER);
    let cookie = logged_in.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    assert!(!cookie.contains("s3cret"), "the cookie is not the token: {cookie}");
    let with_cookie = client().get(&runs).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(with_cookie.status(), StatusCode::OK);
    let csrf = hidden(&with_cookie.text().await.unwrap(), "csrf");
    let forged = client().get(&runs).header("cookie", "baton_session=forged").send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::UNAUTHORIZED);

    let cancel = format!("{}/runs/{}/cancel", console.base, uuid::Uuid::now_v7());
    let post =
        |form: Vec<(&'static str, String)>| console.client().post(&cancel).header("cookie", &cookie).form(&form).send();
    assert_eq!(post(vec![("reason", "x".into())]).await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(post(vec![("csrf", "0".repeat(64))]).await.unwrap().status(), StatusCode::FORBIDDEN);
    let no_run = post(vec![("csrf", csrf)]).await.unwrap().status();
    assert_eq!(no_run, StatusCode::NOT_FOUND, "with the CSRF token the action runs (and finds no such run)");
    let unauthenticated = console.client().post(&cancel).form(&[("csrf", "x")]).send().await.unwrap();
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_runs_list_shows_the_demo_chain_and_the_run_page_its_story() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let messages = env.run_request("console-chain").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let run = env.run_of("console-chain").await;
    let console = env.serve_console(None).await;

    let (status, list) = get(&format!("{}/runs?status=completed&target=docs_agent&since=1h", console.base)).await;
    assert_eq!(status, StatusCode::OK);
    let row = &list[list.find(&format!("data-run=\"{run}\"")).expect("the run is listed")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("data-status=\"completed\""), "{row}");
    assert!(row.contains("<td class=\"chain\">writer → editor → finalizer</td>"), "{row}");
    let (_, none) = get(&format!("{}/runs?status=failed", console.base)).await;
    assert!(!none.contains(&run.to_string()), "a filter leaves it out");

    let (status, page) = get(&format!("{}/runs/{run}", console.base)).await;
    assert_eq!(status, StatusCode::OK);
    for agent in ["writer", "editor", "checker", "finalizer"] {
        assert!(
            page.contains("class=\"event c") && page.contains(&format!("data-agent=\"{agent}\" data-kind=")),
            "{agent} has a lane"
        );
    }
    assert!(page.contains("<article class=\"brief\" data-agent=\"editor\">"), "briefs are shown");
    assert_eq!(
        page.matches("class=\"bridge-message\" data-type=\"status\"").count(),
        3,
        "accepted, running, completed"
    );
    assert!(
        page.contains("class=\"bridge-message\" data-type=\"reply\"") && page.contains("<ol class=\"parts\"><li>"),
        "the reply with its parts"
    );
    assert!(page.contains("Ms. Li, Class 3B"), "the reply's text as sent");
    let (_, missing) = get(&format!("{}/runs/{}", console.base, uuid::Uuid::now_v7())).await;
    assert!(missing.contains("no run"), "{missing}");
}

#[tokio::test]
async fn a_script_in_the_intent_is_shown_as_text() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let mut request = sample_request_json("console-xss", "docs_agent", "en");
    request["userIntent"] = "Please write <script>alert('owned')</script> & <b>more</b>".into();
    let messages = env.run(&request).await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let run = env.run_of("console-xss").await;
    let console = env.serve_console(None).await;
    let (status, page) = get(&format!("{}/runs/{run}", console.base)).await;
    assert_eq!(status, StatusCode::OK);
    let intent = &page[page.find("<pre class=\"intent\">").expect("the request section")..];
    let intent = &intent[..intent.find("</pre>").unwrap()];
    assert!(intent.contains("&lt;script&gt;alert(") && intent.contains("&amp; &lt;b&gt;more&lt;"), "escaped: {intent}");
    assert!(!page.contains("<script>alert"), "never as markup");
    assert!(!page.contains("<b>more</b>"));
    let headers = client().get(format!("{}/runs/{run}", console.base)).send().await.unwrap().headers().clone();
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"),
        "no inline script would run: {policy}"
    );
}

#[tokio::test]
async fn cancel_in_the_console_stops_the_run_and_the_bridge_hears_cancelled() {
    let env = TestEnv::new().await;
    let slow = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "x" }, delay_ms = 1500 }"#;
    let writer =
        profile("writer", &["workspace_write", "workspace_commit", "workspace_finish"], "", &[slow, slow, slow, slow]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("console-cancel", "docs_agent", "en")).await;
    let run = eventually(WAIT, "the writer is running", || async {
        let row =
            env.db().await.query_opt("SELECT run_id FROM invocations WHERE status = 'running'", &[]).await.unwrap();
        row.map(|r| r.get::<_, uuid::Uuid>(0))
    })
    .await;
    let console = env.serve_console(None).await;
    let (_, page) = get(&format!("{}/runs/{run}", console.base)).await;
    assert!(page.contains("id=\"cancel-button\" class=\"danger\" >"), "Cancel is enabled while the run is live");
    let form = [("csrf", hidden(&page, "csrf")), ("reason", "stopped from the console".into())];
    let done = console.client().post(format!("{}/runs/{run}/cancel", console.base)).form(&form).send().await.unwrap();
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled");
    assert!(reply["text"].as_str().unwrap().contains("stopped from the console"), "{reply}");
    assert!(env.journal(run).await.contains(&JournalEvent::RunCancelled));
    let (_, after) = get(&format!("{}/runs/{run}", console.base)).await;
    assert!(after.contains("data-type=\"status\"") && after.contains("s-cancelled"), "the page shows it");
}

#[tokio::test]
async fn a_manual_handoff_is_answered_from_the_console_and_the_bridge_gets_the_reply() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("console-manual", "manual", "en")).await;
    assert_eq!(baton_tests::next_json(&mut replies, WAIT).await["status"], "accepted");
    let console = env.serve_console(None).await;

    let (_, waiting) = get(&format!("{}/waiting", console.base)).await;
    assert!(waiting.contains("<tr data-handoff=\"console-manual\" data-kind=\"manual\">"), "{waiting}");
    let (status, page) = get(&format!("{}/handoffs/console-manual", console.base)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("id=\"copy-prompt\"") && page.contains("<pre id=\"prompt\">") && page.contains("How to answer"),
        "{page}"
    );
    let form = [("csrf", hidden(&page, "csrf")), ("result", "Done by hand: the notice is out.".into())];
    let sent = console
        .client()
        .post(format!("{}/handoffs/console-manual/result", console.base))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::SEE_OTHER);
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed");
    assert!(reply["text"].as_str().unwrap().contains("Done by hand: the notice is out."), "{reply}");
    let (_, waiting) = get(&format!("{}/waiting", console.base)).await;
    assert!(!waiting.contains("data-handoff=\"console-manual\""), "no longer waiting");
    let again = console
        .client()
        .post(format!("{}/handoffs/console-manual/result", console.base))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT, "an ended handoff is refused");
}

#[tokio::test]
async fn a_dead_letter_is_listed_escaped_refused_a_replay_that_cannot_help_and_discarded() {
    use baton_domain::fleet::Queue;
    let env = TestEnv::new().await;
    let fleet = env.start(&[baton::roles::Role::Intake]);
    env.send_raw(b"{not json <script>x</script>", None).await;
    env.send_raw(b"[1, 2, 3]", None).await;
    let dead = env.queue(Queue::Dead);
    eventually(WAIT, "both are dead-lettered", || async {
        (env.publisher.ready_count(&dead).await.unwrap() == 2).then_some(())
    })
    .await;
    fleet.stop().await;
    let console = env.serve_console(None).await;

    let (status, page) = get(&format!("{}/dead", console.base)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page.matches("<tr data-dead=").count(), 2, "{page}");
    // The queue as the fleet names it (with this test's prefix), its logical name beside it.
    let requests = env.queue(Queue::BridgeRequests);
    assert!(page.contains(&format!("data-queue=\"{requests}\"")) && page.contains("class=\"reason\""), "{page}");
    assert!(page.contains("baton.bridge.requests</div>"), "{page}");
    assert!(page.contains("&lt;script&gt;x") && !page.contains("<script>x"), "bodies are escaped");
    let id = |page: &str, body: &str| {
        let row = page.split("<tr data-dead=\"").skip(1).find(|row| row.contains(body)).expect("a row");
        row[..row.find('"').unwrap()].to_string()
    };
    let csrf = [("csrf", hidden(&page, "csrf"))];
    // Intake would refuse it again: a Replay posted for it is refused and changes nothing.
    let replayed = console
        .client()
        .post(format!("{}/dead/{}/replay", console.base, id(&page, "not json")))
        .form(&csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), StatusCode::CONFLICT);
    assert!(replayed.text().await.unwrap().contains("intake refused it"), "the page says why");
    let requests = env.queue(Queue::BridgeRequests);
    assert_eq!(env.publisher.ready_count(&requests).await.unwrap(), 0, "nothing went back to intake");
    // A request on its queue, waiting for intake (which is stopped).
    env.send_raw(br#"{"waiting": "for intake"}"#, None).await;
    let (_, fleet_page) = get(&format!("{}/fleet", console.base)).await;
    let row = &fleet_page[fleet_page.find("<tr data-queue=\"baton.bridge.requests\">").unwrap()..];
    assert!(
        row[..row.find("</tr>").unwrap()].contains("<td class=\"depth num\">1</td>"),
        "the fleet page shows the depth"
    );
    for count in
        ["outbox-backlog", "invocations-running", "invocations-parked", "invocations-blocked", "takeovers-hour"]
    {
        assert!(fleet_page.contains(&format!("id=\"{count}\">0<")), "{count} is counted: {fleet_page}");
    }

    let (_, page) = get(&format!("{}/dead", console.base)).await;
    assert_eq!(page.matches("<tr data-dead=").count(), 2);
    let discarded = console
        .client()
        .post(format!("{}/dead/discard-all", console.base))
        .form(&[("csrf", csrf[0].1.as_str()), ("queue", "")])
        .send()
        .await
        .unwrap();
    assert_eq!(discarded.status(), StatusCode::SEE_OTHER);
    assert_eq!(env.publisher.ready_count(&dead).await.unwrap(), 0);
    let (_, page) = get(&format!("{}/dead?done=Discarded%201%20message(s).", console.base)).await;
    assert!(page.contains("Nothing is dead-lettered.") && page.contains("Discarded 1 message(s)."));
}

#[tokio::test]
async fn retry_in_the_console_runs_a_failed_run_again() {
    let env = TestEnv::new().await;
    let write = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "x" } }"#;
    let writer =
        profile("writer", &["workspace_write", "workspace_commit", "workspace_finish"], "", &[write, write, write]);
    env.apply_profiles(&format!(
        "[routes]\ndocs_agent = \"writer\"\n\n[budgets.default]\nmax_model_calls = 1\n\n{writer}"
    ))
    .await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("console-retry", "docs_agent", "en")).await;
    assert_eq!(until_reply(&mut replies, WAIT).await.last().unwrap()["status"], "failed");
    let run = env.run_of("console-retry").await;
    let console = env.serve_console(None).await;
    let (_, page) = get(&format!("{}/runs/{run}", console.base)).await;
    assert!(page.contains("id=\"retry-button\" >"), "Retry is enabled for a failed run");
    let form = [("csrf", hidden(&page, "csrf"))];
    let retried = console.client().post(format!("{}/runs/{run}/retry", console.base)).form(&form).send().await.unwrap();
    assert_eq!(retried.status(), StatusCode::SEE_OTHER);
    let again = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_eq!(again.first().unwrap()["status"], "running", "the bridge hears the run is running again");
    assert!(env.journal(run).await.contains(&JournalEvent::RunRetried));
    let (_, list) = get(&format!("{}/runs", console.base)).await;
    assert!(list.contains("attempt 2"), "the list shows the attempt");
    let refused = console
        .client()
        .post(format!("{}/runs/{}/retry", console.base, uuid::Uuid::now_v7()))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);
}

/// A run whose model answered HTTP 500 until it gave up: the runs list and
/// the run page say so in the endpoint's words, not "an internal error".
#[tokio::test]
async fn a_failed_runs_real_cause_is_on_the_runs_list_and_its_page() {
    use baton_tests::http::{ModelServer, Reply};
    let server = ModelServer::start(vec![Reply::Status(500, None), Reply::Status(500, None)]).await;
    let env = TestEnv::new().await;
    let profile = format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"solo\"\ndescription = \"The solo agent.\"\n\
         tools = [\"workspace_write\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{}\"\n\
         model = \"test-model\"\nmax_attempts = 2\n",
        server.base_url
    );
    env.apply_profiles(&profile).await;
    let messages = env.run_request("console-cause").await;
    assert_eq!(messages.last().unwrap()["error"]["code"], "model_unavailable");
    let run = env.run_of("console-cause").await;
    let console = env.serve_console(None).await;
    let (_, list) = get(&format!("{}/runs?status=failed", console.base)).await;
    let reason = list.split("class=\"reason small\">").nth(1).unwrap_or_default();
    assert!(reason.starts_with("model_unavailable: model call failed after 2 attempts: HTTP 500"), "{list}");
    let (_, page) = get(&format!("{}/runs/{run}", console.base)).await;
    let error = page.split("id=\"run-error\"").nth(1).unwrap_or_default();
    let error = &error[..error.find("</p>").unwrap_or(error.len())];
    assert!(error.contains("HTTP 500") && error.contains("the bridge was told"), "{error}");
    assert!(!error.contains("internal error"), "{error}");
}
