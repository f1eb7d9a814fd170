//! Database outages around external agents and shutdown: a finished result
//! outlasts the outage, and a deploy during one is a hand-back, not a takeover.

use std::time::Duration;

use baton::roles::Role;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, logs, profile, sample_request_json, until_reply, TestEnv};

const WAIT: Duration = Duration::from_secs(40);
/// The runner's patience for storing a finished turn, shrunk from its 5 s
/// default so that the faults below outlast it quickly.
const PATIENCE: Duration = Duration::from_millis(500);

fn starts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map(|s| s.lines().count()).unwrap_or(0)
}

/// An external agent finishes while the database is read-only for longer
/// than the runner's patience for storing a turn: its result is kept until
/// it can be stored, so the agent runs once (its side effects happen once)
/// and the run completes, instead of being re-run (or failed as
/// "interrupted") because its start marker is the last stored step.
#[tokio::test]
async fn an_external_agents_result_outlasts_a_database_outage_and_the_agent_runs_once() {
    logs::capture();
    let mut env = TestEnv::new().await;
    // Longer than the fault: the heartbeat's missed renewals do not matter.
    env.settings.lease = Duration::from_secs(30);
    env.settings.persist_patience = PATIENCE;
    // The agent counts its starts in a file of the test's; the box would give it a /tmp of its own.
    env.settings.agent_jail = Default::default();
    let log = std::env::temp_dir().join(format!("{}starts", env.settings.queue_prefix));
    let script = format!("cat > /dev/null; echo started >> '{}'; sleep 2; echo 'Built once.'", log.display());
    env.apply_profiles(&format!(
        "[routes]\ndocs_agent = \"coder\"\n\n[[profiles]]\nid = \"coder\"\nname = \"coder\"\ndescription = \"An external coding agent.\"\n\
         [profiles.model]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", '''{script}''']\non_interrupt = \"rerun\"\n"
    ))
    .await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("external-outage", "docs_agent", "en")).await;

    eventually(WAIT, "the agent started", || async { (starts(&log) >= 1).then_some(()) }).await;
    env.set_read_only(true).await;
    // The agent finishes 2 s in, and its result cannot be stored. The fault
    // lasts until the worker has kept it for longer than its patience for
    // storing a finished turn (a model's turn would be given up by then).
    let run = env.run_of("external-outage").await.to_string();
    let keeping = [run.as_str(), "keeping an external agent's outcome until it is stored"];
    eventually(WAIT, "the agent's result kept past the runner's patience", || async {
        let kept = logs::lines_with(&keeping);
        let (first, last) = (kept.first()?.0, kept.last()?.0);
        (last - first > PATIENCE).then_some(())
    })
    .await;
    env.set_read_only(false).await;

    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let started = starts(&log);
    let _ = std::fs::remove_file(&log);
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{messages:?}");
    assert!(reply["text"].as_str().unwrap_or_default().contains("Built once."), "{reply}");
    assert_eq!(started, 1, "the agent ran once");
    let run = env.run_of("external-outage").await;
    let journal = env.journal(run).await;
    assert!(!journal.contains(&JournalEvent::ExternalAgentRerun), "the finished agent was run again: {journal:?}");
}

