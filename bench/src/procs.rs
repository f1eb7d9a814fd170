//! The processes a bench run starts: the support roles once, worker
//! processes per measurement; and reading their memory.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

use super::driver::Side;
use super::profiles::MODEL_KEY_ENV;
use baton::config::Settings;
use baton_domain::fleet::Queue;

/// Names the `baton` executable to run instead of the one beside the bench.
pub const BATON_BIN: &str = "BATON_BIN";

/// The `baton` executable the Baton side runs: `BATON_BIN`, or `baton` in the
/// directory of this executable (cargo puts both in `target/release`).
pub fn baton_binary() -> anyhow::Result<PathBuf> {
    let path = match std::env::var_os(BATON_BIN) {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()?.with_file_name("baton"),
    };
    anyhow::ensure!(
        path.is_file(),
        "no baton binary at {}: build it with `cargo build --release -p baton`, or name one in {BATON_BIN}",
        path.display()
    );
    Ok(path)
}

/// The arguments of the process that runs the roles a fleet runs once
/// (relay, collector), on both sides of every cell.
pub const SUPPORT_ROLES: [&str; 5] = ["up", "--role", "relay", "--role", "collector"];

/// The arguments of each worker process: invocations, and intake beside
/// them, as `baton up` runs them, so a request's root starts in the
/// process that took the request when it has a free slot (eager dispatch).
pub const WORKER_ROLES: [&str; 5] = ["up", "--role", "intake", "--role", "invocation"];

pub struct Procs {
    baton: PathBuf,
    raw: Option<PathBuf>,
    support: Vec<Child>,
    workers: Vec<(Side, Child)>,
}

fn command(program: PathBuf, settings: &Settings, args: &[&str], name: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("DATABASE_URL", &settings.database_url)
        .env("AMQP_URL", &settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &settings.queue_prefix)
        .env("BATON_WORKER_ID", name)
        .env("RUST_LOG", "warn")
        // Every process serves its metrics on a port of its own.
        .env("BATON_METRICS_ADDR", "127.0.0.1:0")
        .env(MODEL_KEY_ENV, "bench")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

impl Procs {
    /// `raw`: the program whose `raw-worker` command runs the raw baseline.
    pub fn new(baton: PathBuf, raw: Option<PathBuf>) -> Self {
        Self { baton, raw, support: vec![], workers: vec![] }
    }

    /// The pids of the Baton processes (support roles and workers), and of the raw workers.
    pub fn pids(&self) -> (Vec<u32>, Vec<u32>) {
        let mut baton: Vec<u32> = self.support.iter().filter_map(Child::id).collect();
        let mut raw = vec![];
        for (side, child) in &self.workers {
            let list = if side.is_raw() { &mut raw } else { &mut baton };
            list.extend(child.id());
        }
        (baton, raw)
    }

    /// A `baton` process that lives for the whole bench.
    pub fn spawn(
        &mut self,
        settings: &Settings,
        args: &[&str],
        name: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<u32> {
        let child =
            command(self.baton.clone(), settings, args, name, env).spawn().context("starting a baton process")?;
        let pid = child.id().context("the process has a pid")?;
        self.support.push(child);
        Ok(pid)
    }

    /// A worker process of one side, stopped after each measurement.
    pub fn spawn_worker(
        &mut self,
        settings: &Settings,
        side: Side,
        args: &[&str],
        name: &str,
        env: &[(&str, &str)],
    ) -> anyhow::Result<u32> {
        let program = match side {
            Side::Baton => self.baton.clone(),
            _ => self.raw.clone().context("no raw worker program")?,
        };
        let child = command(program, settings, args, name, env).spawn().context("starting a worker process")?;
        let pid = child.id().context("the process has a pid")?;
        self.workers.push((side, child));
        Ok(pid)
    }

    /// SIGTERM, then wait: workers shut down gracefully between measurements.
    pub async fn stop_workers(&mut self) {
        let mut workers = self.workers.drain(..).map(|(_, c)| c).collect();
        stop(&mut workers).await;
    }

    pub async fn stop_all(&mut self) {
        self.stop_workers().await;
        stop(&mut self.support).await;
    }
}

async fn stop(children: &mut Vec<Child>) {
    for child in children.iter() {
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
    }
    for mut child in children.drain(..) {
        if tokio::time::timeout(Duration::from_secs(15), child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "VmRSS:")
}

/// The part of a process's resident memory it allocated itself (heap,
/// stacks, buffers), in KiB: its RSS less the pages of its executable and
/// libraries, which depend on the binary and the page cache.
pub fn anon_kb(pid: u32) -> Option<u64> {
    status_kb(pid, "RssAnon:")
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples a process's RSS every 50 ms and keeps the peak.
pub struct RssSampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut peak = 0;
            loop {
                peak = peak.max(rss_kb(pid).unwrap_or(0));
                tokio::select! {
                    _ = &mut stopped => return peak,
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        });
        Self { stop, task }
    }

    pub async fn stop(self) -> u64 {
        let _ = self.stop.send(());
        self.task.await.unwrap_or(0)
    }
}

/// Waits until `count` workers consume the side's first queue.
pub async fn wait_for_consumers(settings: &Settings, side: Side, count: usize) -> anyhow::Result<()> {
    let queue = match side {
        Side::Raw | Side::RawOutbox => super::raw::hop_queue(settings),
        Side::Baton => settings.queues().name(Queue::InvocationsHandoff),
    };
    let conn = baton_bus::Connection::open(&settings.amqp_url, "baton-bench-probe").await?;
    let probe = conn.publisher().await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if probe.consumer_count(&queue).await? as usize >= count {
            conn.close("ok").await;
            return Ok(());
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "workers did not start consuming {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
