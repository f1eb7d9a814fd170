//! The per-hop counters: a steady-state cell (32-stage chains), or with
//! `--counters-workload e2e` a 3-stage end-to-end cell, run on a database
//! of its own, its processes talking to Postgres and RabbitMQ
//! through counting proxies ([`crate::count`]). Per hop: commits (counted on
//! the wire, and `pg_stat_database`'s `xact_commit` for the database over
//! the whole cell, process start and stop included), statements, round
//! trips, publishes, row writes (`pg_stat_database`) and bytes of WAL (the
//! database's own records, read with `pg_walinspect`). Each chain's share of intake, its last stage and
//! the reply (1/31 of a chain's work per hop; 1/2 end to end) is included.
//! With `BATON_BENCH_LOG_STATEMENTS=1` the cell's database logs every
//! statement (`log_statement = 'all'` on that database alone, gone with it).

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
    pub chain: Chain,
    pub hops: usize,
    pub commits: f64,
    pub stat_commits: f64,
    pub statements: f64,
    pub round_trips: f64,
    pub publishes: f64,
    /// Rows inserted, updated and deleted in the cell's database
    /// (`pg_stat_database`), per hop.
    pub row_writes: f64,
    /// Bytes of WAL the cell's database wrote, per hop: the records that
    /// touch its relations and the commits of their transactions, read with
    /// `pg_walinspect` (the server's WAL is shared; other databases' records
    /// are left out).
    pub wal_bytes: f64,
    /// Of those, the bytes of full-page images (a page's first change after
    /// a checkpoint logs the whole page): they depend on when the server
    /// checkpoints, so a guard reads the WAL without them.
    pub fpi_bytes: f64,
}

