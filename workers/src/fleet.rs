//! Starting roles in this process and stopping them together.

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::{self, Role};

/// Roles running in this process.
pub struct Fleet {
    pub shutdown: CancellationToken,
    tasks: JoinSet<()>,
}

impl Fleet {
    pub fn start(settings: &Settings, roles: &[Role]) -> Self {
        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for role in roles {
            tasks.spawn(roles::run(*role, settings.clone(), shutdown.clone()));
        }
        Self { shutdown, tasks }
    }

    /// Asks every role to stop and waits until each has.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
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
