//! The shipped Grafana dashboard and alert rules against Debian's real
//! Prometheus (issue 24; Grafana itself cannot be installed here). A fleet
//! of real `baton` processes does a realistic mix (chains completed, a
//! model endpoint answering HTTP 500, calls throttled under a limit, a
//! budget spent, a run blocked on a question, a cancel, manual handoffs, a
//! dead letter) while Prometheus scrapes every process and RabbitMQ's
//! Prometheus plugin each second. Then every expression of
//! `deploy/grafana/dashboards/*.json`, its template variables substituted as
//! Grafana would, must return data through `/api/v1/query_range`; and every
//! rule of `deploy/prometheus/alerts.yml`, loaded with `for: 0s`, must fire
//! once its condition is staged for real.
//!
//! Outside CI a machine without `prometheus` (Debian's package) skips the
//! test with a printed reason, and one without RabbitMQ's plugin skips the
//! queue-depth expressions; under `CI=true` both must be there.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_tests::browser::free_port;
use baton_tests::http::{ModelServer, Reply};
use baton_tests::paced::{Paced, PacedModelServer};
use baton_tests::{eventually, next_json, BatonProcess, TestEnv};
use lapin::Consumer;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
/// Prometheus' scrape and evaluation interval, in seconds (Grafana's data
/// source would be given the same as its scrape interval).
const SCRAPE_SECS: u64 = 1;
/// Where RabbitMQ's `rabbitmq_prometheus` plugin serves (`.ci/run` enables it).
const RABBITMQ_PROMETHEUS: &str = "127.0.0.1:15692";

/// What this mix does not stage, whose panels may show 0 (each has tests
/// of its own): the rest must show more than 0.
const NOT_STAGED: [(&str, &str); 5] = [
    ("baton_takeovers_total", "no worker is lost holding a claim (tests/process.rs)"),
    ("baton_held_turns_total", "no database outage (tests/outages.rs)"),
    ("baton_relay_nacks_total", "no queue refuses a publish (tests/relay.rs)"),
    ("baton_callbacks_total", "no request asks for status callbacks (tests/callbacks.rs)"),
    ("rabbitmq_queue_messages_unacked", "a delivery is acked within the plugin's 5 s collection interval"),
];

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// Debian's `prometheus` on PATH, or `None` with the reason printed
/// (a failure under `CI=true`).
fn prometheus_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let found = on_path.map(|dir| dir.join("prometheus")).find(|p| p.is_file());
    if found.is_none() {
        let reason = "no `prometheus` on this machine (install Debian's `prometheus` package)";
        assert!(!in_ci(), "the Prometheus test cannot run under CI=true: {reason}");
        println!("SKIPPED the Prometheus test: {reason}");
    }
    found
}

/// A Prometheus of the test's own: its config, rules and TSDB in a temporary
/// directory, on a free port; killed and removed when dropped.
struct Prometheus {
    base: String,
    dir: tempfile::TempDir,
    _child: tokio::process::Child,
    http: reqwest::Client,
}

impl Prometheus {
    async fn start(binary: &Path, baton_targets: &[String], rabbitmq: bool, rules: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<String> = baton_targets.iter().map(|t| format!("\"{t}\"")).collect();
        let mut config = format!(
            "global:\n  scrape_interval: {SCRAPE_SECS}s\n  scrape_timeout: {SCRAPE_SECS}s\n  evaluation_interval: {SCRAPE_SECS}s\n\
             rule_files: [alerts.staged.yml]\n\
             scrape_configs:\n  - job_name: baton\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        if rabbitmq {
            // As deploy/prometheus/prometheus.yml: the plugin's per-queue endpoint.
            config.push_str(&format!(
                "  - job_name: rabbitmq\n    metrics_path: /metrics/per-object\n    static_configs:\n      - targets: [\"{RABBITMQ_PROMETHEUS}\"]\n"
            ));
        }
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        std::fs::write(dir.path().join("alerts.staged.yml"), rules).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start prometheus");
        let prometheus =
            Prometheus { base: format!("http://127.0.0.1:{port}"), dir, _child: child, http: reqwest::Client::new() };
        let ready = format!("{}/-/ready", prometheus.base);
        eventually(Duration::from_secs(30), "Prometheus ready", || async {
            let ok = prometheus.http.get(&ready).send().await.is_ok_and(|r| r.status().is_success());
            ok.then_some(())
        })
        .await;
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An API call's `data`; panics (with Prometheus' own words) on an error.
    async fn api(&self, path: &str, form: &[(&str, String)]) -> Value {
        let response = self.http.post(format!("{}/api/v1/{path}", self.base)).form(form).send().await.unwrap();
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["status"], "success", "{path} {form:?}: {body}\nPrometheus' log:\n{}", self.log());
        body["data"].clone()
    }

    async fn get(&self, path: &str) -> Value {
        let body: Value =
            self.http.get(format!("{}/api/v1/{path}", self.base)).send().await.unwrap().json().await.unwrap();
        assert_eq!(body["status"], "success", "{path}: {body}");
        body["data"].clone()
    }

    /// An instant query's series.
    async fn query(&self, expr: &str) -> Vec<Value> {
        let data = self.api("query", &[("query", expr.to_string())]).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// A range query's series, as a Grafana time-series panel asks.
    async fn query_range(&self, expr: &str, start: f64, end: f64) -> Vec<Value> {
        let form = [
            ("query", expr.to_string()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{SCRAPE_SECS}")),
        ];
        let data = self.api("query_range", &form).await;
        data["result"].as_array().cloned().unwrap_or_default()
    }

    /// The names of the alerts firing now.
    async fn firing(&self) -> BTreeSet<String> {
        let data = self.get("alerts").await;
        let alerts = data["alerts"].as_array().cloned().unwrap_or_default();
        alerts
            .iter()
            .filter(|a| a["state"] == "firing")
            .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_string))
            .collect()
    }
}

