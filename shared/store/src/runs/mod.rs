//! Runs: one per request, holding the final reply (and, once ended, its handoff count).
//!
//! - [`start`]: starting a request's run (intake on arrival, or a chat's next request at its turn).
//! - [`ending`]: transitions that end invocations, tasks and runs, with their events and outbox messages.
//! - [`retry`]: a failed run resumed from its last stored step.
//! - [`answer`]: what the collector reads of a finished run.
//! - [`budgets`]: run budgets and what each run has spent.
//! - [`workspace`]: files, read marks and the commit ledger.

pub mod answer;
pub mod budgets;
pub mod ending;
pub mod retry;
pub mod start;
pub mod workspace;

use baton_domain::protocol::request::Priority;
use baton_domain::run::state::{Failure, RunStatus};
use chrono::{DateTime, Utc};
use std::time::Duration;

use crate::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::decode::RowOf;
use crate::{sql, Result};

/// A run that has not ended, as stored.
const RUNNING: &str = RunStatus::Running.as_str();

#[derive(Debug, Clone)]
pub struct Run {
    pub id: Uuid,
    pub handoff_id: Option<String>,
    pub status: RunStatus,
    pub root_profile_id: String,
    pub handoff_count: i32,
    pub final_text: Option<String>,
    pub error: Option<Failure>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Inserts a run that queues no work of its own (an operator's answer by
/// hand): its priority is `normal`.
pub async fn insert(c: &impl GenericClient, id: Uuid, handoff_id: Option<&str>, root_profile_id: &str) -> Result<()> {
    insert_with_budget(c, id, handoff_id, root_profile_id, Priority::Normal, None, None).await
}

/// [`insert`], with its request's priority, the budget copied onto the run in the same row (intake:
/// no update follows), and the conversation whose turn the run may take
/// (its end gives the turn back through it, V44).
pub async fn insert_with_budget(
    c: &impl GenericClient,
    id: Uuid,
    handoff_id: Option<&str>,
    root_profile_id: &str,
    priority: Priority,
    budget: Option<&baton_domain::policy::budget::RunBudget>,
    conversation: Option<&str>,
) -> Result<()> {
    let budget = budget.map(serde_json::to_value).transpose()?;
    sql::execute(
        c,
        "INSERT INTO runs (id, handoff_id, status, root_profile_id, priority, budget, conversation_key)
         VALUES ($1, $2, $4, $3, $7, $5, $6)",
        &[&id, &handoff_id, &root_profile_id, &RUNNING, &budget, &conversation, &priority.as_str()],
    )
    .await?;
    Ok(())
}

/// The columns [`run_at`] reads, for a query on `runs r`.
pub(crate) const RUN_COLUMNS: &str =
    "r.id, r.handoff_id, r.status, r.root_profile_id, r.handoff_count, r.final_text, r.error, r.created_at, r.finished_at";

/// [`RUN_COLUMNS`] for a reader that shows a run as it stands: a running
/// run's final text is its newest commit's reply (a run's row takes it
/// when the run ends, [`finish`]).
fn run_columns_now() -> String {
    RUN_COLUMNS.replace(
        "r.final_text",
        "coalesce(r.final_text, (SELECT reply FROM commits WHERE run_id = r.id ORDER BY ordinal DESC LIMIT 1))",
    )
}

pub async fn get(c: &impl GenericClient, id: Uuid) -> Result<Option<Run>> {
    let sql = format!("SELECT {} FROM runs r WHERE r.id = $1", run_columns_now());
    sql::query_opt(c, &sql, &[&id]).await?.map(|r| run_at(&r, 0)).transpose()
}

/// A run read from [`RUN_COLUMNS`], starting at column `from`.
pub(crate) fn run_at(r: &tokio_postgres::Row, from: usize) -> Result<Run> {
    let id: Uuid = r.get(from);
    let at = RowOf { table: "runs", id: &id };
    Ok(Run {
        id,
        handoff_id: r.get(from + 1),
        status: at.wire(r, from + 2)?,
        root_profile_id: r.get(from + 3),
        handoff_count: r.get(from + 4),
        final_text: r.get(from + 5),
        error: at.json_opt(r, from + 6)?,
        created_at: r.get(from + 7),
        finished_at: r.get(from + 8),
    })
}

/// Ends a running run that holds no conversation's turn (an operator's
/// answer by hand: its run is given no conversation key); `false` when it
/// had already ended. A run that may hold one ends with
/// [`finish_releasing`], whose caller starts the conversation's next request.
pub async fn finish(c: &impl GenericClient, id: Uuid, status: RunStatus, error: Option<&Value>) -> Result<bool> {
    Ok(finish_releasing(c, id, status, error).await?.is_some())
}

/// Ends a running run, its handoff count set now from its last foreground
/// owner (a hop does not write the run's row, V30), and gives back the
/// conversation whose turn it held in the same statement: `None` when the
/// run had already ended, else the key of the conversation it held, if it
/// held one, for its next request ([`start::next_in_conversation_as`]). The
/// conversation is found through the run's conversation key (V44); one
/// whose turn another run took since is left as it is.
pub async fn finish_releasing(
    c: &impl GenericClient,
    id: Uuid,
    status: RunStatus,
    error: Option<&Value>,
) -> Result<Option<Option<String>>> {
    const SQL: &str = concat!("WITH ", finish_releasing_ctes!());
    let row = sql::query_opt(c, SQL, &[&id, &status.as_str(), &error, &RUNNING]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// The statement's end of [`finish_releasing`] (parameters `$1` to `$4`),
/// also the end of [`complete_finishing`]'s.
macro_rules! finish_releasing_ctes {
    () => {
        "ended AS (
             UPDATE runs SET status = $2, error = $3, finished_at = now(),
                    handoff_count = (SELECT coalesce(max(handoffs), 0) FROM invocations WHERE run_id = $1),
                    final_text = coalesce((SELECT reply FROM commits WHERE run_id = $1 ORDER BY ordinal DESC LIMIT 1),
                                          final_text)
              WHERE id = $1 AND status = $4
             RETURNING conversation_key),
         released AS (
             UPDATE conversations c SET live_run = NULL, updated_at = now()
               FROM ended WHERE c.key = ended.conversation_key AND c.live_run = $1
             RETURNING c.key)
         SELECT (SELECT key FROM released) FROM ended"
    };
}
use finish_releasing_ctes;

/// The run's last owner completes (`invocations::complete`, with what its
/// last step spent: tokens, model calls, tool calls) and the run completes
/// with it ([`finish_releasing`]), in one statement: for an owner that
/// delegated nothing, so no child is left to cancel between the two. What
/// the run's end reads of the invocation (its handoffs) the completion
/// does not change.
pub async fn complete_finishing(
    c: &impl GenericClient,
    owner: &crate::invocations::Invocation,
    spending: (i64, i32, i32),
) -> Result<Option<Option<String>>> {
    let (tokens, model_calls, tool_calls) = spending;
    let (completed, live) = (RunStatus::Completed.as_str(), crate::invocations::live());
    let done = baton_domain::run::state::InvocationStatus::Completed.as_str();
    let row = sql::query_opt(
        c,
        COMPLETE_FINISHING,
        &[
            &owner.run_id,
            &completed,
            &None::<Value>,
            &RUNNING,
            &owner.id,
            &done,
            &live,
            &model_calls,
            &tool_calls,
            &tokens,
            &owner.claim_epoch,
        ],
    )
    .await?;
    Ok(row.map(|r| r.get(0)))
}

/// [`complete_finishing`]'s statement.
pub(crate) const COMPLETE_FINISHING: &str = concat!(
    "WITH done AS (
         UPDATE invocations SET status = $6, error = NULL, lease_owner = NULL, lease_expires_at = NULL,
                finished_at = now(), model_calls = model_calls + $8, tool_calls = tool_calls + $9,
                tokens_used = tokens_used + $10, claim_epoch = $11, started_at = coalesce(started_at, now())
          WHERE id = $5 AND status = ANY($7)), ",
    finish_releasing_ctes!()
);

pub async fn set_final_text(c: &impl GenericClient, id: Uuid, text: &str) -> Result<()> {
    sql::execute(c, "UPDATE runs SET final_text = $2 WHERE id = $1", &[&id, &text]).await?;
    Ok(())
}

/// Ended runs of bridge requests whose reply has not been written (a run
/// is answered by the transaction that ends it, so these are runs whose
/// answer was left to a "run finished" message that was lost, or that the
/// collector failed: an earlier version's, an operator's): first after
/// `grace`, then after 2×, 4× … as long, never more than `cap` apart; only
/// every `cap` while the collector's queue still holds ready messages (a
/// stopped or slow collector will read them; more copies would only pile up).
pub async fn unreplied(c: &impl GenericClient, grace: Duration, cap: Duration, backlog: bool) -> Result<Vec<Uuid>> {
    let (grace, cap) = (grace.as_secs_f64(), cap.as_secs_f64());
    let rows = sql::query(
        c,
        "UPDATE runs SET republished_at = now(), republish_count = republish_count + 1
          WHERE id IN (
              SELECT r.id FROM handoff_requests h JOIN runs r ON r.id = h.run_id
               WHERE h.reply_sent_at IS NULL AND h.run_id IS NOT NULL AND r.status <> $4
                 AND coalesce(r.republished_at, r.finished_at) < now() - make_interval(secs =>
                         CASE WHEN $3 THEN $2 ELSE least($2, $1 * power(2.0::float8, least(r.republish_count, 20))) END)
               LIMIT 200 FOR UPDATE OF r SKIP LOCKED)
      RETURNING id",
        &[&grace, &cap, &backlog, &RUNNING],
    )
    .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Tokens the run's invocations used, summed.
pub async fn tokens_used(c: &impl GenericClient, id: Uuid) -> Result<i64> {
    let row =
        sql::query_one(c, "SELECT coalesce(sum(tokens_used), 0)::bigint FROM invocations WHERE run_id = $1", &[&id])
            .await?;
    Ok(row.get(0))
}
