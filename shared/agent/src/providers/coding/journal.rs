//! What a coding agent does while it works (each command, each edit, each
//! model call) goes to the run's journal as it happens, so the console's run
//! page shows it live. These are observations, written beside the step
//! transactions without the fence: a database that is away costs lines,
//! never the agent's work. Every payload passes the disclosure filter first.

use std::sync::Arc;

use baton_domain::run::journal::JournalEvent;
use baton_store::journal::Event;
use baton_store::Pool;
use serde_json::Value;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::providers::coding::scrub::Scrubber;

/// Events waiting to be written at most; past it new ones are dropped (and counted).
const BACKLOG: usize = 1024;

#[derive(Clone)]
pub struct Journal {
    tx: Option<mpsc::Sender<Event>>,
    invocation: Uuid,
    scrub: Arc<Scrubber>,
}

/// Writes what the journal was given until every [`Journal`] is dropped.
pub struct Writer(Option<tokio::task::JoinHandle<()>>);

impl Journal {
    /// A journal for one invocation of `run`, or one that writes nothing (no pool: unit tests).
    pub fn start(pool: Option<Pool>, run: Uuid, invocation: Uuid, scrub: Arc<Scrubber>) -> (Journal, Writer) {
        let Some(pool) = pool else {
            return (Journal { tx: None, invocation, scrub }, Writer(None));
        };
        let (tx, mut rx) = mpsc::channel::<Event>(BACKLOG);
        let task = tokio::spawn(async move {
            let mut batch = Vec::new();
            while rx.recv_many(&mut batch, 64).await > 0 {
                let written = match pool.get().await {
                    Ok(client) => baton_store::journal::append(&client, run, &batch).await,
                    Err(e) => Err(e.into()),
                };
                if let Err(e) = written {
                    tracing::warn!(error = %e, lost = batch.len(), "could not record a coding agent's progress");
                }
                batch.clear();
            }
        });
        (Journal { tx: Some(tx), invocation, scrub }, Writer(Some(task)))
    }

    /// Records an observation, its strings scrubbed.
    pub fn note(&self, kind: JournalEvent, payload: Value) {
        let Some(tx) = &self.tx else { return };
        let event = Event::new(kind, Some(self.invocation), self.scrub.value(payload));
        if tx.try_send(event).is_err() {
            tracing::warn!(event = kind.as_str(), "a coding agent's progress event was dropped (journal backlog full)");
        }
    }
}

impl Writer {
    /// Waits (a little) until what was noted is written.
    pub async fn flush(self) {
        if let Some(task) = self.0 {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
        }
    }
}
