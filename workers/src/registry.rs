//! This process in the fleet's registry (the console's workers page): a row
//! inserted at start, heartbeated every `BATON_HEARTBEAT_MS` (one small
//! upsert, on a connection of its own, never on a hop's path), marked
//! stopped once the roles have finished on a graceful shutdown. A beat that
//! fails is logged and tried again at the next one: the database may be
//! away for minutes, and the registry never stops the process. Rows silent
//! for a day are pruned by whichever process beats (about once an hour).

use std::time::Duration;

use baton_domain::console::workers::KEPT_SECS;
use baton_store::workers::Process;
use baton_store::Pool;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::Role;

/// How often a process prunes the registry's old rows.
const PRUNE_EVERY: Duration = Duration::from_secs(3_600);

/// The version a process reports: the crate's, and `git describe` when the
/// build was given one in `BATON_GIT_DESCRIBE` (the Dockerfile's build
/// argument; no build script runs git, so a build stays as cheap as before).
pub fn version() -> String {
    let crate_version = env!("CARGO_PKG_VERSION");
    match option_env!("BATON_GIT_DESCRIBE").filter(|d| !d.is_empty()) {
        Some(described) => format!("{crate_version} ({described})"),
        None => crate_version.to_string(),
    }
}

/// The host's name: `HOSTNAME`, else `/etc/hostname`.
fn host() -> String {
    let named = std::env::var("HOSTNAME").ok().or_else(|| std::fs::read_to_string("/etc/hostname").ok());
    named.map(|h| h.trim().to_string()).filter(|h| !h.is_empty()).unwrap_or_else(|| "local".into())
}

/// This process's row and the connection it beats on.
pub struct Registry {
    process: Process,
    pool: Pool,
    beat: Duration,
}

impl Registry {
    pub fn new(settings: &Settings, roles: &[Role]) -> anyhow::Result<Self> {
        let pool = baton_store::pool_with(&settings.database_url, 1, &settings.db_session_of("registry"))?;
        let process = Process {
            id: uuid::Uuid::now_v7(),
            worker_id: settings.worker_id.clone(),
            roles: roles.iter().map(|r| r.name().to_string()).collect(),
            version: version(),
            host: host(),
            pid: std::process::id() as i32,
            beat: settings.heartbeat,
        };
        Ok(Self { process, pool, beat: settings.heartbeat })
    }

    /// Beats until `stop`, then records the stop (the caller cancels `stop`
    /// once the roles have finished).
    pub async fn run(self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pruned_at: Option<tokio::time::Instant> = None;
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => break,
            }
            let prune = pruned_at.is_none_or(|at| at.elapsed() >= PRUNE_EVERY);
            let beat = tokio::time::timeout(self.beat.max(Duration::from_secs(1)) * 2, self.beat_once(prune));
            let outcome = tokio::select! {
                outcome = beat => outcome.unwrap_or_else(|_| Err(anyhow::anyhow!("the database did not answer in time"))),
                _ = stop.cancelled() => break,
            };
            match outcome {
                Ok(()) => {
                    if failing {
                        tracing::info!(worker = %self.process.worker_id, "heartbeat recorded again");
                    }
                    failing = false;
                    if prune {
                        pruned_at = Some(tokio::time::Instant::now());
                    }
                }
                Err(e) => {
                    failing = true;
                    tracing::warn!(error = %format!("{e:#}"), "could not record this process's heartbeat; trying again at the next beat");
                }
            }
        }
        self.stopped().await;
    }

    async fn beat_once(&self, prune: bool) -> anyhow::Result<()> {
        let c = baton_store::client(&self.pool).await?;
        baton_store::workers::beat(&c, &self.process).await?;
        if prune {
            baton_store::workers::prune(&c, Duration::from_secs_f64(KEPT_SECS)).await?;
        }
        Ok(())
    }

    /// Records the stop, a few tries in a few seconds; when the database is
    /// away the row reads as gone instead, which is what the console then says.
    async fn stopped(&self) {
        for attempt in 1..=3 {
            let marked = tokio::time::timeout(Duration::from_secs(2), async {
                let c = baton_store::client(&self.pool).await?;
                Ok::<_, anyhow::Error>(baton_store::workers::stopped(&c, self.process.id).await?)
            });
            match marked.await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => tracing::warn!(attempt, error = %format!("{e:#}"), "could not mark this process stopped"),
                Err(_) => tracing::warn!(attempt, "could not mark this process stopped: the database did not answer"),
            }
        }
    }
}
