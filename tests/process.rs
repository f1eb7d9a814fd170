//! Real `baton` processes that are killed, stalled and stopped mid-invocation:
//! the run still completes exactly once.

use std::collections::HashSet;
use std::time::Duration;

use baton::roles::Role;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, profile, sample_request_json, until_reply, TestEnv};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(40);

/// A writer that commits, then "thinks" for a while (the moment a test
/// strikes), then writes again, commits and finishes.
fn slow_writer(delay_ms: u64) -> String {
    let slow = format!(
        r#"{{ tool = "workspace_write", args = {{ path = "output/main.md", content = "Second draft." }}, delay_ms = {delay_ms} }}"#
    );
    let writer = profile(
        "writer",
        &["workspace_read", "workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "First draft." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_read", args = { path = "output/main.md" } }"#,
            &slow,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")
}

async fn root_of(env: &TestEnv) -> Uuid {
    eventually(WAIT, "the root invocation exists", || async {
        let row = env.db().await.query_opt("SELECT id FROM invocations WHERE kind = 'root'", &[]).await.unwrap();
        row.map(|r| r.get::<_, Uuid>(0))
    })
    .await
}

/// Waits until the invocation has persisted at least `n` steps.
async fn steps_at_least(env: &TestEnv, invocation: Uuid, n: i64) {
    eventually(WAIT, "the invocation made progress", || async {
        (env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&invocation]).await >= n).then_some(())
    })
    .await;
}

/// Exactly-once checks: every tool call ran once, every scripted turn was
/// taken once, the ledger has each commit once, and one reply was sent.
async fn assert_ran_once(env: &TestEnv, invocation: Uuid, turns: i64, commits: i64) {
    let c = env.db().await;
    let steps = baton_store::invocations::steps::load(&c, invocation).await.unwrap();
    let calls: Vec<&str> =
        steps.iter().filter(|s| s.kind == "tool_result").filter_map(|s| s.payload["toolCallId"].as_str()).collect();
    let unique: HashSet<&&str> = calls.iter().collect();
    assert_eq!(calls.len(), unique.len(), "a tool call ran twice: {calls:?}");
    assert_eq!(steps.iter().filter(|s| s.kind == "model_turn").count() as i64, turns, "model turns");
    let run: Uuid = c.query_one("SELECT run_id FROM invocations WHERE id = $1", &[&invocation]).await.unwrap().get(0);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM commits WHERE run_id = $1", &[&run]).await,
        commits,
        "commit ledger"
    );
    assert_eq!(env.handoff_event_count(HandoffEvent::ReplySent).await, 1, "one reply");
}

#[tokio::test]
async fn a_worker_killed_mid_invocation_is_resumed_and_the_run_completes_once() {
    let env = TestEnv::new().await;
    env.apply_profiles(&slow_writer(3_000)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    let mut doomed = env.spawn_baton("invocation", "doomed");
    env.send_request(&sample_request_json("kill-9", "docs_agent", "en")).await;
    let root = root_of(&env).await;
    // prompt, write, result, commit, result, read, result: then the slow turn.
    steps_at_least(&env, root, 7).await;
    doomed.signal("KILL");
    assert_eq!(doomed.exit_code(WAIT).await, None, "killed by a signal");

    let survivor = env.spawn_baton("invocation", "survivor");
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    drop(survivor);
    assert_eq!(messages.last().unwrap()["status"], "completed");
    assert_eq!(messages.last().unwrap()["text"], "Second draft.");
    assert_ran_once(&env, root, 6, 2).await;
    let workers = env.workers_that_started("kill-9").await;
    assert_eq!(workers, vec!["doomed", "survivor"]);
}

#[tokio::test]
async fn a_stalled_worker_is_fenced_when_it_wakes_and_changes_nothing() {
    let env = TestEnv::new().await;
    env.apply_profiles(&slow_writer(1_500)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    let mut zombie = env.spawn_baton("invocation", "zombie");
    env.send_request(&sample_request_json("zombie", "docs_agent", "en")).await;
    let root = root_of(&env).await;
    steps_at_least(&env, root, 7).await;
    zombie.signal("STOP");

    // Its lease runs out; the relay re-publishes; another worker finishes.
    let rescuer = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let steps_after_rescue = env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&root]).await;

    // The zombie wakes mid-turn: its write is refused, and it stops cleanly.
    zombie.signal("CONT");
    zombie.signal("TERM");
    assert_eq!(zombie.exit_code(WAIT).await, Some(0), "the zombie shut down cleanly");
    rescuer.stop().await;
    fleet.stop().await;
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&root]).await,
        steps_after_rescue
    );
    assert_ran_once(&env, root, 6, 2).await;
    let epoch = env.scalar_i64("SELECT claim_epoch FROM invocations WHERE id = $1", &[&root]).await;
    assert_eq!(epoch, 2);
}

