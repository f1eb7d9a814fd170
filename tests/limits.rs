//! Fleet-wide model limits (`[[limits]]`) across three real `baton`
//! processes, against a model server that enforces a provider's own limit
//! and records what a provider sees.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::run::journal::JournalEvent;
use baton_tests::paced::{profiles, request, Paced, PacedModelServer};
use baton_tests::{eventually, next_json, BatonProcess, TestEnv};

const WAIT: Duration = Duration::from_secs(120);

/// Three invocation workers in processes of their own, each serving its
/// metrics on a port of its own.
fn three_workers(env: &TestEnv) -> Vec<(BatonProcess, String)> {
    (0..3)
        .map(|i| {
            let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            let addr = format!("127.0.0.1:{port}");
            let extra = [("BATON_METRICS_ADDR", addr.as_str()), ("BATON_MAX_CONCURRENT_INVOCATIONS", "16")];
            (env.spawn_baton_env("invocation", &format!("limited-{i}"), &extra), addr)
        })
        .collect()
}

/// Sends `n` requests and returns the status of each reply.
async fn run_many(env: &TestEnv, n: usize) -> Vec<String> {
    let mut replies = env.replies().await;
    for i in 0..n {
        env.send_request(&request(&format!("limited-{i}"), "normal", false)).await;
    }
    let mut statuses = vec![];
    while statuses.len() < n {
        let message = next_json(&mut replies, WAIT).await;
        if message["type"] == "reply" {
            statuses.push(message["status"].as_str().unwrap_or("?").to_string());
        }
    }
    statuses
}

