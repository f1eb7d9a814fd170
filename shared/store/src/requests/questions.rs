//! Questions agents ask their users (`ask_user`), and the bridge's answers,
//! each answer stored once by its id.

use crate::GenericClient;
use baton_domain::protocol::conversation::question::QuestionState;
use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::decode::RowOf;
use crate::{sql, Result};

const OPEN: &str = QuestionState::Open.as_str();

#[derive(Debug, Clone)]
pub struct Question {
    pub id: Uuid,
    pub handoff_id: String,
    pub run_id: Uuid,
    pub invocation_id: Uuid,
    pub tool_call_id: String,
    pub question: String,
    pub options: Vec<String>,
    pub state: QuestionState,
    pub expires_at: DateTime<Utc>,
    /// Whether `expires_at` has passed, on the database's clock.
    pub expired: bool,
    /// The user's words, after the disclosure policy.
    pub answer: Option<String>,
}

pub struct NewQuestion<'a> {
    pub id: Uuid,
    pub handoff_id: &'a str,
    pub run_id: Uuid,
    pub invocation_id: Uuid,
    pub tool_call_id: &'a str,
    pub question: &'a str,
    pub options: &'a [String],
    pub timeout: std::time::Duration,
}

const COLUMNS: &str =
    "id, handoff_id, run_id, invocation_id, tool_call_id, question, options, state, expires_at, expires_at <= now(), answer";

fn from_row(row: &Row) -> Result<Question> {
    let id: Uuid = row.get(0);
    let at = RowOf { table: "questions", id: &id };
    Ok(Question {
        id,
        handoff_id: row.get(1),
        run_id: row.get(2),
        invocation_id: row.get(3),
        tool_call_id: row.get(4),
        question: row.get(5),
        options: at.json_opt(row, 6)?.unwrap_or_default(),
        state: at.wire(row, 7)?,
        expires_at: row.get(8),
        expired: row.get(9),
        answer: row.get(10),
    })
}

/// Stores a new open question; returns it as stored (with its expiry on the
/// database's clock).
pub async fn insert(c: &impl GenericClient, q: &NewQuestion<'_>) -> Result<Question> {
    let sql = format!(
        "INSERT INTO questions (id, handoff_id, run_id, invocation_id, tool_call_id, question, options, state, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + make_interval(secs => $9))
      RETURNING {COLUMNS}"
    );
    let options = serde_json::to_value(q.options)?;
    let secs = q.timeout.as_secs_f64();
    let params: sql::Params =
        &[&q.id, &q.handoff_id, &q.run_id, &q.invocation_id, &q.tool_call_id, &q.question, &options, &OPEN, &secs];
    from_row(&sql::query_one(c, &sql, params).await?)
}

/// The question a tool call asked, locked for this transaction.
pub async fn of_call(c: &impl GenericClient, invocation_id: Uuid, tool_call_id: &str) -> Result<Option<Question>> {
    let sql = format!("SELECT {COLUMNS} FROM questions WHERE invocation_id = $1 AND tool_call_id = $2 FOR UPDATE");
    sql::query_opt(c, &sql, &[&invocation_id, &tool_call_id]).await?.as_ref().map(from_row).transpose()
}

/// A handoff's question by the id its bridge knows (`lock` takes its row lock).
pub async fn get(c: &impl GenericClient, handoff_id: &str, question_id: Uuid, lock: bool) -> Result<Option<Question>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM questions WHERE handoff_id = $1 AND id = $2 {}",
        if lock { "FOR UPDATE" } else { "" }
    );
    sql::query_opt(c, &sql, &[&handoff_id, &question_id]).await?.as_ref().map(from_row).transpose()
}

/// Records the answer on an open question; `false` when it was no longer open.
pub async fn answer(c: &impl GenericClient, id: Uuid, text: &str) -> Result<bool> {
    close(c, id, QuestionState::Answered, Some(text)).await
}

/// Closes an open question unanswered; `false` when it was no longer open.
pub async fn expire(c: &impl GenericClient, id: Uuid) -> Result<bool> {
    close(c, id, QuestionState::Expired, None).await
}

async fn close(c: &impl GenericClient, id: Uuid, state: QuestionState, answer: Option<&str>) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE questions SET state = $2, answer = $3, closed_at = now(),
                answered_at = CASE WHEN $3::text IS NULL THEN NULL ELSE now() END
          WHERE id = $1 AND state = $4",
        &[&id, &state.as_str(), &answer, &OPEN],
    )
    .await?;
    Ok(n == 1)
}

/// Records an answer by its id, with what became of it; `false` when an
/// answer with this id was recorded before (a duplicate).
pub async fn record_answer(
    c: &impl GenericClient,
    id: &str,
    handoff_id: &str,
    question_id: &str,
    outcome: &str,
) -> Result<bool> {
    let n = sql::execute(
        c,
        "INSERT INTO bridge_answers (id, handoff_id, question_id, outcome) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        &[&id, &handoff_id, &question_id, &outcome],
    )
    .await?;
    Ok(n == 1)
}

/// Says what became of a recorded answer (applied, or why it changed nothing).
pub async fn set_answer_outcome(c: &impl GenericClient, id: &str, outcome: &str) -> Result<()> {
    sql::execute(c, "UPDATE bridge_answers SET outcome = $2 WHERE id = $1", &[&id, &outcome]).await?;
    Ok(())
}
