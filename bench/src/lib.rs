//! `baton-bench`: Baton's hop against the raw limit, in one run on the same
//! broker and database. A hop is one stage handing the work to the next:
//! consume, claim, one agent step, commit the transfer, publish the
//! successor with a confirm, ack.
//!
//! Two workloads, each beside the raw loop in the same run: steady-state
//! hops on 32-stage chains (with a "raw + outbox" loop, and, when asked,
//! the same chains with a model over HTTP), and 3-stage chains end to end
//! through intake, the agents, the collector and the bridge reply. Each
//! cell (workers × chains in flight) runs raw and Baton interleaved,
//! repeated; a closed-loop driver keeps every slot busy (see [`driver`]).
//! Then per-hop counters through counting proxies ([`counters`]).
//!
//! The Baton side runs real `baton` processes: the binary beside this one
//! (build it with `cargo build --release -p baton`), or the one `BATON_BIN`
//! names. The raw side runs this binary's hidden `raw-worker` command.
//!
//! # Layout
//! - [`profiles`]: the generated chains of agents.
//! - [`driver`]: the closed-loop slots and the listener of chain ends.
//! - `cell`: one measurement; `journal`: hops read off each side's journal.
//! - [`raw`]: the raw baseline's worker and schema.
//! - `cpu`, `procs`: the processes, their CPU time and memory.
//! - [`count`]: counting proxies for Postgres and RabbitMQ; [`counters`]: the per-hop counters cell.
//! - `model`: the model server for the HTTP path; `report`: the tables; `growth`, `grid`: the run.

mod cell;
pub mod count;
pub mod counters;
mod cpu;
pub mod driver;
mod grid;
mod growth;
mod journal;
mod model;
pub mod procs;
pub mod profiles;
pub mod raw;
mod report;

use std::time::{Duration, Instant};

use anyhow::Context;
use baton_domain::profiles::ProfilesFile;

use baton::config::Settings;
use procs::Procs;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Worker process counts to measure (each side gets as many).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub workers: Vec<usize>,
    /// Chains in flight at once (one driver slot each).
    #[arg(long = "in-flight", value_delimiter = ',', default_value = "1,16,64")]
    pub in_flight: Vec<usize>,
    /// Workloads: steady (32-stage chains), e2e (3-stage chains), http (steady, model over HTTP).
    #[arg(long, value_delimiter = ',', default_value = "steady,e2e,http")]
    pub workloads: Vec<String>,
    /// Repetitions of each cell, raw and Baton interleaved.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Hops each cell aims for.
    #[arg(long, default_value_t = 2000)]
    pub hops: usize,
    /// No new chain is started after this many seconds of a cell.
    #[arg(long = "max-secs", default_value_t = 8)]
    pub max_secs: u64,
    /// Hops of the per-hop counters cell (0 skips it).
    #[arg(long = "counter-hops", default_value_t = 600)]
    pub counter_hops: usize,
    /// The workload of the counters cell: steady (32-stage chains), e2e (3-stage chains end to end) or
    /// http (the steady chains with a model over HTTP; Baton only).
    #[arg(long = "counters-workload", default_value = "steady", value_parser = ["steady", "e2e", "http"])]
    pub counters_workload: String,
    /// Finished invocations to load, then measure steady state again (0 skips it).
    #[arg(long, default_value_t = 0)]
    pub growth: usize,
    /// Parents to park on agent_await for the memory reading (0 skips it).
    #[arg(long, default_value_t = 0)]
    pub parked: usize,
    /// A quick look: 1 worker, 16 in flight, 1 repetition, 300 hops per cell.
    #[arg(long)]
    pub quick: bool,
    /// Keep the bench database afterwards (to look at its journal).
    #[arg(long)]
    pub keep: bool,
}

impl BenchArgs {
    fn apply_quick(mut self) -> Self {
        if self.quick {
            (self.workers, self.in_flight, self.reps, self.hops, self.max_secs) = (vec![1], vec![16], 1, 300, 4);
            self.counter_hops = self.counter_hops.min(300);
        }
        self
    }
}

/// The bench's own database and queue prefix, beside the configured ones.
pub fn bench_settings(base: &Settings, database: &str) -> Settings {
    let mut s = base.clone();
    let (head, _) = base.database_url.rsplit_once('/').unwrap_or((&base.database_url, ""));
    s.database_url = format!("{head}/{database}");
    s.queue_prefix = format!("{}bench.", base.queue_prefix);
    s.worker_id = "bench".into();
    s
}

