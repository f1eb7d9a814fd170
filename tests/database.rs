//! The database misbehaving: read-only for a while (a failover, maintenance),
//! a worker frozen inside a transaction, a schema that is not the binary's,
//! two migrations at once. Every fault is scoped to this test's own database.

use std::time::{Duration, Instant};

use baton::roles::Role;
use baton_bus::lapin::options::QueueDeclareOptions;
use baton_bus::lapin::types::FieldTable;
use baton_domain::fleet::Queue;
use baton_domain::protocol::request::HandoffEvent;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, logs, profile, sample_request_json, until_reply, TestEnv};
use serde_json::Value;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(40);

/// A number from this test's database on a fresh session (pooled ones may
/// just have been ended by a fault).
async fn count(env: &TestEnv, sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&env.settings.database_url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Messages waiting in this test's `baton.dead`.
async fn dead_letters(env: &TestEnv) -> u32 {
    let channel = env.conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions { passive: true, ..Default::default() };
    channel
        .queue_declare(env.queue(Queue::Dead).as_str().into(), passive, FieldTable::default())
        .await
        .unwrap()
        .message_count()
}

/// The request completed with one reply, nothing was dead-lettered, no
/// invocation was taken over, and nothing failed.
async fn assert_rode_it_out(env: &TestEnv, messages: &[Value]) {
    let statuses: Vec<&str> = messages.iter().filter_map(|m| m["status"].as_str()).collect();
    assert!(!statuses.contains(&"failed"), "{messages:?}");
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    let replies = format!("SELECT count(*) FROM handoff_events WHERE type = '{}'", HandoffEvent::ReplySent);
    assert_eq!(count(env, &replies).await, 1, "one reply");
    assert_eq!(dead_letters(env).await, 0, "nothing dead-lettered");
    assert_eq!(
        count(env, "SELECT coalesce(sum(takeovers), 0)::bigint FROM invocations").await,
        0,
        "no takeover counted"
    );
    let host_errors = format!("SELECT count(*) FROM events WHERE type = '{}'", JournalEvent::HostError);
    assert_eq!(count(env, &host_errors).await, 0, "no host error");
}

#[tokio::test]
async fn a_request_arriving_while_the_database_is_read_only_runs_once_it_is_writable() {
    logs::capture();
    let mut env = TestEnv::new().await;
    env.settings.lease = Duration::from_secs(15);
    env.apply_example_profiles().await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;

    env.set_read_only(true).await;
    env.send_request(&sample_request_json("read-only", "docs_agent", "en")).await;
    // The fault lasts until the intake has the request and has failed to
    // store it (reads still work, so this is observable).
    logs::wait_for_line(WAIT, &["handoff_id=read-only", "storing a request: the database is unavailable"]).await;
    assert_eq!(
        count(&env, "SELECT count(*) FROM handoff_requests").await,
        0,
        "nothing could be stored while read-only"
    );
    env.set_read_only(false).await;

    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_rode_it_out(&env, &messages).await;
    let created = format!("SELECT count(*) FROM handoff_events WHERE type = '{}'", HandoffEvent::Created);
    assert_eq!(count(&env, &created).await, 1);
}

#[tokio::test]
async fn a_run_mid_chain_rides_out_a_read_only_database_without_a_takeover() {
    logs::capture();
    let mut env = TestEnv::new().await;
    // Longer than the fault, so the heartbeat's missed renewals do not matter.
    env.settings.lease = Duration::from_secs(20);
    // Shrunk from 5 s, so that the fault outlasts it quickly.
    env.settings.persist_patience = Duration::from_millis(500);
    let writer = profile(
        "writer",
        &["workspace_write", "workspace_commit", "agent_handoff"],
        "can_handoff = true",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Written through a failover." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "agent_handoff", args = { agentId = "closer", handoff = { objective = "Finish it." } }, delay_ms = 1000 }"#,
        ],
    );
    let closer = profile("closer", &["workspace_finish"], "", &[r#"{ tool = "workspace_finish" }"#]);
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}\n{closer}")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("mid-chain", "docs_agent", "en")).await;

    // prompt, write + result, commit + result: the handoff turn is being "thought".
    eventually(WAIT, "the writer reached its slow turn", || async {
        (count(&env, "SELECT count(*) FROM steps s JOIN invocations i ON i.id = s.invocation_id WHERE i.kind = 'root'")
            .await
            >= 5)
            .then_some(())
    })
    .await;
    let run = env.run_of("mid-chain").await.to_string();
    env.set_read_only(true).await;
    // Until the runner's own patience for storing a finished turn has run
    // out, so the invocation role has to resume the claimed invocation itself.
    let resuming = "the database is unavailable for now; resuming the invocation after it";
    logs::wait_for_line(WAIT, &[&run, resuming]).await;
    env.set_read_only(false).await;

    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    assert_rode_it_out(&env, &messages).await;
    assert_eq!(messages.last().unwrap()["text"], "Written through a failover.");
    assert_eq!(count(&env, "SELECT max(claim_epoch) FROM invocations").await, 1, "each invocation claimed once");
    let run = env.run_of("mid-chain").await;
    let journal = env.journal(run).await;
    assert_eq!(journal.iter().filter(|k| **k == JournalEvent::HandoffAccepted).count(), 1, "handed off once");
}

#[tokio::test]
async fn a_worker_frozen_inside_a_step_transaction_is_taken_over_and_its_writes_are_refused() {
    let env = TestEnv::new().await;
    let writer = profile(
        "writer",
        &["workspace_write", "workspace_commit", "workspace_finish"],
        "",
        &[
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Rescued." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"writer\"\n\n{writer}")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    let idle_timeout = Duration::from_secs(2);
    let mut frozen = env.spawn_baton_env(
        "invocation",
        "frozen",
        &[
            ("BATON_TEST_PAUSE_IN_STEP_MS", "10000"),
            ("BATON_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", &idle_timeout.as_millis().to_string()),
        ],
    );
    env.send_request(&sample_request_json("frozen", "docs_agent", "en")).await;

    // The worker holds its first step transaction (and the invocation's row
    // lock) open at the pause point: freeze it there.
    eventually(WAIT, "the worker is inside a step transaction", || async {
        let sql = "SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = 'baton-invocation-frozen'
                      AND state = 'idle in transaction' AND state_change < now() - interval '300 milliseconds'";
        (count(&env, sql).await >= 1).then_some(())
    })
    .await;
    frozen.signal("STOP");
    let frozen_at = Instant::now();
    let root: Uuid =
        env.db().await.query_one("SELECT id FROM invocations WHERE kind = 'root'", &[]).await.unwrap().get(0);

    // The server ends the frozen transaction; the lease runs out; another
    // worker takes the invocation over and finishes the run.
    let rescuer = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    let took = frozen_at.elapsed();
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    assert_eq!(messages.last().unwrap()["text"], "Rescued.");
    // The lease and the idle timeout run side by side; the margin is for the
    // sweep, the claim and the rest of the run on a busy machine.
    let bound = env.settings.lease + idle_timeout + Duration::from_secs(8);
    assert!(took < bound, "rescued after {took:?}, more than lease + idle timeout + 8 s ({bound:?})");
    let steps_after_rescue = env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&root]).await;

    // Thawed, the frozen worker finds its transaction gone and its claim
    // taken: it writes nothing and stops cleanly.
    frozen.signal("CONT");
    let log = env.log_of("frozen");
    eventually(WAIT, "the thawed worker saw that its claim is lost", || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains("claim lost").then_some(())
    })
    .await;
    frozen.signal("TERM");
    assert_eq!(frozen.exit_code(WAIT).await, Some(0), "the thawed worker shut down cleanly");
    rescuer.stop().await;
    fleet.stop().await;
    assert_eq!(
        env.scalar_i64("SELECT count(*) FROM steps WHERE invocation_id = $1", &[&root]).await,
        steps_after_rescue
    );
    assert_eq!(
        env.scalar_i64("SELECT claim_epoch FROM invocations WHERE id = $1", &[&root]).await,
        2,
        "taken over once"
    );
    let results = env.tool_results(root).await;
    let mut ids: Vec<&str> = results.iter().filter_map(|r| r["toolCallId"].as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3, "each tool call ran once: {results:?}");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM commits", &[]).await, 1, "one commit in the ledger");
    assert_eq!(env.handoff_event_count(HandoffEvent::ReplySent).await, 1, "one reply");
}

