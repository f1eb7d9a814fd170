//! Group commit: units of work ready together commit in one transaction,
//! each caller hears only after that commit, a failing unit is taken out
//! of its batch and runs alone, and a worker's claims really are grouped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton::roles::Role;
use baton_store::group_commit::{job, Batching, GroupCommit, Job};
use baton_store::GenericClient;
use baton_tests::{sample_request_json, TestEnv};

const WAIT: Duration = Duration::from_secs(60);

/// Grouping everything that arrives within a generous window while another
/// batch is in flight (see [`busy`]).
const GROUPED: Batching = Batching { max: 8, window: Duration::from_millis(300), in_flight: 2 };

type Units = GroupCommit<String, anyhow::Error>;

/// A unit that inserts `id` into `table` and returns its transaction's id;
/// `fail` makes it fail after its insert. `runs` counts its attempts.
fn insert(
    table: &'static str,
    id: i32,
    parent: Option<i32>,
    fail: bool,
    runs: Arc<AtomicUsize>,
) -> Job<String, anyhow::Error> {
    job(move |tx| {
        let runs = runs.clone();
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            match parent {
                Some(p) => tx.execute(&format!("INSERT INTO {table} (id, parent) VALUES ($1, $2)"), &[&id, &p]).await?,
                None => tx.execute(&format!("INSERT INTO {table} (id) VALUES ($1)"), &[&id]).await?,
            };
            if fail {
                tx.execute("SELECT 1 / 0", &[]).await?;
            }
            Ok(tx.query_one("SELECT txid_current()::text", &[]).await?.get(0))
        })
    })
}

/// Makes `gc` busy: a batch that holds its transaction until `release` is
/// dropped is in flight when this returns, so the next batch gathers for
/// its window (an idle group commit takes a lone unit at once).
async fn busy(env: &TestEnv, gc: &Units) -> tokio::sync::oneshot::Sender<()> {
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let held = Arc::new(tokio::sync::Mutex::new(Some(held)));
    let blocker = job(move |tx| {
        let held = held.clone();
        Box::pin(async move {
            tx.execute("SELECT 'group-commit-blocker'", &[]).await?;
            if let Some(held) = held.lock().await.take() {
                let _ = held.await;
            }
            Ok(String::new())
        })
    });
    let gc = gc.clone();
    tokio::spawn(async move { gc.run(blocker).await });
    let sql = "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE '%group-commit-blocker%' AND pid <> pg_backend_pid()";
    baton_tests::eventually(WAIT, "the blocking batch is in flight", || async {
        (env.scalar_i64(sql, &[]).await == 1).then_some(())
    })
    .await;
    release
}

/// Runs `units` at once (while a batch is in flight, so they gather); each caller checks, as soon as it hears, whether
/// its row is visible to another connection (it must be: it committed).
async fn run_all(
    env: &TestEnv,
    gc: &Units,
    table: &'static str,
    units: Vec<(i32, Job<String, anyhow::Error>)>,
) -> Vec<(i32, Result<String, String>, bool)> {
    let release = busy(env, gc).await;
    let tasks = units.into_iter().map(|(id, unit)| {
        let (gc, pool) = (gc.clone(), env.pool.clone());
        tokio::spawn(async move {
            let result = gc.run(unit).await.map_err(|e| format!("{e:#}"));
            let seen: i64 = pool
                .get()
                .await
                .unwrap()
                .query_one(&format!("SELECT count(*) FROM {table} WHERE id = $1"), &[&id])
                .await
                .unwrap()
                .get(0);
            (id, result, seen == 1)
        })
    });
    let tasks: Vec<_> = tasks.collect();
    // The units gather for the window, then commit while the blocker waits.
    let mut out = vec![];
    for task in tasks {
        out.push(task.await.unwrap());
    }
    drop(release);
    out
}

