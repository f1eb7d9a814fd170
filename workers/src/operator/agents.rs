//! Who did what in a run, one row per agent invocation: how long it ran,
//! its model calls, its tool calls and its tokens. What `baton demo` ends
//! with and `baton runs show` prints under its header, instead of the
//! journal's ninety rows.

use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::InvocationKind;
use baton_store::invocations::Invocation;
use baton_store::journal::EventRow;
use chrono::Duration;
use serde::Serialize;
use uuid::Uuid;

use super::table;

/// One agent invocation of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRow {
    pub agent: String,
    pub kind: InvocationKind,
    /// From its first journal event to its last (a parked wait included).
    #[serde(skip)]
    pub duration: Option<Duration>,
    pub duration_ms: Option<i64>,
    pub model_calls: usize,
    pub tool_calls: usize,
    pub tokens: i64,
}

/// One invocation, as much of it as the summary reads.
#[derive(Debug, Clone)]
pub struct Lane {
    pub id: Uuid,
    pub agent: String,
    pub kind: InvocationKind,
    pub tokens: i64,
}

impl From<&Invocation> for Lane {
    fn from(inv: &Invocation) -> Self {
        Lane { id: inv.id, agent: inv.profile_id.clone(), kind: inv.kind, tokens: inv.tokens_used }
    }
}

/// The run's invocations in the order given (their creation's), with what
/// their journal events count.
pub fn summarize(lanes: &[Lane], events: &[EventRow]) -> Vec<AgentRow> {
    lanes
        .iter()
        .map(|inv| {
            let own: Vec<&EventRow> = events.iter().filter(|e| e.invocation_id == Some(inv.id)).collect();
            let count =
                |kinds: &[JournalEvent]| own.iter().filter(|e| kinds.iter().any(|k| e.kind == k.as_str())).count();
            let duration = match (own.first(), own.last()) {
                (Some(first), Some(last)) => Some(last.at - first.at),
                _ => None,
            };
            AgentRow {
                agent: inv.agent.clone(),
                kind: inv.kind,
                duration,
                duration_ms: duration.map(|d| d.num_milliseconds()),
                model_calls: count(&[JournalEvent::ModelResponseStored, JournalEvent::CodingModelCall]),
                tool_calls: count(&[
                    JournalEvent::ToolCallCompleted,
                    JournalEvent::ToolCallFailed,
                    JournalEvent::CodingAgentCommand,
                ]),
                tokens: inv.tokens,
            }
        })
        .collect()
}

/// The rows as a table; a delegated child is marked under its parent's name.
pub fn render(rows: &[AgentRow]) -> String {
    let mut t = table::new(&["agent", "kind", "duration", "model calls", "tool calls", "tokens"], &[2, 3, 4, 5]);
    for r in rows {
        let agent = match r.kind {
            InvocationKind::Child => format!("  ↳ {}", r.agent),
            _ => r.agent.clone(),
        };
        t.add_row([
            agent,
            r.kind.to_string(),
            r.duration.map_or_else(|| "-".into(), table::duration),
            r.model_calls.to_string(),
            r.tool_calls.to_string(),
            r.tokens.to_string(),
        ]);
    }
    table::render(&t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use serde_json::json;

    fn event(inv: Uuid, kind: JournalEvent, ms: i64) -> EventRow {
        let at = DateTime::<Utc>::UNIX_EPOCH + Duration::milliseconds(ms);
        EventRow {
            seq: ms,
            invocation_id: Some(inv),
            profile_id: None,
            kind: kind.as_str().into(),
            payload: json!({}),
            at,
        }
    }

    #[test]
    fn each_invocation_counts_its_own_model_and_tool_calls_and_lasts_from_its_first_event_to_its_last() {
        let (writer, checker) = (Uuid::now_v7(), Uuid::now_v7());
        let events = [
            event(writer, JournalEvent::InvocationStarted, 0),
            event(writer, JournalEvent::ModelResponseStored, 10),
            event(writer, JournalEvent::ToolCallCompleted, 12),
            event(checker, JournalEvent::ModelResponseStored, 20),
            event(writer, JournalEvent::ModelResponseStored, 30),
            event(writer, JournalEvent::ToolCallFailed, 31),
            event(writer, JournalEvent::InvocationCompleted, 450),
        ];
        let invocation = |id, agent: &str, kind, tokens| Lane { id, agent: agent.into(), kind, tokens };
        let rows = summarize(
            &[
                invocation(writer, "writer", InvocationKind::Root, 120),
                invocation(checker, "checker", InvocationKind::Child, 7),
            ],
            &events,
        );
        assert_eq!((rows[0].model_calls, rows[0].tool_calls, rows[0].tokens), (2, 2, 120));
        assert_eq!(rows[0].duration_ms, Some(450));
        assert_eq!((rows[1].model_calls, rows[1].tool_calls, rows[1].duration_ms), (1, 0, Some(0)));
        let text = render(&rows);
        assert!(text.lines().next().unwrap().starts_with("agent"), "{text}");
        assert!(text.contains("450ms") && text.contains("↳ checker"), "{text}");
    }
}
