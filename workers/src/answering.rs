//! Applying an answer to a question an agent asked its user (`ask_user`,
//! docs/bridge-protocol.md#conversations), whoever gives it: intake for a bridge's `BridgeAnswer`
//! (`roles/intake/answers.rs`), or an operator in the console. It is stored once by
//! its id and, in the same transaction, becomes the question's answer, moves
//! the request back to `running` and wakes the parked invocation under its
//! row lock; any worker resumes it. An answer that is a duplicate, late, or
//! about an unknown handoff, a closed question or an ended run is recorded
//! and changes nothing.

use baton_domain::fleet::FleetMessage;
use baton_domain::policy::disclosure::{self, DisclosureConfig};
use baton_domain::protocol::conversation::answer::BridgeAnswer;
use baton_domain::protocol::conversation::question::QuestionState;
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{InvocationStatus, RunStatus};
use baton_store::journal::Event;
use baton_store::requests::questions::{self, Question};
use baton_store::{
    begin, client as db, commit, invocations, outbox, profiles, requests, requests::bridge, runs, GenericClient, Pool,
};
use serde_json::json;
use uuid::Uuid;

/// What became of an answer: it was applied, or why it changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    Applied,
    Ignored(&'static str),
    Duplicate,
}

/// Who gave an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answerer {
    /// A bridge's `BridgeAnswer`, from the user.
    Bridge,
    /// An operator, in the console: recorded as an [`HandoffEvent::OperatorAnswered`] handoff event.
    Operator,
}

/// Stores and applies one answer in one transaction.
pub async fn apply(pool: &Pool, answer: &BridgeAnswer, by: Answerer) -> anyhow::Result<Handled> {
    let mut client = db(pool).await?;
    // Read before the transaction opens, like a request's.
    let policy = profiles::disclosure(&client).await?;
    let tx = begin(&mut client).await?;
    let handled = decide(&tx, answer, &policy).await?;
    let outcome = match &handled {
        Handled::Applied => "applied",
        Handled::Ignored(why) => why,
        Handled::Duplicate => "duplicate",
    };
    if handled != Handled::Duplicate {
        questions::set_answer_outcome(&tx, &answer.id, outcome).await?;
    }
    if by == Answerer::Operator {
        let why = format!("an operator answered in the console: {outcome}");
        note(&tx, answer, HandoffEvent::OperatorAnswered, &why).await?;
    }
    commit(tx).await?;
    Ok(handled)
}

async fn decide(c: &impl GenericClient, answer: &BridgeAnswer, policy: &DisclosureConfig) -> anyhow::Result<Handled> {
    if !questions::record_answer(c, &answer.id, &answer.handoff_id, &answer.question_id, "received").await? {
        note(c, answer, HandoffEvent::AnswerDuplicate, "this answer was received before").await?;
        return Ok(Handled::Duplicate);
    }
    if requests::get(c, &answer.handoff_id).await?.is_none() {
        tracing::warn!("an answer for an unknown handoff; recorded, nothing changed");
        return Ok(Handled::Ignored("unknown handoff"));
    }
    let id = Uuid::parse_str(&answer.question_id).ok();
    let Some(found) = (match id {
        Some(id) => questions::get(c, &answer.handoff_id, id, false).await?,
        None => None,
    }) else {
        return ignore(c, answer, "unknown question").await;
    };
    // The locks in the order the asking tool takes them: the invocation
    // (its step's fence), the question, the request.
    let parked = invocations::lock(c, found.invocation_id).await?;
    let Some(question) = questions::get(c, &answer.handoff_id, found.id, true).await? else {
        return ignore(c, answer, "unknown question").await;
    };
    let Some(request) = requests::lock(c, &answer.handoff_id).await? else {
        return Ok(Handled::Ignored("unknown handoff"));
    };
    if let Some(why) = closed(c, &question).await? {
        return ignore(c, answer, why).await;
    }
    let (text, found) = disclosure::redact_text(&answer.text, policy.for_target(request.target_agent.as_str()));
    questions::answer(c, question.id, &text).await?;
    requests::add_event(
        c,
        &request.id,
        HandoffEvent::AnswerReceived,
        None,
        Some(&format!("answer {} to question {}", answer.id, question.id)),
    )
    .await?;
    if !found.is_empty() {
        let what: Vec<&str> = found.iter().map(|f| f.reason()).collect();
        let note = format!("{} removal(s) from answer {}: {}", what.len(), answer.id, what.join("; "));
        requests::add_event(c, &request.id, HandoffEvent::DisclosureFiltered, None, Some(&note)).await?;
    }
    bridge::status(c, &request, HandoffStatus::Running, Some("the user answered")).await?;
    if parked.is_some_and(|inv| inv.status == InvocationStatus::Parked)
        && invocations::wake(c, question.invocation_id).await?
    {
        outbox::enqueue_fleet(c, &FleetMessage::wake(question.run_id, question.invocation_id)).await?;
        let woken = Event::new(JournalEvent::InvocationWoken, Some(question.invocation_id), json!({"by": "answer"}));
        baton_store::journal::append(c, question.run_id, &[woken]).await?;
    }
    Ok(Handled::Applied)
}

/// Why a question takes no answer any more, if it does not.
async fn closed(c: &impl GenericClient, question: &Question) -> anyhow::Result<Option<&'static str>> {
    let run = runs::get(c, question.run_id).await?;
    Ok(match question.state {
        _ if run.is_none_or(|r| r.status != RunStatus::Running) => Some("the run has ended"),
        QuestionState::Answered => Some("the question was already answered"),
        QuestionState::Expired => Some("the question expired"),
        QuestionState::Open if question.expired => Some("the question expired"),
        QuestionState::Open => None,
    })
}

async fn ignore(c: &impl GenericClient, answer: &BridgeAnswer, why: &'static str) -> anyhow::Result<Handled> {
    tracing::info!(why, "answer ignored");
    note(c, answer, HandoffEvent::AnswerIgnored, why).await?;
    Ok(Handled::Ignored(why))
}

/// A handoff event about an answer, when the handoff is known.
async fn note(c: &impl GenericClient, answer: &BridgeAnswer, kind: HandoffEvent, why: &str) -> anyhow::Result<()> {
    if requests::get(c, &answer.handoff_id).await?.is_some() {
        let message = format!("answer {} to question {}: {why}", answer.id, answer.question_id);
        requests::add_event(c, &answer.handoff_id, kind, None, Some(&message)).await?;
    }
    Ok(())
}