async fn scrape(addr: &str) -> String {
    reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn three_workers_under_a_limit_just_below_the_providers_hear_no_429_and_every_run_completes() {
    // The provider takes 4 requests a second; the fleet's limit is 2 (120 a
    // minute, held over every one-second window), below what the fleet would
    // send on its own, so calls do wait. The provider stamps arrivals, the
    // fleet admissions: the margin absorbs a loaded machine's transit times
    // (two admissions a second apart can arrive together), while the limit
    // itself is checked exactly below, on the fleet's own clock.
    let server = PacedModelServer::start(Paced { per_second: Some(4), ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit = "[[limits]]\nname = \"paced\"\nbase_url = \"BASE\"\nrequests_per_minute = 120\nwindow_secs = 1\n";
    env.apply_profiles(&profiles(&server, &limit.replace("BASE", &server.base_url))).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let workers = three_workers(&env);

    let statuses = run_many(&env, 50).await;
    assert!(statuses.iter().all(|s| s == "completed"), "{statuses:?}");
    assert_eq!(server.arrivals().len(), 100, "100 model calls, none retried");
    assert_eq!(server.refused(), 0, "the provider never answered 429");
    // No one-second window of admissions holds more than two calls.
    let crowded = env
        .scalar_i64(
            "SELECT count(*) FROM model_limit_calls a \
              WHERE (SELECT count(*) FROM model_limit_calls b \
                      WHERE b.limit_name = a.limit_name \
                        AND b.started_at >= a.started_at \
                        AND b.started_at < a.started_at + interval '1 second') > 2",
            &[],
        )
        .await;
    assert_eq!(crowded, 0, "a one-second window admitted more than two calls");
    let admitted = env.scalar_i64("SELECT count(*) FROM model_limit_calls WHERE limit_name = 'paced'", &[]).await;
    assert_eq!(admitted, 100, "every call was admitted once");

    // Waiting is visible: the journal, and a metric labelled by the limit's name.
    let (waiting, throttled) = (JournalEvent::ModelCallWaiting.as_str(), JournalEvent::ModelCallThrottled.as_str());
    let waited = env.scalar_i64("SELECT count(*) FROM events WHERE type = $1", &[&throttled]).await;
    assert!(waited > 0, "100 calls at 2 a second wait their turn");
    let other = "SELECT count(*) FROM events WHERE type = $1 AND payload->>'reason' <> 'requests_per_minute'";
    let reasons = env.scalar_i64(other, &[&waiting]).await;
    assert_eq!(reasons, 0, "only the request rate made calls wait");
    let mut scraped = String::new();
    for (_, addr) in &workers {
        scraped.push_str(&scrape(addr).await);
    }
    assert!(
        scraped.contains("baton_model_throttled_total{limit=\"paced\",reason=\"requests_per_minute\"}"),
        "{scraped}"
    );
    assert!(!scraped.contains(&server.base_url), "no endpoint or key in a label");
    drop(workers);
    fleet.stop().await;
}

#[tokio::test]
async fn a_limit_of_two_concurrent_calls_holds_across_three_workers() {
    let server = PacedModelServer::start(Paced { delay: Duration::from_millis(150), ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit = format!("[[limits]]\nname = \"pair\"\nbase_url = \"{}/\"\nconcurrent_calls = 2\n", server.base_url);
    env.apply_profiles(&profiles(&server, &limit)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let workers = three_workers(&env);

    let statuses = run_many(&env, 20).await;
    assert!(statuses.iter().all(|s| s == "completed"), "{statuses:?}");
    assert_eq!(server.arrivals().len(), 40);
    assert_eq!(server.most_in_flight(), 2, "never more than two calls at once, and the limit was reached");
    let in_flight = env.scalar_i64("SELECT count(*) FROM model_limit_calls WHERE held_until IS NOT NULL", &[]).await;
    assert_eq!(in_flight, 0, "every admitted call was ended");
    drop(workers);
    fleet.stop().await;
}

#[tokio::test]
async fn a_token_limit_holds_against_the_usage_the_provider_reports() {
    // 50 tokens a call; 6,000 a minute held over each second is 100 a
    // second. While it runs, a call counts the tokens of its own request
    // (its prompt alone is over 100, so it counts the whole quota and runs
    // alone in its second); once done, the 50 the provider reported.
    let server = PacedModelServer::start(Paced { tokens: 50, ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit = format!(
        "[[limits]]\nname = \"tokens\"\nbase_url = \"{}\"\ntokens_per_minute = 6000\nwindow_secs = 1\n",
        server.base_url
    );
    env.apply_profiles(&profiles(&server, &limit)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let workers = three_workers(&env);

    let started = std::time::Instant::now();
    let statuses = run_many(&env, 15).await;
    assert!(statuses.iter().all(|s| s == "completed"), "{statuses:?}");
    // Checked on the fleet's own clock (admissions), with the usage the
    // provider reported: the server's arrival stamps add transit times.
    let tokens = env
        .scalar_i64(
            "SELECT coalesce(max((SELECT sum(b.tokens) FROM model_limit_calls b \
                                   WHERE b.limit_name = a.limit_name \
                                     AND b.started_at >= a.started_at \
                                     AND b.started_at < a.started_at + interval '1 second')), 0)::bigint \
               FROM model_limit_calls a",
            &[],
        )
        .await;
    assert!(tokens <= 100, "{tokens} tokens admitted in one second");
    let reported = env.scalar_i64("SELECT count(*) FROM model_limit_calls WHERE reported AND tokens = 50", &[]).await;
    assert_eq!(reported, 30, "every call ended with the usage the provider reported");
    assert!(started.elapsed() >= Duration::from_secs(12), "30 calls at no more than two a second take fifteen seconds");
    let tokens = "SELECT count(*) FROM events WHERE type = $1 AND payload->>'reason' = 'tokens_per_minute'";
    let reasons = env.scalar_i64(tokens, &[&JournalEvent::ModelCallWaiting.as_str()]).await;
    assert!(reasons > 0);
    drop(workers);
    fleet.stop().await;
}

/// A provider's 429 with `Retry-After` pauses the whole limit: calls of
/// other runs, on other workers, that never heard the 429 wait it out (and
/// say so in their journals) instead of each earning a 429 of its own.
#[tokio::test]
async fn a_providers_retry_after_pauses_every_worker_under_the_limit() {
    let server = PacedModelServer::start(Paced { refuse_first: 1, retry_after_secs: 2, ..Default::default() }).await;
    let env = TestEnv::new().await;
    let limit =
        format!("[[limits]]\nname = \"paused\"\nbase_url = \"{}\"\nrequests_per_minute = 6000\n", server.base_url);
    let file = profiles(&server, &limit).replace("max_attempts = 1", "max_attempts = 3");
    env.apply_profiles(&file).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let workers = three_workers(&env);
    let mut replies = env.replies().await;

    // The first call is refused; once the limit is paused, two more requests arrive.
    env.send_request(&request("first", "normal", false)).await;
    eventually(WAIT, "the provider refused a call", || async {
        let paused = env
            .scalar_i64("SELECT count(*) FROM model_limits WHERE name = 'paused' AND paused_until IS NOT NULL", &[])
            .await;
        (server.refused() == 1 && paused == 1).then_some(())
    })
    .await;
    for id in ["second", "third"] {
        env.send_request(&request(id, "normal", false)).await;
    }
    let mut statuses = vec![];
    while statuses.len() < 3 {
        let message = next_json(&mut replies, WAIT).await;
        if message["type"] == "reply" {
            statuses.push(message["status"].as_str().unwrap_or("?").to_string());
        }
    }
    assert!(statuses.iter().all(|s| s == "completed"), "{statuses:?}");
    let arrivals = server.arrivals();
    assert_eq!(server.refused(), 1, "one 429 in all: the others waited instead");
    let refused_at = arrivals.iter().find(|a| a.refused).expect("the refusal").at;
    let refused_run = arrivals.iter().find(|a| a.refused).expect("the refusal").run.clone();
    // Nobody called the provider before the pause it asked for had passed
    // (a loaded machine only makes the calls later).
    let early: Vec<_> =
        arrivals.iter().filter(|a| !a.refused && a.at < refused_at + Duration::from_millis(1900)).collect();
    assert!(early.is_empty(), "calls before the provider's pause ended: {early:?}");
    // The other runs' calls waited for the pause, and their journals say why.
    let others_waited = env
        .scalar_i64(
            "SELECT count(DISTINCT run_id) FROM events WHERE type = $2 AND payload->>'reason' = 'retry_after' AND run_id::text <> $1",
            &[&refused_run, &JournalEvent::ModelCallWaiting.as_str()],
        )
        .await;
    assert_eq!(others_waited, 2, "both later runs waited out the pause");
    drop(workers);
    fleet.stop().await;
}
