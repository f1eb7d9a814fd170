//! Status callbacks a bridge can trust: signed the Standard Webhooks way
//! (checked with the reference library, not Baton's code), sent only to
//! allowed origins, never redirected, sent side by side so one slow
//! endpoint holds up only its own handoff, and never logged or recorded
//! with their query string.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::protocol::callback::webhook_id;
use baton_domain::protocol::request::HandoffEvent;
use baton_tests::webhook::{verify, Arrival, Receiver};
use baton_tests::{
    callbacks_toml, eventually, profile, sample_request_json, until_reply, TestEnv, CALLBACK_SECRET,
    CALLBACK_SECRET_ENV,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// One quick agent, and callbacks allowed to `origins` (none: no `[callbacks]`).
fn profiles(origins: &[&str]) -> String {
    let solo = profile(
        "solo",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    let callbacks = if origins.is_empty() { String::new() } else { callbacks_toml(origins) };
    format!("[routes]\ndocs_agent = \"solo\"\n\n{callbacks}\n{solo}")
}

/// A request in its own chat, with this status URL.
fn request(id: &str, status_url: &str) -> Value {
    let mut request = sample_request_json(id, "docs_agent", "en");
    request["callback"]["statusUrl"] = status_url.into();
    request["conversationKey"] = format!("chat-{id}").into();
    request
}

/// The `callback_failed` notes of a handoff.
async fn failures(env: &TestEnv, handoff: &str) -> Vec<String> {
    let rows = env
        .db()
        .await
        .query(
            "SELECT message FROM handoff_events WHERE handoff_id = $1 AND type = $2 ORDER BY id",
            &[&handoff, &HandoffEvent::CallbackFailed.as_str()],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get::<_, Option<String>>(0).unwrap_or_default()).collect()
}

async fn queued(env: &TestEnv, handoff: &str) -> i64 {
    env.scalar_i64("SELECT count(*) FROM callbacks WHERE handoff_id = $1", &[&handoff]).await
}

/// The seqs of these arrivals in order, each repeat of the one before dropped.
fn seqs(arrivals: &[Arrival]) -> Vec<i64> {
    let mut seqs: Vec<i64> = arrivals.iter().map(Arrival::seq).collect();
    seqs.dedup();
    seqs
}

#[tokio::test]
async fn status_callbacks_are_signed_so_the_reference_library_accepts_them_and_refuses_a_tampered_body() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&[&receiver.origin])).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request("signed-1", &format!("{}/hook/flaky?token=q", receiver.origin))).await;
    until_reply(&mut replies, WAIT).await;
    let arrivals = eventually(WAIT, "three statuses, the first after two failures", || async {
        let got = receiver.arrivals_at("flaky");
        (got.len() == 5).then_some(got)
    })
    .await;
    fleet.stop().await;

    for arrival in &arrivals {
        arrival.verify(CALLBACK_SECRET).unwrap_or_else(|e| panic!("the reference library refused {arrival:?}: {e}"));
        assert_eq!(arrival.header("content-type"), "application/json");
    }
    assert_eq!(arrivals.iter().map(Arrival::seq).collect::<Vec<_>>(), [1, 1, 1, 2, 3]);
    let ids: Vec<String> = arrivals.iter().map(|a| a.header("webhook-id")).collect();
    assert!(ids[..3].iter().all(|id| *id == webhook_id("signed-1", 1)), "a retry keeps its webhook-id: {ids:?}");
    assert_eq!((ids[3].clone(), ids[4].clone()), (webhook_id("signed-1", 2), webhook_id("signed-1", 3)));

    let last = arrivals.last().unwrap();
    let body = String::from_utf8(last.body.to_vec()).unwrap();
    assert!(body.contains("\"completed\""), "{body}");
    let tampered = body.replace("\"completed\"", "\"cancelled\"");
    assert!(verify(CALLBACK_SECRET, &last.headers, tampered.as_bytes()).is_err(), "a tampered body is refused");
    let mut replayed = last.headers.clone();
    replayed.insert("webhook-id", ids[0].parse().unwrap());
    assert!(verify(CALLBACK_SECRET, &replayed, &last.body).is_err(), "a signature does not carry over to another id");
    let other = baton_domain::protocol::callback::sign::Secret::encode(&[9; 32]);
    assert!(verify(&other, &last.headers, &last.body).is_err(), "another secret does not verify");
}

#[tokio::test]
async fn a_callback_url_off_the_allow_list_or_without_one_is_refused_with_the_reason_and_never_posted() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&["http://127.0.0.1:1"])).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request("off-list", &format!("{}/hook/ok?token=off-list-secret", receiver.origin))).await;
    assert_eq!(
        until_reply(&mut replies, WAIT).await.last().unwrap()["status"],
        "completed",
        "a refused callback never holds up a run"
    );
    // The relay reads the allow-list when it takes a callback (every poll):
    // let it refuse this one before the list changes.
    eventually(WAIT, "the off-list callbacks refused", || async {
        (!failures(&env, "off-list").await.is_empty()).then_some(())
    })
    .await;
    env.apply_profiles(&profiles(&[])).await;
    env.send_request(&request("no-list", &format!("{}/hook/ok?token=no-list-secret", receiver.origin))).await;
    until_reply(&mut replies, WAIT).await;
    for handoff in ["off-list", "no-list"] {
        eventually(WAIT, "the handoff's callbacks refused and dropped", || async {
            (!failures(&env, handoff).await.is_empty() && queued(&env, handoff).await == 0).then_some(())
        })
        .await;
    }
    fleet.stop().await;

    let off = failures(&env, "off-list").await;
    let origin = &receiver.origin;
    assert!(off[0].contains(&format!("origin {origin} is not in [callbacks] allowed_origins")), "{off:?}");
    assert!(off[0].contains(&format!("{origin}/hook/ok")), "the note names the URL without its query: {off:?}");
    let none = failures(&env, "no-list").await;
    assert!(none[0].contains("allows no callback origin"), "{none:?}");
    for note in off.iter().chain(&none) {
        assert!(!note.contains("secret") && !note.contains("token"), "a query string was recorded: {note}");
    }
    assert!(receiver.arrivals().is_empty(), "nothing was POSTed: {:?}", receiver.arrivals());
}

