//! The operator's command line (issue 24): `runs show` opens with a header
//! and takes a handoff id, an unknown id fails in every format, `runs list`
//! lines up whatever the status and says why a run failed, `dead list`
//! shows whole reasons and decoded bodies, and a broker that refuses the
//! login or has no such vhost is not reported as down; all through the
//! `baton` binary against the real services.

use std::process::Output;
use std::time::Duration;

use baton::roles::Role;
use baton_tests::http::{ModelServer, Reply};
use baton_tests::{eventually, sample_request_json, until_reply, TestEnv};
use serde_json::Value;

/// `baton ARGS` against this test's database and queues, `env` changed.
async fn cli(env: &TestEnv, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(baton_tests::baton_binary());
    command
        .args(args)
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &env.settings.queue_prefix)
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0");
    vars.iter().for_each(|(k, v)| {
        command.env(k, v);
    });
    command.output().await.expect("run baton")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A solo agent whose model answers 500 on both of its attempts.
fn failing(server: &ModelServer) -> String {
    format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"solo\"\ndescription = \"The solo agent.\"\n\
         tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"test-model\"\nmax_attempts = 2\n[profiles.delegation]\n",
        server.base_url
    )
}

/// The reason a run's stored error gives, as the CLI is to show it.
async fn stored_reason(env: &TestEnv, handoff: &str) -> String {
    let run = baton_store::runs::get(&env.db().await, env.run_of(handoff).await).await.unwrap().unwrap();
    baton::operator::reason::of(run.error.as_ref()).expect("a reason")
}

/// Four runs, one per status: a completed chain, a run whose model failed,
/// a cancelled manual handoff, and one still running.
async fn mixed_runs(env: &TestEnv) {
    let server = ModelServer::start(vec![Reply::Status(500, None), Reply::Status(500, None)]).await;
    env.apply_profiles(&failing(&server)).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("cli-failed-with-a-long-id", "docs_agent", "en")).await;
    assert_eq!(until_reply(&mut replies, Duration::from_secs(30)).await.last().unwrap()["status"], "failed");
    env.apply_example_profiles().await;
    env.send_request(&sample_request_json("cli-completed-with-a-long-id", "docs_agent", "en")).await;
    assert_eq!(until_reply(&mut replies, Duration::from_secs(30)).await.last().unwrap()["status"], "completed");
    env.send_request(&sample_request_json("cli-manual-with-a-long-id", "manual", "en")).await;
    let c = env.db().await;
    eventually(Duration::from_secs(20), "the manual handoff waits", || async {
        baton_store::overview::waiting(&c).await.unwrap().first().map(|_| ())
    })
    .await;
    let out =
        cli(env, &["handoff", "cancel", "cli-manual-with-a-long-id", "--reason", "the user went away"], &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    until_reply(&mut replies, Duration::from_secs(30)).await;
    fleet.stop().await;
    baton_store::runs::insert(&c, uuid::Uuid::now_v7(), None, "writer").await.unwrap();
}

/// Where `word` starts in `line`, in characters.
fn column(line: &str, word: &str) -> usize {
    let at = line.find(word).unwrap_or_else(|| panic!("`{word}` not in `{line}`"));
    line[..at].chars().count()
}

