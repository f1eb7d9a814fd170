//! Baton's agent loop: a claimed invocation runs model turn → tool calls →
//! results, each step persisted as it happens and fenced by the claim epoch,
//! so any worker can resume it after a crash.
//!
//! # Layout
//! - [`runner`]: the loop, one persisted step at a time.
//! - [`opening`]: an invocation's system prompt and brief, written with its claim.
//! - [`http`]: HTTP response bodies read up to a cap.
//! - [`metrics`]: the metric names the loop records (model calls, tokens, tool calls).
//! - `step`: the step transaction (`StepTx`: begin, fence, write, commit, retried whole),
//!   what it wrote, how a loop ended ([`Exit`]), safe-to-store model output.
//! - [`tools`]: the model-visible tools, run inside the step's transaction.
//! - [`providers`]: the provider trait; scripted, OpenAI-compatible and command providers, and
//!   [`providers::coding`]: the coding CLIs on a checkout of the request's project (the CLIs, the
//!   checkout, the model gateway, sessions that continue).
//! - [`limiter`]: model calls under a fleet-wide limit wait their turn (admission in Postgres).
//! - [`slots`]: slots given out by priority with aging (a worker's invocations, a limit's turn).
//! - [`transcript`]: the persisted transcript, read back as chat messages.
//! - [`jail`]: the box's outer layers: another user, bubblewrap, an undumpable worker.
//! - `budget`: run budgets on the step path: spend recorded per step, checked before the next.

mod budget;
pub mod http;
pub mod jail;
pub mod limiter;
pub mod metrics;
pub mod opening;
pub mod providers;
pub mod runner;
pub mod slots;
mod step;
pub mod tools;
pub mod transcript;

pub use runner::{Exit, Runner};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] baton_store::Error),
    #[error("host contract broken: {0}")]
    Contract(String),
    #[error(transparent)]
    Provider(#[from] providers::ProviderError),
}

impl Error {
    /// The claim was taken over: stop without touching anything.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Store(baton_store::Error::Fenced(_)))
    }

    /// The database went away, is failing over, read-only, busy or slow for
    /// a moment: the same step is tried again later, by the same claim.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Store(e) if e.is_transient())
    }

    /// The database aborted the transaction (deadlock, serialization): run it again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Store(e) if e.is_retryable())
    }
}

impl From<baton_store::tokio_postgres::Error> for Error {
    fn from(e: baton_store::tokio_postgres::Error) -> Self {
        Error::Store(e.into())
    }
}

impl From<baton_store::PoolError> for Error {
    fn from(e: baton_store::PoolError) -> Self {
        Error::Store(e.into())
    }
}
