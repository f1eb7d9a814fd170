//! The per-hop regression guard: a small steady-state cell (real `baton`
//! processes, 32-stage scripted chains) run through the bench's counting
//! proxies, and what one hop costs held under a ceiling. The ceilings are
//! today's figures with a little slack; lower them as the hot path gets
//! cheaper.

use baton_tests::{baton_binary, TestEnv};

/// Commits per hop, counted on the wire (COMMIT tags and implicit commits).
/// 2026-11-30 (main at d54658d): 6.19; after each role publishes its own
/// rows (no relay trip, confirmed rows deleted in batches): 3.24; with a
/// scripted stage's first turn folded into its claim: 2.17 (one on the
/// critical path, plus the batched deletes of confirmed rows); with those
/// deletes gathered for up to 25 ms: 1.47.
const MAX_COMMITS: f64 = 2.0;
/// Statements per hop (every Execute and simple Query, BEGIN and COMMIT
/// included). 2026-11-30: 38.3; after the one-round-trip claim: 32.5;
/// with the first turn folded into the claim: 29.3. 2026-12-01: 25.6; with
/// each step's transcript and journal written as one row each: 22.2; with
/// the claim reading the run, its spend, the task and the profiles'
/// version (the profile then read from a cached copy): 16.0; with a
/// handoff's end of its invocation, its run's count, its task and its spend
/// one statement: 13.1, and with it counting the target's tasks too: 12.0.
/// 2026-12-02: no task row for a handoff stage: 10.9; a step's transcript
/// and journal rows one statement, and a new invocation and its outbox row
/// one: 8.9; intake's and the collector's statements cut: 7.9; the
/// successor run where it was handed to (eager dispatch: no outbox row to
/// delete): 7.0; the handoff's end and its successor's insert one: 6.0.
const MAX_STATEMENTS: f64 = 7.0;
/// Rows inserted, updated and deleted per hop (`pg_stat_database`).
/// 2026-12-01: 29.2; with a step's transcript and journal one row each:
/// 13.5; with a handoff's spend in the write that ends its invocation: 12.5.
/// 2026-12-02: no task row for a handoff stage and no run update: 8.6; a
/// scripted stage's claim written with its end (one version): 7.6; intake
/// and the collector writing each row once: 7.3; eager dispatch (no
/// outbox row inserted and deleted per hop): 5.2.
const MAX_ROW_WRITES: f64 = 6.0;
/// Bytes of WAL per hop written for the cell's database, full-page images
/// left out (they depend on when the server checkpoints). 2026-12-01:
/// 14,100 (full-page images included); one transcript and one journal row
/// per step: 10,100. 2026-12-02: the handoff's task row gone and the brief
/// stored as given: 6,300; the opening prompt stored as its profiles
/// version: 5,400; the journal's types as an enum and its main invocation
/// once: 4,900; one version of the invocation row fewer: 4,400; intake
/// and the collector leaner: 4,250; eager dispatch: 3,800. 2026-12-05: a
/// row's payloads as one compact JSON array, and no payload repeating an
/// invocation's row: 2,870 (the target is 3,000).
const MAX_WAL_BYTES: f64 = 3_000.0;
/// Publishes per hop (all of them on confirm channels): the successor, plus
/// each chain's request, statuses, reply and "run finished" over its 31
/// hops. 2026-11-30: 1.19; with eager dispatch (the successor runs where it
/// was handed to, with no message): 0.19, the chain's own messages.
const MAX_PUBLISHES: f64 = 0.3;

/// The test's settings for a counters cell: a database and a queue prefix
/// of the cell's own (`name`), beside the test's.
fn cell_settings(env: &TestEnv, name: &str) -> baton::config::Settings {
    let mut settings = env.settings.clone();
    settings.database_url = format!("{}_{name}", env.settings.database_url);
    settings.queue_prefix = format!("{}{}.", env.settings.queue_prefix, name.replace('_', ""));
    settings
}

