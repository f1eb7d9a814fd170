//! Return-mode delegation across the fleet: children run concurrently on
//! any worker, a waiting parent is parked in Postgres and woken.

use std::time::Duration;

use baton::roles::invocation::Worker;
use baton::roles::Role;
use baton_agent::Exit;
use baton_domain::fleet::RunInvocation;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, profile, sample_request_json, until_reply, TestEnv};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);
const LEAD_TOOLS: &[&str] =
    &["agent_delegate", "agent_await", "agent_handoff", "workspace_write", "workspace_commit", "workspace_finish"];
const CAN_DELEGATE: &str = "can_delegate = true\ncan_handoff = true";
const SUBAGENT: &str = "allow_as_subagent = true";

fn delegate(key_objective: &str) -> String {
    format!(
        r#"{{ tool = "agent_delegate", args = {{ agentId = "helper", task = {{ objective = "{key_objective}" }} }} }}"#
    )
}

const WRITE: &str = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Lead's reply." } }"#;
const COMMIT: &str = r#"{ tool = "workspace_commit" }"#;
const FINISH: &str = r#"{ tool = "workspace_finish" }"#;

fn helper(delay_ms: u64) -> String {
    let turn = format!(
        r#"{{ tool = "task_return", args = {{ summary = "Helped.", findings = ["One finding."] }}, delay_ms = {delay_ms} }}"#
    );
    profile("helper", &["workspace_read"], SUBAGENT, &[&turn])
}

fn with_routes(profiles: &[String]) -> String {
    format!("[routes]\ndocs_agent = \"lead\"\n\n{}", profiles.join("\n"))
}

#[tokio::test]
async fn parallel_children_run_at_once_and_are_awaited_together() {
    let env = TestEnv::new().await;
    let lead = profile(
        "lead",
        LEAD_TOOLS,
        CAN_DELEGATE,
        &[
            &delegate("First part."),
            &delegate("Second part."),
            r#"{ tool = "agent_await", args = { mode = "allCompleted" } }"#,
            WRITE,
            COMMIT,
            FINISH,
        ],
    );
    env.apply_profiles(&with_routes(&[lead, helper(400)])).await;
    let messages = env.run_request("parallel").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");

    let run = env.run_of("parallel").await;
    let lead = &env.invocations_of(run, "lead").await[0];
    let results = env.tool_results(lead.id).await;
    assert!(
        results[0]["content"].as_str().unwrap().contains("Started task helper with Agent helper"),
        "{}",
        results[0]
    );
    assert!(results[1]["content"].as_str().unwrap().contains("Started task helper-002"), "{}", results[1]);
    let awaited = results[2]["content"].as_str().unwrap();
    assert!(awaited.contains("## Task helper (Agent helper): completed\nSummary: Helped."), "{awaited}");
    assert!(awaited.contains("## Task helper-002 (Agent helper): completed"), "{awaited}");

    let overlap = env
        .scalar_i64(
            "SELECT (max(started_at) < min(finished_at))::int::bigint FROM invocations WHERE run_id = $1 AND kind = 'child'",
            &[&run],
        )
        .await;
    assert_eq!(overlap, 1, "the two children ran at the same time");
    let journal = env.journal(run).await;
    for kind in [
        JournalEvent::DelegateStarted,
        JournalEvent::AwaitStarted,
        JournalEvent::InvocationParked,
        JournalEvent::InvocationWoken,
        JournalEvent::AwaitCompleted,
        JournalEvent::TaskReturnRecorded,
    ] {
        assert!(journal.contains(&kind), "{kind} missing from {journal:?}");
    }
    let woken = journal.iter().filter(|k| **k == JournalEvent::InvocationWoken).count();
    assert_eq!(woken, 1, "an allCompleted wait wakes once, when the last child is done");
}