#[tokio::test]
async fn runs_list_lines_up_every_status_keeps_ids_whole_and_says_why_a_run_failed() {
    let env = TestEnv::new().await;
    mixed_runs(&env).await;
    let out = cli(&env, &["runs", "list"], &[]).await;
    let table = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "a header and four runs:\n{table}");
    let header = lines[0];
    for (line, status) in lines[1..].iter().zip(["running", "cancelled", "completed", "failed"]) {
        assert_eq!(column(line, status), column(header, "status"), "the status column lines up:\n{table}");
        let attempt_end = column(header, "attempt") + "attempt".len();
        assert_eq!(column(line, " 1 ") + 2, attempt_end, "numbers are right-aligned:\n{table}");
    }
    for id in ["cli-failed-with-a-long-id", "cli-completed-with-a-long-id", "cli-manual-with-a-long-id"] {
        assert!(table.contains(id), "`{id}` whole:\n{table}");
    }
    let failed = lines.iter().find(|l| l.contains("cli-failed")).unwrap();
    assert!(failed.ends_with(&stored_reason(&env, "cli-failed-with-a-long-id").await), "{table}");
    let cancelled = lines.iter().find(|l| l.contains("cli-manual")).unwrap();
    assert!(cancelled.ends_with("cancelled: the user went away"), "{table}");
    let completed = lines.iter().find(|l| l.contains("cli-completed")).unwrap();
    // Fields are two spaces or more apart; the duration is the seventh.
    let fields: Vec<&str> = completed.split("  ").map(str::trim).filter(|f| !f.is_empty()).collect();
    let duration = fields[6];
    assert!(duration.trim().ends_with("ms") || duration.trim().ends_with('s'), "a short duration: `{duration}`");
    assert!(!duration.trim().is_empty() && duration.trim() != "0s", "a sub-second run is not `0s`: `{duration}`");

    let json: Value = serde_json::from_slice(&cli(&env, &["runs", "list", "--json"], &[]).await.stdout).unwrap();
    let by = |id: &str| json.as_array().unwrap().iter().find(|r| r["handoffId"] == id).unwrap().clone();
    let failed = by("cli-failed-with-a-long-id");
    assert_eq!(failed["reason"], stored_reason(&env, "cli-failed-with-a-long-id").await);
    assert!(failed["durationMs"].as_i64().unwrap() >= 0);
    assert_eq!(by("cli-completed-with-a-long-id")["reason"], Value::Null);
    let running = json.as_array().unwrap().iter().find(|r| r["status"] == "running").unwrap();
    assert_eq!(running["durationMs"], Value::Null, "a run still going has no duration yet");
}

#[tokio::test]
async fn runs_show_opens_with_a_header_finds_a_run_by_its_handoff_and_an_unknown_id_fails_in_every_format() {
    let env = TestEnv::new().await;
    mixed_runs(&env).await;
    let run = env.run_of("cli-completed-with-a-long-id").await;
    let by_handoff = stdout(&cli(&env, &["runs", "show", "cli-completed-with-a-long-id"], &[]).await);
    let by_run = stdout(&cli(&env, &["runs", "show", &run.to_string()], &[]).await);
    assert_eq!(by_handoff.lines().take(8).collect::<Vec<_>>(), by_run.lines().take(8).collect::<Vec<_>>());
    let tokens = baton_store::runs::tokens_used(&env.db().await, run).await.unwrap();
    for line in [
        format!("run       {run}"),
        "status    completed".into(),
        "reason    -".into(),
        "handoff   cli-completed-with-a-long-id".into(),
        "chain     writer → editor → finalizer".into(),
        format!("tokens    {tokens}"),
    ] {
        assert!(by_handoff.contains(&line), "`{line}` missing:\n{by_handoff}");
    }
    assert!(by_handoff.lines().any(|l| l.starts_with("duration  ")), "{by_handoff}");
    let agents = by_handoff.lines().find(|l| l.starts_with("agent ")).expect("the per-agent table");
    assert!(agents.contains("model calls") && agents.contains("tool calls"), "{agents}");
    assert!(by_handoff.contains("  ↳ checker"), "the delegated checker under its parent:\n{by_handoff}");
    assert!(by_handoff.contains("run_completed"), "the timeline follows:\n{by_handoff}");

    let failed = stdout(&cli(&env, &["runs", "show", "cli-failed-with-a-long-id"], &[]).await);
    let reason = stored_reason(&env, "cli-failed-with-a-long-id").await;
    assert!(failed.contains("status    failed") && failed.contains(&format!("reason    {reason}")), "{failed}");
    let shown: Value =
        serde_json::from_slice(&cli(&env, &["runs", "show", "cli-failed-with-a-long-id", "--json"], &[]).await.stdout)
            .unwrap();
    assert_eq!(shown["run"]["reason"], reason.as_str());
    assert!(shown["run"]["durationMs"].as_i64().is_some(), "{shown}");
    assert_eq!(shown["agents"][0]["agent"], "solo");

    for id in ["no-such-handoff", &uuid::Uuid::now_v7().to_string()] {
        for format in
            [&["runs", "show", id][..], &["runs", "show", id, "--json"], &["runs", "show", id, "--transcript"]]
        {
            let out = cli(&env, format, &[]).await;
            assert!(!out.status.success(), "{format:?} succeeded: {}", stdout(&out));
            assert!(stderr(&out).contains(&format!("no run or handoff `{id}`")), "{}", stderr(&out));
            assert!(stdout(&out).is_empty(), "nothing printed as if it were a run: {}", stdout(&out));
        }
    }
}