/// One query of a dashboard panel.
struct PanelQuery {
    dashboard: String,
    panel: String,
    expr: String,
}

/// Every panel's every query of every shipped dashboard (rows' panels too).
fn dashboard_queries() -> Vec<PanelQuery> {
    fn walk(dashboard: &str, panels: &[Value], out: &mut Vec<PanelQuery>) {
        for panel in panels {
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    let title = panel["title"].as_str().unwrap_or("?").to_string();
                    out.push(PanelQuery { dashboard: dashboard.to_string(), panel: title, expr: expr.to_string() });
                }
            }
            walk(dashboard, panel["panels"].as_array().map_or(&[][..], Vec::as_slice), out);
        }
    }
    let mut out = vec![];
    let dir = repo().join("deploy/grafana/dashboards");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "json")) {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        walk(&name, dashboard["panels"].as_array().map_or(&[][..], Vec::as_slice), &mut out);
        let variables = dashboard["templating"]["list"].as_array().map_or(0, Vec::len);
        assert_eq!(variables, 0, "{name} has template variables: teach this test their values as Grafana would");
    }
    out
}

/// A query as Grafana sends it for a time-series panel over `range` with
/// this data source (scrape interval 1 s): `$__interval` is the range over
/// the panel's data points, never under the scrape interval (1 s for the
/// few minutes this test spans); `$__rate_interval` is
/// max(`$__interval` + scrape interval, 4 × scrape interval); `$__range` is
/// the whole range.
fn as_grafana_sends(expr: &str, range_secs: u64) -> String {
    let interval = SCRAPE_SECS;
    let rate_interval = (interval + SCRAPE_SECS).max(4 * SCRAPE_SECS);
    let sent = expr
        .replace("$__rate_interval", &format!("{rate_interval}s"))
        .replace("$__range", &format!("{range_secs}s"))
        .replace("$__interval", &format!("{interval}s"));
    assert!(!sent.contains('$'), "a template variable this test does not substitute: {expr}");
    sent
}

/// The largest number among a range result's samples; `None` when it has
/// none (NaN and ±Inf, which a panel draws as nothing, are not data).
fn largest(series: &[Value]) -> Option<f64> {
    let samples = series.iter().flat_map(|s| s["values"].as_array().cloned().unwrap_or_default());
    let numbers = samples.filter_map(|v| v[1].as_str().and_then(|n| n.parse::<f64>().ok()));
    numbers.filter(|n| n.is_finite()).reduce(f64::max)
}

/// The alert rules as shipped, but each fires as soon as its expression
/// holds (`for: 0s`): the test stages every condition for real rather than
/// waiting minutes for `for`. Expressions and thresholds are the shipped ones.
fn staged_rules(shipped: &str) -> String {
    let lines = shipped.lines().map(|line| {
        let trimmed = line.trim_start();
        if trimmed.starts_with("for:") {
            format!("{}for: 0s", &line[..line.len() - trimmed.len()])
        } else {
            line.to_string()
        }
    });
    lines.collect::<Vec<_>>().join("\n") + "\n"
}

fn alert_names(rules: &str) -> BTreeSet<String> {
    rules.lines().filter_map(|l| l.trim_start().strip_prefix("- alert:")).map(|n| n.trim().to_string()).collect()
}

