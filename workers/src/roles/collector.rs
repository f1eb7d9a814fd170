//! The result collector: turns a finished run into one humanized reply for
//! the bridge. Idempotent: the request row is locked and a reply already
//! sent is never sent again.

use baton_bus::consume::consume;
use baton_bus::{DeadLetters, Delivery};
use tracing::Instrument;
use baton_domain::bridge::ReplyInput;
use baton_domain::budget::Exhausted;
use baton_domain::contract::ErrorCode;
use baton_domain::fleet::{Queue, RunFinished};
use baton_domain::reply::Outcome;
use baton_domain::request::HandoffStatus;
use baton_domain::state::RunStatus;
use baton_domain::Language;
use baton_store::runs::Run;
use baton_store::{invocations, requests, runs, Pool};
use baton_store::after_commit::scope;
use baton_store::{begin, client as db, commit};
use tokio_util::sync::CancellationToken;

use super::direct::Direct;
use super::{connect, retry_transient, Role};
use crate::bridge;
use crate::config::Settings;

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Collector).await?;
    let publisher = conn.publisher().await?;
    let dead = DeadLetters::new(&publisher, &settings.queues());
    let queue = settings.queues().name(Queue::RunsFinished);
    tracing::info!(%queue, "collector consuming");
    let (publishing, direct) = Direct::start(&conn, &pool, settings).await?;
    let result = scope(publishing, consume(&conn, &queue, settings.prefetch, shutdown, |d| handle(&pool, &dead, settings, shutdown, d))).await;
    direct.stop().await;
    publisher.close().await;
    result
}

async fn handle(pool: &Pool, dead: &DeadLetters, settings: &Settings, shutdown: &CancellationToken, d: Delivery) -> anyhow::Result<()> {
    let hop = tracing::info_span!("collector");
    crate::telemetry::continue_from(&hop, &d);
    match serde_json::from_slice::<RunFinished>(d.body()) {
        Ok(message) => match retry_transient("collecting a run", settings.transient_patience, shutdown, || collect(pool, message)).instrument(hop).await {
            Ok(()) => Ok(d.ack().await?),
            Err(e) if super::is_transient(&e) => Err(e),
            Err(e) => Ok(d.dead_letter(dead, Queue::RunsFinished.as_str(), &format!("could not collect the run: {e:#}")).await?),
        },
        Err(e) => Ok(d.dead_letter(dead, Queue::RunsFinished.as_str(), &format!("not a run-finished message: {e}")).await?),
    }
}

/// Writes the final status and reply of a run's request to the outbox.
#[tracing::instrument(name = "run", skip_all, fields(run = %message.run_id, run_id = %message.run_id, handoff_id = tracing::field::Empty))]
pub async fn collect(pool: &Pool, message: RunFinished) -> anyhow::Result<()> {
    let mut client = db(pool).await?;
    let tx = begin(&mut client).await?;
    let Some(run) = runs::get(&tx, message.run_id).await? else {
        anyhow::bail!("run {} does not exist", message.run_id);
    };
    let Some(handoff) = run.handoff_id.clone() else {
        return Ok(());
    };
    tracing::Span::current().record("handoff_id", handoff.as_str());
    let Some(request) = requests::lock(&tx, &handoff).await? else {
        return Ok(());
    };
    let language = request.language;
    let Some(outcome) = outcome(&run, language) else {
        return Ok(());
    };
    if request.reply_sent_at.is_some() {
        tracing::debug!(%handoff, "reply already sent");
        return Ok(());
    }
    if matches!(outcome, Outcome::Completed { .. }) {
        requests::add_event(&tx, &handoff, "result_received", None, None).await?;
    } else if matches!(outcome, Outcome::Failed { .. }) {
        let error = run.error.as_ref().map(|e| e.to_value().to_string());
        requests::add_event(&tx, &handoff, "failed", Some(HandoffStatus::Failed), error.as_deref()).await?;
    }
    let status = outcome.status();
    bridge::status(&tx, &request, status, None).await?;
    let agents = agents(&tx, &run).await?;
    let input = ReplyInput {
        handoff_id: &handoff,
        chat_id: request.reply_chat_id.as_deref(),
        source: request.source.as_str(),
        language,
        outcome,
        run_id: Some(run.id.to_string()),
        agents,
        at: bridge::timestamp(),
    };
    bridge::reply(&tx, &request, &input).await?;
    commit(tx).await?;
    let took = run.finished_at.and_then(|end| (end - run.created_at).to_std().ok());
    crate::metrics::request_answered(request.source.as_str(), &run.root_profile_id, status.as_str(), took);
    Ok(())
}

fn outcome(run: &Run, language: Language) -> Option<Outcome> {
    // A spent budget is worded from its figures, in the reply's language.
    let exhausted = run.error.as_ref().and_then(|e| Exhausted::from_error(&e.to_value()));
    if let Some(exhausted) = exhausted.filter(|_| run.status == RunStatus::Failed) {
        let message = exhausted.message(language);
        return Some(Outcome::Failed { code: ErrorCode::BudgetExhausted, message });
    }
    Some(match run.status {
        RunStatus::Running => return None,
        RunStatus::Completed => Outcome::Completed { final_text: run.final_text.clone().unwrap_or_default() },
        RunStatus::Failed => match &run.error {
            Some(e) => Outcome::Failed { code: reply_code(&e.code), message: e.message.clone() },
            None => Outcome::Failed { code: ErrorCode::Failed, message: "the agents could not finish".into() },
        },
        RunStatus::Cancelled => Outcome::Cancelled { reason: run.error.as_ref().map(|e| e.message.clone()) },
    })
}

/// The bridge's code for a stored run error. A code that is not part of the
/// contract (a bug: every code a run can fail with is an [`ErrorCode`]) is
/// logged and sent as `failed`, so a bridge only sees codes it compiled against.
fn reply_code(stored: &str) -> ErrorCode {
    ErrorCode::parse(stored).unwrap_or_else(|| {
        tracing::warn!(code = stored, "a run failed with a code outside the contract; the bridge is told `failed`");
        ErrorCode::Failed
    })
}

/// The agents that held the foreground, in order.
async fn agents(c: &impl baton_store::GenericClient, run: &Run) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = vec![];
    for inv in invocations::for_run(c, run.id).await? {
        if inv.kind.is_foreground() && names.last() != Some(&inv.profile_id) {
            names.push(inv.profile_id);
        }
    }
    Ok(names)
}
