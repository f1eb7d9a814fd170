//! What an operator looks at: the runs (filtered, newest first, paged by
//! key), what waits for a person (`manual` handoffs, runs blocked on a
//! question), and the fleet's counts. Read only; the CLI (`baton runs
//! list`, `baton handoff list --waiting`) and the web console both read these.
//!
//! - [`gauges`]: fleet-wide figures for the metrics gauges (live invocations, outbox backlog, hop waits).
//! - [`counts`]: the console overview's runs by status in the last hour and day, and the Waiting badge.

pub mod counts;
pub mod gauges;

use crate::GenericClient;
use baton_domain::protocol::conversation::question::QuestionState;
use baton_domain::protocol::request::{HandoffStatus, Source, TargetAgent};
use baton_domain::run::state::{Failure, InvocationKind, InvocationStatus, RunState, RunStatus};
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::decode::RowOf;
use crate::{sql, Result};

/// Which runs to list. Every filter is optional; `before` is the key of the
/// last row of the previous page (its `created_at` and `run_id`).
#[derive(Debug, Clone)]
pub struct RunFilter {
    /// `blocked` finds the running runs waiting on a question.
    pub status: Option<RunState>,
    /// The request's `targetAgent`.
    pub target: Option<String>,
    /// The request's `replyToChatId`.
    pub chat: Option<String>,
    pub source: Option<Source>,
    /// Runs created at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Keyset paging: runs strictly older than this key.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    pub limit: i64,
}

impl Default for RunFilter {
    fn default() -> Self {
        Self { status: None, target: None, chat: None, source: None, since: None, before: None, limit: 50 }
    }
}

/// One run as a list shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRow {
    pub run_id: Uuid,
    pub handoff_id: Option<String>,
    pub status: RunState,
    pub target: Option<String>,
    pub chat: Option<String>,
    pub source: Option<Source>,
    /// The agents that held the foreground, in order (a repeat collapsed).
    pub agents: Vec<String>,
    pub tokens: i64,
    /// 1 for a run never retried; `baton runs retry` counts up.
    pub attempt: i32,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Why it failed or was cancelled ([`Failure::reason`] for an operator).
    pub error: Option<Failure>,
}

impl RunRow {
    /// The key of this row for the next page's [`RunFilter::before`].
    pub fn key(&self) -> (DateTime<Utc>, Uuid) {
        (self.created_at, self.run_id)
    }
}

/// A run's [`RunState`], in SQL (`r` is the run): `blocked` while running
/// with an open question that has not expired.
pub const RUN_STATE_SQL: &str = "CASE WHEN r.status = 'running' AND EXISTS
       (SELECT 1 FROM questions q WHERE q.run_id = r.id AND q.state = 'open' AND q.expires_at > now())
     THEN 'blocked' ELSE r.status END";

const RUNS: &str = "
SELECT r.id, r.handoff_id, r.state, h.target_agent, h.reply_chat_id, h.source,
       coalesce((SELECT array_agg(i.profile_id ORDER BY i.created_at, i.id) FROM invocations i
                  WHERE i.run_id = r.id AND i.kind = ANY($9)), '{}'),
       coalesce((SELECT sum(i.tokens_used) FROM invocations i WHERE i.run_id = r.id), 0)::bigint,
       r.attempt, r.created_at, r.finished_at, r.error
  FROM (SELECT r.*, {state} AS state FROM runs r) r LEFT JOIN handoff_requests h ON h.id = r.handoff_id
 WHERE ($1::text IS NULL OR r.state = $1)
   AND ($2::text IS NULL OR h.target_agent = $2)
   AND ($3::text IS NULL OR h.reply_chat_id = $3)
   AND ($4::text IS NULL OR h.source = $4)
   AND ($5::timestamptz IS NULL OR r.created_at >= $5)
   AND ($6::timestamptz IS NULL OR (r.created_at, r.id) < ($6, $7))
 ORDER BY r.created_at DESC, r.id DESC
 LIMIT $8";

