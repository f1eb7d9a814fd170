//! The console cannot be borrowed (issue 22, part 2): it answers only to its
//! own names (DNS rebinding), a POST must come from its own pages, error
//! pages and briefs escape what a URL or a user wrote, a filter that does not
//! read is a 400 (never a panic), and ids are one path segment each.

use std::time::Duration;

use baton_bus::publish::Outgoing;
use baton_domain::console::origin::PublicUrl;
use baton_domain::fleet::Queue;
use baton_tests::{eventually, next_json, profile, sample_request_json, ServedConsole, TestEnv};
use reqwest::StatusCode;

const WAIT: Duration = Duration::from_secs(30);

/// The value of the hidden `name` input in a page.
fn hidden(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name} field in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// GETs `path` naming `host` in `Host`.
async fn get_as(console: &ServedConsole, path: &str, host: &str) -> (StatusCode, String) {
    let response = console.client().get(format!("{}{path}", console.base)).header("host", host).send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

async fn dead_count(env: &TestEnv) -> u32 {
    env.publisher.ready_count(&env.queue(Queue::Dead)).await.unwrap()
}

/// One dead letter in this test's `baton.dead`, as if intake had put it there.
async fn one_dead_letter(env: &TestEnv) {
    let dead = env.queue(Queue::Dead);
    let headers =
        vec![("x-baton-error", "not JSON".to_string()), ("x-baton-source-queue", "baton.bridge.requests".into())];
    env.publisher.publish(&Outgoing { queue: &dead, body: b"not json", headers, ..Default::default() }).await.unwrap();
    eventually(WAIT, "the dead letter is there", || async { (dead_count(env).await == 1).then_some(()) }).await;
}

#[tokio::test]
async fn a_page_under_another_name_is_refused_and_its_token_never_shown() {
    let env = TestEnv::new().await;
    one_dead_letter(&env).await;
    let console = env.serve_console(None).await;
    let port = console.authority().rsplit(':').next().unwrap().to_string();

    let (status, page) = get_as(&console, "/dead", "attacker.example:8080").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!page.contains("name=\"csrf\""), "no CSRF token for a page under another name: {page}");
    assert!(page.contains("not to `attacker.example:8080`"), "the page says why: {page}");
    for path in ["/runs", "/login", "/assets/console.js", "/fleet"] {
        assert_eq!(get_as(&console, path, "attacker.example:8080").await.0, StatusCode::FORBIDDEN, "{path}");
    }
    for other in ["localhost.attacker.example", &format!("127.0.0.1.attacker.example:{port}"), "10.1.2.3:8080"] {
        assert_eq!(get_as(&console, "/dead", other).await.0, StatusCode::FORBIDDEN, "{other}");
    }
    let (_, escaped) = get_as(&console, "/runs", "<b>x</b>").await;
    assert!(!escaped.contains("<b>x</b>"), "what the request named is escaped: {escaped}");
    for own in [console.authority().to_string(), format!("localhost:{port}"), "[::1]:9".into(), "LOCALHOST".into()] {
        assert_eq!(get_as(&console, "/dead", &own).await.0, StatusCode::OK, "{own}");
    }

    // A public name is answered to only once BATON_ADMIN_URL names it.
    let public = env
        .serve_console_with(None, |s| s.admin_url = Some(PublicUrl::parse("https://console.example.org").unwrap()))
        .await;
    assert_eq!(get_as(&public, "/runs", "console.example.org").await.0, StatusCode::OK);
    assert_eq!(get_as(&public, "/runs", "console.example.org:443").await.0, StatusCode::OK);
    assert_eq!(get_as(&console, "/runs", "console.example.org").await.0, StatusCode::FORBIDDEN);
    assert_eq!(get_as(&public, "/runs", "other.example.org").await.0, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_post_from_another_origin_or_that_says_none_is_refused_and_changes_nothing() {
    let env = TestEnv::new().await;
    one_dead_letter(&env).await;
    let console = env.serve_console(None).await;
    let (_, page) = get_as(&console, "/dead", console.authority()).await;
    let csrf = hidden(&page, "csrf");
    let form = [("csrf", csrf.as_str()), ("queue", "")];
    let url = format!("{}/dead/discard-all", console.base);
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();

    let cross = plain.post(&url).header("origin", "http://attacker.example:8080").form(&form).send().await.unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN, "another site's form, with a valid token");
    let said = cross.text().await.unwrap();
    assert!(said.contains("This form was sent from") && said.contains("attacker.example:8080"), "{said}");
    let other_port =
        format!("http://127.0.0.1:{}", console.authority().rsplit(':').next().unwrap().parse::<u16>().unwrap() + 1);
    let near = plain.post(&url).header("origin", other_port).form(&form).send().await.unwrap();
    assert_eq!(near.status(), StatusCode::FORBIDDEN, "another port is another origin");
    let site = plain.post(&url).header("sec-fetch-site", "cross-site").form(&form).send().await.unwrap();
    assert_eq!(site.status(), StatusCode::FORBIDDEN);
    let unsaid = plain.post(&url).form(&form).send().await.unwrap();
    assert_eq!(unsaid.status(), StatusCode::FORBIDDEN, "a POST must say where it comes from");
    assert!(unsaid.text().await.unwrap().contains("Origin"), "and the page says how");
    let login = plain.post(format!("{}/login", console.base)).form(&[("token", "x")]).send().await.unwrap();
    assert_eq!(login.status(), StatusCode::FORBIDDEN, "the login form too");
    // Nothing was discarded: the letter is ready again once the listing's
    // channel (which held it unacked for a moment) has handed it back.
    eventually(Duration::from_secs(10), "the dead letter is still there", || async {
        (dead_count(&env).await == 1).then_some(())
    })
    .await;

    let same_site = plain.post(&url).header("sec-fetch-site", "same-origin").form(&form).send().await.unwrap();
    assert_eq!(same_site.status(), StatusCode::SEE_OTHER, "the console's own form (a browser without Origin)");
    assert_eq!(dead_count(&env).await, 0);
}

#[tokio::test]
async fn an_error_page_shows_markup_in_the_url_as_text() {
    let env = TestEnv::new().await;
    let console = env.serve_console(None).await;
    let tag = "%3Cmeta%20http-equiv%3D%22refresh%22%20content%3D%220%3Burl%3Dhttp%3A%2F%2Fattacker.example%2F%22%3E";
    for path in [format!("/runs/{tag}"), format!("/handoffs/{tag}")] {
        let (status, page) = get_as(&console, &path, console.authority()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(page.contains("&lt;meta http-equiv=") && !page.contains("<meta http-equiv"), "{path}: {page}");
    }
}

#[tokio::test]
async fn an_age_past_what_a_time_holds_is_a_400_that_says_why() {
    let env = TestEnv::new().await;
    let console = env.serve_console(None).await;
    for since in ["9223372036854775s", "106751991167301d", "99999999999999999999d"] {
        let response = console.client().get(format!("{}/runs?since={since}", console.base)).send().await;
        let response = response.unwrap_or_else(|e| panic!("since={since}: the console did not answer: {e}"));
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{since}");
        let page = response.text().await.unwrap();
        assert!(page.contains(&format!("`{since}` is not an age")), "{page}");
    }
    let fine = console.client().get(format!("{}/runs?since=1h", console.base)).send().await.unwrap();
    assert_eq!(fine.status(), StatusCode::OK, "the console still answers");
}

/// Reads the bridge's messages until one of `handoff` is a `kind` (status, reply) with `status`.
async fn heard(replies: &mut lapin::Consumer, handoff: &str, kind: &str, status: &str) -> serde_json::Value {
    loop {
        let message = next_json(replies, WAIT).await;
        if message["handoffId"] == handoff && message["type"] == kind && message["status"] == status {
            return message;
        }
    }
}

/// A writer that keeps its run live for a while (so a form aimed at it
/// would find it running).
fn slow_writer() -> String {
    let slow = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "x" }, delay_ms = 4000 }"#;
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    format!("[routes]\ndocs_agent = \"writer\"\n\n{}", profile("writer", &tools, "", &[slow, slow, slow]))
}

