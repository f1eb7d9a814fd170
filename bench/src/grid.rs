//! The run: for each worker count, raw and Baton workers side by side
//! (each idle while the other is measured), every workload and number of
//! chains in flight, repetitions interleaved raw / raw + outbox / Baton.

use std::time::{Duration, Instant};

use super::cell::{self, Outcome, Spec};
use super::counters::PerHop;
use super::cpu::{self, Groups};
use super::driver::Side;
use super::procs::{self, RssSampler};
use super::profiles::Chain;
use super::{growth, say, Bench, BenchArgs, SCENARIO_TIMEOUT};

/// Worker memory readings, in KiB.
#[derive(Debug, Default)]
pub struct Memory {
    pub idle_kb: Option<u64>,
    /// Of `idle_kb`, what the worker allocated itself (`RssAnon`).
    pub idle_anon_kb: Option<u64>,
    pub loaded_kb: u64,
    /// (parents parked, RSS before, RSS after)
    pub parked: Option<(usize, u64, u64)>,
}

/// Everything the run measured.
#[derive(Default)]
pub struct Results {
    /// Each cell run, with its repetition number.
    pub cells: Vec<(usize, Outcome)>,
    /// The steady-state cells measured again over a big history.
    pub growth: Vec<Outcome>,
    pub memory: Memory,
    pub counters: Vec<PerHop>,
}

pub fn workloads(args: &BenchArgs) -> Vec<Chain> {
    let mut out = vec![];
    for (name, chain) in [("steady", Chain::Steady), ("e2e", Chain::EndToEnd), ("http", Chain::SteadyHttp)] {
        if args.workloads.iter().any(|w| w == name) {
            out.push(chain);
        }
    }
    out
}

fn sides(chain: Chain) -> &'static [Side] {
    match chain {
        Chain::Steady => &[Side::Raw, Side::RawOutbox, Side::Baton],
        Chain::EndToEnd => &[Side::Raw, Side::Baton],
        Chain::SteadyHttp => &[Side::Baton],
    }
}

pub async fn measure_all(bench: &mut Bench, args: &BenchArgs) -> anyhow::Result<Results> {
    let mut results = Results::default();
    bench.procs.spawn(&bench.settings, &procs::SUPPORT_ROLES, "support", &[])?;
    for &workers in &args.workers {
        let first = start_workers(bench, workers).await?;
        if results.memory.idle_kb.is_none() {
            results.memory.idle_kb = procs::rss_kb(first);
            results.memory.idle_anon_kb = procs::anon_kb(first);
        }
        let sampler = RssSampler::start(first);
        warm_up(bench, workers).await?;
        for chain in workloads(args) {
            for &in_flight in &args.in_flight {
                for rep in 1..=args.reps {
                    for &side in sides(chain) {
                        let spec = Spec { side, chain, workers, in_flight };
                        let outcome = run_cell(bench, spec, args.hops, args.max_secs).await?;
                        say(&outcome.progress_line(rep));
                        results.cells.push((rep, outcome));
                    }
                }
            }
        }
        results.memory.loaded_kb = results.memory.loaded_kb.max(sampler.stop().await);
        bench.procs.stop_workers().await;
    }
    if args.growth > 0 {
        results.growth = measure_growth(bench, args).await?;
    }
    if args.parked > 0 {
        results.memory.parked = Some(park(bench, args.parked).await?);
    }
    Ok(results)
}

/// Starts `count` raw workers and `count` Baton workers; returns the first Baton worker's pid.
async fn start_workers(bench: &mut Bench, count: usize) -> anyhow::Result<u32> {
    let mut first = None;
    for i in 0..count {
        bench.procs.spawn_worker(&bench.settings, Side::Raw, &["raw-worker"], &format!("raw-{i}"), &[])?;
        let pid = bench.procs.spawn_worker(
            &bench.settings,
            Side::Baton,
            &procs::WORKER_ROLES,
            &format!("worker-{i}"),
            &[],
        )?;
        first.get_or_insert(pid);
    }
    procs::wait_for_consumers(&bench.settings, Side::Raw, count).await?;
    procs::wait_for_consumers(&bench.settings, Side::Baton, count).await?;
    Ok(first.unwrap_or_default())
}

