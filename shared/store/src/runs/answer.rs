//! What the collector reads of a finished run before it answers its bridge.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::requests::{self, Request};
use crate::{sql, Result};

/// What the collector reads of a finished run, in one statement: the run,
/// the seconds it waited for its user's answers, its attempt, its request
/// (locked for this transaction, as `requests::lock_of_run`) and what a coding
/// agent changed (the newest). `None` when the run does not exist.
pub struct ToAnswer {
    pub run: super::Run,
    pub waited_secs: f64,
    pub attempt: i32,
    pub request: Option<Request>,
    pub changes: Option<baton_domain::projects::Changes>,
}

pub async fn to_answer(c: &impl GenericClient, run_id: Uuid) -> Result<Option<ToAnswer>> {
    let run_columns = super::RUN_COLUMNS;
    let request_columns: Vec<String> = requests::COLUMNS.split(", ").map(|c| format!("h.{c}")).collect();
    let sql = format!(
        "WITH h AS (SELECT * FROM handoff_requests WHERE id = (SELECT handoff_id FROM runs WHERE id = $1) FOR UPDATE)
         SELECT {run_columns},
                coalesce((SELECT sum(extract(epoch FROM least(coalesce(q.closed_at, now()), coalesce(r.finished_at, now()))
                                                      - q.created_at))
                            FROM questions q WHERE q.run_id = r.id), 0)::float8,
                r.attempt,
                (SELECT changes FROM coding_changes WHERE run_id = r.id ORDER BY created_at DESC, invocation_id DESC LIMIT 1),
                h.id IS NOT NULL,
                {}
           FROM runs r LEFT JOIN h ON true WHERE r.id = $1",
        request_columns.join(", ")
    );
    let Some(row) = sql::query_opt(c, &sql, &[&run_id]).await? else {
        return Ok(None);
    };
    let changes: Option<Value> = row.get(11);
    let request = if row.get(12) { Some(requests::from_row_at(&row, 13)?) } else { None };
    Ok(Some(ToAnswer {
        run: super::run_at(&row, 0)?,
        waited_secs: row.get(9),
        attempt: row.get(10),
        request,
        changes: changes.map(serde_json::from_value).transpose()?,
    }))
}
