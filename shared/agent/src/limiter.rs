//! Model calls under a fleet-wide limit (`[[limits]]`) wait their turn here.
//!
//! Admission is decided in Postgres (`baton_store::profiles::limits`), so a limit
//! holds across every worker process. A call that must wait sleeps with no
//! transaction, no pooled connection and no HTTP connection held; within one
//! process the calls under a limit queue up in arrival order behind one
//! poller, so a thousand waiting calls cost the database one poll at a time
//! per process. Waiting is not failing: the journal records it
//! (`model_call_waiting`, then `model_call_throttled` with how long), and a
//! metric counts it by the limit's name. A call under no limit never gets
//! here (no round trip).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_domain::policy::limits::{ModelLimit, WaitReason};
use baton_domain::run::journal::JournalEvent;
use baton_store::journal::Event;
use baton_store::profiles::limits::{self, Admission};
use baton_store::Pool;
use serde_json::json;
use uuid::Uuid;

/// A call the database could not admit (it stayed away past the patience).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAdmitted(String);

/// The shortest and longest pause between two polls of a limit that waits
/// for a call in flight to end.
const POLL_MIN: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(500);
/// How long admission rides out a database that is away before the call fails.
const DB_PATIENCE: Duration = Duration::from_secs(120);

/// Whose call this is, for the journal.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub run_id: Uuid,
    pub invocation_id: Uuid,
}

/// Admits model calls under their limits; one per worker process.
pub struct Limiter {
    pool: Pool,
    /// One queue per limit: calls of this process wait in arrival order.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// An admitted call. [`Pass::done`] ends it with the tokens it used; a pass
/// dropped without it (the call was dropped on shutdown) ends it with its
/// estimate, in the background.
pub struct Pass {
    pool: Pool,
    call: Option<Uuid>,
}

impl Limiter {
    pub fn new(pool: Pool) -> Self {
        Self { pool, turns: Mutex::default() }
    }

    fn turn(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.turns.lock().expect("not poisoned");
        turns.entry(name.to_string()).or_default().clone()
    }

    /// Waits until a call under `limit` may start, then counts it as in
    /// flight for at most `hold`.
    pub async fn admit(&self, limit: &ModelLimit, caller: Caller, hold: Duration) -> Result<Pass, NotAdmitted> {
        let turn = self.turn(&limit.name);
        let _turn = turn.lock().await;
        let started = Instant::now();
        let (mut waited_for, mut poll, mut db_since) = (None::<WaitReason>, POLL_MIN, None::<Instant>);
        loop {
            let call = Uuid::now_v7();
            let attempt = match self.pool.get().await {
                Ok(client) => limits::admit(&client, limit, call, hold).await,
                Err(e) => Err(e.into()),
            };
            let (wait, reason) = match attempt {
                Ok(Admission::Admitted) => {
                    if let Some(reason) = waited_for {
                        self.note_throttled(limit, caller, reason, started.elapsed()).await;
                    }
                    return Ok(Pass { pool: self.pool.clone(), call: Some(call) });
                }
                Ok(Admission::Wait(wait, reason)) => (wait, reason),
                Err(e) => {
                    let since = *db_since.get_or_insert_with(Instant::now);
                    if !e.is_transient() || since.elapsed() > DB_PATIENCE {
                        return Err(NotAdmitted(format!(
                            "the model call could not be admitted under limit `{}`: {e}",
                            limit.name
                        )));
                    }
                    tracing::warn!(limit = %limit.name, error = %e, "admitting a model call: the database is unavailable for now");
                    (None, waited_for.unwrap_or(WaitReason::ConcurrentCalls))
                }
            };
            if waited_for.is_none() {
                waited_for = Some(reason);
                self.note_waiting(limit, caller, reason, wait).await;
            }
            let pause = match wait {
                Some(wait) => wait.max(Duration::from_millis(1)),
                None => {
                    poll = (poll * 2).min(POLL_MAX);
                    poll
                }
            };
            tokio::time::sleep(pause + jitter(pause)).await;
        }
    }

    /// A provider's 429: every worker's next call under `limit` waits `pause`.
    pub async fn pause(&self, limit: &ModelLimit, pause: Duration) {
        let paused = match self.pool.get().await {
            Ok(client) => limits::pause(&client, &limit.name, pause).await,
            Err(e) => Err(e.into()),
        };
        match paused {
            Ok(()) => {
                tracing::info!(limit = %limit.name, ?pause, "the provider asked to slow down; the fleet pauses calls under this limit");
            }
            Err(e) => {
                tracing::warn!(limit = %limit.name, error = %e, "could not pause the limit fleet-wide");
            }
        }
    }

    async fn note_waiting(&self, limit: &ModelLimit, caller: Caller, reason: WaitReason, wait: Option<Duration>) {
        crate::metrics::model_throttled(&limit.name, reason.as_str());
        tracing::info!(limit = %limit.name, reason = reason.as_str(), ?wait, "model call waits its turn");
        let payload =
            json!({"limit": limit.name, "reason": reason.as_str(), "waitMs": wait.map(|w| w.as_millis() as u64)});
        self.note(caller, Event::new(JournalEvent::ModelCallWaiting, Some(caller.invocation_id), payload)).await;
    }

    async fn note_throttled(&self, limit: &ModelLimit, caller: Caller, reason: WaitReason, waited: Duration) {
        crate::metrics::model_throttle_wait(&limit.name, waited);
        let payload = json!({"limit": limit.name, "reason": reason.as_str(), "waitedMs": waited.as_millis() as u64});
        self.note(caller, Event::new(JournalEvent::ModelCallThrottled, Some(caller.invocation_id), payload)).await;
    }

    /// A journal event of an observation (no state changes with it, so no
    /// fence): a database that is away only costs the line.
    async fn note(&self, caller: Caller, event: Event) {
        let appended = match self.pool.get().await {
            Ok(client) => baton_store::journal::append(&client, caller.run_id, &[event]).await,
            Err(e) => Err(e.into()),
        };
        if let Err(e) = appended {
            tracing::warn!(error = %e, "could not record a throttled model call in the journal");
        }
    }
}

impl Pass {
    /// Ends the call with the tokens the provider reported, if it did.
    pub async fn done(mut self, tokens: Option<i64>) {
        if let Some(call) = self.call.take() {
            end(&self.pool, call, tokens).await;
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            let pool = self.pool.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { end(&pool, call, None).await });
            }
        }
    }
}

async fn end(pool: &Pool, call: Uuid, tokens: Option<i64>) {
    let ended = match pool.get().await {
        Ok(client) => limits::done(&client, call, tokens).await,
        Err(e) => Err(e.into()),
    };
    if let Err(e) = ended {
        // It stops counting as in flight when its hold runs out.
        tracing::warn!(error = %e, "could not end a limited model call; its hold will expire");
    }
}

/// Up to a tenth of `pause` (at most 50 ms), so processes polling one limit
/// do not keep meeting at its lock.
fn jitter(pause: Duration) -> Duration {
    let spread = (pause / 10).min(Duration::from_millis(50)).as_micros() as u64;
    let random = (Uuid::new_v4().as_u128() as u64) % spread.max(1);
    Duration::from_micros(random)
}