/// A database of its own for the migration tests (dropped at the end).
struct FreshDb {
    url: String,
    name: String,
    admin: String,
}

impl FreshDb {
    fn new() -> Self {
        let admin = std::env::var("TEST_ADMIN_DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("baton_test_{}", &Uuid::new_v4().simple().to_string()[..16]);
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        Self { url, name, admin }
    }
}

impl Drop for FreshDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                if let Ok((client, c)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await {
                    tokio::spawn(c);
                    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

#[tokio::test]
async fn concurrent_migrations_on_a_fresh_database_all_succeed() {
    let db = FreshDb::new();
    let migrators: Vec<_> = (0..3)
        .map(|_| {
            let migrate = tokio::process::Command::new(baton_tests::baton_binary())
                .arg("migrate")
                .env("DATABASE_URL", &db.url)
                .env("RUST_LOG", "warn")
                .output();
            tokio::spawn(migrate)
        })
        .collect();
    for migrator in migrators {
        let out = migrator.await.unwrap().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a concurrent `baton migrate` failed: {text}");
    }
    let pool = baton_store::pool(&db.url, 1).unwrap();
    let client = pool.get().await.unwrap();
    let applied = baton_store::schema::applied(&client).await.unwrap();
    assert_eq!(applied.len(), baton_store::schema::embedded().len(), "each migration recorded once: {applied:?}");
    baton_store::schema::check(&client).await.expect("the schema is the binary's");
}

/// Starts `baton up --role intake` and returns its exit code and output.
async fn start_intake(env: &TestEnv, id: &str) -> (Option<i32>, String) {
    let mut process = env.spawn_baton_env("intake", id, &[]);
    let code = process.exit_code(Duration::from_secs(20)).await;
    (code, std::fs::read_to_string(env.log_of(id)).unwrap_or_default())
}

#[tokio::test]
async fn a_role_refuses_to_start_on_a_database_behind_or_ahead_of_its_binary() {
    let env = TestEnv::new().await;
    let c = env.db().await;
    // The database misses the binary's newest migration.
    let newest = c
        .query_one("DELETE FROM refinery_schema_history WHERE version = (SELECT max(version) FROM refinery_schema_history) RETURNING *", &[])
        .await
        .unwrap();
    let (version, name): (i32, String) = (newest.get("version"), newest.get("name"));
    let (code, text) = start_intake(&env, "behind").await;
    assert_eq!(code, Some(1), "refused: {text}");
    assert!(text.contains("run `baton migrate`") && text.contains(&format!("V{version}__{name}")), "{text}");

    // Put it back, and record one this binary has never heard of.
    let (applied_on, checksum): (Option<String>, Option<String>) = (newest.get("applied_on"), newest.get("checksum"));
    c.execute(
        "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) VALUES ($1, $2, $3, $4), (99999, 'from_the_future', $3, '1')",
        &[&version, &name, &applied_on, &checksum],
    )
    .await
    .unwrap();
    let (code, text) = start_intake(&env, "ahead").await;
    assert_eq!(code, Some(1), "refused: {text}");
    assert!(
        text.contains("this binary is older than the database") && text.contains("V99999__from_the_future"),
        "{text}"
    );
}
