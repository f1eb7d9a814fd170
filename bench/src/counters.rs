//! The per-hop counters: a steady-state cell (32-stage chains) run on a
//! database of its own, its processes talking to Postgres and RabbitMQ
//! through counting proxies ([`crate::count`]). Per hop: commits (counted on
//! the wire, and `pg_stat_database`'s `xact_commit` for the database over
//! the whole cell, process start and stop included), statements, round
//! trips and publishes. Each chain's share of intake, its last stage and
//! the reply (1/31 of a chain's work per hop) is included.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton::config::Settings;

use super::cell::chains_for;
use super::count::{self, Counts, Snapshot};
use super::driver::{self, Side};
use super::procs::{self, Procs};
use super::profiles::Chain;
use super::{journal, say, Bench};

/// What one hop cost on one side.
#[derive(Debug, Clone)]
pub struct PerHop {
    pub side: Side,
    pub hops: usize,
    pub commits: f64,
    pub stat_commits: f64,
    pub statements: f64,
    pub round_trips: f64,
    pub publishes: f64,
}

impl PerHop {
    pub fn line(&self) -> String {
        format!(
            "{}: {} hops; per hop {:.2} commits (pg_stat_database over the whole cell: {:.2}), {:.2} statements, {:.2} round trips, {:.2} publishes",
            self.side.name(),
            self.hops,
            self.commits,
            self.stat_commits,
            self.statements,
            self.round_trips,
            self.publishes
        )
    }
}

/// Runs the counters cell for Baton, and for the raw loops when `raw` (the
/// program with the `raw-worker` command) is given. `settings` names a
/// database that is created for it and dropped afterwards.
pub async fn measure(
    settings: &Settings,
    baton: PathBuf,
    raw: Option<PathBuf>,
    hops: usize,
    in_flight: usize,
) -> anyhow::Result<Vec<PerHop>> {
    let sides: &[Side] = if raw.is_some() { &[Side::Raw, Side::RawOutbox, Side::Baton] } else { &[Side::Baton] };
    let mut bench = Bench::prepare(settings, Procs::new(baton, raw), "http://127.0.0.1:9/v1").await?;
    let counts = Arc::new(Counts::default());
    let pg = count::postgres(count::upstream(&settings.database_url, 5432).await?, counts.clone()).await?;
    let amqp = count::amqp(count::upstream(&settings.amqp_url, 5672).await?, counts.clone()).await?;
    let mut proxied = settings.clone();
    proxied.database_url = count::through(&settings.database_url, pg.addr);
    proxied.amqp_url = count::through(&settings.amqp_url, amqp.addr);
    let mut out = vec![];
    let mut outcome = Ok(());
    for &side in sides {
        match one_side(&mut bench, &proxied, &counts, side, hops, in_flight).await {
            Ok(per_hop) => {
                say(&per_hop.line());
                out.push(per_hop);
            }
            Err(e) => {
                outcome = Err(e);
                break;
            }
        }
    }
    bench.procs.stop_all().await;
    bench.cleanup(false).await?;
    outcome.map(|()| out)
}

async fn one_side(
    bench: &mut Bench,
    proxied: &Settings,
    counts: &Counts,
    side: Side,
    hops: usize,
    in_flight: usize,
) -> anyhow::Result<PerHop> {
    let chains = chains_for(Chain::Steady, hops, in_flight);
    let heads = driver::heads(bench, side, Chain::Steady, chains).await?;
    // The bench's own connections go, so the server's figures are the processes' alone.
    bench.pool.retain(|_, _| false);
    backends_gone(&bench.settings.database_url).await?;
    let stat_before = xact_commit(&bench.settings.database_url).await?;
    match side {
        Side::Baton => {
            bench.procs.spawn(proxied, &procs::SUPPORT_ROLES, "support", &[])?;
            bench.procs.spawn_worker(proxied, side, &["up", "--role", "invocation"], "worker-0", &[])?;
        }
        _ => {
            bench.procs.spawn_worker(proxied, side, &["raw-worker"], "raw-0", &[])?;
        }
    }
    procs::wait_for_consumers(&bench.settings, side, 1).await?;
    let before = quiet(counts).await;
    let drive = driver::drive(bench, side, Chain::Steady, in_flight, heads, chains, super::SCENARIO_TIMEOUT).await?;
    let delta = quiet(counts).await - before;
    bench.procs.stop_all().await;
    backends_gone(&bench.settings.database_url).await?;
    let stat_commits = xact_commit(&bench.settings.database_url).await? - stat_before;
    let hops = journal::hops(&bench.pool, side, &drive.keys).await?.len();
    Ok(per_hop(side, hops, delta, stat_commits))
}

fn per_hop(side: Side, hops: usize, d: Snapshot, stat_commits: i64) -> PerHop {
    let per = |n: f64| n / hops.max(1) as f64;
    PerHop {
        side,
        hops,
        commits: per(d.commits as f64),
        stat_commits: per(stat_commits as f64),
        statements: per(d.statements as f64),
        round_trips: per(d.round_trips as f64),
        publishes: per(d.publishes as f64),
    }
}

/// The counts once nothing has moved for a little while (work that follows
/// a chain's end, such as the relay deleting what it published, is in).
async fn quiet(counts: &Counts) -> Snapshot {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut last = counts.snapshot();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = counts.snapshot();
        if now == last || tokio::time::Instant::now() >= deadline {
            return now;
        }
        last = now;
    }
}

async fn xact_commit(url: &str) -> anyhow::Result<i64> {
    let (client, name) = super::admin(url).await?;
    Ok(client.query_one("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", &[&name]).await?.get(0))
}

/// Waits until no session is connected to the database (a backend reports
/// its statistics as it exits).
async fn backends_gone(url: &str) -> anyhow::Result<()> {
    let (client, name) = super::admin(url).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 =
            client.query_one("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", &[&name]).await?.get(0);
        if n == 0 {
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{n} sessions still on {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
