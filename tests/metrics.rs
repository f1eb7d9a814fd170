//! The metrics listener: `/metrics` moves as runs go through the fleet,
//! `/readyz` follows the services, and no label carries an id or user text.

use std::net::SocketAddr;
use std::time::Duration;

use baton::health;
use baton::roles::Role;
use baton_tests::http::{ModelServer, Reply};
use baton_tests::{eventually, TestEnv};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Serves the listener on a free port for the env's settings.
async fn listen(env: &mut TestEnv, roles: &[Role], stop: &CancellationToken) -> SocketAddr {
    env.settings.metrics_addr = "127.0.0.1:0".parse().unwrap();
    health::start(&env.settings, roles, stop.clone()).await.expect("the listener binds")
}

async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}")).await.expect("the listener answers");
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn scrape(addr: SocketAddr) -> String {
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    text
}

/// The sum of a metric's samples whose labels include every pair given.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(series, _)| series == &name || series.starts_with(&format!("{name}{{")))
        .filter(|(series, _)| labels.iter().all(|(k, v)| series.contains(&format!("{k}=\"{v}\""))))
        .map(|(_, value)| value.parse::<f64>().unwrap())
        .sum()
}

/// No label value looks like an id (a UUID, hyphenated or not), names the
/// test's queue prefix, or holds any of the `secrets` (handoff ids, text).
fn assert_no_ids(text: &str, secrets: &[&str]) {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, _)) = line.rsplit_once(' ') else { continue };
        let labels = series.split_once('{').map_or("", |(_, l)| l);
        let hex_run = labels.split(|c: char| !c.is_ascii_hexdigit()).map(str::len).max().unwrap_or(0);
        assert!(hex_run < 8, "a label looks like an id: {line}");
        for secret in secrets {
            assert!(!labels.contains(secret), "a label holds `{secret}`: {line}");
        }
    }
}

#[tokio::test]
async fn the_demo_chain_moves_requests_hops_claims_and_run_duration() {
    let mut env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let stop = CancellationToken::new();
    let addr = listen(&mut env, &Role::ALL, &stop).await;
    let before = scrape(addr).await;
    let fleet = env.start_all();
    let messages = env.run_request("metrics-chain-1").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let after = scrape(addr).await;
    fleet.stop().await;
    stop.cancel();

    let delta = |name: &str, labels: &[(&str, &str)]| sample(&after, name, labels) - sample(&before, name, labels);
    let accepted = [("source", "weixin"), ("target_agent", "docs_agent"), ("stage", "accepted")];
    assert_eq!(delta("baton_requests_total", &accepted), 1.0, "counted when accepted: {after}");
    let completed =
        [("source", "weixin"), ("target_agent", "docs_agent"), ("stage", "answered"), ("outcome", "completed")];
    assert_eq!(delta("baton_requests_total", &completed), 1.0, "and when answered: {after}");
    // Counters with known labels exist from the start, at 0.
    for (name, labels) in [
        ("baton_takeovers_total", &[][..]),
        ("baton_relay_nacks_total", &[][..]),
        ("baton_callbacks_total", &[("outcome", "refused")][..]),
        ("baton_budget_exhaustions_total", &[("limit", "tokens")][..]),
        ("baton_held_turns_total", &[("outcome", "given_up")][..]),
        ("baton_requests_total", &[("target_agent", "codex"), ("stage", "accepted")][..]),
    ] {
        let series = before
            .lines()
            .any(|l| l.starts_with(name) && labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))));
        assert!(series, "{name} {labels:?} is exported before anything happened:\n{before}");
    }
    assert_eq!(sample(&before, "baton_build_info", &[("version", env!("CARGO_PKG_VERSION"))]), 1.0, "{before}");
    for gauge in ["baton_runs", "baton_invocations_unclaimed_oldest_age_seconds", "baton_manual_handoffs_waiting"] {
        assert!(after.lines().any(|l| l.starts_with(gauge)), "{gauge} missing:\n{after}");
    }
    assert_eq!(delta("baton_run_duration_seconds_count", &[("outcome", "completed")]), 1.0);
    // writer → editor → finalizer: two handoffs, each successor claimed once.
    let hops = env.scalar_i64("SELECT count(*) FROM invocations WHERE kind = 'handoff'", &[]).await;
    assert_eq!(hops, 2);
    assert_eq!(delta("baton_hop_latency_seconds_count", &[]), hops as f64);
    assert!(delta("baton_hop_latency_seconds_sum", &[]) > 0.0);
    let invocations = env.scalar_i64("SELECT count(*) FROM invocations", &[]).await;
    assert!(delta("baton_claims_total", &[]) >= invocations as f64, "every invocation was claimed: {after}");
    assert_eq!(delta("baton_takeovers_total", &[]), 0.0);
    assert!(delta("baton_tool_calls_total", &[("tool", "agent_handoff"), ("outcome", "ok")]) >= 2.0);
    assert!(
        delta("baton_model_request_duration_seconds_count", &[("profile", "writer"), ("outcome", "ok")]) >= 1.0,
        "by profile id"
    );
    assert_eq!(delta("baton_bridge_replies_total", &[("status", "completed")]), 1.0);
    assert!(delta("baton_relay_publish_duration_seconds_count", &[]) >= 1.0);
    assert!(after.contains("baton_outbox_backlog "), "the relay's process reports the outbox: {after}");
    assert!(after.contains("baton_invocations{state=\"running\"}"));

    let run = env.run_of("metrics-chain-1").await.to_string();
    assert_no_ids(&after, &["metrics-chain-1", &run, env.settings.queue_prefix.as_str(), "wxid_demo_chat"]);
}