#[tokio::test]
async fn a_parent_can_work_before_it_awaits() {
    let env = TestEnv::new().await;
    let lead = profile(
        "lead",
        LEAD_TOOLS,
        CAN_DELEGATE,
        &[&delegate("Look it up."), WRITE, COMMIT, r#"{ tool = "agent_await" }"#, FINISH],
    );
    env.apply_profiles(&with_routes(&[lead, helper(500)])).await;
    let messages = env.run_request("work-then-wait").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let run = env.run_of("work-then-wait").await;
    let timeline = baton_store::journal::timeline(&env.db().await, run).await.unwrap();
    let seq = |kind| timeline.iter().find(|e| e.is(kind)).map(|e| e.seq).unwrap();
    let (committed, returned) = (seq(JournalEvent::ChatCommitCompleted), seq(JournalEvent::TaskReturnRecorded));
    assert!(committed < returned, "the lead committed while its helper worked");
    let lead = &env.invocations_of(run, "lead").await[0];
    let awaited = &env.tool_results(lead.id).await[3];
    assert!(awaited["content"].as_str().unwrap().contains("Summary: Helped."), "{awaited}");
}

#[tokio::test]
async fn a_child_out_of_budget_fails_its_task_and_the_parent_reads_why() {
    let env = TestEnv::new().await;
    let budgeted = r#"{ tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Take two turns." }, budget = { maxRounds = 1 } } }"#;
    let lead =
        profile("lead", LEAD_TOOLS, CAN_DELEGATE, &[budgeted, r#"{ tool = "agent_await" }"#, WRITE, COMMIT, FINISH]);
    let slow_helper = profile(
        "helper",
        &["workspace_read"],
        SUBAGENT,
        &[
            r#"{ tool = "workspace_read", args = { path = "output/none.md" } }"#,
            r#"{ tool = "task_return", args = { summary = "Never sent." } }"#,
        ],
    );
    env.apply_profiles(&with_routes(&[lead, slow_helper])).await;
    let messages = env.run_request("budget").await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "the parent carries on");
    let run = env.run_of("budget").await;
    let lead = &env.invocations_of(run, "lead").await[0];
    let awaited = env.tool_results(lead.id).await[1]["content"].as_str().unwrap().to_string();
    assert!(awaited.contains("## Task helper (Agent helper): failed"), "{awaited}");
    assert!(awaited.contains("used all 1 of its model turns"), "{awaited}");
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::ChildInvocationFailed), "{journal:?}");
    assert!(!journal.contains(&JournalEvent::RunFailed));
}

