//! The result collector: turns a finished run into one humanized reply for
//! the bridge. Idempotent: the request row is locked and a reply already
//! sent is never sent again.

use std::sync::Arc;

use baton_bus::{DeadLetters, Delivery};
use baton_domain::fleet::{Queue, RunFinished};
use baton_domain::policy::budget::Exhausted;
use baton_domain::protocol::bridge::ReplyInput;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::reply::Outcome;
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use baton_domain::run::state::RunStatus;
use baton_domain::Language;
use baton_store::after_commit::scope;
use baton_store::runs::Run;
use baton_store::{begin, client as db, commit};
use baton_store::{invocations, requests, Pool};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::roles::keyed_consumer::consume_keyed;
use crate::roles::publish_after_commit::PublishAfterCommit;
use crate::roles::{connect, retry_transient, Role};
use baton_store::requests::bridge;

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Collector).await?;
    let publisher = conn.publisher().await?;
    let dead = DeadLetters::new(&publisher, &settings.queues());
    let queue = settings.queues().name(Queue::RunsFinished);
    tracing::info!(%queue, concurrency = settings.intake_lanes(), "collector consuming");
    let (publishing, publisher_after_commit) = PublishAfterCommit::start(&conn, &pool, settings).await?;
    let role = Arc::new((pool.clone(), dead, settings.clone(), publishing));
    // Runs are collected side by side, one message of a run after the other.
    let keys = |d: &Delivery| {
        serde_json::from_slice::<RunFinished>(d.body()).map(|m| vec![m.run_id.to_string()]).unwrap_or_default()
    };
    let result = consume_keyed(&conn, &queue, settings.prefetch, settings.intake_lanes(), shutdown, keys, |d, stop| {
        let role = role.clone();
        async move {
            let (pool, dead, settings, publishing) = &*role;
            scope(publishing.clone(), handle(pool, dead, settings, &stop, d)).await
        }
    })
    .await;
    publisher_after_commit.stop().await;
    publisher.close().await;
    // Closed, not only dropped: a consumer whose task ended with the
    // attempt's error (another consumer of this role failed) is cancelled
    // with it, and what it held goes back to its queue. Left open, it kept
    // a dead-lettered request unacked, out of every live consumer's reach.
    conn.close("the role's attempt ended").await;
    result
}

async fn handle(
    pool: &Pool,
    dead: &DeadLetters,
    settings: &Settings,
    shutdown: &CancellationToken,
    d: Delivery,
) -> anyhow::Result<()> {
    let hop = tracing::info_span!("collector");
    crate::telemetry::continue_from(&hop, &d);
    match serde_json::from_slice::<RunFinished>(d.body()) {
        Ok(message) => {
            match retry_transient("collecting a run", settings.transient_patience, shutdown, || collect(pool, message))
                .instrument(hop)
                .await
            {
                Ok(()) => Ok(d.ack().await?),
                Err(e) if crate::roles::is_transient(&e) => Err(e),
                Err(e) => Ok(d
                    .dead_letter(dead, Queue::RunsFinished.as_str(), &format!("could not collect the run: {e:#}"))
                    .await?),
            }
        }
        Err(e) => {
            Ok(d.dead_letter(dead, Queue::RunsFinished.as_str(), &format!("not a run-finished message: {e}")).await?)
        }
    }
}

/// Writes the final status and reply of a run's request to the outbox.
#[tracing::instrument(name = "run", skip_all, fields(run = %message.run_id, run_id = %message.run_id, handoff_id = tracing::field::Empty))]
pub async fn collect(pool: &Pool, message: RunFinished) -> anyhow::Result<()> {
    let mut client = db(pool).await?;
    let tx = begin(&mut client).await?;
    // Pipelined: the run, its attempt, its request (locked) and what a
    // coding agent changed (one statement), and its invocations.
    let (read, invocations) = tokio::try_join!(
        baton_store::runs::answer::to_answer(&tx, message.run_id),
        invocations::for_run(&tx, message.run_id)
    )?;
    let Some(baton_store::runs::answer::ToAnswer { run, waited_secs, attempt, request, changes }) = read else {
        anyhow::bail!("run {} does not exist", message.run_id);
    };
    let Some(handoff) = run.handoff_id.clone() else {
        return Ok(());
    };
    tracing::Span::current().record("handoff_id", handoff.as_str());
    let Some(request) = request else {
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
    let error = run.error.as_ref().map(|e| e.to_value().to_string());
    let said: Vec<requests::Said<'_>> = match outcome {
        Outcome::Completed { .. } => vec![(HandoffEvent::ResultReceived, None, None)],
        Outcome::Failed { .. } => vec![(HandoffEvent::Failed, Some(HandoffStatus::Failed), error.as_deref())],
        _ => vec![],
    };
    let status = outcome.status();
    let changes = changes.filter(|_| matches!(outcome, Outcome::Completed { .. }));
    let input = ReplyInput {
        handoff_id: request.wire_id(),
        chat_id: request.reply_chat_id.as_deref(),
        source: request.source.as_str(),
        language,
        outcome,
        run_id: Some(run.id.to_string()),
        agents: agents(invocations),
        changes,
        at: bridge::timestamp(),
    };
    // One statement: the events, the final status and the reply, in this
    // order, and the request row once (its status and `reply_sent_at`).
    let update = bridge::Update {
        said: &said,
        status: Some((status, None)),
        reply: Some((&input, attempt)),
        ..Default::default()
    };
    bridge::update(&tx, &request, update).await?;
    commit(tx).await?;
    // The time it waited for the user's answers is the user's, not the run's.
    let took = run.finished_at.and_then(|end| (end - run.created_at).to_std().ok());
    let took = took.map(|t| t.saturating_sub(std::time::Duration::from_secs_f64(waited_secs.max(0.0))));
    crate::metrics::request_answered(request.source.as_str(), request.target_agent.as_str(), status.as_str(), took);
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
fn agents(invocations: Vec<invocations::Invocation>) -> Vec<String> {
    let mut names: Vec<String> = vec![];
    for inv in invocations {
        if inv.kind.is_foreground() && names.last() != Some(&inv.profile_id) {
            names.push(inv.profile_id);
        }
    }
    names
}
