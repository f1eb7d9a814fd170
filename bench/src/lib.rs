//! `baton-bench`: Baton's hop against the raw limit, in one run on the same
//! broker and database. A hop is one stage handing the work to the next:
//! consume, claim, one agent step, commit the transfer, publish the
//! successor with a confirm, ack. Both sides run 3-stage chains with 1, 2
//! and 4 worker processes and 1 and 64 chains in flight; then again after
//! loading a million finished invocations; then worker memory is read idle,
//! under load and with thousands of parents parked on `agent_await`.
//!
//! The Baton side runs real `baton` processes: the binary beside this one
//! (build it with `cargo build --release -p baton`), or the one `BATON_BIN`
//! names. The raw side runs this binary's hidden `raw-worker` command.

mod growth;
mod procs;
pub mod raw;
mod report;
mod scenario;

use std::time::{Duration, Instant};

use anyhow::Context;
use baton_domain::profiles::ProfilesFile;

use baton::config::Settings;
use procs::Procs;
use report::{Memory, Row};
use scenario::Side;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Worker process counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub workers: Vec<usize>,
    /// Chains in flight at once.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub concurrency: Vec<usize>,
    /// Chains per measurement with one in flight.
    #[arg(long, default_value_t = 40)]
    pub sequential_chains: usize,
    /// Chains per measurement with many in flight.
    #[arg(long, default_value_t = 640)]
    pub concurrent_chains: usize,
    /// Finished invocations to load for the growth measurement (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub growth: usize,
    /// Parents to park on agent_await for the memory reading (0 skips it).
    #[arg(long, default_value_t = 10_000)]
    pub parked: usize,
    /// Keep the bench database afterwards (to look at its journal).
    #[arg(long)]
    pub keep: bool,
}

const PROFILES: &str = r#"
[routes]
docs_agent = "s1"
codex = "parker"

[[profiles]]
id = "s1"
name = "Stage 1"
description = "First stage."
tools = ["agent_handoff"]
[profiles.model]
provider = "scripted"
script = [{ tool = "agent_handoff", args = { agentId = "s2", handoff = { objective = "Stage 2." } } }]
[profiles.delegation]
can_handoff = true

[[profiles]]
id = "s2"
name = "Stage 2"
description = "Second stage."
tools = ["agent_handoff"]
[profiles.model]
provider = "scripted"
script = [{ tool = "agent_handoff", args = { agentId = "s3", handoff = { objective = "Stage 3." } } }]
[profiles.delegation]
can_handoff = true

[[profiles]]
id = "s3"
name = "Stage 3"
description = "Last stage."
tools = ["workspace_write", "workspace_commit", "workspace_finish"]
[profiles.model]
provider = "scripted"
script = [{ calls = [
  { tool = "workspace_write", args = { path = "output/main.md", content = "done" } },
  { tool = "workspace_commit" },
  { tool = "workspace_finish" },
] }]