pub async fn run(base: &Settings, args: BenchArgs) -> anyhow::Result<()> {
    let args = args.apply_quick();
    let started = Instant::now();
    let model = model::ModelServer::start().await?;
    let settings = bench_settings(base, "baton_bench");
    let procs = Procs::new(procs::baton_binary()?, Some(std::env::current_exe()?));
    let mut bench = Bench::prepare(&settings, procs, &model.base_url).await?;
    let outcome = grid::measure_all(&mut bench, &args).await;
    bench.procs.stop_all().await;
    let cleanup = bench.cleanup(args.keep).await;
    let mut results = outcome?;
    cleanup?;
    if args.counter_hops > 0 {
        let chain = match args.counters_workload.as_str() {
            "e2e" => profiles::Chain::EndToEnd,
            "http" => profiles::Chain::SteadyHttp,
            _ => profiles::Chain::Steady,
        };
        say(&format!(
            "per-hop counters: {} hops of {} at 16 in flight through counting proxies",
            args.counter_hops,
            chain.name()
        ));
        let settings = bench_settings(base, "baton_bench_counters");
        let (baton, raw) = (procs::baton_binary()?, Some(std::env::current_exe()?));
        results.counters =
            counters::measure_chain(&settings, baton, raw, chain, args.counter_hops, 16, &model.base_url).await?;
    }
    println!("\n{}", report::render(&results, &args, started.elapsed()));
    Ok(())
}

/// The bench's database, broker connection and processes.
pub struct Bench {
    pub settings: Settings,
    pub pool: baton_store::Pool,
    pub conn: baton_bus::Connection,
    pub publisher: baton_bus::Publisher,
    pub reply_queue: String,
    pub procs: Procs,
    pub database: String,
}

pub(crate) fn say(text: &str) {
    println!("==> {text}");
}

impl Bench {
    /// A fresh database (migrated, with the bench's profiles and the raw
    /// schema) and fresh queues under the settings' prefix.
    pub async fn prepare(settings: &Settings, procs: Procs, model_url: &str) -> anyhow::Result<Self> {
        say("preparing a fresh bench database and queues");
        recreate_database(&settings.database_url).await?;
        let pool = baton_store::pool(&settings.database_url, 8)?;
        baton_store::migrate(&pool).await?;
        let profiles = ProfilesFile::parse(&profiles::file(model_url))?;
        baton_store::profiles::apply_atomically(&mut pool.get().await?, &profiles).await?;
        pool.get().await?.batch_execute(raw::SCHEMA).await?;
        let conn =
            baton_bus::Connection::open(&settings.amqp_url, "baton-bench").await.context("connecting to RabbitMQ")?;
        let queues = settings.queues();
        let reply_queue = queues.prefixed("bench.replies");
        // Whatever an interrupted bench left behind goes first.
        let _ = conn.delete(&queues).await;
        for q in [raw::hop_queue(settings), raw::done_queue(settings), reply_queue.clone()] {
            conn.delete_queue(&q).await?;
        }
        conn.declare(&queues).await?;
        raw::declare(&conn.amqp().create_channel().await?, settings).await?;
        conn.declare_queue(&reply_queue).await?;
        let publisher = conn.publisher().await?;
        let database = settings.database_url.rsplit_once('/').map(|(_, d)| d.to_string()).unwrap_or_default();
        Ok(Self { settings: settings.clone(), pool, conn, publisher, reply_queue, procs, database })
    }

    pub(crate) fn clone_for_slot(&self) -> driver::SlotEnv {
        driver::SlotEnv { settings: self.settings.clone(), reply_queue: self.reply_queue.clone() }
    }

    pub async fn cleanup(&self, keep_database: bool) -> anyhow::Result<()> {
        let _ = self.conn.delete(&self.settings.queues()).await;
        for q in [raw::hop_queue(&self.settings), raw::done_queue(&self.settings), self.reply_queue.clone()] {
            let _ = self.conn.delete_queue(&q).await;
        }
        self.conn.close("bench done").await;
        if !keep_database {
            self.pool.close();
            drop_database(&self.settings.database_url).await?;
        }
        Ok(())
    }
}

/// A client on the server's `postgres` database, and the name of the one in `url`.
pub async fn admin(url: &str) -> anyhow::Result<(baton_store::tokio_postgres::Client, String)> {
    let (head, name) = url.rsplit_once('/').context("a database URL ends in /name")?;
    let (client, conn) =
        baton_store::tokio_postgres::connect(&format!("{head}/postgres"), baton_store::tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok((client, name.to_string()))
}

pub async fn drop_database(url: &str) -> anyhow::Result<()> {
    let (client, name) = admin(url).await?;
    client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await?;
    Ok(())
}

async fn recreate_database(url: &str) -> anyhow::Result<()> {
    drop_database(url).await?;
    let (client, name) = admin(url).await?;
    client.batch_execute(&format!("CREATE DATABASE \"{name}\"")).await?;
    Ok(())
}

/// How long a scenario may take before the bench gives up on it.
pub(crate) const SCENARIO_TIMEOUT: Duration = Duration::from_secs(180);