/// Runs matching `filter`, newest first, at most `filter.limit` of them.
pub async fn runs(c: &impl GenericClient, filter: &RunFilter) -> Result<Vec<RunRow>> {
    let foreground = [InvocationKind::Root.as_str(), InvocationKind::Handoff.as_str()];
    let (before_at, before_id) = filter.before.unzip();
    static QUERY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let query = QUERY.get_or_init(|| RUNS.replace("{state}", RUN_STATE_SQL));
    let rows = sql::query(
        c,
        query,
        &[
            &filter.status.map(RunState::as_str),
            &filter.target,
            &filter.chat,
            &filter.source.map(Source::as_str),
            &filter.since,
            &before_at,
            &before_id,
            &filter.limit.max(0),
            &&foreground[..],
        ],
    )
    .await?;
    rows.iter().map(run_row).collect()
}

fn run_row(r: &tokio_postgres::Row) -> Result<RunRow> {
    let run_id: Uuid = r.get(0);
    let at = RowOf { table: "runs", id: &run_id };
    let mut agents: Vec<String> = r.get(6);
    agents.dedup();
    Ok(RunRow {
        run_id,
        handoff_id: r.get(1),
        status: at.wire(r, 2)?,
        target: r.get(3),
        chat: r.get(4),
        source: at.wire_opt(r, 5)?,
        agents,
        tokens: r.get(7),
        attempt: r.get(8),
        created_at: r.get(9),
        finished_at: r.get(10),
        error: at.json_opt(r, 11)?,
    })
}

/// Why a handoff waits for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingFor {
    /// A `manual` handoff: an operator pastes the result.
    Manual,
    /// A run `blocked` on an agent's `ask_user` question: an operator may answer it.
    Question,
}

/// A handoff waiting for a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub handoff_id: String,
    pub waiting_for: WaitingFor,
    pub source: Source,
    pub chat: Option<String>,
    pub status: HandoffStatus,
    /// When the handoff arrived.
    pub created_at: DateTime<Utc>,
    /// What the agent asked, when it waits for an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<OpenQuestion>,
}

impl Waiting {
    /// Since when it has waited for a person: the question's time, or the handoff's.
    pub fn since(&self) -> DateTime<Utc> {
        self.question.as_ref().map_or(self.created_at, |q| q.asked_at)
    }
}

/// An open `ask_user` question a run is blocked on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenQuestion {
    pub question_id: Uuid,
    pub run_id: Uuid,
    /// The profile of the agent that asked.
    pub agent: String,
    pub text: String,
    pub options: Vec<String>,
    pub asked_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Everything waiting for a person, oldest wait first: `manual` handoffs
/// and runs blocked on a question.
pub async fn waiting(c: &impl GenericClient) -> Result<Vec<Waiting>> {
    let mut all = manual(c).await?;
    all.extend(questions(c, None).await?);
    all.sort_by(|a, b| a.since().cmp(&b.since()).then_with(|| a.handoff_id.cmp(&b.handoff_id)));
    Ok(all)
}

/// `manual` handoffs no run has taken and no reply has ended (once their
/// chat's turn has come), oldest first.
async fn manual(c: &impl GenericClient) -> Result<Vec<Waiting>> {
    let rows = sql::query(
        c,
        "SELECT id, source, reply_chat_id, status, created_at FROM handoff_requests
          WHERE target_agent = $1 AND run_id IS NULL AND reply_sent_at IS NULL AND status = $2
            -- one still queued behind its chat's live run waits for its turn, not yet for a person
            AND NOT EXISTS (SELECT 1 FROM conversation_queue q WHERE q.handoff_id = handoff_requests.id)
          ORDER BY created_at, id",
        &[&TargetAgent::Manual.as_str(), &HandoffStatus::Accepted.as_str()],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let id: String = r.get(0);
            let at = RowOf { table: "handoff_requests", id: &id };
            Ok(Waiting {
                waiting_for: WaitingFor::Manual,
                source: at.wire(r, 1)?,
                chat: r.get(2),
                status: at.wire(r, 3)?,
                created_at: r.get(4),
                question: None,
                handoff_id: id,
            })
        })
        .collect()
}