[[profiles]]
id = "parker"
name = "Parker"
description = "Delegates and waits."
tools = ["agent_delegate", "agent_await"]
[profiles.model]
provider = "scripted"
script = [
  { tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Take your time." } } },
  { tool = "agent_await", args = { timeoutMs = 300000 } },
]
[profiles.delegation]
can_delegate = true

[[profiles]]
id = "helper"
name = "Helper"
description = "Never gets to run in the bench."
[profiles.model]
provider = "scripted"
script = [{ tool = "task_return", args = { summary = "done" } }]
[profiles.delegation]
allow_as_subagent = true
"#;

/// The bench's own database and queue prefix, beside the configured ones.
fn bench_settings(base: &Settings) -> Settings {
    let mut s = base.clone();
    let (head, _) = base.database_url.rsplit_once('/').unwrap_or((&base.database_url, ""));
    s.database_url = format!("{head}/baton_bench");
    s.queue_prefix = format!("{}bench.", base.queue_prefix);
    s.worker_id = "bench".into();
    s
}

pub async fn run(base: &Settings, args: BenchArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let settings = bench_settings(base);
    let procs = Procs::new(procs::baton_binary()?);
    let mut env = Bench::prepare(&settings, procs).await?;
    let outcome = env.measure_all(&args).await;
    env.procs.stop_all().await;
    let cleanup = env.cleanup(args.keep).await;
    let (rows, memory) = outcome?;
    cleanup?;
    println!("\n{}", report::render(&rows, &memory, started.elapsed()));
    Ok(())
}

pub(crate) struct Bench {
    settings: Settings,
    pool: baton_store::Pool,
    conn: baton_bus::Connection,
    publisher: baton_bus::Publisher,
    reply_queue: String,
    procs: Procs,
}

fn say(text: &str) {
    println!("==> {text}");
}

impl Bench {
    async fn prepare(settings: &Settings, procs: Procs) -> anyhow::Result<Self> {
        say("preparing a fresh bench database and queues");
        recreate_database(&settings.database_url).await?;
        let pool = baton_store::pool(&settings.database_url, 8)?;
        baton_store::migrate(&pool).await?;
        let profiles = ProfilesFile::parse(PROFILES)?;
        baton_store::profiles::apply_atomically(&mut pool.get().await?, &profiles).await?;
        pool.get().await?.batch_execute(raw::SCHEMA).await?;
        let conn = baton_bus::Connection::open(&settings.amqp_url, "baton-bench").await.context("connecting to RabbitMQ")?;
        let queues = settings.queues();
        // Whatever an interrupted bench left behind goes first.
        let _ = conn.delete(&queues).await;
        for q in [raw::hop_queue(settings), raw::done_queue(settings), settings.queues().prefixed("bench.replies")] {
            conn.delete_queue(&q).await?;
        }
        conn.declare(&queues).await?;
        raw::declare(&conn.amqp().create_channel().await?, settings).await?;
        let reply_queue = settings.queues().prefixed("bench.replies");
        conn.declare_queue(&reply_queue).await?;
        let publisher = conn.publisher().await?;
        Ok(Self { settings: settings.clone(), pool, conn, publisher, reply_queue, procs })
    }

    async fn measure_all(&mut self, args: &BenchArgs) -> anyhow::Result<(Vec<Row>, Memory)> {
        let mut rows = vec![];
        let mut memory = Memory::default();
        self.procs.spawn(&self.settings, &["up", "--role", "intake", "--role", "relay", "--role", "collector"], "support", &[])?;
        for &workers in &args.workers {
            rows.extend(self.measure(workers, args, "empty", &mut memory).await?);
        }
        if args.growth > 0 {
            say(&format!("loading {} finished invocations (with tasks and events) and as many raw rows", args.growth));
            let took = growth::load(&self.pool, args.growth).await?;
            say(&format!("loaded in {:.0}s", took.as_secs_f64()));
            let workers = args.workers.iter().copied().filter(|w| *w <= 2).max().unwrap_or(1);
            rows.extend(self.measure(workers, args, "1M history", &mut memory).await?);
        }
        if args.parked > 0 {
            memory.parked = Some(self.park(args.parked).await?);
        }
        Ok((rows, memory))
    }

    /// Raw and Baton with `workers` processes at every concurrency.
    async fn measure(&mut self, workers: usize, args: &BenchArgs, tables: &str, memory: &mut Memory) -> anyhow::Result<Vec<Row>> {
        let mut rows = vec![];
        for &concurrency in &args.concurrency {
            let chains = if concurrency == 1 { args.sequential_chains } else { args.concurrent_chains.max(concurrency) };
            for side in [Side::Raw, Side::Baton] {
                let pids = self.start_workers(side, workers).await?;
                if side == Side::Baton && memory.idle_kb.is_none() {
                    memory.idle_kb = procs::rss_kb(pids[0]);
                }
                let sampler = procs::RssSampler::start(pids[0]);
                let m = scenario::run(self, side, chains, concurrency).await?;
                let peak = sampler.stop().await;
                if side == Side::Baton && concurrency > 1 {
                    memory.loaded_kb = memory.loaded_kb.max(peak);
                }
                self.procs.stop_workers().await;
                let row = Row { side, workers, concurrency, tables: tables.to_string(), m };
                say(&row.progress_line());
                rows.push(row);
            }
        }
        Ok(rows)
    }

    async fn start_workers(&mut self, side: Side, count: usize) -> anyhow::Result<Vec<u32>> {
        let mut pids = vec![];
        for i in 0..count {
            let (args, name): (&[&str], String) = match side {
                Side::Raw => (&["raw-worker"], format!("raw-{i}")),
                Side::Baton => (&["up", "--role", "invocation"], format!("worker-{i}")),
            };
            pids.push(self.procs.spawn_worker(&self.settings, side, args, &name, &[])?);
        }
        // Each worker is consuming once its consumers are registered.
        procs::wait_for_consumers(&self.settings, side, count).await?;
        Ok(pids)
    }

    /// Parks `count` parents on agent_await (their children stay queued: this
    /// worker consumes only the handoff queue) and reads the worker's memory.
    async fn park(&mut self, count: usize) -> anyhow::Result<(usize, u64, u64)> {
        say(&format!("parking {count} parents on agent_await through the fleet"));
        let pid = self.procs.spawn_worker(&self.settings, Side::Baton, &["up", "--role", "invocation"], "parking", &[("BATON_INVOCATION_QUEUES", "handoff")])?;
        procs::wait_for_consumers(&self.settings, Side::Baton, 1).await?;
        let before = procs::rss_kb(pid).unwrap_or(0);
        scenario::park(self, count).await?;
        let after = procs::rss_kb(pid).unwrap_or(0);
        self.procs.stop_workers().await;
        Ok((count, before, after))
    }

    async fn cleanup(&self, keep_database: bool) -> anyhow::Result<()> {
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

async fn admin(url: &str) -> anyhow::Result<(baton_store::tokio_postgres::Client, String)> {
    let (head, name) = url.rsplit_once('/').context("a database URL ends in /name")?;
    let (client, conn) = baton_store::tokio_postgres::connect(&format!("{head}/postgres"), baton_store::tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok((client, name.to_string()))
}

async fn drop_database(url: &str) -> anyhow::Result<()> {
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
