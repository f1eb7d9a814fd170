//! A dead letter as `/dead` shows it: its queue as the fleet names it, how
//! long it has been dead, the handoff and run it names when they are
//! stored, and whether Replay can help it
//! ([`baton_domain::console::dead`] decides, per reason).

use std::collections::BTreeMap;

use baton_bus::dead::DeadLetter;
use baton_bus::Queues;
use baton_domain::console::dead::{replay, Cause, Destination, Replay};
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
    withheld: Option<&'static str>,
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

/// The fleet queue a physical name is, if any.
fn fleet_queue(queues: &Queues, name: &str) -> Option<Queue> {
    Queue::ALL.into_iter().find(|q| queues.name(*q) == name)
}

/// Whether the copy kept is not the whole message (the relay cut it or dropped its body).
fn is_cut(d: &DeadLetter) -> bool {
    d.headers.iter().any(|(k, _)| k == "x-baton-truncated" || k == "x-baton-body-dropped")
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
        let from = target.as_deref().and_then(|q| fleet_queue(&queues, q));
        let to = match (&target, from) {
            (None, _) => Destination::Unknown,
            (Some(_), Some(q)) => Destination::Fleet(q),
            (Some(q), None) => {
                if !reply_queues.contains_key(q) {
                    reply_queues.insert(q.clone(), baton_store::console::is_reply_queue(&c, q).await?);
                }
                Destination::Other { named: reply_queues[q] }
            }
        };
        let withheld = match replay(to, Cause::of(from, &d.reason), is_cut(&d)) {
            Replay::Offered => None,
            Replay::Withheld(why) => Some(why),
        };
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