/// A request of its own chat (so runs do not wait for each other) to `target`.
fn request(id: &str, target: &str, intent: Option<&str>) -> Value {
    let mut r = baton_tests::paced::request(id, "normal", false);
    r["targetAgent"] = target.into();
    if let Some(intent) = intent {
        r["userIntent"] = intent.into();
    }
    r
}

/// The example profiles (the writer → editor → finalizer chain, the
/// announcer that asks the user) with `docs_agent` on the chain,
/// `claude_code` on an OpenAI-compatible agent under a fleet-wide limit of
/// one call at a time and a token budget, `codex` on one whose endpoint
/// answers 500, and `qwen_code` on the announcer.
fn profiles(paced: &PacedModelServer, failing: &ModelServer) -> String {
    let example = include_str!("../examples/profiles.toml");
    let routes = "docs_agent = \"writer\"\ncodex = \"writer\"\nqwen_code = \"writer\"\nclaude_code = \"writer\"\n";
    assert!(example.contains(routes), "the example profiles' routes changed");
    let example = example.replace(
        routes,
        "docs_agent = \"writer\"\ncodex = \"flaky\"\nqwen_code = \"announcer\"\nclaude_code = \"solo\"\n",
    );
    let agent = |id: &str, base_url: &str, attempts: u32| {
        format!(
            "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"The {id} agent.\"\n\
             tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
             base_url = \"{base_url}\"\nmodel = \"test-model\"\nmax_attempts = {attempts}\n"
        )
    };
    format!(
        "{example}\n{}\n{}\n[[limits]]\nname = \"one_at_a_time\"\nbase_url = \"{}\"\nconcurrent_calls = 1\n\n\
         [budgets.routes.claude_code]\nmax_tokens = 1000\n",
        agent("solo", &paced.base_url, 1),
        agent("flaky", &failing.base_url, 2),
        paced.base_url,
    )
}

/// Waits for the replies of `ids` and returns each one's status (and error code).
async fn replies_of(replies: &mut Consumer, ids: &[&str]) -> BTreeMap<String, String> {
    let mut statuses = BTreeMap::new();
    while ids.iter().any(|id| !statuses.contains_key(*id)) {
        let message = next_json(replies, WAIT).await;
        if message["type"] == "reply" {
            let id = message["handoffId"].as_str().unwrap_or("?").to_string();
            let status = message["status"].as_str().unwrap_or("?");
            let code = message["error"]["code"].as_str().map_or(String::new(), |c| format!(": {c}"));
            statuses.insert(id, format!("{status}{code}"));
        }
    }
    statuses
}

fn baton_process(env: &TestEnv, roles: &[&str], name: &str, port: u16) -> BatonProcess {
    let addr = format!("127.0.0.1:{port}");
    env.spawn_baton_roles(roles, name, &[("BATON_METRICS_ADDR", addr.as_str())])
}

async fn stop(process: &mut BatonProcess) {
    process.signal("TERM");
    process.exit_code(Duration::from_secs(30)).await;
}