/// Hops of the warm-up, on each side.
const WARM_UP_HOPS: usize = 1000;

/// Chains on each side first: connections opened, statements prepared, and
/// tables that are not empty, analyzed.
async fn warm_up(bench: &Bench, workers: usize) -> anyhow::Result<()> {
    say(&format!("{workers} worker process(es) per side: warming up"));
    for side in [Side::Raw, Side::Baton] {
        let spec = Spec { side, chain: Chain::EndToEnd, workers, in_flight: 16 };
        cell::run(bench, spec, &vec![], WARM_UP_HOPS, Duration::from_secs(30)).await?;
    }
    // What autovacuum does within a running fleet's first minute: the
    // planner sees the tables' sizes, and plans cached while they were
    // empty are made again.
    baton_store::client(&bench.pool).await?.batch_execute("ANALYZE").await?;
    Ok(())
}

async fn groups(bench: &Bench) -> anyhow::Result<Groups> {
    let (baton, raw) = bench.procs.pids();
    Ok(vec![
        ("baton processes", baton),
        ("raw workers", raw),
        ("postgres backends", cpu::postgres_pids(&bench.pool, &bench.database).await?),
        ("rabbitmq", cpu::rabbitmq_pids()),
        ("driver", vec![std::process::id()]),
    ])
}

async fn run_cell(bench: &Bench, spec: Spec, hops: usize, max_secs: u64) -> anyhow::Result<Outcome> {
    let groups = groups(bench).await?;
    cell::run(bench, spec, &groups, hops, Duration::from_secs(max_secs)).await
}

/// Loads history, then measures steady state once more with one worker per side.
async fn measure_growth(bench: &mut Bench, args: &BenchArgs) -> anyhow::Result<Vec<Outcome>> {
    say(&format!("loading {} finished invocations (with tasks and events) and as many raw rows", args.growth));
    let took = growth::load(&bench.pool, args.growth).await?;
    say(&format!("loaded in {:.0}s", took.as_secs_f64()));
    start_workers(bench, 1).await?;
    let mut out = vec![];
    for &in_flight in &args.in_flight {
        for side in [Side::Raw, Side::Baton] {
            let outcome =
                run_cell(bench, Spec { side, chain: Chain::Steady, workers: 1, in_flight }, args.hops, args.max_secs)
                    .await?;
            say(&format!("with history: {}", outcome.progress_line(1)));
            out.push(outcome);
        }
    }
    bench.procs.stop_workers().await;
    Ok(out)
}

/// Parks `count` parents on agent_await (their children stay queued: this
/// worker consumes only the handoff queue) and reads the worker's memory.
async fn park(bench: &mut Bench, count: usize) -> anyhow::Result<(usize, u64, u64)> {
    say(&format!("parking {count} parents on agent_await through the fleet"));
    let pid = bench.procs.spawn_worker(
        &bench.settings,
        Side::Baton,
        &procs::WORKER_ROLES,
        "parking",
        &[("BATON_INVOCATION_QUEUES", "handoff")],
    )?;
    procs::wait_for_consumers(&bench.settings, Side::Baton, 1).await?;
    let before = procs::rss_kb(pid).unwrap_or(0);
    let env = bench.clone_for_slot();
    for i in 0..count {
        super::driver::send_request(&bench.publisher, &env, &format!("park-{i}"), "claude_code").await?;
    }
    let deadline = Instant::now() + SCENARIO_TIMEOUT * 3;
    loop {
        let parked: i64 = bench
            .pool
            .get()
            .await?
            .query_one("SELECT count(*) FROM invocations WHERE status = 'parked'", &[])
            .await?
            .get(0);
        if parked as usize >= count {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "only {parked} of {count} parents parked in time");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let after = procs::rss_kb(pid).unwrap_or(0);
    bench.procs.stop_workers().await;
    Ok((count, before, after))
}
