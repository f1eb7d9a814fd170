//! The bench's closing table.

use std::fmt::Write;
use std::time::Duration;

use super::scenario::{Measurement, Side};

pub struct Row {
    pub side: Side,
    pub workers: usize,
    pub concurrency: usize,
    pub tables: String,
    pub m: Measurement,
}

impl Row {
    pub fn progress_line(&self) -> String {
        format!(
            "{:<5} {} worker(s), {:>2} in flight, {} tables: {} chains ({} hops) in {:.1}s, {:.0} hops/s, p50 {:.1} ms, p99 {:.1} ms",
            self.side.name(),
            self.workers,
            self.concurrency,
            self.tables,
            self.m.chains,
            self.m.hops,
            self.m.wall.as_secs_f64(),
            self.m.hops_per_sec,
            self.m.latency_ms[0],
            self.m.latency_ms[2]
        )
    }
}

/// Worker memory readings, in KiB.
#[derive(Debug, Default)]
pub struct Memory {
    pub idle_kb: Option<u64>,
    pub loaded_kb: u64,
    /// (parents parked, RSS before, RSS after)
    pub parked: Option<(usize, u64, u64)>,
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

pub fn render(rows: &[Row], memory: &Memory, took: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Hop benchmark, {} on {} cores ({}), 3-stage chains; latency = handoff committed -> successor claimed",
        chrono::Utc::now().format("%Y-%m-%d"),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        memory_total()
    );
    let _ = writeln!(
        out,
        "\n| tables | workers | in flight | raw hops/s | baton hops/s | ratio | raw p50 | baton p50 | ratio | raw p95 | baton p95 | raw p99 | baton p99 |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for baton in rows.iter().filter(|r| r.side == Side::Baton) {
        let Some(raw) = rows.iter().find(|r| r.side == Side::Raw && r.workers == baton.workers && r.concurrency == baton.concurrency && r.tables == baton.tables) else {
            continue;
        };
        let (b, r) = (&baton.m, &raw.m);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.1} ms | {:.1} ms | {:.2} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
            baton.tables,
            baton.workers,
            baton.concurrency,
            r.hops_per_sec,
            b.hops_per_sec,
            b.hops_per_sec / r.hops_per_sec.max(f64::EPSILON),
            r.latency_ms[0],
            b.latency_ms[0],
            b.latency_ms[0] / r.latency_ms[0].max(f64::EPSILON),
            r.latency_ms[1],
            b.latency_ms[1],
            r.latency_ms[2],
            b.latency_ms[2],
        );
    }
    let _ = writeln!(out, "\nInvocation worker memory (RSS):");
    if let Some(idle) = memory.idle_kb {
        let _ = writeln!(out, "- idle: {}", mb(idle));
    }
    let _ = writeln!(out, "- peak under load (the most chains in flight): {}", mb(memory.loaded_kb));
    if let Some((n, before, after)) = memory.parked {
        let _ = writeln!(out, "- with {n} parents parked on agent_await: {} (was {} before they parked: {:+.1} MB)", mb(after), mb(before), (after as f64 - before as f64) / 1024.0);
    }
    let _ = writeln!(out, "\nThe whole bench took {:.0}s.", took.as_secs_f64());
    out
}

fn memory_total() -> String {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kb: u64 = info.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or(0);
    format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0)
}
