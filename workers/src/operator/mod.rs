//! What an operator can do from the command line: cancel a run, and work
//! a handoff by hand (the manual flow of the bridge protocol).
//!
//! # Layout
//! - [`listing`]: `runs list`, `runs show --json`, `handoff list --waiting`: tables and JSON.
//! - [`show`]: `runs show ID` (a run's or a handoff's id): its header and who did what.
//! - [`agents`]: one row per agent invocation of a run (duration, model and tool calls, tokens).
//! - [`reason`]: why a run ended as it did, in one line.
//! - [`table`]: the command line's aligned tables and short durations.
//! - `retry`: `runs retry`: a failed run resumes from its last stored step.
//! - [`dead_letters`]: `dead list | replay | discard` on `baton.dead`.
//! - [`answer`]: an operator answers an agent's open question (the console).

pub mod agents;
pub mod answer;
pub mod dead_letters;
pub mod listing;
pub mod reason;
mod retry;
pub mod show;
pub mod table;

pub use answer::answer_question;
pub use retry::retry_run;

use anyhow::{bail, Context};
use baton_domain::fleet::{FleetMessage, Queue};
use baton_domain::profiles::brief::render_request_brief;
use baton_domain::protocol::request::{HandoffEvent, HandoffRequest, HandoffStatus};
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{CancelledBy, RunStatus};
use baton_store::journal::Event;
use baton_store::{runs, Pool};
use serde_json::json;
use uuid::Uuid;

/// `baton runs cancel`: cancels a run in one transaction, recorded as an
/// operator's from the command line; `false` when it had already ended.
pub async fn cancel_run(pool: &Pool, run_id: Uuid, reason: &str) -> anyhow::Result<bool> {
    cancel_run_by(pool, run_id, reason, CancelledBy::Cli).await
}

/// Cancels a run in one transaction, recording who did (`by`); `false`
/// when it had already ended.
pub async fn cancel_run_by(pool: &Pool, run_id: Uuid, reason: &str, by: CancelledBy) -> anyhow::Result<bool> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let events = runs::ending::cancel_run(&tx, run_id, reason, by).await?;
    let cancelled = events.len() > 1;
    baton_store::journal::append(&tx, run_id, &events).await?;
    tx.commit().await?;
    Ok(cancelled)
}

/// `baton handoff show`: the request as agents see it (after the disclosure
/// policy), its status and its events.
pub async fn handoff_show(pool: &Pool, id: &str) -> anyhow::Result<String> {
    let c = pool.get().await?;
    let request = baton_store::requests::get(&c, id).await?.with_context(|| format!("no handoff `{id}`"))?;
    let parsed: HandoffRequest = serde_json::from_value(request.body.clone())?;
    let mut out = format!(
        "handoff {id}\n  source: {}\n  target: {}\n  status: {}\n  language: {}\n  chat: {}\n  replies to: {}\n  run: {}\n",
        request.source,
        request.target_agent,
        request.status,
        request.language,
        request.reply_chat_id.as_deref().unwrap_or("-"),
        request.reply_to.as_deref().unwrap_or(Queue::BridgeReplies.as_str()),
        request.run_id.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
    );
    let redactions = &parsed.context.redactions;
    out.push_str(&format!("\nContext after filtering ({} removal(s)):\n", redactions.len()));
    for r in redactions {
        out.push_str(&format!("  - {}: {}\n", r.field, r.reason));
    }
    out.push_str(&format!("\n{}\nEvents:\n", render_request_brief(&parsed)));
    for e in baton_store::requests::events(&c, id).await? {
        let detail = [e.status.map(HandoffStatus::as_str), e.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        out.push_str(&format!("  {}  {:<18} {detail}\n", e.at.format("%Y-%m-%d %H:%M:%S"), e.kind));
    }
    Ok(out)
}

/// `baton handoff prompt`: a ready-to-copy prompt for an external agent.
pub async fn handoff_prompt(pool: &Pool, id: &str) -> anyhow::Result<String> {
    let c = pool.get().await?;
    let request = baton_store::requests::get(&c, id).await?.with_context(|| format!("no handoff `{id}`"))?;
    let parsed: HandoffRequest = serde_json::from_value(request.body)?;
    Ok(format!(
        "{}\n## How to answer\nReply with the result only, as plain text in {}: it is sent to the user as it is.\n",
        render_request_brief(&parsed),
        if parsed.language() == baton_domain::Language::ZhCn { "Simplified Chinese" } else { "English" }
    ))
}

/// What an operator did to a waiting handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// `paste-result`: an external agent's result, sent to the user.
    Result,
    /// `cancel`: the handoff is dropped; the user is told.
    Cancel,
}