const QUESTIONS: &str = "
SELECT h.id, h.source, h.reply_chat_id, h.status, h.created_at,
       q.id, q.run_id, i.profile_id, q.question, q.options, q.created_at, q.expires_at
  FROM questions q
  JOIN handoff_requests h ON h.id = q.handoff_id
  JOIN runs r ON r.id = q.run_id
  JOIN invocations i ON i.id = q.invocation_id
 WHERE q.state = $1 AND q.expires_at > now() AND r.status = $2 AND h.reply_sent_at IS NULL
   AND ($3::text IS NULL OR h.id = $3)
 ORDER BY q.created_at, q.id";

/// Runs blocked on an open question that has not expired (one handoff's,
/// with `handoff_id`), oldest question first.
pub async fn questions(c: &impl GenericClient, handoff_id: Option<&str>) -> Result<Vec<Waiting>> {
    let open = QuestionState::Open.as_str();
    let rows = sql::query(c, QUESTIONS, &[&open, &RunStatus::Running.as_str(), &handoff_id]).await?;
    rows.iter().map(question_row).collect()
}

fn question_row(r: &tokio_postgres::Row) -> Result<Waiting> {
    let id: String = r.get(0);
    let question_id: Uuid = r.get(5);
    let at = RowOf { table: "handoff_requests", id: &id };
    let asked = RowOf { table: "questions", id: &question_id };
    Ok(Waiting {
        waiting_for: WaitingFor::Question,
        source: at.wire(r, 1)?,
        chat: r.get(2),
        status: at.wire(r, 3)?,
        created_at: r.get(4),
        question: Some(OpenQuestion {
            question_id,
            run_id: r.get(6),
            agent: r.get(7),
            text: r.get(8),
            options: asked.json_opt(r, 9)?.unwrap_or_default(),
            asked_at: r.get(10),
            expires_at: r.get(11),
        }),
        handoff_id: id,
    })
}

/// The fleet at a glance, from Postgres (queue depths are the broker's).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetCounts {
    /// Invocations created and not yet claimed.
    pub invocations_created: i64,
    pub invocations_running: i64,
    pub invocations_parked: i64,
    /// Handoffs `blocked` (waiting on the user) whose reply is not sent.
    pub handoffs_blocked: i64,
    /// Invocations taken over from a worker that died or stalled, within the last hour.
    pub takeovers_last_hour: i64,
    /// Outbox rows not yet published.
    pub outbox_backlog: i64,
    /// Seconds since the oldest unpublished outbox row was written.
    pub outbox_oldest_secs: Option<f64>,
}

/// Counts for the fleet view, in one statement.
pub async fn fleet(c: &impl GenericClient) -> Result<FleetCounts> {
    let row = sql::query_one(
        c,
        "SELECT (SELECT count(*) FROM invocations WHERE status = $1),
                (SELECT count(*) FROM invocations WHERE status = $2),
                (SELECT count(*) FROM invocations WHERE status = $3),
                (SELECT count(*) FROM handoff_requests WHERE status = $4 AND reply_sent_at IS NULL),
                (SELECT count(*) FROM invocations WHERE taken_over_at > now() - interval '1 hour'),
                (SELECT count(*) FROM unsent_messages),
                (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM unsent_messages)",
        &[
            &InvocationStatus::Created.as_str(),
            &InvocationStatus::Running.as_str(),
            &InvocationStatus::Parked.as_str(),
            &HandoffStatus::Blocked.as_str(),
        ],
    )
    .await?;
    Ok(FleetCounts {
        invocations_created: row.get(0),
        invocations_running: row.get(1),
        invocations_parked: row.get(2),
        handoffs_blocked: row.get(3),
        takeovers_last_hour: row.get(4),
        outbox_backlog: row.get(5),
        outbox_oldest_secs: row.get(6),
    })
}