/// Baton's figures of a counters cell, printed.
fn baton_of(costs: &[baton_bench::counters::PerHop]) -> &baton_bench::counters::PerHop {
    let baton = costs.iter().find(|c| c.side == baton_bench::driver::Side::Baton).expect("a Baton figure");
    println!("{}", baton.line());
    baton
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_hop_costs_no_more_commits_statements_publishes_row_writes_and_wal_than_the_ceiling() {
    let env = TestEnv::new().await;
    let settings = cell_settings(&env, "hops");
    let costs =
        baton_bench::counters::measure(&settings, baton_binary(), None, 200, 4).await.expect("the counters cell runs");
    let baton = baton_of(&costs);
    assert!(baton.hops >= 200, "only {} hops ran", baton.hops);
    assert!(baton.commits <= MAX_COMMITS, "{:.2} commits per hop, over the ceiling of {MAX_COMMITS}", baton.commits);
    assert!(
        baton.statements <= MAX_STATEMENTS,
        "{:.2} statements per hop, over the ceiling of {MAX_STATEMENTS}",
        baton.statements
    );
    assert!(
        baton.publishes <= MAX_PUBLISHES,
        "{:.2} publishes per hop, over the ceiling of {MAX_PUBLISHES}",
        baton.publishes
    );
    assert!(
        baton.row_writes <= MAX_ROW_WRITES,
        "{:.1} row writes per hop, over the ceiling of {MAX_ROW_WRITES}",
        baton.row_writes
    );
    let wal = baton.wal_bytes - baton.fpi_bytes;
    assert!(
        wal <= MAX_WAL_BYTES,
        "{wal:.0} bytes of WAL per hop (no full-page images), over the ceiling of {MAX_WAL_BYTES}"
    );
    // A hop cannot be free: the counters see the traffic at all (each
    // chain publishes its start and end; claims may share a commit).
    assert!(
        baton.commits >= 0.1 && baton.publishes >= 0.1 && baton.row_writes >= 1.0 && baton.wal_bytes >= 100.0,
        "the proxies saw no traffic: {}",
        baton.line()
    );
}

/// Per end-to-end hop (a 3-stage chain from the bridge's request to its
/// reply: two hops): 2026-12-05, before a request's root was taken where it
/// was taken in and its run answered by the transaction that ends it: 3.0
/// publishes, 23.0 row writes, 27.0 statements, 11,600 bytes of WAL; then,
/// with the last stage's row written once: 2.0, 19.5, 20.7 and 10,950; now,
/// with each bridge message written once (V38), a root's brief not stored
/// (V39), a write that is its own read, a root running from intake's commit
/// and bridge messages published with no transaction of their own: 2.0,
/// 16.0, 17.2 and 8,910; now, with no primary key on bridge messages (V41),
/// a run's end and a request's start as HOT updates (V42) and a status
/// stored as its status, number and time (V43): 2.0, 16.0, 17.3 and 7,950
/// (the targets: 16 row writes and 6,000 bytes); then, with one
/// bridge message row for the messages a statement writes (V46): 2.0, 14.0,
/// 17.0 and 7,195; now, with the statement's handoff events in that row
/// (V47) and a run's first events kept by its row (V48): 2.0, 13.0, 16.9
/// and 6,870; then, with a request's body compressed (V49), step kinds and
/// handoff events as enums (V50), a reply's row without what its request
/// says, a run's first events in intake's bridge row (V51), a tool result
/// without its call's name and two workspace reads and three statements
/// fewer per request: 2.0, 12.5, 14.4 and 5,940 (the target: 6,000
/// bytes). Those are the bench's, at 16 in flight; this cell runs 4, where
/// fewer messages share a publisher's round and more commits are written:
/// 12.6 row writes, 16.4 statements, 5,950 bytes. Then, with statements
/// sent two at a time where neither waits for the other's answer (intake's
/// lock and insert, its run and its status, a run's answer and its
/// conversation's queue) and a run's last owner completed with it: at the
/// bench's 16 in flight 13.9 statements and 12.7 round trips per hop (14.4
/// and 14.7 before); here 15.8 statements and 15.2 round trips. And with a
/// transaction's `BEGIN` sent with its first statement: 11.4 round trips at
/// 16 in flight, 13.6 here. Then, with a step's transcript and journal row
/// sent with the `COMMIT`, a new chat, a root taken here, a run's answer
/// and its chat's next request read with the statements before them, and a
/// bridge message's writer saying what it waits for: 13.2 statements and
/// 7.5 round trips at 16 in flight, 14.6 and 8.8–8.9 here.
const E2E_MAX_PUBLISHES: f64 = 2.1;
const E2E_MAX_ROW_WRITES: f64 = 13.0;
const E2E_MAX_STATEMENTS: f64 = 15.5;
const E2E_MAX_WAL_BYTES: f64 = 6_100.0;
const E2E_MAX_ROUND_TRIPS: f64 = 9.8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_to_end_hop_costs_no_more_publishes_row_writes_statements_and_wal_than_the_ceiling() {
    let env = TestEnv::new().await;
    let settings = cell_settings(&env, "e2e_hops");
    let chain = baton_bench::profiles::Chain::EndToEnd;
    let costs =
        baton_bench::counters::measure_chain(&settings, baton_binary(), None, chain, 100, 4, "http://127.0.0.1:9/v1")
            .await
            .expect("the counters cell runs");
    let baton = baton_of(&costs);
    assert!(baton.hops >= 100, "only {} hops ran", baton.hops);
    let wal = baton.wal_bytes - baton.fpi_bytes;
    let over = [
        ("publishes", baton.publishes, E2E_MAX_PUBLISHES),
        ("row writes", baton.row_writes, E2E_MAX_ROW_WRITES),
        ("statements", baton.statements, E2E_MAX_STATEMENTS),
        ("round trips", baton.round_trips, E2E_MAX_ROUND_TRIPS),
        ("bytes of WAL", wal, E2E_MAX_WAL_BYTES),
    ];
    for (what, figure, ceiling) in over {
        assert!(
            figure <= ceiling,
            "{figure:.2} {what} per end-to-end hop, over the ceiling of {ceiling}: {}",
            baton.line()
        );
    }
    assert!(baton.publishes >= 1.0 && baton.row_writes >= 5.0, "the proxies saw no traffic: {}", baton.line());
}

/// A handoff's end, the one statement every steady hop runs, is planned
/// once per connection, not at every execution: after Postgres' five
/// custom plans it takes the generic one, which it does only when that plan
/// costs no more. With the children's kind a parameter, the generic plan
/// could not use the partial index `invocations_by_parent` and scanned the
/// table (on a table of any size), so each hop paid a quarter of a
/// millisecond of planning.
#[tokio::test]
async fn a_handoff_s_end_runs_on_a_generic_plan() {
    let env = TestEnv::new().await;
    let mut client = env.db().await;
    // Enough finished work for the planner to weigh a scan against an index.
    let finished = "INSERT INTO invocations (id, run_id, profile_id, kind, status, exit_policy, brief)
                    SELECT gen_random_uuid(), gen_random_uuid(), 'writer', 'root', 'completed', 'run_finish_allowed', 'Done.'
                      FROM generate_series(1, 5000);
                    ANALYZE invocations;";
    client.batch_execute(finished).await.unwrap();
    let sql = baton_store::invocations::hand_over_sql();
    let statement = client.prepare(&sql).await.unwrap();
    let live = vec!["created", "running", "parked"];
    let tx = client.transaction().await.unwrap();
    for _ in 0..8 {
        let (id, run) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] =
            [&id, &"transferred", &1i32, &1i32, &live, &run, &"writer", &"root", &1i64, &0i64];
        tx.query(&statement, &params).await.unwrap();
    }
    let plans = "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1";
    let row = tx.query_one(plans, &[&sql]).await.unwrap();
    let (generic, custom): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((generic, custom), (3, 5), "planned afresh at every execution: {custom} custom plans");
}