#[tokio::test]
async fn model_calls_and_tokens_are_counted_by_profile() {
    let write = Reply::Tool("workspace_write", json!({"path": "output/main.md", "content": "From the model."}));
    let server = ModelServer::start(vec![
        Reply::Status(503, None),
        write,
        Reply::Tool("workspace_commit", json!({})),
        Reply::Tool("workspace_finish", json!({})),
    ])
    .await;
    let profile = format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"solo\"\ndescription = \"The solo agent.\"\n\
         tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"test-model\"\n",
        server.base_url
    );
    let mut env = TestEnv::new().await;
    env.apply_profiles(&profile).await;
    let stop = CancellationToken::new();
    let addr = listen(&mut env, &Role::ALL, &stop).await;
    let fleet = env.start_all();
    let messages = env.run_request("metrics-tokens-1").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let text = scrape(addr).await;
    fleet.stop().await;
    stop.cancel();

    // Three completions of 40 prompt and 10 completion tokens each (tests/src/http.rs).
    assert_eq!(sample(&text, "baton_model_tokens_total", &[("profile", "solo"), ("kind", "prompt")]), 120.0, "{text}");
    assert_eq!(sample(&text, "baton_model_tokens_total", &[("profile", "solo"), ("kind", "completion")]), 30.0);
    assert_eq!(
        sample(&text, "baton_model_request_duration_seconds_count", &[("profile", "solo"), ("outcome", "ok")]),
        3.0
    );
    assert_eq!(sample(&text, "baton_model_request_errors_total", &[("profile", "solo"), ("status", "503")]), 1.0);
    assert_eq!(sample(&text, "baton_tool_calls_total", &[("tool", "workspace_write"), ("outcome", "ok")]), 1.0);
    assert_no_ids(&text, &["metrics-tokens-1", "From the model."]);
}

#[tokio::test]
async fn readyz_turns_503_when_the_database_is_unreachable_while_healthz_stays_200() {
    let mut env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let stop = CancellationToken::new();
    let addr = listen(&mut env, &Role::ALL, &stop).await;
    let fleet = env.start_all();
    eventually(Duration::from_secs(20), "ready", || async { (get(addr, "/readyz").await.0 == 200).then_some(()) })
        .await;

    // The test's database refuses connections from now on, and loses the ones it had.
    let db = env.settings.database_url.rsplit_once('/').unwrap().1.to_string();
    let admin = baton_store::pool(&env.settings.database_url.replace(&db, "postgres"), 1).unwrap();
    let admin = admin.get().await.unwrap();
    admin.batch_execute(&format!("ALTER DATABASE \"{db}\" ALLOW_CONNECTIONS false")).await.unwrap();
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", &[&db]).await.unwrap();
    let started = std::time::Instant::now();
    eventually(Duration::from_secs(10), "not ready, for want of postgres", || async {
        let (status, text) = get(addr, "/readyz").await;
        (status == 503 && text.contains("postgres:")).then_some(())
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(get(addr, "/healthz").await.0, 200);

    admin.batch_execute(&format!("ALTER DATABASE \"{db}\" ALLOW_CONNECTIONS true")).await.unwrap();
    fleet.stop().await;
    stop.cancel();
}

#[tokio::test]
async fn a_process_pointed_at_a_wrong_database_port_is_alive_but_not_ready() {
    let mut env = TestEnv::new().await;
    env.settings.database_url = "postgres://postgres@127.0.0.1:1/baton".into();
    let stop = CancellationToken::new();
    let addr = listen(&mut env, &[Role::Relay], &stop).await;
    let fleet = env.start(&[Role::Relay]);
    let why = eventually(Duration::from_secs(10), "a probe that failed", || async {
        let (status, text) = get(addr, "/readyz").await;
        (status == 503 && text.contains("postgres:") && !text.contains("not checked yet")).then_some(text)
    })
    .await;
    assert!(why.contains("consumers not up: relay"), "{why}");
    assert_eq!(get(addr, "/healthz").await, (200, "alive\n".to_string()));
    assert!(!health::check(addr).await.unwrap(), "`baton health` says not ready");
    fleet.stop().await;
    stop.cancel();
}

#[test]
fn every_dashboard_query_names_a_metric_baton_exports() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("deploy/grafana/dashboards/baton.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut named = std::collections::BTreeSet::new();
    for target in dashboard["panels"].as_array().unwrap().iter().flat_map(|p| p["targets"].as_array().unwrap()) {
        let expr = target["expr"].as_str().unwrap();
        let words = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for word in words.filter(|w| w.starts_with("baton_")) {
            let base = ["_bucket", "_count", "_sum"].iter().find_map(|s| word.strip_suffix(s)).unwrap_or(word);
            assert!(
                baton::metrics::NAMES.contains(&base),
                "the dashboard queries `{word}`, which Baton does not export"
            );
            named.insert(base);
        }
    }
    let missing: Vec<_> = baton::metrics::NAMES.iter().filter(|n| !named.contains(*n)).collect();
    assert!(missing.is_empty(), "the dashboard shows nothing of {missing:?}");
    // The alert rules name only what Baton exports, too.
    let alerts = std::fs::read_to_string(root.join("deploy/prometheus/alerts.yml")).unwrap();
    let words = alerts.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
    for word in words.filter(|w| w.starts_with("baton_")) {
        assert!(baton::metrics::NAMES.contains(&word), "an alert queries `{word}`, which Baton does not export");
    }
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    assert!(compose.contains(r#"test: ["CMD", "baton", "health"]"#), "Baton's services have a health check");
}