#[tokio::test]
async fn handoff_ids_with_slashes_and_dots_stay_one_segment_and_their_forms_act_on_them() {
    let env = TestEnv::new().await;
    env.apply_profiles(&slow_writer()).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    let in_chat = |id: &str, target: &str| {
        let mut request = sample_request_json(id, target, "en");
        request["callback"]["replyToChatId"] = format!("chat-{id}").into();
        request
    };
    env.send_request(&in_chat("seg-victim", "docs_agent")).await;
    let victim = eventually(WAIT, "the victim's run started", || async {
        baton_store::requests::get(&env.db().await, "seg-victim").await.unwrap().and_then(|r| r.run_id)
    })
    .await;
    // An id that, left with its slashes, aims the handoff page's forms at the victim's run.
    let aimed = format!("../runs/{victim}");
    for id in ["seg/slash", aimed.as_str()] {
        env.send_request(&in_chat(id, "manual")).await;
        heard(&mut replies, id, "status", "accepted").await;
    }
    let console = env.serve_console(None).await;
    let (_, waiting) = get_as(&console, "/waiting", console.authority()).await;
    let encoded = format!("%2E%2E%2Fruns%2F{victim}");
    assert!(waiting.contains("href=\"/handoffs/seg%2Fslash\""), "{waiting}");
    assert!(waiting.contains(&format!("href=\"/handoffs/{encoded}\"")), "{waiting}");

    let (status, page) = get_as(&console, "/handoffs/seg%2Fslash", console.authority()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let result = [("csrf", hidden(&page, "csrf")), ("result", "Done by hand.".into())];
    let sent = console.client().post(format!("{}/handoffs/seg%2Fslash/result", console.base)).form(&result).send();
    assert_eq!(sent.await.unwrap().status(), StatusCode::SEE_OTHER);
    heard(&mut replies, "seg/slash", "reply", "completed").await;

    // The cancel form's action, followed as a client resolves it, cancels this handoff and no run of another.
    let (status, page) = get_as(&console, &format!("/handoffs/{encoded}"), console.authority()).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let form = &page[page.find("id=\"cancel-handoff\"").expect("the cancel form")..];
    let action = &form[form.find("action=\"").unwrap() + 8..];
    let action = &action[..action.find('"').unwrap()];
    assert_eq!(action, format!("/handoffs/{encoded}/cancel"));
    let cancel = [("csrf", hidden(&page, "csrf")), ("reason", "not wanted".into())];
    let done = console.client().post(format!("{}{action}", console.base)).form(&cancel).send().await.unwrap();
    assert_eq!(done.status(), StatusCode::SEE_OTHER);
    heard(&mut replies, &aimed, "reply", "cancelled").await;
    let run = baton_store::runs::get(&env.db().await, victim).await.unwrap().unwrap();
    assert!(!run.status.is_terminal(), "the victim's run goes on: {:?}", run.status);
    fleet.stop().await;
}

#[tokio::test]
async fn a_link_to_another_host_in_a_users_intent_is_dropped_from_its_brief() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let mut request = sample_request_json("guard-links", "docs_agent", "en");
    request["userIntent"] =
        "See [the form](//attacker.example/steal) and [this](/\\attacker.example/x) and [ok](https://example.org/a)"
            .into();
    assert_eq!(env.run(&request).await.last().unwrap()["status"], "completed");
    let run = env.run_of("guard-links").await;
    let console = env.serve_console(None).await;
    let (status, page) = get_as(&console, &format!("/runs/{run}"), console.authority()).await;
    assert_eq!(status, StatusCode::OK);
    let briefs = &page[page.find("id=\"briefs\"").expect("the briefs")..];
    let briefs = &briefs[..briefs.find("</section>").unwrap()];
    assert!(!briefs.contains("href=\"//attacker.example") && !briefs.contains("attacker.example/x\""), "{briefs}");
    assert!(briefs.contains("href=\"#\"") && briefs.contains("href=\"https://example.org/a\""), "{briefs}");
}