/// `baton handoff paste-result | cancel`: [`settle_handoff_by`], a cancel
/// recorded as the command line's (`cli`).
pub async fn settle_handoff(pool: &Pool, id: &str, how: Settle, text: &str) -> anyhow::Result<Uuid> {
    settle_handoff_by(pool, id, how, text, CancelledBy::Cli).await
}

/// Completes (or cancels) a handoff by hand: a run is recorded with the
/// outcome and the collector sends the reply, exactly as for a run the
/// fleet did itself. A handoff the fleet is running is cancelled through
/// its run; one that has ended is refused. A cancel records who did it
/// (`by`: `console` or `cli`) as a run's cancel does, on the run
/// (`runs.error.by`) and in its `run_cancelled` event, and a manual
/// handoff's also in its own log (a `cancelled` event, `by console: …`).
pub async fn settle_handoff_by(
    pool: &Pool,
    id: &str,
    how: Settle,
    text: &str,
    by: CancelledBy,
) -> anyhow::Result<Uuid> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let request = baton_store::requests::lock(&tx, id).await?.with_context(|| format!("no handoff `{id}`"))?;
    if request.reply_sent_at.is_some() || request.status.is_terminal() {
        bail!("handoff `{id}` has already ended ({})", request.status);
    }
    if let Some(run) = request.run_id {
        if how == Settle::Result {
            bail!("handoff `{id}` is being run by the fleet; cancel it first to answer by hand");
        }
        let events = runs::ending::cancel_run(&tx, run, text, by).await?;
        if events.len() <= 1 {
            bail!("handoff `{id}` has already ended; its reply is on its way");
        }
        baton_store::journal::append(&tx, run, &events).await?;
        tx.commit().await?;
        return Ok(run);
    }
    let run = Uuid::now_v7();
    runs::insert(&tx, run, Some(id), "manual").await?;
    baton_store::requests::link_run(&tx, id, run).await?;
    let (status, error, ended) = match how {
        Settle::Result => {
            runs::set_final_text(&tx, run, text).await?;
            (RunStatus::Completed, None, Event::new(JournalEvent::RunCompleted, None, json!({"by": "operator"})))
        }
        Settle::Cancel => {
            // As a run's cancel stores it (`runs::ending::cancel_run`).
            let error = json!({"code": "cancelled", "message": text, "by": by.as_str()});
            let note = format!("by {}: {text}", by.as_str());
            let event = HandoffEvent::Cancelled;
            baton_store::requests::add_event(&tx, id, event, Some(HandoffStatus::Cancelled), Some(&note)).await?;
            (RunStatus::Cancelled, Some(error.clone()), Event::new(JournalEvent::RunCancelled, None, error))
        }
    };
    runs::finish(&tx, run, status, error.as_ref()).await?;
    let events = [Event::new(JournalEvent::RunCreated, None, json!({"handoffId": id, "manual": true})), ended];
    baton_store::journal::append(&tx, run, &events).await?;
    baton_store::outbox::enqueue_fleet(&tx, &FleetMessage::finished(run)).await?;
    tx.commit().await?;
    Ok(run)
}

/// `baton runs prune`: deletes finished runs older than `older_than` with
/// everything they own, their requests' trails, and what is kept by age
/// (see [`baton_store::retention`]), a batch per transaction so live work
/// is never held up for long. Returns what went.
pub async fn prune_runs(
    pool: &Pool,
    older_than: std::time::Duration,
    batch: i64,
) -> anyhow::Result<baton_store::retention::Pruned> {
    let mut total = baton_store::retention::Pruned::default();
    loop {
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        let pruned = baton_store::retention::prune(&tx, older_than, batch).await?;
        tx.commit().await?;
        total.add(pruned);
        if !pruned.filled(batch) {
            return Ok(total);
        }
    }
}
