//! The run journal: what happened, in order, across every agent of a run.

use baton_domain::run::journal::JournalEvent;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::{sql, Result};

/// An event to append.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: JournalEvent,
    pub invocation_id: Option<Uuid>,
    pub payload: Value,
}

impl Event {
    pub fn new(kind: JournalEvent, invocation_id: Option<Uuid>, payload: Value) -> Self {
        Self { kind, invocation_id, payload }
    }
}

/// A stored event, with its per-run sequence number and the agent it concerns.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub seq: i64,
    pub invocation_id: Option<Uuid>,
    pub profile_id: Option<String>,
    /// The event's name as stored: a [`JournalEvent`] this version may not
    /// know (an older or newer binary wrote it), so it stays a string.
    pub kind: String,
    pub payload: Value,
    pub at: DateTime<Utc>,
}

impl EventRow {
    /// Whether the row is a `kind` event.
    pub fn is(&self, kind: JournalEvent) -> bool {
        self.kind == kind.as_str()
    }
}

/// Appends events in order, in one statement, as one journal row (the
/// `events` view reads them back one per row). More events than a row
/// holds (4,096) would go in several rows; no step writes that many.
pub async fn append(c: &impl GenericClient, run_id: Uuid, events: &[Event]) -> Result<()> {
    for events in events.chunks(ROW_EVENTS) {
        let (invocations, kinds, payloads) = columns(events);
        sql::execute(
            c,
            "INSERT INTO journal (run_id, invocations, types, payloads) VALUES ($1, $2, $3, $4)",
            &[&run_id, &invocations, &kinds, &payloads],
        )
        .await?;
    }
    Ok(())
}

/// The most events one journal row holds (its CHECK, V28).
pub(crate) const ROW_EVENTS: usize = 4096;

/// One journal row's arrays: each event's invocation, type and payload.
pub(crate) fn columns(events: &[Event]) -> (Vec<Option<Uuid>>, Vec<&str>, Vec<&Value>) {
    let invocations = events.iter().map(|e| e.invocation_id).collect();
    let kinds = events.iter().map(|e| e.kind.as_str()).collect();
    let payloads = events.iter().map(|e| &e.payload).collect();
    (invocations, kinds, payloads)
}

pub async fn timeline(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<EventRow>> {
    let rows = sql::query(
        c,
        "SELECT row_number() OVER (ORDER BY e.id), e.invocation_id, i.profile_id, e.type, e.payload, e.created_at
           FROM events e LEFT JOIN invocations i ON i.id = e.invocation_id
          WHERE e.run_id = $1 ORDER BY e.id",
        &[&run_id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| EventRow {
            seq: r.get(0),
            invocation_id: r.get(1),
            profile_id: r.get(2),
            kind: r.get(3),
            payload: r.get(4),
            at: r.get(5),
        })
        .collect())
}