async fn count(env: &TestEnv, sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&env.settings.database_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// A worker shut down (a deploy) while the database is away for longer than
/// its patience for storing a turn: its claim is handed back once the
/// database takes writes again (before the shutdown deadline), so the next
/// worker resumes the run at once and no takeover is counted, instead of the
/// claim being left to expire and counted as a worker that died.
#[tokio::test]
async fn a_worker_shut_down_during_a_database_outage_hands_its_claim_back_without_a_takeover() {
    logs::capture();
    let mut env = TestEnv::new().await;
    // Long: a claim left to expire would show as a takeover and a slow resume.
    env.settings.lease = Duration::from_secs(30);
    env.settings.shutdown_grace = Duration::from_secs(20);
    // Long enough for the deploy to come while the turn is being stored.
    env.settings.persist_patience = Duration::from_secs(1);
    let writer = profile(
        "writer",
        &["workspace_write", "workspace_commit", "agent_handoff"],
        "can_handoff = true",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Handed back, not taken over." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "agent_handoff", args = { agentId = "closer", handoff = { objective = "Finish it." } }, delay_ms = 1000 }"#,
        ],
    );
    let closer = profile("closer", &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}\n{closer}")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let leaving = env.start(&[Role::Invocation]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("handed-back", "docs_agent", "en")).await;

    // prompt, write + result, commit + result: the handoff turn is being "thought".
    eventually(WAIT, "the writer reached its slow turn", || async {
        (count(&env, "SELECT count(*) FROM steps s JOIN invocations i ON i.id = s.invocation_id WHERE i.kind = 'root'")
            .await
            >= 5)
            .then_some(())
    })
    .await;
    let run = env.run_of("handed-back").await.to_string();
    env.set_read_only(true).await;
    // The turn is back and being stored (through the outage) when the deploy comes.
    logs::wait_for_line(WAIT, &[&run, "storing a finished turn; retrying"]).await;
    let stopping = tokio::spawn(leaving.stop());
    // Past the runner's patience for storing the turn: the loop ends on a
    // transient error while shutting down.
    logs::wait_for_line(WAIT, &[&run, "the database is unavailable at shutdown; handing the invocation back"]).await;
    env.set_read_only(false).await;
    stopping.await.unwrap();
    let arriving = env.start(&[Role::Invocation]);

    let messages = until_reply(&mut replies, WAIT).await;
    arriving.stop().await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{messages:?}");
    assert_eq!(
        count(&env, "SELECT coalesce(sum(takeovers), 0)::bigint FROM invocations").await,
        0,
        "no takeover counted"
    );
    let host_errors = format!("SELECT count(*) FROM events WHERE type = '{}'", JournalEvent::HostError);
    assert_eq!(count(&env, &host_errors).await, 0, "no host error");
}

/// A model turn answered while the database is away for longer than the
/// lease (and longer than the 5 s the runner used to keep a turn) is held,
/// spilled to the worker's state directory, and stored once the database is
/// back: the model server is asked each turn exactly once, no lease is taken
/// over (the heartbeats renew before the relay's sweep looks), and the
/// spilled file is gone.
#[tokio::test]
async fn a_turn_answered_during_a_long_outage_is_kept_and_stored_with_no_turn_asked_twice_and_no_takeover() {
    use baton_tests::turns::{self, TurnServer};
    logs::capture();
    let mut env = TestEnv::new().await;
    // The lease is TestEnv's 3 s: the outage below outlasts it twice. The
    // relay reconnects the moment the database is back, racing the heartbeats.
    env.settings.reconnect_max = Duration::from_millis(300);
    let state = tempfile::tempdir().unwrap();
    env.settings.holding =
        baton_agent::runner::Holding { dir: state.path().into(), spill_bytes: 1 << 20, spill_after: Duration::ZERO };
    let write = serde_json::json!({"path": "output/main.md", "content": "Paid for once."});
    let script = vec![
        ("workspace_write", write),
        ("workspace_commit", serde_json::json!({})),
        ("workspace_finish", serde_json::json!({})),
    ];
    let server = TurnServer::start(vec![("writer", script)], Duration::from_millis(1500)).await;
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    let writer = turns::profile("writer", &tools, "", &server.base_url);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("long-outage", "docs_agent", "en")).await;

    // The second turn is being answered when the database goes away.
    server.until_asked(2, WAIT).await;
    let run = env.run_of("long-outage").await;
    env.set_read_only(true).await;
    let run_field = format!("run={run}");
    logs::wait_for_line(WAIT, &[&run_field, "a held turn spilled to disk"]).await;
    let retrying = [run_field.as_str(), "storing a finished turn; retrying"];
    let outage = env.settings.lease * 2 + Duration::from_secs(2);
    eventually(WAIT, "the turn held through an outage of two leases", || async {
        let kept = logs::lines_with(&retrying);
        let (first, last) = (kept.first()?.0, kept.last()?.0);
        (last - first > outage).then_some(())
    })
    .await;
    env.set_read_only(false).await;

    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "completed", "{messages:?}");
    assert_eq!(server.repeated(), vec![], "a model turn was asked again");
    assert_eq!(server.distinct(), 3, "three turns, each asked once");
    logs::wait_for_line(WAIT, &[&run_field, "a held turn stored after the database came back"]).await;
    assert_eq!(
        count(&env, "SELECT coalesce(sum(takeovers), 0)::bigint FROM invocations").await,
        0,
        "no lease taken over"
    );
    assert_eq!(count(&env, "SELECT max(claim_epoch) FROM invocations").await, 1, "claimed once");
    let held = state.path().join("held");
    let left = std::fs::read_dir(&held).map(Iterator::count).unwrap_or(0);
    assert_eq!(left, 0, "the spilled turn's file is removed once it is stored");
}

