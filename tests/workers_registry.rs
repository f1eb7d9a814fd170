//! The fleet's registry of processes (issue 24): a real `baton up` appears
//! with its roles and version, its heartbeat advances, a SIGTERMed one is
//! stopped and a SIGKILLed one is gone, and the workers page says so, with
//! the runs a process holds read from its claims.

use std::time::Duration;

use baton::roles::Role;
use baton_store::workers::Listed;
use baton_tests::{eventually, profile, sample_request_json, TestEnv};

const WAIT: Duration = Duration::from_secs(30);
/// Fast beats, so "gone" (three missed) comes within a second or so.
const BEAT: (&str, &str) = ("BATON_HEARTBEAT_MS", "250");

async fn rows_of(env: &TestEnv, worker: &str) -> Vec<Listed> {
    let (rows, _) = baton_store::workers::list(&env.db().await).await.unwrap();
    rows.into_iter().filter(|r| r.worker_id == worker).collect()
}

async fn row_of(env: &TestEnv, worker: &str) -> Listed {
    eventually(WAIT, &format!("{worker} is registered"), || async { rows_of(env, worker).await.pop() }).await
}

/// The workers page's row for `worker`, as HTML.
async fn page_row(base: &str, worker: &str) -> String {
    let page = reqwest::get(format!("{base}/workers")).await.unwrap().text().await.unwrap();
    let at = page.find(&format!("data-worker=\"{worker}\"")).unwrap_or_else(|| panic!("no row for {worker}: {page}"));
    let row = &page[at..];
    row[..row.find("</tr>").unwrap()].to_string()
}

#[tokio::test]
async fn a_process_registers_with_its_roles_beats_and_is_stopped_after_a_sigterm() {
    let env = TestEnv::new().await;
    let mut process = env.spawn_baton_roles(&["intake", "relay"], "reg-term", &[BEAT]);
    let first = row_of(&env, "reg-term").await;
    assert_eq!(first.roles, vec!["intake".to_string(), "relay".to_string()]);
    assert!(first.version.starts_with(env!("CARGO_PKG_VERSION")), "{}", first.version);
    assert!(first.pid > 0 && first.stopped_at.is_none() && (first.beat_secs - 0.25).abs() < 1e-9, "{first:?}");
    let later = eventually(WAIT, "the heartbeat advances", || async {
        let now = row_of(&env, "reg-term").await;
        (now.heartbeat_at > first.heartbeat_at).then_some(now)
    })
    .await;
    assert_eq!((later.id, later.started_at), (first.id, first.started_at), "the same row, beaten");

    let console = env.serve_console(None).await;
    let row = page_row(&console.base, "reg-term").await;
    assert!(row.contains("data-liveness=\"live\""), "{row}");
    assert!(row.contains(">intake</span>") && row.contains(">relay</span>"), "{row}");

    process.signal("TERM");
    assert_eq!(process.exit_code(WAIT).await, Some(0));
    let stopped = row_of(&env, "reg-term").await;
    assert!(stopped.stopped_at.is_some(), "a graceful stop is recorded: {stopped:?}");
    let row = page_row(&console.base, "reg-term").await;
    assert!(row.contains("data-liveness=\"stopped\""), "{row}");
}

/// A writer whose second draft takes a long while: its run stays held.
fn slow_writer() -> String {
    let writer = profile(
        "writer",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Draft." }, delay_ms = 60000 }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")
}

#[tokio::test]
async fn a_killed_process_is_shown_as_gone_with_the_run_it_held() {
    let env = TestEnv::new().await;
    env.apply_profiles(&slow_writer()).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut worker = env.spawn_baton_roles(&["invocation"], "reg-kill", &[BEAT]);
    env.send_request(&sample_request_json("reg-held", "docs_agent", "en")).await;
    let run = eventually(WAIT, "the run starts", || async {
        baton_store::requests::get(&env.db().await, "reg-held").await.unwrap().and_then(|r| r.run_id)
    })
    .await;
    let held = eventually(WAIT, "the worker holds the run", || async {
        let row = row_of(&env, "reg-kill").await;
        (row.in_flight == 1 && row.runs == vec![run]).then_some(row)
    })
    .await;
    assert_eq!(held.roles, vec!["invocation".to_string()]);
    let console = env.serve_console(None).await;
    let row = page_row(&console.base, "reg-kill").await;
    assert!(row.contains(&format!("href=\"/runs/{run}\"")), "the page links the run it holds: {row}");
    let in_process = row_of(&env, &env.settings.worker_id).await;
    assert_eq!(in_process.roles, vec!["intake", "relay", "collector"], "the test's own fleet registered too");

    worker.signal("KILL");
    worker.exit_code(WAIT).await;
    eventually(WAIT, "the killed process shows as gone", || async {
        page_row(&console.base, "reg-kill").await.contains("data-liveness=\"gone\"").then_some(())
    })
    .await;
    let gone = row_of(&env, "reg-kill").await;
    assert!(gone.stopped_at.is_none(), "a kill records no stop: {gone:?}");
    fleet.stop().await;
    let stopped = row_of(&env, &env.settings.worker_id).await;
    assert!(stopped.stopped_at.is_some(), "Fleet::stop records the in-process fleet's stop");
}

#[tokio::test]
async fn rows_silent_for_longer_than_they_are_kept_are_pruned() {
    let env = TestEnv::new().await;
    let c = env.db().await;
    let process = |worker: &str| baton_store::workers::Process {
        id: uuid::Uuid::now_v7(),
        worker_id: worker.into(),
        roles: vec!["relay".into()],
        version: "test".into(),
        host: "here".into(),
        pid: 1,
        beat: Duration::from_secs(5),
    };
    let (old, young) = (process("reg-old"), process("reg-young"));
    baton_store::workers::beat(&c, &old).await.unwrap();
    baton_store::workers::beat(&c, &young).await.unwrap();
    c.execute("UPDATE fleet_workers SET heartbeat_at = now() - interval '2 days' WHERE id = $1", &[&old.id])
        .await
        .unwrap();
    let pruned = baton_store::workers::prune(&c, Duration::from_secs(86_400)).await.unwrap();
    assert_eq!(pruned, 1);
    let (left, _) = baton_store::workers::list(&c).await.unwrap();
    assert_eq!(left.iter().map(|r| r.worker_id.as_str()).collect::<Vec<_>>(), vec!["reg-young"]);
}
