//! One cell of the bench: a side, a workload, a worker count and a number
//! of chains in flight, run once; what it measured.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::cpu::{self, Groups};
use super::driver::{self, Side};
use super::journal::{self, Hop};
use super::profiles::Chain;
use super::Bench;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Spec {
    pub side: Side,
    pub chain: Chain,
    pub workers: usize,
    pub in_flight: usize,
}

/// What one run of a cell measured. Throughput and latency come from the
/// window in which every slot was busy (its first tenth left out as ramp).
#[derive(Debug, Clone)]
pub struct Outcome {
    pub spec: Spec,
    /// Hops of the whole cell, and of the window.
    pub hops: usize,
    pub window_hops: usize,
    pub window_secs: f64,
    pub hops_per_sec: f64,
    pub chains_per_sec: f64,
    /// Mean time from a chain's start to its end, as the driver saw it (ms).
    pub chain_ms: f64,
    /// Mean claim → claim (ms): a hop's cycle time.
    pub cycle_ms: f64,
    pub claim_to_claim: [f64; 3],
    pub commit_to_claim: [f64; 3],
    /// CPU milliseconds per hop of each process group, over the whole cell.
    pub cpu_ms: BTreeMap<&'static str, f64>,
}

impl Outcome {
    /// Little's law: chains in flight = chains/s (hops/s over the hops of a
    /// chain) × the mean time from a chain's start to its end as the driver
    /// saw it. Close to the slots when the driver never waits outside a chain.
    pub fn little(&self) -> f64 {
        self.chains_per_sec * self.chain_ms / 1000.0
    }

    pub fn progress_line(&self, rep: usize) -> String {
        let s = &self.spec;
        format!(
            "{:<12} {:<30} {}w {:>2} in flight #{rep}: {:>5} hops ({:>5} in window {:.1}s) {:>6.0} hops/s {:>6.1} chains/s | claim→claim p50 {:.1} p99 {:.1} mean {:.1} ms | commit→claim p50 {:.1} ms | in flight {} ≈ {:.1}",
            s.side.name(),
            s.chain.name(),
            s.workers,
            s.in_flight,
            self.hops,
            self.window_hops,
            self.window_secs,
            self.hops_per_sec,
            self.chains_per_sec,
            self.claim_to_claim[0],
            self.claim_to_claim[2],
            self.cycle_ms,
            self.commit_to_claim[0],
            s.in_flight,
            self.little(),
        )
    }
}

/// Chains a cell runs: enough for `hops` hops, and at least one more than the slots.
pub fn chains_for(chain: Chain, hops: usize, in_flight: usize) -> usize {
    hops.div_ceil(chain.stages() as usize - 1).max(in_flight + 1)
}

pub async fn run(bench: &Bench, spec: Spec, groups: &Groups, hops: usize, max: Duration) -> anyhow::Result<Outcome> {
    let chains = chains_for(spec.chain, hops, spec.in_flight);
    let heads = driver::heads(bench, spec.side, spec.chain, chains).await?;
    let before = cpu::read(groups);
    let drive = driver::drive(bench, spec.side, spec.chain, spec.in_flight, heads, chains, max).await?;
    let after = cpu::read(groups);
    let all = journal::hops(&bench.pool, spec.side, &drive.keys).await?;
    Ok(summarize(spec, &drive, &all, after.ms_per_hop_since(&before, all.len())))
}

fn summarize(spec: Spec, drive: &driver::Drive, all: &[Hop], cpu_ms: BTreeMap<&'static str, f64>) -> Outcome {
    let (busy_from, busy_to) = drive.all_busy;
    let ramp = (busy_to - busy_from) / 10;
    let (from, to) = (busy_from + ramp, busy_to);
    let inside = |t: DateTime<Utc>| t >= from && t <= to;
    let mut window: Vec<&Hop> = all.iter().filter(|h| inside(h.claimed)).collect();
    if window.is_empty() {
        window = all.iter().collect();
    }
    let secs = ((to - from).num_microseconds().unwrap_or(0) as f64 / 1e6).max(1e-3);
    let hops_per_sec = window.len() as f64 / secs;
    // A chain's time counts when the chain was mostly inside the window.
    let mut timed: Vec<_> = drive.chains.iter().filter(|c| inside(c.started + (c.ended - c.started) / 2)).collect();
    if timed.is_empty() {
        timed = drive.chains.iter().collect();
    }
    let chain_ms =
        journal::mean(timed.iter().map(|c| (c.ended - c.started).num_microseconds().unwrap_or(0) as f64 / 1000.0));
    Outcome {
        spec,
        hops: all.len(),
        window_hops: window.len(),
        window_secs: secs,
        hops_per_sec,
        chains_per_sec: hops_per_sec / (spec.chain.stages() - 1) as f64,
        chain_ms,
        cycle_ms: journal::mean(window.iter().map(|h| h.claim_to_claim_ms)),
        claim_to_claim: journal::percentiles(window.iter().map(|h| h.claim_to_claim_ms).collect()),
        commit_to_claim: journal::percentiles(window.iter().map(|h| h.commit_to_claim_ms).collect()),
        cpu_ms,
    }
}
