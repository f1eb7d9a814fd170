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
/// with the first turn folded into the claim: 29.3.
const MAX_STATEMENTS: f64 = 31.0;
/// Publishes per hop (all of them on confirm channels): the successor, plus
/// each chain's request, statuses, reply and "run finished" over its 31
/// hops. 2026-11-30: 1.19.
const MAX_PUBLISHES: f64 = 1.25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_hop_costs_no_more_commits_statements_and_publishes_than_the_ceiling() {
    let env = TestEnv::new().await;
    let mut settings = env.settings.clone();
    settings.database_url = format!("{}_hops", env.settings.database_url);
    settings.queue_prefix = format!("{}hops.", env.settings.queue_prefix);
    let costs =
        baton_bench::counters::measure(&settings, baton_binary(), None, 200, 4).await.expect("the counters cell runs");
    let baton = costs.iter().find(|c| c.side == baton_bench::driver::Side::Baton).expect("a Baton figure");
    println!("{}", baton.line());
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
    // A hop cannot be free: the counters see the traffic at all.
    assert!(baton.commits >= 1.0 && baton.publishes >= 1.0, "the proxies saw no traffic: {}", baton.line());
}
