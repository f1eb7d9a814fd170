//! The run journal: what happened, in order, across every agent of a run.

use std::borrow::Cow;

use crate::GenericClient;
use baton_domain::run::journal::JournalEvent;
use baton_domain::wire::{contains_nul, without_nul};
use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Json;
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

    /// An `agent_task_*` event about `invocation`'s own incoming task. Its
    /// `taskId` is not written: the `events` view reads it from the
    /// invocation's row (`journal_payload`, V35), as for any payload that
    /// would only repeat the row.
    pub fn own_task(kind: JournalEvent, invocation: Uuid) -> Self {
        Self::new(kind, Some(invocation), Value::Object(Default::default()))
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
        let Columns { invocation, invocations, kinds, payloads } = columns(events);
        sql::execute(
            c,
            "INSERT INTO journal (run_id, invocation_id, invocations, types, payloads)
             VALUES ($1, $2, $3, $4::text[]::journal_event[], $5)",
            &[&run_id, &invocation, &invocations, &kinds, &payloads],
        )
        .await?;
    }
    Ok(())
}

/// The most events one journal row holds (V28; the CHECK that held it there
/// is dropped since V52, and this is what the store writes).
pub(crate) const ROW_EVENTS: usize = 4096;

/// One journal row's columns (V33): the invocation most of its events
/// concern, and each event's invocation (NULL for that one, the nil uuid
/// for none), type and payload.
pub(crate) struct Columns<'a> {
    pub invocation: Option<Uuid>,
    pub invocations: Vec<Option<Uuid>>,
    pub kinds: Vec<&'a str>,
    /// The events' payloads as one JSON array, serialized straight into
    /// the statement's parameter (V35).
    pub payloads: Json<Vec<Cow<'a, Value>>>,
}

/// Values as one JSON array for a `json` column (V35), each as it is unless
/// it holds a NUL character, which becomes U+FFFD: the views read the array
/// as `jsonb`, which cannot hold one, so a NUL stored would make every later
/// read of its run fail. (An agent's output is not ours to trust.)
pub(crate) fn json_array<'a>(values: impl Iterator<Item = &'a Value>) -> Json<Vec<Cow<'a, Value>>> {
    Json(values.map(|v| if contains_nul(v) { Cow::Owned(without_nul(v.clone())) } else { Cow::Borrowed(v) }).collect())
}

/// A `json` parameter already serialized, owned (for a statement whose
/// statement goes out later: [`crate::Transaction::write_at_commit`]).
#[derive(Debug)]
pub(crate) struct JsonText(pub Vec<u8>);

impl JsonText {
    /// `values` as [`json_array`] writes them.
    pub(crate) fn array<'a>(values: impl Iterator<Item = &'a Value>) -> Result<Self> {
        let array = json_array(values);
        serde_json::to_vec(&array.0).map(Self).map_err(|e| crate::Error::Corrupt(e.to_string()))
    }
}

impl tokio_postgres::types::ToSql for JsonText {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // `jsonb`'s binary form is a version byte, then the text.
        if *ty == tokio_postgres::types::Type::JSONB {
            out.extend_from_slice(&[1]);
        }
        out.extend_from_slice(&self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    tokio_postgres::types::accepts!(JSON, JSONB);
    tokio_postgres::types::to_sql_checked!();
}

pub(crate) fn columns(events: &[Event]) -> Columns<'_> {
    let invocation = most_named(events.iter().filter_map(|e| e.invocation_id));
    let invocations = events
        .iter()
        .map(|e| match e.invocation_id {
            None => Some(Uuid::nil()),
            same if same == invocation => None,
            other => other,
        })
        .collect();
    let kinds = events.iter().map(|e| e.kind.as_str()).collect();
    let payloads = json_array(events.iter().map(|e| &e.payload));
    Columns { invocation, invocations, kinds, payloads }
}

/// The id named most often (the first of those named as often).
fn most_named(ids: impl Iterator<Item = Uuid>) -> Option<Uuid> {
    let mut counts: Vec<(Uuid, usize)> = vec![];
    for id in ids {
        match counts.iter_mut().find(|(seen, _)| *seen == id) {
            Some((_, n)) => *n += 1,
            None => counts.push((id, 1)),
        }
    }
    counts
        .iter()
        .fold(None, |best: Option<(Uuid, usize)>, &(id, n)| match best {
            Some((_, m)) if m >= n => best,
            _ => Some((id, n)),
        })
        .map(|(id, _)| id)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_nul_character_is_stored_as_a_replacement_character_and_nothing_else_changes() {
        let (dirty, clean) = (json!({"output": ["a\u{0}b"], "k\u{0}": 1}), json!({"tool": "x"}));
        let stored = json_array([&dirty, &clean].into_iter());
        let expected = json!([{"output": ["a\u{FFFD}b"], "k\u{FFFD}": 1}, {"tool": "x"}]);
        assert_eq!(serde_json::to_value(&stored.0).unwrap(), expected);
        assert!(matches!(stored.0[1], Cow::Borrowed(_)), "a clean payload is not copied");
    }

    #[test]
    fn a_row_names_its_main_invocation_once_and_the_others_and_none_apart() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let events: Vec<Event> = [Some(b), Some(a), None, Some(a), Some(b), Some(a)]
            .into_iter()
            .map(|inv| Event::new(JournalEvent::ToolCallCompleted, inv, json!({})))
            .collect();
        let row = columns(&events);
        assert_eq!(row.invocation, Some(a));
        assert_eq!(row.invocations, vec![Some(b), None, Some(Uuid::nil()), None, Some(b), None]);
        assert_eq!(columns(&events[2..3]).invocation, None);
        assert_eq!(columns(&events[2..3]).invocations, vec![Some(Uuid::nil())]);
    }
}