/// The log line `message` of process `worker` carries its role, run,
/// invocation and epoch from the spans it was written in, not from its own fields.
fn assert_logged_in_spans(env: &TestEnv, worker: &str, message: &str, invocation: Uuid) {
    let log = std::fs::read_to_string(env.log_of(worker)).unwrap();
    let line = log.lines().find(|l| l.contains(message)).unwrap_or_else(|| panic!("no `{message}` in:\n{log}"));
    let entry: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(entry["fields"].as_object().unwrap().len(), 1, "only the message itself: {entry}");
    let spans = entry["spans"].as_array().unwrap();
    let span =
        |name: &str| spans.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no {name} span: {entry}"));
    assert_eq!(span("role")["role"], "invocation");
    assert_eq!(span("role")["worker"], worker);
    assert_eq!(span("invocation")["invocation"], invocation.to_string());
    assert_eq!(span("invocation")["epoch"], 1);
    assert!(span("invocation")["run"].as_str().is_some_and(|run| Uuid::parse_str(run).is_ok()), "{entry}");
}

#[tokio::test]
async fn sigterm_hands_the_claim_back_and_another_worker_resumes_at_once() {
    let env = TestEnv::new().await;
    env.apply_profiles(&slow_writer(20_000)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    let mut leaving = env.spawn_baton_env("invocation", "leaving", &[("BATON_LOG_FORMAT", "json")]);
    env.send_request(&sample_request_json("sigterm", "docs_agent", "en")).await;
    let root = root_of(&env).await;
    steps_at_least(&env, root, 7).await;
    leaving.signal("TERM");
    assert_eq!(leaving.exit_code(Duration::from_secs(10)).await, Some(0), "exits without waiting for the 20 s turn");
    let released = env
        .scalar_i64(
            "SELECT count(*) FROM invocations WHERE id = $1 AND lease_owner IS NULL AND lease_expires_at < now()",
            &[&root],
        )
        .await;
    assert_eq!(released, 1, "the claim was handed back, not left to expire");
    assert_logged_in_spans(&env, "leaving", "claim released for another worker", root);

    // The resumed turn is slow too; a faster script stands in for a model
    // that answers now. Same turns, no delay.
    env.apply_profiles(&slow_writer(10)).await;
    let next = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    next.stop().await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    assert_ran_once(&env, root, 6, 2).await;
    let takeovers = env.scalar_i64("SELECT takeovers::bigint FROM invocations WHERE id = $1", &[&root]).await;
    assert_eq!(takeovers, 0, "a graceful hand-back is not a takeover");
}

#[tokio::test]
async fn a_parent_parks_on_one_worker_process_and_is_woken_on_another() {
    let env = TestEnv::new().await;
    let lead = profile(
        "lead",
        &["agent_delegate", "agent_await", "workspace_write", "workspace_commit", "workspace_finish"],
        "can_delegate = true",
        &[
            r#"{ tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Help." } } }"#,
            r#"{ tool = "agent_await", args = { mode = "allCompleted" } }"#,
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done with help." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    let helper = profile(
        "helper",
        &["workspace_read"],
        "allow_as_subagent = true",
        &[r#"{ tool = "task_return", args = { summary = "Helped." }, delay_ms = 1500 }"#],
    );
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{helper}")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    let mut first = env.spawn_baton("invocation", "worker-a");
    env.send_request(&sample_request_json("park-wake", "docs_agent", "en")).await;
    let root = root_of(&env).await;
    eventually(WAIT, "the lead is parked", || async {
        (env.scalar_i64("SELECT count(*) FROM invocations WHERE id = $1 AND status = 'parked'", &[&root]).await == 1)
            .then_some(())
    })
    .await;
    // A parked parent holds no worker: stopping this one loses nothing.
    first.signal("TERM");
    assert_eq!(first.exit_code(WAIT).await, Some(0));
    let second = env.spawn_baton("invocation", "worker-b");
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    drop(second);
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let starts: Vec<(bool, String)> = baton_store::journal::timeline(&env.db().await, env.run_of("park-wake").await)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.is(JournalEvent::InvocationStarted) && e.invocation_id == Some(root))
        .map(|e| {
            (e.payload["resumed"].as_bool().unwrap_or(false), e.payload["worker"].as_str().unwrap_or("").to_string())
        })
        .collect();
    assert_eq!(starts, vec![(false, "worker-a".to_string()), (true, "worker-b".to_string())]);
    let awaited = &env.tool_results(root).await[1];
    assert!(awaited["content"].as_str().unwrap().contains("Summary: Helped."), "{awaited}");
}
