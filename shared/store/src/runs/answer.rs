//! A finished run's answer to its bridge: what is read of the run, and the
//! final status and reply written in the transaction that ended it.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::policy::budget::Exhausted;
use baton_domain::protocol::bridge::ReplyInput;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::reply::Outcome;
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use baton_domain::run::state::RunStatus;
use baton_domain::Language;
use serde_json::Value;
use uuid::Uuid;

use super::Run;
use crate::outbox::after_commit;
use crate::requests::{self, bridge, Request};
use crate::{sql, Result};

/// What the collector reads of a finished run, in one statement: the run,
/// the seconds it waited for its user's answers, its attempt, its request
/// (locked for this transaction, as `requests::lock_of_run`), what a coding
/// agent changed (the newest) and the agents that held the foreground.
/// `None` when the run does not exist.
pub struct ToAnswer {
    pub run: Run,
    pub waited_secs: f64,
    pub attempt: i32,
    pub request: Option<Request>,
    pub changes: Option<baton_domain::projects::Changes>,
    /// The agents that held the foreground, in order.
    pub agents: Vec<String>,
}

/// [`to_answer`]'s statement.
pub(crate) static TO_ANSWER: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let run_columns = super::RUN_COLUMNS;
    let request_columns: Vec<String> = requests::COLUMNS.split(", ").map(|c| format!("h.{c}")).collect();
    format!(
        "WITH h AS (SELECT * FROM handoff_requests WHERE id = (SELECT handoff_id FROM runs WHERE id = $1) FOR UPDATE)
         SELECT {run_columns},
                coalesce((SELECT sum(extract(epoch FROM least(coalesce(q.closed_at, now()), coalesce(r.finished_at, now()))
                                                      - q.created_at))
                            FROM questions q WHERE q.run_id = r.id), 0)::float8,
                r.attempt,
                (SELECT changes FROM coding_changes WHERE run_id = r.id ORDER BY created_at DESC, invocation_id DESC LIMIT 1),
                h.id IS NOT NULL,
                {},
                (SELECT array_agg(i.profile_id ORDER BY i.created_at, i.id) FROM invocations i
                  WHERE i.run_id = r.id AND i.kind <> 'child')
           FROM runs r LEFT JOIN h ON true WHERE r.id = $1",
        request_columns.join(", ")
    )
});

pub async fn to_answer(c: &impl GenericClient, run_id: Uuid) -> Result<Option<ToAnswer>> {
    let Some(row) = sql::query_opt(c, &TO_ANSWER, &[&run_id]).await? else {
        return Ok(None);
    };
    let changes: Option<Value> = row.get(11);
    let request = if row.get(12) { Some(requests::from_row_at(&row, 13)?) } else { None };
    // The foreground owners' agents; one that handed off to itself is named once.
    let mut agents: Vec<String> =
        row.get::<_, Option<Vec<String>>>(13 + requests::COLUMNS.split(", ").count()).unwrap_or_default();
    agents.dedup();
    Ok(Some(ToAnswer {
        agents,
        run: super::run_at(&row, 0)?,
        waited_secs: row.get(9),
        attempt: row.get(10),
        request,
        changes: changes.map(serde_json::from_value).transpose()?,
    }))
}

/// Answers a finished run's bridge, in the caller's transaction: the final
/// status and the reply (with its events and the request row) in one
/// statement ([`bridge::update`]). Idempotent: the request row is locked,
/// and a reply already sent is never sent again. Nothing happens for a run
/// still running, or one that no bridge request started. A run a role ends
/// is answered in the transaction that ends it ([`super::ending`]); the
/// collector role answers, here too, what `baton.runs.finished` carries (a
/// run an operator's command ended, `runs answer`, the relay's sweep of
/// unanswered runs).
pub async fn collect(c: &impl GenericClient, run_id: Uuid) -> Result<()> {
    let read = to_answer(c, run_id).await?;
    collect_read(c, run_id, read).await
}

/// [`collect`], with what [`to_answer`] read already, in this transaction.
#[tracing::instrument(name = "answer", skip_all, fields(run_id = %run_id, handoff_id = tracing::field::Empty))]
pub async fn collect_read(c: &impl GenericClient, run_id: Uuid, read: Option<ToAnswer>) -> Result<()> {
    let Some(ToAnswer { run, waited_secs, attempt, request, changes, agents }) = read else {
        return Err(crate::Error::Corrupt(format!("run {run_id} does not exist")));
    };
    let Some(request) = request.filter(|_| run.handoff_id.is_some()) else {
        return Ok(());
    };
    tracing::Span::current().record("handoff_id", run.handoff_id.as_deref());
    let language = request.language;
    let Some(outcome) = outcome(&run, language) else {
        return Ok(());
    };
    if request.reply_sent_at.is_some() {
        tracing::debug!(handoff = %request.id, "reply already sent");
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
        agents,
        changes,
        at: bridge::timestamp(),
    };
    // One statement: the events, the final status and the reply, in this
    // order, and the request row once (its status and `reply_sent_at`).
    // `to_answer` locked the request's row.
    let update = bridge::Update {
        said: &said,
        status: Some((status, None)),
        reply: Some((&input, attempt)),
        held: true,
        ..Default::default()
    };
    // Nothing in the transaction reads it after: it goes out with the commit.
    bridge::update_at_commit(c, &request, update).await?;
    // The time it waited for the user's answers is the user's, not the run's.
    let took = run.finished_at.and_then(|end| (end - run.created_at).to_std().ok());
    let took = took.map(|t| t.saturating_sub(Duration::from_secs_f64(waited_secs.max(0.0))));
    let (source, target_agent, outcome) = (request.source.as_str(), request.target_agent.as_str(), status.as_str());
    after_commit::answered(after_commit::Answered { source, target_agent, outcome, took });
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