#[tokio::test]
async fn handoff_waits_for_delegated_tasks_under_deny_if_pending() {
    let env = TestEnv::new().await;
    let handoff = r#"{ tool = "agent_handoff", args = { agentId = "closer", handoff = { objective = "Finish." } } }"#;
    let lead = profile(
        "lead",
        LEAD_TOOLS,
        CAN_DELEGATE,
        &[&delegate("Slow work."), WRITE, COMMIT, handoff, r#"{ tool = "agent_await" }"#, handoff],
    );
    let closer = profile("closer", &["workspace_finish"], "", &[FINISH]);
    env.apply_profiles(&with_routes(&[lead, helper(600), closer])).await;
    let messages = env.run_request("deny").await;
    assert_eq!(messages.last().unwrap()["status"], "completed");
    let run = env.run_of("deny").await;
    let lead = &env.invocations_of(run, "lead").await[0];
    let results = env.tool_results(lead.id).await;
    assert_eq!(results[3]["structured"]["error"]["code"], "agent.handoff_pending_tasks", "{}", results[3]);
    assert_eq!(results[5]["content"], "Handoff accepted for Agent closer. Your part is complete.");
}

#[tokio::test]
async fn finishing_cancels_unfinished_children_and_they_stop_at_their_next_step() {
    let env = TestEnv::new().await;
    let short_wait = r#"{ tool = "agent_await", args = { timeoutMs = 200 } }"#;
    let lead = profile("lead", LEAD_TOOLS, CAN_DELEGATE, &[&delegate("Too slow."), short_wait, WRITE, COMMIT, FINISH]);
    let late_write =
        r#"{ tool = "workspace_write", args = { path = "scratch/late.md", content = "too late" }, delay_ms = 1500 }"#;
    let helper = profile(
        "helper",
        &["workspace_write"],
        SUBAGENT,
        &[late_write, r#"{ tool = "task_return", args = { summary = "Late." } }"#],
    );
    env.apply_profiles(&with_routes(&[lead, helper])).await;

    // No invocation role: this test runs the lead and the helper itself.
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("cancel-children", "docs_agent", "en")).await;
    let worker = Worker::new(env.pool.clone(), env.settings.clone());
    let (lead_id, run_id): (uuid::Uuid, uuid::Uuid) = eventually(WAIT, "the lead exists", || async {
        let row =
            env.db().await.query_opt("SELECT id, run_id FROM invocations WHERE kind = 'root'", &[]).await.unwrap();
        row.map(|r| (r.get(0), r.get(1)))
    })
    .await;
    let lead_msg = RunInvocation { invocation_id: lead_id, run_id };
    let lead = worker.claim(lead_msg).await.unwrap().unwrap();
    assert_eq!(worker.runner.run(&lead, &CancellationToken::new()).await.unwrap(), Exit::Parked);

    let helper_id: uuid::Uuid =
        env.db().await.query_one("SELECT id FROM invocations WHERE kind = 'child'", &[]).await.unwrap().get(0);
    let helper = worker.claim(RunInvocation { invocation_id: helper_id, run_id }).await.unwrap().unwrap();
    let runner = worker.runner.clone();
    let helper_run = tokio::spawn(async move { runner.run(&helper, &CancellationToken::new()).await });

    // The wait times out; the relay wakes the lead, which finishes alone.
    let lead = eventually(WAIT, "the lead is woken", || async { worker.claim(lead_msg).await.unwrap() }).await;
    assert_eq!(worker.runner.run(&lead, &CancellationToken::new()).await.unwrap(), Exit::Finished);
    assert_eq!(helper_run.await.unwrap().unwrap(), Exit::Fenced, "the helper stops at its next step");
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;

    assert_eq!(messages.last().unwrap()["status"], "completed");
    let results = env.tool_results(lead_id).await;
    assert!(results[1]["content"].as_str().unwrap().starts_with("The wait timed out"), "{}", results[1]);
    let status = env
        .db()
        .await
        .query_one(
            "SELECT t.status, i.status FROM tasks t JOIN invocations i ON i.id = t.child_invocation_id WHERE i.id = $1",
            &[&helper_id],
        )
        .await
        .unwrap();
    assert_eq!((status.get::<_, String>(0), status.get::<_, String>(1)), ("cancelled".into(), "cancelled".into()));
    assert_eq!(env.scalar_i64("SELECT count(*) FROM workspace_files WHERE path = 'scratch/late.md'", &[]).await, 0);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&helper_id]).await,
        1,
        "only its prompt"
    );
    assert!(env.journal(run_id).await.contains(&JournalEvent::TaskCancelled));
}

#[tokio::test]
async fn an_operator_can_cancel_a_run_and_the_bridge_is_told() {
    let env = TestEnv::new().await;
    let slow = r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "x" }, delay_ms = 1500 }"#;
    let lead = profile("lead", LEAD_TOOLS, CAN_DELEGATE, &[&delegate("Help."), slow, COMMIT, FINISH]);
    env.apply_profiles(&with_routes(&[lead, helper(1500)])).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("cancel-run", "docs_agent", "en")).await;
    let run = eventually(WAIT, "the helper is running", || async {
        let row = env
            .db()
            .await
            .query_opt("SELECT run_id FROM invocations WHERE kind = 'child' AND status = 'running'", &[])
            .await
            .unwrap();
        row.map(|r| r.get::<_, uuid::Uuid>(0))
    })
    .await;
    assert!(baton::operator::cancel_run(&env.pool, run, "the user changed their mind").await.unwrap());
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = messages.last().unwrap();
    assert_eq!(reply["status"], "cancelled");
    assert!(reply["text"].as_str().unwrap().contains("the user changed their mind"), "{reply}");
    let live = env
        .scalar_i64(
            "SELECT count(*) FROM invocations WHERE run_id = $1 AND status IN ('created', 'running', 'parked')",
            &[&run],
        )
        .await;
    assert_eq!(live, 0);
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM commits WHERE run_id = $1", &[&run]).await,
        0,
        "nothing was committed after the cancel"
    );
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::RunCancelled), "{journal:?}");
}
