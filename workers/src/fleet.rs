//! Starting roles in this process and stopping them together, with the
//! process's row in the fleet's registry ([`crate::registry`]) beside them.

use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::registry::Registry;
use crate::roles::{self, Role};

/// Roles running in this process.
pub struct Fleet {
    pub shutdown: CancellationToken,
    tasks: JoinSet<()>,
    /// The registry's heartbeat, stopped after the roles (so the row says
    /// stopped only once nothing of this process runs any more).
    registry: Option<(CancellationToken, JoinHandle<()>)>,
}

impl Fleet {
    pub fn start(settings: &Settings, roles: &[Role]) -> Self {
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for role in roles {
            tasks.spawn(roles::run(*role, settings.clone(), shutdown.clone()));
        }
        let registry = match Registry::new(settings, roles) {
            Ok(registry) => {
                let stop = CancellationToken::new();
                Some((stop.clone(), tokio::spawn(registry.run(stop))))
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "running without a row in the workers registry");
                None
            }
        };
        Self { shutdown, tasks, registry }
    }

    /// Asks every role to stop and waits until each has.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Some((stop, beating)) = self.registry.take() {
            stop.cancel();
            let _ = beating.await;
        }
    }

    /// Runs until SIGTERM or Ctrl-C, then stops gracefully.
    pub async fn run_until_signalled(self) -> anyhow::Result<()> {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: stopping"),
        }
        self.stop().await;
        Ok(())
    }
}

impl Drop for Fleet {
    /// A fleet dropped without [`Fleet::stop`] (its roles are aborted with
    /// their tasks) stops beating too, rather than beating for ever.
    fn drop(&mut self) {
        if let Some((stop, _)) = self.registry.take() {
            stop.cancel();
        }
    }
}