impl PerHop {
    pub fn line(&self) -> String {
        format!(
            "{}, {}: {} hops; per hop {:.2} commits (pg_stat_database over the whole cell: {:.2}), {:.2} statements, {:.2} round trips, {:.2} publishes, {:.1} row writes, {:.0} bytes of WAL ({:.0} of them full-page images)",
            self.side.name(),
            self.chain.name(),
            self.hops,
            self.commits,
            self.stat_commits,
            self.statements,
            self.round_trips,
            self.publishes,
            self.row_writes,
            self.wal_bytes,
            self.fpi_bytes
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
    measure_chain(settings, baton, raw, Chain::Steady, hops, in_flight, "http://127.0.0.1:9/v1").await
}

/// [`measure`], for the chains of `chain`, whose stages ask the model
/// server at `model_url` when they are [`Chain::SteadyHttp`]'s (Baton's side
/// alone: the raw loop has no model).
pub async fn measure_chain(
    settings: &Settings,
    baton: PathBuf,
    raw: Option<PathBuf>,
    chain: Chain,
    hops: usize,
    in_flight: usize,
    model_url: &str,
) -> anyhow::Result<Vec<PerHop>> {
    let sides: &[Side] = match (&raw, chain) {
        (None, _) | (_, Chain::SteadyHttp) => &[Side::Baton],
        (Some(_), Chain::Steady) => &[Side::Raw, Side::RawOutbox, Side::Baton],
        (Some(_), Chain::EndToEnd) => &[Side::Raw, Side::Baton],
    };
    let mut bench = Bench::prepare(settings, Procs::new(baton, raw), model_url).await?;
    let counts = Arc::new(Counts::default());
    let pg = count::postgres(count::upstream(&settings.database_url, 5432).await?, counts.clone()).await?;
    let amqp = count::amqp(count::upstream(&settings.amqp_url, 5672).await?, counts.clone()).await?;
    let mut proxied = settings.clone();
    proxied.database_url = count::through(&settings.database_url, pg.addr);
    proxied.amqp_url = count::through(&settings.amqp_url, amqp.addr);
    let mut out = vec![];
    let mut outcome = Ok(());
    for &side in sides {
        match one_side(&mut bench, &proxied, &counts, side, chain, hops, in_flight).await {
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
    // BATON_BENCH_KEEP=1 keeps the cell's database to look at what a hop wrote.
    bench.cleanup(std::env::var_os("BATON_BENCH_KEEP").is_some()).await?;
    outcome.map(|()| out)
}

async fn one_side(
    bench: &mut Bench,
    proxied: &Settings,
    counts: &Counts,
    side: Side,
    chain: Chain,
    hops: usize,
    in_flight: usize,
) -> anyhow::Result<PerHop> {
    let chains = chains_for(chain, hops, in_flight);
    let heads = driver::heads(bench, side, chain, chains).await?;
    if std::env::var_os("BATON_BENCH_LOG_STATEMENTS").is_some() {
        let (client, name) = super::admin(&bench.settings.database_url).await?;
        client.batch_execute(&format!("ALTER DATABASE \"{name}\" SET log_statement = 'all'")).await?;
    }
    // The bench's own connections go, so the server's figures are the processes' alone.
    bench.pool.retain(|_, _| false);
    backends_gone(&bench.settings.database_url).await?;
    // The server keeps its WAL from here until the cell's has been read.
    let kept = keep_wal(&bench.settings.database_url).await?;
    let stat_before = database_stats(&bench.settings.database_url).await?;
    let tables_before = table_writes(&bench.settings.database_url).await?;
    match side {
        Side::Baton => {
            bench.procs.spawn(proxied, &procs::SUPPORT_ROLES, "support", &[])?;
            bench.procs.spawn_worker(proxied, side, &procs::WORKER_ROLES, "worker-0", &[])?;
        }
        _ => {
            bench.procs.spawn_worker(proxied, side, &["raw-worker"], "raw-0", &[])?;
        }
    }
    procs::wait_for_consumers(&bench.settings, side, 1).await?;
    let before = quiet(counts).await;
    let drive = driver::drive(bench, side, chain, in_flight, heads, chains, super::SCENARIO_TIMEOUT).await?;
    let delta = quiet(counts).await - before;
    bench.procs.stop_all().await;
    backends_gone(&bench.settings.database_url).await?;
    let stats = database_stats(&bench.settings.database_url).await?.since(&stat_before);
    let tables = table_writes(&bench.settings.database_url).await?;
    let (wal, parts) = wal_bytes(&bench.settings.database_url, &stat_before.lsn).await?;
    let fpi = parts.iter().find(|(part, _)| part == FPI).map_or(0, |(_, b)| *b);
    let parts: Vec<(String, i64)> = parts.into_iter().filter(|(part, _)| part != FPI).collect();
    drop(kept);
    let hops = journal::hops(&bench.pool, side, &drive.keys).await?.len();
    let per = |bytes: i64| bytes as f64 / hops.max(1) as f64;
    let largest: Vec<String> = parts.iter().take(16).map(|(part, b)| format!("{part} {:.0}", per(*b))).collect();
    say(&format!("{}: WAL per hop by relation (bytes): {}", side.name(), largest.join(", ")));
    let mut written: Vec<(String, [i64; 3])> = tables
        .into_iter()
        .map(|(table, now)| {
            let was = tables_before.iter().find(|(t, _)| *t == table).map_or([0; 3], |(_, w)| *w);
            (table, [now[0] - was[0], now[1] - was[1], now[2] - was[2]])
        })
        .filter(|(_, w)| w.iter().any(|n| *n != 0))
        .collect();
    written.sort_by_key(|(_, w)| -(w[0] + w[1] + w[2]));
    let written: Vec<String> =
        written.iter().map(|(t, [i, u, d])| format!("{t} {:.2}/{:.2}/{:.2}", per(*i), per(*u), per(*d))).collect();
    say(&format!("{}: row writes per hop by table (inserted/updated/deleted): {}", side.name(), written.join(", ")));
    Ok(per_hop(side, chain, hops, delta, &stats, (wal, fpi)))
}

fn per_hop(
    side: Side,
    chain: Chain,
    hops: usize,
    d: Snapshot,
    stats: &DatabaseStats,
    (wal, fpi): (i64, i64),
) -> PerHop {
    let per = |n: f64| n / hops.max(1) as f64;
    PerHop {
        side,
        chain,
        hops,
        commits: per(d.commits as f64),
        stat_commits: per(stats.commits as f64),
        statements: per(d.statements as f64),
        round_trips: per(d.round_trips as f64),
        publishes: per(d.publishes as f64),
        row_writes: per(stats.row_writes as f64),
        wal_bytes: per(wal as f64),
        fpi_bytes: per(fpi as f64),
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

/// What `pg_stat_database` says of a database, and where the server's WAL
/// stood, at one moment.
struct DatabaseStats {
    commits: i64,
    row_writes: i64,
    lsn: String,
}

impl DatabaseStats {
    fn since(&self, before: &DatabaseStats) -> DatabaseStats {
        DatabaseStats {
            commits: self.commits - before.commits,
            row_writes: self.row_writes - before.row_writes,
            lsn: self.lsn.clone(),
        }
    }
}

async fn database_stats(url: &str) -> anyhow::Result<DatabaseStats> {
    let (client, name) = super::admin(url).await?;
    let row = client
        .query_one(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted, pg_current_wal_lsn()::text
               FROM pg_stat_database WHERE datname = $1",
            &[&name],
        )
        .await?;
    Ok(DatabaseStats { commits: row.get(0), row_writes: row.get(1), lsn: row.get(2) })
}

/// Rows inserted, updated and deleted so far in each table of the database
/// in `url` (`pg_stat_user_tables`; a backend reports its own as it exits).
async fn table_writes(url: &str) -> anyhow::Result<Vec<(String, [i64; 3])>> {
    let (client, conn) = baton_store::tokio_postgres::connect(url, baton_store::tokio_postgres::NoTls).await?;
    let conn = tokio::spawn(conn);
    let rows =
        client.query("SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables", &[]).await?;
    drop(client);
    let _ = conn.await;
    Ok(rows.iter().map(|r| (r.get(0), [r.get(1), r.get(2), r.get(3)])).collect())
}

/// The part of [`wal_bytes`]'s answer that counts full-page images.
const FPI: &str = "full-page images";

/// Holds the server's WAL from now on while the client returned is open: a
/// temporary physical replication slot, reserved at once, which the server
/// drops when its session ends, however this process ends. Without it a
/// busy server (a test suite beside the cell) may recycle the cell's WAL
/// before it is read.
async fn keep_wal(url: &str) -> anyhow::Result<baton_store::tokio_postgres::Client> {
    let (client, _) = super::admin(url).await?;
    let slot = format!("baton_bench_{}", uuid::Uuid::new_v4().simple());
    client.execute("SELECT pg_create_physical_replication_slot($1, true, true)", &[&slot]).await?;
    Ok(client)
}

/// The bytes of WAL written since `from` on behalf of the database in
/// `url`: records naming one of its relations (`rel <tablespace>/<database
/// oid>/<file>`), and the commit and abort records of the transactions that
/// wrote them. The extension is created in that database (dropped with it),
/// after the cell, so creating it is not counted. Also returns where those
/// bytes went, largest first: each relation's records, full-page images
/// included, and the commits; and, as the part named [`FPI`], the bytes of
/// full-page images among them.
async fn wal_bytes(url: &str, from: &str) -> anyhow::Result<(i64, Vec<(String, i64)>)> {
    let (client, conn) = baton_store::tokio_postgres::connect(url, baton_store::tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let to: String = client.query_one("SELECT pg_current_wal_lsn()::text", &[]).await?.get(0);
    client.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect").await?;
    let rows = client
        .query(
            "WITH r AS (SELECT *, substring(block_ref FROM 'rel [0-9]+/' || (SELECT oid FROM pg_database
                                                                         WHERE datname = current_database()) || '/([0-9]+)') AS file
                          FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)),
                  mine AS (SELECT * FROM r WHERE file IS NOT NULL),
                  parts AS (SELECT coalesce(c.relname, 'relation ' || m.file) AS part, m.record_length
                              FROM mine m LEFT JOIN pg_class c ON c.relfilenode = m.file::oid
                            UNION ALL
                            SELECT 'commits', record_length FROM r
                             WHERE resource_manager = 'Transaction' AND xid <> 0 AND xid IN (SELECT xid FROM mine))
             SELECT part, sum(record_length)::bigint AS bytes FROM parts GROUP BY part
             UNION ALL SELECT $3, coalesce(sum(fpi_length), 0)::bigint FROM mine
             ORDER BY bytes DESC",
            &[&from, &to, &FPI],
        )
        .await?;
    let parts: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    Ok((parts.iter().filter(|(part, _)| part != FPI).map(|(_, b)| b).sum(), parts))
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