/// A turn's commit goes through but its answer is lost with the connection
/// (the primary died after its synchronous standby had the commit): the
/// held turn's next attempt finds the step already stored and the
/// invocation carries on from it, instead of writing the step twice (a
/// duplicate transcript row, failing the run as a host error).
#[tokio::test]
async fn a_turn_whose_commit_went_through_unconfirmed_is_not_stored_twice_and_the_run_completes() {
    use baton_tests::pg_cut::CommitCutter;
    use baton_tests::turns::{self, TurnServer};
    let _logs = logs::shown_on_failure();
    let env = TestEnv::new().await;
    let upstream = env.settings.database_url.split_once('@').map(|(_, rest)| rest).unwrap_or_default();
    let upstream = upstream.split_once('/').map(|(host, _)| host.to_string()).unwrap_or_default();
    let cutter = CommitCutter::start(upstream).await;
    let script = vec![
        ("workspace_write", serde_json::json!({"path": "output/main.md", "content": "Written once."})),
        ("workspace_commit", serde_json::json!({})),
        ("workspace_finish", serde_json::json!({})),
    ];
    let server = TurnServer::start(vec![("writer", script)], Duration::from_millis(800)).await;
    let tools = ["workspace_write", "workspace_commit", "workspace_finish"];
    let writer = turns::profile("writer", &tools, "", &server.base_url);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")).await;
    // The invocation role alone talks to the database through the proxy.
    let others = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut through_proxy = env.settings.clone();
    through_proxy.database_url = cutter.url(&env.settings.database_url);
    let invocations = baton::fleet::Fleet::start(&through_proxy, &[Role::Invocation]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("unconfirmed-commit", "docs_agent", "en")).await;

    // The second turn is being answered: its step's commit is the next one.
    server.until_asked(2, WAIT).await;
    cutter.arm();
    let messages = until_reply(&mut replies, WAIT).await;
    invocations.stop().await;
    others.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(cutter.cuts(), 1, "a commit was cut");
    assert_eq!(reply["status"], "completed", "{messages:?}");
    assert_eq!(server.repeated(), vec![], "a model turn was asked again");
    assert_eq!(server.distinct(), 3, "three turns, each asked once");
    let run = env.run_of("unconfirmed-commit").await.to_string();
    logs::wait_for_line(WAIT, &[&run, "a held turn was stored by an earlier attempt whose commit was unconfirmed"])
        .await;
    assert_eq!(count(&env, "SELECT max(claim_epoch) FROM invocations").await, 1, "claimed once, never taken over");
    let models = count(&env, "SELECT count(*) FROM steps WHERE kind = 'model_turn'").await;
    assert_eq!(models, 3, "each turn stored once");
}
