//! The overview's counts: runs by status in the last hour and day, and
//! what waits for a person (the navigation's badge, read on every page, so
//! it is one statement over two small partial indexes, V29).

use baton_domain::protocol::conversation::question::QuestionState;
use baton_domain::protocol::request::{HandoffStatus, TargetAgent};
use baton_domain::run::state::{RunState, RunStatus};

use crate::decode::RowOf;
use crate::{sql, GenericClient, Result};

/// Runs created in the last hour and in the last day, by state (`blocked` included).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunCounts {
    pub hour: Vec<(RunState, i64)>,
    pub day: Vec<(RunState, i64)>,
}

/// Both windows in one statement (over `runs_by_created`).
pub async fn runs_by_status(c: &impl GenericClient) -> Result<RunCounts> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let query = SQL.get_or_init(|| {
        format!(
            "SELECT state, count(*) FILTER (WHERE created_at > now() - interval '1 hour'), count(*)
               FROM (SELECT {} AS state, r.created_at FROM runs r WHERE r.created_at > now() - interval '1 day') s
              GROUP BY state ORDER BY state",
            super::RUN_STATE_SQL
        )
    });
    let rows = sql::query(c, query, &[]).await?;
    let mut counts = RunCounts::default();
    for r in &rows {
        let status: String = r.get(0);
        let status = RowOf { table: "runs", id: &status }.wire(r, 0)?;
        counts.hour.push((status, r.get(1)));
        counts.day.push((status, r.get(2)));
    }
    Ok(counts)
}

/// What waits for a person, counted as [`super::waiting`] lists it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// `manual` handoffs nobody has taken (once their chat's turn has come).
    pub manual: i64,
    /// Runs blocked on an open question that has not expired.
    pub questions: i64,
}

impl Waits {
    pub fn total(&self) -> i64 {
        self.manual + self.questions
    }
}

/// The same rows as `waiting`'s two queries, counted in one statement.
pub async fn waits(c: &impl GenericClient) -> Result<Waits> {
    let row = sql::query_one(
        c,
        "SELECT (SELECT count(*) FROM handoff_requests h
                  WHERE h.target_agent = $1 AND h.run_id IS NULL AND h.reply_sent_at IS NULL AND h.status = $2
                    AND NOT EXISTS (SELECT 1 FROM conversation_queue q WHERE q.handoff_id = h.id)),
                (SELECT count(*) FROM questions q
                   JOIN handoff_requests h ON h.id = q.handoff_id
                   JOIN runs r ON r.id = q.run_id
                  WHERE q.state = $3 AND q.expires_at > now() AND r.status = $4 AND h.reply_sent_at IS NULL)",
        &[
            &TargetAgent::Manual.as_str(),
            &HandoffStatus::Accepted.as_str(),
            &QuestionState::Open.as_str(),
            &RunStatus::Running.as_str(),
        ],
    )
    .await?;
    Ok(Waits { manual: row.get(0), questions: row.get(1) })
}