/// Waits until every alert of `wanted` has been seen firing, adding what
/// fires to `fired`.
async fn await_firing(prometheus: &Prometheus, fired: &mut BTreeSet<String>, wanted: &BTreeSet<String>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !wanted.is_subset(fired) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "alerts that never fired: {:?}",
            wanted.difference(fired).collect::<Vec<_>>()
        );
        fired.extend(prometheus.firing().await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn every_dashboard_expression_returns_data_and_every_alert_fires_on_a_live_fleet() {
    let Some(binary) = prometheus_binary() else { return };
    let rabbitmq =
        reqwest::get(format!("http://{RABBITMQ_PROMETHEUS}/metrics")).await.is_ok_and(|r| r.status().is_success());
    if !rabbitmq {
        let reason = format!("RabbitMQ's Prometheus plugin does not answer on {RABBITMQ_PROMETHEUS} (rabbitmq-plugins enable rabbitmq_prometheus)");
        assert!(!in_ci(), "under CI=true: {reason}");
        println!("SKIPPING the queue-depth expressions: {reason}");
    }
    let queries = dashboard_queries();
    let shipped = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let alerts = alert_names(&shipped);
    assert!(!queries.is_empty() && !alerts.is_empty());

    let paced =
        PacedModelServer::start(Paced { delay: Duration::from_millis(300), huge: 5000, ..Default::default() }).await;
    let failing = ModelServer::start(vec![Reply::Status(500, None); 6]).await;
    let env = TestEnv::new().await;
    env.apply_profiles(&profiles(&paced, &failing)).await;
    let (front_port, worker_port) = (free_port(), free_port());
    let targets = [format!("127.0.0.1:{front_port}"), format!("127.0.0.1:{worker_port}")];
    let prometheus = Prometheus::start(&binary, &targets, rabbitmq, &staged_rules(&shipped)).await;
    let started = unix_now();

    // The loaded rules are the shipped ones, each with `for: 0s`.
    let groups = prometheus.get("rules").await;
    let loaded: BTreeSet<String> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["type"] == "alerting")
        .inspect(|r| assert_eq!(r["duration"], 0, "{r}"))
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(loaded, alerts, "Prometheus loaded every shipped alert");

    // The fleet: intake, relay (which reports the fleet-wide gauges) and
    // collector in one process, an invocation worker in another.
    let mut front = baton_process(&env, &["intake", "relay", "collector"], "prom-front", front_port);
    let mut worker = baton_process(&env, &["invocation"], "prom-worker", worker_port);
    // Scraped before anything happens, so every counter's 0 is in the TSDB
    // and `increase` sees each first event.
    eventually(WAIT, "both processes scraped, their counters at 0", || async {
        let up = prometheus.query("up{job=\"baton\"} == 1").await.len();
        let zeros = prometheus.query("baton_requests_total{stage=\"answered\",outcome=\"failed\"}").await;
        let instances: BTreeSet<_> = zeros.iter().map(|s| s["metric"]["instance"].to_string()).collect();
        (up == 2 && instances.len() == 2).then_some(())
    })
    .await;

    // The mix, in two waves (so every histogram has observations a scrape
    // apart, as a rate needs).
    let mut replies = env.replies().await;
    for (id, target, intent) in [
        ("mix-chain-1", "docs_agent", None),
        ("mix-paced-1", "claude_code", None),
        ("mix-paced-2", "claude_code", None),
        ("mix-paced-3", "claude_code", None),
        ("mix-budget", "claude_code", Some("Write it HUGELY, please.")),
        ("mix-flaky-1", "codex", None),
        ("mix-ask-1", "qwen_code", None),
        ("mix-ask-2", "qwen_code", None),
        ("mix-manual-1", "manual", None),
        ("mix-manual-2", "manual", None),
    ] {
        env.send_request(&request(id, target, intent)).await;
    }
    // A body that is not a request: dead-lettered by intake.
    env.send_raw(b"{ not a request", None).await;
    let first = ["mix-chain-1", "mix-paced-1", "mix-paced-2", "mix-paced-3", "mix-budget", "mix-flaky-1"];
    let mut statuses = replies_of(&mut replies, &first).await;
    // The second chain's hops only once Prometheus holds the first's: a
    // histogram's series appears with its first observation, and a rate
    // needs a sample before the next ones (on a loaded machine the two
    // chains' hops could otherwise fall between the same two scrapes).
    eventually(WAIT, "Prometheus holds the first chain's hop latency", || async {
        (!prometheus.query("baton_hop_latency_seconds_count > 0").await.is_empty()).then_some(())
    })
    .await;
    for (id, target) in [("mix-chain-2", "docs_agent"), ("mix-paced-4", "claude_code")] {
        env.send_request(&request(id, target, None)).await;
    }
    for id in ["mix-flaky-2", "mix-flaky-3"] {
        env.send_request(&request(id, "codex", None)).await;
    }
    // Both questions asked, both manual handoffs waiting; then an operator
    // cancels one of each through the `baton` CLI.
    eventually(WAIT, "two runs blocked on a question and two manual handoffs waiting", || async {
        let blocked = env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE status = 'blocked'", &[]).await;
        let manual = baton_store::overview::counts::waits(&env.db().await).await.unwrap().manual;
        (blocked == 2 && manual == 2).then_some(())
    })
    .await;
    let ask = env.run_of("mix-ask-2").await.to_string();
    env.baton_cli(&["runs", "cancel", &ask, "--reason", "the user changed their mind"]).await;
    env.baton_cli(&["handoff", "cancel", "mix-manual-2", "--reason", "done by hand elsewhere"]).await;
    let second = ["mix-chain-2", "mix-paced-4", "mix-flaky-2", "mix-flaky-3", "mix-ask-2", "mix-manual-2"];
    statuses.extend(replies_of(&mut replies, &second).await);
    let expected = [
        ("mix-chain-1", "completed"),
        ("mix-chain-2", "completed"),
        ("mix-paced-1", "completed"),
        ("mix-paced-2", "completed"),
        ("mix-paced-3", "completed"),
        ("mix-paced-4", "completed"),
        ("mix-budget", "failed: budget_exhausted"),
        ("mix-flaky-1", "failed: model_unavailable"),
        ("mix-flaky-2", "failed: model_unavailable"),
        ("mix-flaky-3", "failed: model_unavailable"),
        ("mix-ask-2", "cancelled"),
        ("mix-manual-2", "cancelled"),
    ];
    let expected: BTreeMap<String, String> = expected.iter().map(|(i, s)| (i.to_string(), s.to_string())).collect();
    assert_eq!(statuses, expected, "the mix ended as staged");

    // The alerts. Runs failing (4 of 12 answers), a model endpoint failing
    // (six HTTP 500s) and dead letters arriving are staged by the mix. An
    // outbox row held back: one the broker refused, waiting for its retry,
    // written 90 s ago (past the rule's minute, rather than waiting it out).
    env.db()
        .await
        .execute(
            "INSERT INTO outbox (queue, external, body, created_at, attempts, next_attempt_at, last_error)
             VALUES ($1, true, '{\"type\": \"status\"}', now() - interval '90 seconds', 1, now() + interval '1 hour', 'nack')",
            &[&env.reply_queue],
        )
        .await
        .unwrap();
    // The model endpoint's errors, and the answers of the runs the worker
    // ended, are counted by the worker: their alerts fire before the worker
    // stops (a stopped process's series go stale, and an alert on them
    // resolves).
    let mut fired = BTreeSet::new();
    let by_worker = BTreeSet::from(["BatonModelEndpointFailing".to_string(), "BatonRunsFailing".to_string()]);
    await_firing(&prometheus, &mut fired, &by_worker).await;
    // An invocation nobody claims: the worker stops, a request arrives, and
    // its root invocation waits (made 3 minutes old, past the rule's 2,
    // rather than waiting them out).
    stop(&mut worker).await;
    env.send_request(&request("mix-unclaimed", "docs_agent", None)).await;
    eventually(WAIT, "an invocation waiting to be claimed", || async {
        let aged = env
            .db()
            .await
            .execute("UPDATE invocations SET created_at = now() - interval '3 minutes' WHERE status = 'created'", &[])
            .await
            .unwrap();
        (aged > 0).then_some(())
    })
    .await;
    let all_but_down: BTreeSet<String> = alerts.iter().filter(|a| *a != "BatonFleetDown").cloned().collect();
    await_firing(&prometheus, &mut fired, &all_but_down).await;
    assert!(!fired.contains("BatonFleetDown"), "the fleet was up: {fired:?}");

    // Every dashboard expression, as Grafana sends it over the test's whole
    // range, returns a number at some step, and more than 0 unless it shows
    // what this mix does not stage (within a deadline: the last events reach
    // Prometheus on its next scrapes). The RabbitMQ panels show this test's
    // own queues.
    let (mut missing, mut values): (Vec<String>, Vec<String>);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        (missing, values) = (vec![], vec![]);
        let end = unix_now();
        let range = (end - started).ceil() as u64;
        for q in &queries {
            if !rabbitmq && q.expr.contains("rabbitmq_") {
                continue;
            }
            let series = prometheus.query_range(&as_grafana_sends(&q.expr, range), started, end).await;
            let most = largest(&series);
            let zero_allowed = NOT_STAGED.iter().any(|(metric, _)| q.expr.contains(metric));
            let ours = !q.expr.contains("rabbitmq_")
                || series
                    .iter()
                    .any(|s| s["metric"]["queue"].as_str().is_some_and(|n| n.starts_with(&env.settings.queue_prefix)));
            if !ours || most.is_none_or(|m| m <= 0.0 && !zero_allowed) {
                missing.push(format!("{} / {}: {} (largest value {most:?})", q.dashboard, q.panel, q.expr));
            }
            values.push(format!("{:>10}  {}", most.map_or("none".into(), |m| format!("{m:.3}")), q.expr));
        }
        if missing.is_empty() || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("the dashboard's expressions, each one's largest value:\n{}", values.join("\n"));
    assert!(
        missing.is_empty(),
        "{} of {} dashboard expressions return no data, or only 0 for what the mix did:\n{}",
        missing.len(),
        queries.len(),
        missing.join("\n")
    );

    // The fleet down: its last process stops.
    stop(&mut front).await;
    eventually(WAIT, "BatonFleetDown fires", || async {
        prometheus.firing().await.contains("BatonFleetDown").then_some(())
    })
    .await;
    println!(
        "{} dashboard expressions returned data and {} alerts fired, {} s after Prometheus started",
        queries.len(),
        alerts.len(),
        (unix_now() - started).round()
    );
}
