//! `baton-bench`: config → telemetry → the bench, or one of its raw workers.

use baton::config::Settings;
use baton_bench::BenchArgs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "baton-bench", version, about = "Measure Baton's hop against a raw lapin + Postgres baseline")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    internal: Option<Internal>,
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Subcommand)]
enum Internal {
    /// (internal) one worker process of the raw baseline.
    #[command(hide = true)]
    RawWorker,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let settings = Settings::from_env()?;
    match cli.internal {
        None => {
            baton::telemetry::init("warn");
            baton_bench::run(&settings, cli.args).await
        }
        Some(Internal::RawWorker) => {
            baton::telemetry::init("info");
            raw_worker(&settings).await
        }
    }
}

/// Works the raw baseline's queue until SIGTERM.
async fn raw_worker(settings: &Settings) -> anyhow::Result<()> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            term.recv().await;
        }
        stop.cancel();
    });
    baton_bench::raw::work(settings, shutdown).await
}
