//! The bench's closing tables, in markdown: per workload, each cell's
//! median over its repetitions with the spread, Little's law, CPU per hop
//! per process group, and the per-hop counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::cell::{Outcome, Spec};
use super::driver::Side;
use super::grid::{self, Results};
use super::profiles::Chain;
use super::BenchArgs;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The repetitions of one cell.
struct Reps<'a>(Vec<&'a Outcome>);

impl Reps<'_> {
    fn med(&self, f: impl Fn(&Outcome) -> f64) -> f64 {
        median(self.0.iter().map(|o| f(o)).collect())
    }

    fn spread(&self, f: impl Fn(&Outcome) -> f64) -> String {
        let v: Vec<f64> = self.0.iter().map(|o| f(o)).collect();
        let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        if v.len() < 2 {
            String::new()
        } else {
            format!(" ({lo:.0}–{hi:.0})")
        }
    }

    fn pcts(&self, f: impl Fn(&Outcome) -> [f64; 3]) -> String {
        let p: Vec<f64> = (0..3).map(|i| self.med(|o| f(o)[i])).collect();
        format!("{:.1} / {:.1} / {:.1}", p[0], p[1], p[2])
    }
}

fn reps<'a>(results: &'a Results, spec: Spec) -> Reps<'a> {
    Reps(results.cells.iter().filter(|(_, o)| o.spec == spec).map(|(_, o)| o).collect())
}

/// Unique cells of a workload, in the order they were run.
fn specs(results: &Results, chain: Chain) -> Vec<Spec> {
    let mut out: Vec<Spec> = vec![];
    for (_, o) in &results.cells {
        if o.spec.chain == chain && !out.contains(&o.spec) {
            out.push(o.spec);
        }
    }
    out.sort_by_key(|s| (s.workers, s.in_flight));
    out
}

fn raw_hops_per_sec(results: &Results, spec: Spec) -> f64 {
    let chain = if spec.chain == Chain::SteadyHttp { Chain::Steady } else { spec.chain };
    reps(results, Spec { side: Side::Raw, chain, ..spec }).med(|o| o.hops_per_sec)
}

fn workload_table(out: &mut String, results: &Results, chain: Chain) {
    let _ = writeln!(out, "\n### {}\n", chain.name());
    let _ = writeln!(
        out,
        "| workers | in flight | side | hops/s (spread) | × raw | chains/s | claim → claim p50 / p95 / p99 ms | commit → claim p50 / p95 / p99 ms | in flight ≈ chains/s × chain time | hops (window) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for spec in specs(results, chain) {
        let r = reps(results, spec);
        let hops = r.med(|o| o.hops_per_sec);
        let raw = raw_hops_per_sec(results, spec);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0}{} | {:.2} | {:.1} | {} | {} | {} ≈ {:.1} | {} |",
            spec.workers,
            spec.in_flight,
            spec.side.name(),
            hops,
            r.spread(|o| o.hops_per_sec),
            hops / raw.max(f64::EPSILON),
            r.med(|o| o.chains_per_sec),
            r.pcts(|o| o.claim_to_claim),
            r.pcts(|o| o.commit_to_claim),
            spec.in_flight,
            r.med(Outcome::little),
            r.0.iter().map(|o| o.window_hops).sum::<usize>(),
        );
    }
}

fn cpu_table(out: &mut String, results: &Results) {
    let names: Vec<&'static str> =
        results.cells.first().map(|(_, o)| o.cpu_ms.keys().copied().collect()).unwrap_or_default();
    let _ = writeln!(out, "\n### CPU per hop (ms, median over repetitions, whole cell)\n");
    let _ = writeln!(out, "| workload | workers | in flight | side | {} | total |", names.join(" | "));
    let _ = writeln!(out, "|---|---|---|---|{}---|", "---|".repeat(names.len()));
    for chain in [Chain::Steady, Chain::EndToEnd, Chain::SteadyHttp] {
        for spec in specs(results, chain) {
            let r = reps(results, spec);
            let per: BTreeMap<&str, f64> =
                names.iter().map(|n| (*n, r.med(|o| o.cpu_ms.get(n).copied().unwrap_or(0.0)))).collect();
            let cols: Vec<String> = names.iter().map(|n| format!("{:.2}", per[n])).collect();
            let total: f64 = per.iter().filter(|(n, _)| **n != "driver").map(|(_, v)| v).sum();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {:.2} |",
                chain.name(),
                spec.workers,
                spec.in_flight,
                spec.side.name(),
                cols.join(" | "),
                total
            );
        }
    }
}

fn counters_table(out: &mut String, results: &Results) {
    if results.counters.is_empty() {
        return;
    }
    let chain = results.counters[0].chain.name();
    let _ = writeln!(out, "\n### Per hop, counted on the wire ({chain}, 1 worker, 16 in flight)\n");
    let _ = writeln!(
        out,
        "| side | hops | commits | commits (pg_stat_database, whole cell) | statements | round trips | publishes | row writes | WAL bytes (full-page images) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for c in &results.counters {
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} ({:.0}) |",
            c.side.name(),
            c.hops,
            c.commits,
            c.stat_commits,
            c.statements,
            c.round_trips,
            c.publishes,
            c.row_writes,
            c.wal_bytes,
            c.fpi_bytes
        );
    }
}

pub fn render(results: &Results, args: &BenchArgs, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## Hop benchmark, {} ({} cores, {}); {} repetition(s) per cell, raw and Baton interleaved",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        std::thread::available_parallelism().map(std::num::NonZero::get).unwrap_or(0),
        memory_total(),
        args.reps,
    );
    let _ = writeln!(
        out,
        "\nhops/s over the window in which every slot was busy (first tenth left out); latency percentiles are medians over repetitions; \
         claim → claim is a successor's claim to its own successor's claim, commit → claim the handoff's commit to the successor's claim."
    );
    for chain in grid::workloads(args) {
        workload_table(&mut out, results, chain);
    }
    if !results.growth.is_empty() {
        let _ = writeln!(out, "\n### steady state over {} finished invocations\n", args.growth);
        for o in &results.growth {
            let _ = writeln!(out, "- {}", o.progress_line(1));
        }
    }
    cpu_table(&mut out, results);
    counters_table(&mut out, results);
    let m = &results.memory;
    let _ = writeln!(out, "\nInvocation worker memory (RSS):");
    if let Some(idle) = m.idle_kb {
        let anon =
            m.idle_anon_kb.map(|a| format!(" ({} allocated, the rest code and libraries)", mb(a))).unwrap_or_default();
        let _ = writeln!(out, "- idle: {}{anon}", mb(idle));
    }
    let _ = writeln!(out, "- peak under load: {}", mb(m.loaded_kb));
    if let Some((n, before, after)) = m.parked {
        let _ = writeln!(
            out,
            "- with {n} parents parked on agent_await: {} (was {} before they parked: {:+.1} MB)",
            mb(after),
            mb(before),
            (after as f64 - before as f64) / 1024.0
        );
    }
    let _ = writeln!(out, "\nThe whole bench took {:.0}s.", took.as_secs_f64());
    out
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

fn memory_total() -> String {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb: u64 = info
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0)
}
