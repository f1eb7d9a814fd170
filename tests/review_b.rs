//! Seams between the hardening items: an external agent's finished result
//! and a database outage longer than the runner's short patience.

use std::time::Duration;

use baton_tests::{eventually, sample_request_json, until_reply, TestEnv};

const WAIT: Duration = Duration::from_secs(40);

/// Makes this test's database read-only (or writable again) and ends its
/// sessions, so pooled sessions reconnect with the new default.
async fn set_read_only(env: &TestEnv, on: bool) {
    let admin = env.admin().await;
    let db = env.db_name();
    let value = if on { "on" } else { "off" };
    admin.batch_execute(&format!("ALTER DATABASE \"{db}\" SET default_transaction_read_only = {value}")).await.unwrap();
    admin
        .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", &[&db])
        .await
        .unwrap();
}

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
    let mut env = TestEnv::new().await;
    // Longer than the fault: the heartbeat's missed renewals do not matter.
    env.settings.lease = Duration::from_secs(30);
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
    set_read_only(&env, true).await;
    // The agent finishes 2 s in; the fault outlasts the runner's 5 s
    // patience for storing a finished turn by a good margin.
    tokio::time::sleep(Duration::from_secs(10)).await;
    set_read_only(&env, false).await;

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
    assert!(!journal.iter().any(|k| k == "external_agent_rerun"), "the finished agent was run again: {journal:?}");
}
