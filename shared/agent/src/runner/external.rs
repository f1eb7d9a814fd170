//! An external (`command`) agent's start marker, what an interruption does
//! (re-run or fail, as its profile says), and the patience with which its
//! outcome is stored through a database outage: it cannot be asked for again.

use baton_domain::policy::sandbox::{self, OnInterrupt};
use baton_domain::run::journal::JournalEvent;
use baton_store::journal::Event;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Claimed, Exit, Runner};
use crate::transcript;
use crate::Error;

impl Runner {
    /// Before an external agent starts: a marker, so that a later claim
    /// knows it was started. Finding the marker already there means an
    /// earlier start was interrupted (a dead worker, a deploy): it is run
    /// again from scratch or the invocation fails, as the profile chose.
    pub(super) async fn before_external(
        &self,
        c: &mut Claimed<'_>,
        on_interrupt: OnInterrupt,
    ) -> Result<Option<Exit>, Error> {
        let interrupted = c.steps.last().is_some_and(|s| s.kind == transcript::EXTERNAL_STARTED);
        if !interrupted {
            self.mark_external_start(c).await?;
            return Ok(None);
        }
        if on_interrupt == OnInterrupt::Fail {
            // Its side effects may be done, so it is not run a second time.
            self.fail(c.inv, sandbox::codes::INTERRUPTED, sandbox::INTERRUPTED_MESSAGE, None).await?;
            return Ok(Some(Exit::Failed(sandbox::INTERRUPTED_MESSAGE.into())));
        }
        let ev = Event::new(
            JournalEvent::ExternalAgentRerun,
            Some(c.inv.id),
            json!({"reason": "an earlier start was interrupted"}),
        );
        self.step(c).log([ev]).commit().await?;
        Ok(None)
    }

    /// An external agent was killed before it finished (its run was dropped,
    /// which killed its process group): handed back for a re-run, or failed
    /// visibly. A lost claim makes the failure a no-op (the fence refuses it).
    pub(super) async fn external_interrupted(&self, c: &Claimed<'_>, on_interrupt: OnInterrupt) -> Result<Exit, Error> {
        tracing::warn!(?on_interrupt, "external agent killed before it finished");
        if on_interrupt == OnInterrupt::Rerun {
            return Ok(Exit::Stopped);
        }
        let detail = "killed at the worker's shutdown deadline, or its claim was lost";
        self.fail(c.inv, sandbox::codes::INTERRUPTED, sandbox::INTERRUPTED_MESSAGE, Some(detail)).await?;
        Ok(Exit::Failed(sandbox::INTERRUPTED_MESSAGE.into()))
    }

    /// Records that an external agent is about to start (see `model_turn`).
    pub(super) async fn mark_external_start(&self, c: &mut Claimed<'_>) -> Result<(), Error> {
        let written = self.step(c).append(transcript::EXTERNAL_STARTED, json!({})).commit().await?;
        c.absorb(written);
        Ok(())
    }
}

/// Runs `attempt` again while the database is away (with backoff) until
/// `kill` fires: for the writes that record what an external agent did,
/// which cannot be asked for again. Each attempt is a whole fenced
/// transaction, so a lost claim ends the wait too (as `Fenced`).
pub(super) async fn patiently<T, F, Fut>(kill: &CancellationToken, mut attempt: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    use backon::BackoffBuilder;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(250))
        .with_max_delay(std::time::Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        let e = match attempt().await {
            Err(e) if e.is_transient() && !kill.is_cancelled() => e,
            other => return other,
        };
        let delay = delays.next().unwrap_or(std::time::Duration::from_secs(5));
        tracing::warn!(error = %e, ?delay, "the database is unavailable; keeping an external agent's outcome until it is stored");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = kill.cancelled() => return Err(e),
        }
    }
}