#[tokio::test]
async fn a_redirecting_callback_endpoint_is_not_followed() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&[&receiver.origin])).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&request("moved-1", &format!("{}/moved?token=moved-secret", receiver.origin))).await;
    until_reply(&mut replies, WAIT).await;
    let notes = eventually(WAIT, "each status given up at its redirect", || async {
        let notes = failures(&env, "moved-1").await;
        (notes.len() == 3 && queued(&env, "moved-1").await == 0).then_some(notes)
    })
    .await;
    fleet.stop().await;
    for note in &notes {
        assert!(note.contains("302 Found: a redirect, which is not followed") && note.contains("/moved"), "{note}");
        assert!(!note.contains("moved-secret"), "{note}");
    }
    assert_eq!(seqs(&receiver.arrivals_at("moved")), [1, 2, 3]);
    assert!(receiver.arrivals_at("ok").is_empty(), "the redirect was followed");
}

#[tokio::test]
async fn a_slow_endpoint_holds_up_only_its_own_handoff_whose_updates_still_arrive_in_order() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&[&receiver.origin])).await;
    let fleet = env.start_all();
    env.send_request(&request("slow-a", &format!("{}/hook/slow", receiver.origin))).await;
    eventually(WAIT, "A's first status held by its endpoint", || async {
        (!receiver.arrivals_at("slow").is_empty()).then_some(())
    })
    .await;
    env.send_request(&request("fast-b", &format!("{}/hook/ok", receiver.origin))).await;
    let fast = eventually(WAIT, "B's three statuses", || async {
        let got = receiver.arrivals_at("ok");
        (got.len() == 3).then_some(got)
    })
    .await;
    let held = receiver.arrivals_at("slow");
    // B's went by A's open POST: sent one at a time, they would wait for it
    // to time out (after 10 s). A's later statuses wait behind it.
    let b_after_a = fast[2].at.duration_since(held[0].at);
    eprintln!("B's three callbacks arrived {b_after_a:?} after A's endpoint began holding its first");
    assert!(b_after_a < Duration::from_secs(8), "B's callbacks waited for A's endpoint: {b_after_a:?}");
    assert_eq!(held.len(), 1, "A's first POST is still being held: {:?}", seqs(&held));
    assert_eq!(seqs(&fast), [1, 2, 3]);

    receiver.release();
    let slow = eventually(WAIT, "A's three statuses once its endpoint answers", || async {
        let got = receiver.arrivals_at("slow");
        (seqs(&got).len() == 3).then_some(got)
    })
    .await;
    fleet.stop().await;
    assert_eq!(seqs(&slow), [1, 2, 3], "one handoff's statuses arrive in order");
    assert!(slow.iter().chain(&fast).all(|a| a.verify(CALLBACK_SECRET).is_ok()));
}

#[tokio::test]
async fn no_callback_query_string_reaches_the_relays_log_the_events_or_the_stored_errors() {
    let receiver = Receiver::start().await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&[&receiver.origin, "http://127.0.0.1:9"])).await;
    let relay = env.spawn_baton_env(
        "relay",
        "cb-relay",
        &[(CALLBACK_SECRET_ENV, CALLBACK_SECRET), ("BATON_METRICS_ADDR", "127.0.0.1:0")],
    );
    let fleet = env.start(&[Role::Intake, Role::Invocation, Role::Collector]);
    env.send_request(&request("leak-off", "http://127.0.0.1:1/hook?token=LEAK-OFF")).await;
    env.send_request(&request("leak-moved", &format!("{}/moved?token=LEAK-MOVED", receiver.origin))).await;
    env.send_request(&request("leak-down", "http://127.0.0.1:9/status?token=LEAK-DOWN")).await;
    eventually(WAIT, "refused, redirected and unreachable callbacks handled", || async {
        let c = env.db().await;
        let retried = c
            .query_opt("SELECT 1 FROM callbacks WHERE handoff_id = 'leak-down' AND last_error IS NOT NULL", &[])
            .await
            .unwrap();
        let done = failures(&env, "leak-off").await.len() == 1 && failures(&env, "leak-moved").await.len() == 3;
        (done && retried.is_some()).then_some(())
    })
    .await;
    fleet.stop().await;
    drop(relay);

    let c = env.db().await;
    let notes = c.query("SELECT coalesce(string_agg(message, ' | '), '') FROM handoff_events", &[]).await.unwrap()[0]
        .get::<_, String>(0);
    let errors = c.query("SELECT coalesce(string_agg(last_error, ' | '), '') FROM callbacks", &[]).await.unwrap()[0]
        .get::<_, String>(0);
    let log = std::fs::read_to_string(env.log_of("cb-relay")).unwrap();
    assert!(
        log.contains("status callback") && log.contains("/moved"),
        "the relay logged the failures, URLs without their query: {log}"
    );
    assert!(errors.contains("error sending request") || errors.contains("connect"), "{errors}");
    for (what, text) in [("log", &log), ("events", &notes), ("stored errors", &errors)] {
        assert!(!text.contains("LEAK-") && !text.contains("token="), "a query string reached the {what}: {text}");
    }
}
