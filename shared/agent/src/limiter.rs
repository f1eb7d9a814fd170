//! Model calls under a fleet-wide limit (`[[limits]]`) wait their turn here.
//!
//! Admission is decided in Postgres (`baton_store::profiles::limits`), so a limit
//! holds across every worker process. A call that must wait sleeps with no
//! transaction, no pooled connection and no HTTP connection held; within one
//! process the calls under a limit take turns behind one poller, so a
//! thousand waiting calls cost the database one poll at a time per process.
//! The turn goes by the run's priority, oldest first, with aging
//! ([`crate::slots`]): a `high` run's call goes before `low` ones waiting,
//! and a `low` one is overtaken at most [`MAX_OVERTAKES`] times.
//! Waiting is not failing: the journal records it
//! (`model_call_waiting`, then `model_call_throttled` with how long), and a
//! metric counts it by the limit's name. A call under no limit never gets
//! here (no round trip).
//!
//! An admitted call counts for the tokens estimated from its request
//! ([`baton_domain::policy::limits::estimate_tokens`]) and is held in flight
//! for [`SLOT_HOLD`], renewed every third of it while its [`Pass`] lives: a
//! worker that dies mid-call frees its slot within [`SLOT_HOLD`], however
//! long the call's own timeout.
//!
//! [`MAX_OVERTAKES`]: baton_domain::policy::priority::MAX_OVERTAKES

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use baton_domain::policy::limits::{ModelLimit, WaitReason};
use baton_domain::protocol::request::Priority;
use baton_domain::run::journal::JournalEvent;
use baton_store::journal::Event;
use baton_store::profiles::limits::{self, Admission};
use baton_store::Pool;
use serde_json::json;
use uuid::Uuid;

use crate::slots::Slots;

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
/// How long an admitted call counts as in flight without a renewal: a
/// worker that died mid-call frees its slot within this.
pub const SLOT_HOLD: Duration = Duration::from_secs(15);

/// Whose call this is, for the journal and its turn.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub run_id: Uuid,
    pub invocation_id: Uuid,
    /// The run's priority: its place in line behind this process's other calls.
    pub priority: Priority,
}

/// Admits model calls under their limits; one per worker process.
pub struct Limiter {
    pool: Pool,
    /// Where admitted calls renew their hold.
    renewals: Pool,
    hold: Duration,
    /// One turn per limit: calls of this process take it by priority.
    turns: Mutex<HashMap<String, Slots>>,
}

/// An admitted call, renewing its hold while it lives. [`Pass::done`] ends
/// it with the tokens it used; a pass dropped without it (the call was
/// dropped on shutdown) ends it with its estimate, in the background.
pub struct Pass {
    pool: Pool,
    call: Option<Uuid>,
    renewing: tokio::task::JoinHandle<()>,
}

impl Limiter {
    pub fn new(pool: Pool) -> Self {
        Self { renewals: pool.clone(), pool, hold: SLOT_HOLD, turns: Mutex::default() }
    }

    /// Renews admitted calls on `pool` (a worker's lease pool: a renewal
    /// does not wait behind the agent loops for a connection).
    pub fn renewing_on(mut self, pool: Pool) -> Self {
        self.renewals = pool;
        self
    }

    fn turn(&self, name: &str) -> Slots {
        let mut turns = self.turns.lock().expect("not poisoned");
        turns.entry(name.to_string()).or_insert_with(|| Slots::new(1)).clone()
    }

    /// Waits until a call under `limit` may start (its turn in this process
    /// first, by `caller`'s priority), then counts it as in flight with
    /// `estimate` tokens until its [`Pass`] ends.
    pub async fn admit(&self, limit: &ModelLimit, caller: Caller, estimate: i64) -> Result<Pass, NotAdmitted> {
        let turn = self.turn(&limit.name);
        let _turn = turn.acquire(caller.priority).await;
        let started = Instant::now();
        let (mut waited_for, mut poll, mut db_since) = (None::<WaitReason>, POLL_MIN, None::<Instant>);
        loop {
            let call = Uuid::now_v7();
            let attempt = match self.pool.get().await {
                Ok(client) => limits::admit(&client, limit, call, self.hold, estimate).await,
                Err(e) => Err(e.into()),
            };
            let (wait, reason) = match attempt {
                Ok(Admission::Admitted) => {
                    if let Some(reason) = waited_for {
                        self.note_throttled(limit, caller, reason, started.elapsed()).await;
                    }
                    return Ok(Pass::start(self, call));
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
    /// Holds `call` in flight, renewed every third of the hold until the pass ends.
    fn start(limiter: &Limiter, call: Uuid) -> Self {
        let (renewals, hold) = (limiter.renewals.clone(), limiter.hold);
        let renewing = tokio::spawn(async move {
            let mut tick = tokio::time::interval(hold / 3);
            tick.tick().await;
            loop {
                tick.tick().await;
                let renewed = match renewals.get().await {
                    Ok(client) => limits::renew(&client, call, hold).await,
                    Err(e) => Err(e.into()),
                };
                match renewed {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => tracing::warn!(error = %e, "could not renew a limited model call's hold; retrying"),
                }
            }
        });
        Self { pool: limiter.pool.clone(), call: Some(call), renewing }
    }

    /// Ends the call with the tokens the provider reported, if it did.
    pub async fn done(mut self, tokens: Option<i64>) {
        self.renewing.abort();
        if let Some(call) = self.call.take() {
            end(&self.pool, call, tokens).await;
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.renewing.abort();
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
        // It stops counting as in flight when its hold runs out (nothing renews it now).
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
