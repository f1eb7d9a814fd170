//! A dead letter as `/dead` shows it: its queue as the fleet names it, how
//! long it has been dead, the handoff and run it names when they are
//! stored, and whether Replay can help it
//! ([`baton_bus::dead::replayable`] decides, by
//! [`baton_domain::console::dead`]'s rule: the one every replay follows).

use std::collections::BTreeMap;

use baton_bus::dead::{replayable, DeadLetter, Rule};
use baton_domain::fleet::Queue;
use serde::Serialize;

use super::{age, at, clip, short_run_id};
use crate::console::state::State;

/// How much of a body a row shows.
const BODY_CHARS: usize = 1200;

#[derive(Serialize)]
pub struct Row {
    pub id: String,
    /// The queue as the fleet names it (with its prefix): where a replay goes.
    pub queue: String,
    /// Its logical name, when it is one of the fleet's queues and differs.
    logical: Option<&'static str>,
    reason: String,
    body: String,
    truncated: bool,
    /// How long it has been dead, and since when (UTC).
    age: Option<String>,
    dead_at: Option<String>,
    handoff: Option<String>,
    run: Option<String>,
    run_short: Option<String>,
    /// Why Replay is not offered (`None`: it is).
    withheld: Option<String>,
}

/// What a letter names that may be stored: handoff ids (its body's
/// `handoffId` or `id`, its correlation and message ids) and a run id.
fn named(d: &DeadLetter) -> (Vec<String>, Option<uuid::Uuid>) {
    let body: Option<serde_json::Value> = serde_json::from_str(&d.body_preview).ok();
    let field = |k: &str| body.as_ref().and_then(|b| b[k].as_str()).map(str::to_string);
    let handoffs = [field("handoffId"), field("id"), d.correlation_id.clone(), d.message_id.clone()];
    let run = field("runId").and_then(|r| r.parse().ok());
    (handoffs.into_iter().flatten().collect(), run)
}

/// Shapes the letters, asking Postgres which handoffs and runs they name
/// and which other queues stored requests named as their `reply_to`.
pub async fn rows(state: &State, letters: Vec<DeadLetter>) -> anyhow::Result<Vec<Row>> {
    let queues = state.queues();
    let c = state.db().await?;
    let (mut handoffs, mut runs) = (vec![], vec![]);
    for d in &letters {
        let (h, r) = named(d);
        handoffs.extend(h);
        runs.extend(r);
    }
    let (stored, ran) = baton_store::console::known(&c, &handoffs, &runs).await?;
    let mut reply_queues = BTreeMap::new();
    let mut rows = vec![];
    for d in letters {
        let target = d.replay_queue.clone();
        let from = d.fleet_queue(&queues);
        let reply_queue = match (&target, from) {
            (Some(q), None) => {
                if !reply_queues.contains_key(q) {
                    reply_queues.insert(q.clone(), baton_store::console::is_reply_queue(&c, q).await?);
                }
                reply_queues[q]
            }
            _ => false,
        };
        let withheld = replayable(&queues, &d, reply_queue, Rule::Replayable).err();
        let (h, r) = named(&d);
        let run = r.filter(|r| ran.contains(r));
        let died = d.dead_at_ms.and_then(chrono::DateTime::from_timestamp_millis);
        rows.push(Row {
            truncated: d.body_bytes > BODY_CHARS || d.body_preview.chars().count() > BODY_CHARS,
            body: clip(&d.body_preview, BODY_CHARS),
            logical: from.map(Queue::as_str).filter(|l| Some(*l) != target.as_deref()),
            queue: target.unwrap_or_else(|| "(unknown)".into()),
            reason: d.reason,
            age: died.map(age),
            dead_at: died.map(at),
            handoff: h.into_iter().find(|h| stored.contains(h)),
            run_short: run.map(short_run_id),
            run: run.map(|r| r.to_string()),
            withheld,
            id: d.id,
        });
    }
    Ok(rows)
}