#[tokio::test]
async fn dead_list_shows_whole_reasons_and_json_bodies_decoded() {
    let env = TestEnv::new().await;
    let fleet = env.start(&[Role::Intake]);
    // No `userIntent`: intake dead-letters it, with the reason.
    let mut body = sample_request_json("cli-dead", "docs_agent", "zh-CN");
    body.as_object_mut().unwrap().remove("userIntent");
    env.send_raw(&serde_json::to_vec(&body).unwrap(), None).await;
    let bus = baton_bus::Connection::open(&env.settings.amqp_url, "baton-test-dead").await.unwrap();
    let queues = env.settings.queues();
    let letters = eventually(Duration::from_secs(20), "the request is dead-lettered", || async {
        Some(baton_bus::dead::list(&bus, &queues, 10).await.unwrap()).filter(|l| !l.is_empty())
    })
    .await;
    fleet.stop().await;
    bus.close("listed").await;
    let text = stdout(&cli(&env, &["dead", "list"], &[]).await);
    assert!(text.contains(&format!("  reason: {}", letters[0].reason)), "the whole reason:\n{text}");
    assert!(text.contains("  \"id\": \"cli-dead\""), "the body decoded and indented:\n{text}");
    let chinese = body["context"]["recentConversation"][0]["content"].as_str().unwrap();
    assert!(text.contains(chinese), "text, not escapes:\n{text}");
}

#[tokio::test]
async fn a_refused_login_an_unknown_vhost_and_a_malformed_url_each_say_what_is_wrong() {
    let env = TestEnv::new().await;
    let vhost = format!("baton-test-none-{}", uuid::Uuid::new_v4().simple());
    let cases = [
        ("amqp://guest:wrong-password@127.0.0.1:5672/%2f".to_string(), "refused the login of user `guest`"),
        (format!("amqp://guest:guest@127.0.0.1:5672/{vhost}"), "has no virtual host"),
        ("amqp//guest:guest@127.0.0.1:5672".to_string(), "invalid settings: AMQP_URL:"),
    ];
    for (url, says) in &cases {
        for args in [&["dead", "list"][..], &["dead", "list", "--json"], &["demo", "--timeout", "5"]] {
            let out = cli(&env, args, &[("AMQP_URL", url)]).await;
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?} with {url}: {err}");
            let first =
                err.lines().find(|l| l.starts_with("Error: ")).unwrap_or_else(|| panic!("no error line: {err}"));
            assert!(first.contains(says), "{args:?} with {url}: {first}");
            assert!(!first.contains("not reachable") && !first.contains("Start it"), "{first}");
            assert!(!err.contains("wrong-password"), "the password is never shown: {err}");
        }
    }
    let down = cli(&env, &["dead", "list"], &[("AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f")]).await;
    assert!(stderr(&down).contains("RabbitMQ is not reachable at 127.0.0.1:1"), "{}", stderr(&down));
}