#[tokio::test]
async fn units_ready_together_commit_in_one_transaction_and_each_hears_after_the_commit() {
    let env = TestEnv::new().await;
    env.db().await.batch_execute("CREATE TABLE probe (id int PRIMARY KEY)").await.unwrap();
    let gc = Units::start(env.pool.clone(), GROUPED);
    let runs = Arc::new(AtomicUsize::new(0));
    let units = (1..=5).map(|id| (id, insert("probe", id, None, false, runs.clone()))).collect();
    let results = run_all(&env, &gc, "probe", units).await;
    let txids: std::collections::BTreeSet<_> = results.iter().map(|(_, r, _)| r.clone().unwrap()).collect();
    assert_eq!(txids.len(), 1, "five units ready together, one transaction: {results:?}");
    assert!(results.iter().all(|(_, _, seen)| *seen), "each heard only after its row committed: {results:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 5, "each ran once");
}

#[tokio::test]
async fn a_failing_unit_is_taken_out_and_runs_alone_while_its_batch_commits_without_it() {
    let env = TestEnv::new().await;
    env.db().await.batch_execute("CREATE TABLE probe (id int PRIMARY KEY)").await.unwrap();
    let gc = Units::start(env.pool.clone(), GROUPED);
    let (runs, failing_runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let units = (1..=5)
        .map(|id| {
            let counter = if id == 3 { failing_runs.clone() } else { runs.clone() };
            (id, insert("probe", id, None, id == 3, counter))
        })
        .collect();
    let results = run_all(&env, &gc, "probe", units).await;
    let (failed, others): (Vec<_>, Vec<_>) = results.into_iter().partition(|(id, _, _)| *id == 3);
    let (_, failure, seen) = &failed[0];
    assert!(failure.as_ref().is_err_and(|e| e.contains("division by zero")), "its own error, alone: {failure:?}");
    assert!(!seen, "nothing of the failed unit committed");
    assert_eq!(failing_runs.load(Ordering::SeqCst), 2, "in the batch, then alone");
    let txids: std::collections::BTreeSet<_> = others.iter().map(|(_, r, _)| r.clone().unwrap()).collect();
    assert_eq!(txids.len(), 1, "the rest committed together, without it: {others:?}");
    assert!(others.iter().all(|(_, _, seen)| *seen));
    let rows = env.scalar_i64("SELECT count(*) FROM probe", &[]).await;
    assert_eq!(rows, 4);
}

#[tokio::test]
async fn a_commit_that_fails_runs_each_unit_alone_and_only_the_guilty_one_fails() {
    let env = TestEnv::new().await;
    env.db()
        .await
        .batch_execute(
            "CREATE TABLE parent (id int PRIMARY KEY); INSERT INTO parent VALUES (1);
             CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent DEFERRABLE INITIALLY DEFERRED)",
        )
        .await
        .unwrap();
    let gc = Units::start(env.pool.clone(), GROUPED);
    let runs = Arc::new(AtomicUsize::new(0));
    // Unit 2's row points at a parent that does not exist: only the commit says so.
    let units =
        (1..=4).map(|id| (id, insert("child", id, Some(if id == 2 { 99 } else { 1 }), false, runs.clone()))).collect();
    let results = run_all(&env, &gc, "child", units).await;
    for (id, result, seen) in &results {
        match id {
            2 => assert!(result.as_ref().is_err_and(|e| e.contains("foreign key")) && !seen, "{result:?}"),
            _ => assert!(result.is_ok() && *seen, "unit {id}: {result:?}"),
        }
    }
    let txids: std::collections::BTreeSet<_> = results.iter().filter_map(|(_, r, _)| r.clone().ok()).collect();
    assert_eq!(txids.len(), 3, "after the failed commit each ran alone: {results:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 8, "four in the batch, four alone");
}

/// A worker's claims that are ready together share one transaction: the
/// transcripts of several invocations carry one `xmin`, and every run still
/// ends with one completed reply.
#[tokio::test]
async fn a_workers_claims_ready_together_commit_together_and_every_run_completes() {
    let env = TestEnv::new().await;
    env.apply_example_profiles().await;
    let mut settings = env.settings.clone();
    settings.group_commit = Batching { max: 16, window: Duration::from_millis(50), in_flight: 2 };
    let fleet = baton::fleet::Fleet::start(&settings, &[Role::Intake, Role::Relay, Role::Collector, Role::Invocation]);
    let mut replies = env.replies().await;
    let ids: Vec<String> = (0..8).map(|i| format!("grouped-{i}")).collect();
    for id in &ids {
        // Each in a chat of its own, so the runs do not take turns.
        let mut request = sample_request_json(id, "docs_agent", "en");
        request["conversationKey"] = format!("chat-{id}").into();
        env.send_request(&request).await;
    }
    let mut completed = std::collections::BTreeMap::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while completed.len() < ids.len() {
        assert!(tokio::time::Instant::now() < deadline, "replies so far: {completed:?}");
        let message = baton_tests::next_json(&mut replies, WAIT).await;
        if message["type"] == "reply" {
            let id = message["handoffId"].as_str().unwrap().to_string();
            assert!(completed.insert(id, message["status"].as_str().unwrap().to_string()).is_none(), "one reply each");
        }
    }
    fleet.stop().await;
    assert!(completed.values().all(|s| s == "completed"), "{completed:?}");
    let most = env
        .scalar_i64(
            "SELECT max(n) FROM (SELECT count(DISTINCT invocation_id) AS n FROM transcript GROUP BY xmin::text) t",
            &[],
        )
        .await;
    assert!(
        most >= 2,
        "some transaction stored the steps of {most} invocation(s); claims ready together commit together"
    );
    let sent = env.scalar_i64("SELECT count(*) FROM handoff_requests WHERE reply_sent_at IS NOT NULL", &[]).await;
    assert_eq!(sent, ids.len() as i64);
}

/// An idle group commit does not wait out its window for company: a lone
/// unit commits at once (here, long before a window of a minute).
#[tokio::test]
async fn an_idle_group_commit_commits_a_lone_unit_at_once() {
    let env = TestEnv::new().await;
    env.db().await.batch_execute("CREATE TABLE probe (id int PRIMARY KEY)").await.unwrap();
    let gc = Units::start(env.pool.clone(), Batching { max: 8, window: Duration::from_secs(60), in_flight: 2 });
    let unit = insert("probe", 1, None, false, Arc::new(AtomicUsize::new(0)));
    let result = tokio::time::timeout(WAIT / 2, gc.run(unit)).await;
    assert!(result.is_ok_and(|r| r.is_ok()), "the lone unit committed without waiting for the window");
    assert_eq!(env.scalar_i64("SELECT count(*) FROM probe", &[]).await, 1);
}

/// A store transaction's `BEGIN` goes out with its first statement, not on
/// its own: its statements still run in one transaction (one transaction
/// id; nothing it writes is seen elsewhere before the commit), one dropped
/// without a commit is rolled back, and the pooled connection it ran on
/// is idle again for its next user.
#[tokio::test]
async fn a_store_transaction_begins_with_its_first_statement_and_rolls_back_when_dropped() {
    let env = TestEnv::new().await;
    let table = format!("tx_probe_{}", uuid::Uuid::new_v4().simple());
    env.db().await.batch_execute(&format!("CREATE TABLE {table} (id int)")).await.unwrap();
    let other = env.db().await;
    let count_sql = format!("SELECT count(*) FROM {table}");

    let mut client = env.db().await;
    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.execute(format!("INSERT INTO {table} VALUES (1)").as_str(), &[]).await.unwrap();
    let xid = |row: tokio_postgres::Row| row.get::<_, String>(0);
    let first = xid(tx.query_one("SELECT txid_current()::text", &[]).await.unwrap());
    tx.execute(format!("INSERT INTO {table} VALUES (2)").as_str(), &[]).await.unwrap();
    let second = xid(tx.query_one("SELECT txid_current()::text", &[]).await.unwrap());
    assert_eq!(first, second, "every statement ran in one transaction");
    assert_eq!(rows(&other, &count_sql).await, 0, "nothing is seen before the commit");
    baton_store::commit(tx).await.unwrap();
    assert_eq!(rows(&other, &count_sql).await, 2);

    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.execute(format!("INSERT INTO {table} VALUES (3)").as_str(), &[]).await.unwrap();
    drop(tx);
    // The same connection: inside a transaction left open it would see its row.
    let idle: bool = client.query_one("SELECT txid_current_if_assigned() IS NULL", &[]).await.unwrap().get(0);
    assert!(idle, "no transaction is left open on the connection");
    assert_eq!(rows(&client, &count_sql).await, 2, "the dropped transaction's row is gone");
}

#[tokio::test]
async fn a_write_queued_for_the_commit_goes_out_with_it_and_its_failure_rolls_the_transaction_back() {
    let env = TestEnv::new().await;
    let table = format!("tx_at_commit_{}", uuid::Uuid::new_v4().simple());
    env.db().await.batch_execute(&format!("CREATE TABLE {table} (id int PRIMARY KEY)")).await.unwrap();
    let other = env.db().await;
    let count_sql = format!("SELECT count(*) FROM {table}");
    let insert = format!("INSERT INTO {table} VALUES ($1)");
    let queued = |n: i32| -> baton_store::OwnedParams { vec![Box::new(n)] };

    let mut client = env.db().await;
    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.execute(insert.as_str(), &[&1i32]).await.unwrap();
    tx.write_at_commit(tx.prepare_cached(&insert).await.unwrap(), queued(2));
    // Queued, not sent: a statement after it runs before it.
    let seen = format!("SELECT count(*) FROM {table} WHERE id = 2");
    assert_eq!(rows_in(&tx, &seen).await, 0, "the queued write waits for the commit");
    baton_store::commit(tx).await.unwrap();
    assert_eq!(rows(&other, &count_sql).await, 2, "the queued write committed with the transaction");

    // A queued write's rows are given to its `then` once committed.
    let returning = format!("INSERT INTO {table} VALUES ($1) RETURNING id * 10");
    let seen = Arc::new(std::sync::Mutex::new(vec![]));
    let then = |seen: &Arc<std::sync::Mutex<Vec<i32>>>| -> baton_store::Then {
        let seen = seen.clone();
        Box::new(move |rows: &[tokio_postgres::Row]| {
            seen.lock().unwrap().extend(rows.iter().map(|r| r.get::<_, i32>(0)));
        })
    };
    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.write_at_commit_then(tx.prepare_cached(&returning).await.unwrap(), queued(5), then(&seen));
    baton_store::commit(tx).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [50], "the committed write's rows");

    // A queued write that fails: the commit says why and keeps nothing, and
    // no `then` hears of rows that were rolled back.
    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.execute(insert.as_str(), &[&3i32]).await.unwrap();
    tx.write_at_commit_then(tx.prepare_cached(&returning).await.unwrap(), queued(6), then(&seen));
    tx.write_at_commit(tx.prepare_cached(&insert).await.unwrap(), queued(1));
    let e = baton_store::commit(tx).await.expect_err("a duplicate key fails the commit");
    assert_eq!(*seen.lock().unwrap(), [50], "nothing is said of a write that was rolled back");
    assert!(format!("{e}").contains("duplicate key"), "{e}");
    assert_eq!(rows(&other, &count_sql).await, 3, "rows 3 and 6 were rolled back with the failed write");
    let idle: bool = client.query_one("SELECT txid_current_if_assigned() IS NULL", &[]).await.unwrap().get(0);
    assert!(idle, "no transaction is left open on the connection");

    // Dropped uncommitted: the queued write is never sent.
    let tx = baton_store::begin(&mut client).await.unwrap();
    tx.write_at_commit(tx.prepare_cached(&insert).await.unwrap(), queued(4));
    drop(tx);
    assert_eq!(rows(&client, &count_sql).await, 3, "a dropped transaction's queued write is not written");
}

async fn rows_in(c: &baton_store::Transaction<'_>, count_sql: &str) -> i64 {
    c.query_one(count_sql, &[]).await.unwrap().get(0)
}

async fn rows(c: &baton_store::Client, count_sql: &str) -> i64 {
    c.query_one(count_sql, &[]).await.unwrap().get(0)
}
