//! Task records: one per handoff stage (TransferControl) or delegated job
//! (ReturnToParent), the seed's AgentTaskRecord.

use crate::GenericClient;
use baton_domain::run::state::{Continuation, Failure, TaskStatus};
use baton_domain::tools::delegation::{Budget, Capsule};
use serde_json::Value;
use uuid::Uuid;

use crate::decode::{texts, RowOf};
use crate::{sql, Result};

/// Queued or running: a task that has not ended.
fn unfinished() -> Vec<&'static str> {
    texts(TaskStatus::unfinished(), TaskStatus::as_str)
}

const RETURN_TO_PARENT: &str = Continuation::ReturnToParent.as_str();

pub struct NewTask<'a> {
    pub id: Uuid,
    pub run_id: Uuid,
    pub parent_invocation_id: Uuid,
    pub child_invocation_id: Uuid,
    pub target_profile_id: &'a str,
    pub workspace_key: &'a str,
    pub continuation: Continuation,
    pub task: &'a Value,
    pub budget: Option<&'a Budget>,
    pub created_by_tool_call_id: &'a str,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub id: Uuid,
    pub parent_invocation_id: Uuid,
    pub child_invocation_id: Uuid,
    pub target_profile_id: String,
    pub workspace_key: String,
    pub continuation: Continuation,
    pub status: TaskStatus,
    pub task: Value,
    pub created_by_tool_call_id: String,
    /// What a delegated task's agent returned.
    pub result: Option<Capsule>,
    pub error: Option<Failure>,
    /// Whether the parent has read this task's result.
    pub delivered: bool,
}

impl Task {
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }
}

pub async fn insert(c: &impl GenericClient, t: &NewTask<'_>) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO tasks (id, run_id, parent_invocation_id, child_invocation_id, target_profile_id, workspace_key,
                            continuation, status, task, budget, created_by_tool_call_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $11, $8, $9, $10)",
        &[
            &t.id,
            &t.run_id,
            &t.parent_invocation_id,
            &t.child_invocation_id,
            &t.target_profile_id,
            &t.workspace_key,
            &t.continuation.as_str(),
            t.task,
            &t.budget.map(serde_json::to_value).transpose()?,
            &t.created_by_tool_call_id,
            &TaskStatus::Queued.as_str(),
        ],
    )
    .await?;
    Ok(())
}

/// The statuses a task may be in to become `to`.
pub(crate) fn statuses_before(to: TaskStatus) -> Vec<&'static str> {
    [TaskStatus::Queued, TaskStatus::Running].into_iter().filter(|s| s.can_become(to)).map(TaskStatus::as_str).collect()
}

/// Moves a task along its state machine; `false` if it was not in a state
/// that may become `to` (a terminal task is final).
pub async fn transition(c: &impl GenericClient, id: Uuid, to: TaskStatus, error: Option<&Value>) -> Result<bool> {
    let from = statuses_before(to);
    let n = sql::execute(
        c,
        "UPDATE tasks SET status = $2, error = coalesce($3, error),
                finished_at = CASE WHEN $5 THEN now() END
          WHERE id = $1 AND status = ANY($4)",
        &[&id, &to.as_str(), &error, &from, &to.is_terminal()],
    )
    .await?;
    Ok(n == 1)
}

/// ReturnToParent tasks of this parent that are queued or running.
pub async fn pending_children(c: &impl GenericClient, parent: Uuid) -> Result<i64> {
    let row = sql::query_one(
        c,
        "SELECT count(*) FROM tasks WHERE parent_invocation_id = $1 AND continuation = $2 AND status = ANY($3)",
        &[&parent, &RETURN_TO_PARENT, &unfinished()],
    )
    .await?;
    Ok(row.get(0))
}

const COLUMNS: &str = "id, parent_invocation_id, child_invocation_id, target_profile_id, workspace_key, continuation, \
     status, task, created_by_tool_call_id, result, error, delivered";

fn from_row(r: &tokio_postgres::Row) -> Result<Task> {
    let id: Uuid = r.get(0);
    let at = RowOf { table: "tasks", id: &id };
    Ok(Task {
        id,
        parent_invocation_id: r.get(1),
        child_invocation_id: r.get(2),
        target_profile_id: r.get(3),
        workspace_key: r.get(4),
        continuation: at.wire(r, 5)?,
        status: at.wire(r, 6)?,
        task: r.get(7),
        created_by_tool_call_id: r.get(8),
        result: at.json_opt(r, 9)?,
        error: at.json_opt(r, 10)?,
        delivered: r.get(11),
    })
}

pub async fn for_run(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<Task>> {
    let sql = format!("SELECT {COLUMNS} FROM tasks WHERE run_id = $1 ORDER BY created_at, id");
    sql::query(c, &sql, &[&run_id]).await?.iter().map(from_row).collect()
}

/// How many tasks of the run went to `target` (its workspace handles count
/// them): every task, a delegated one (a row here) or a handoff stage's (no
/// row, V30), has its one invocation, and the root has none; counted as
/// `invocations::hand_over` counts them.
pub async fn count_for_target(c: &impl GenericClient, run_id: Uuid, target: &str) -> Result<usize> {
    let row = sql::query_one(
        c,
        "SELECT count(*) FROM invocations WHERE run_id = $1 AND profile_id = $2 AND kind <> 'root'",
        &[&run_id, &target],
    )
    .await?;
    Ok(row.get::<_, i64>(0) as usize)
}

/// The delegated (ReturnToParent) tasks of a parent, oldest first.
pub async fn children_of(c: &impl GenericClient, parent: Uuid) -> Result<Vec<Task>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM tasks WHERE parent_invocation_id = $1 AND continuation = $2 ORDER BY created_at, id"
    );
    sql::query(c, &sql, &[&parent, &RETURN_TO_PARENT]).await?.iter().map(from_row).collect()
}

/// The task an invocation works on (its incoming task).
pub async fn of_child(c: &impl GenericClient, child: Uuid) -> Result<Option<Task>> {
    let sql = format!("SELECT {COLUMNS} FROM tasks WHERE child_invocation_id = $1");
    sql::query_opt(c, &sql, &[&child]).await?.as_ref().map(from_row).transpose()
}

pub async fn set_result(c: &impl GenericClient, id: Uuid, result: &Capsule, result_ref: &str) -> Result<()> {
    let result = serde_json::to_value(result)?;
    sql::execute(c, "UPDATE tasks SET result = $2, result_ref = $3 WHERE id = $1", &[&id, &result, &result_ref])
        .await?;
    Ok(())
}

/// Cancels the unfinished delegated tasks of one parent, or every unfinished
/// task of the run when `parent` is `None`; returns (task id, child invocation id).
pub async fn cancel_unfinished(
    c: &impl GenericClient,
    run_id: Uuid,
    parent: Option<Uuid>,
) -> Result<Vec<(Uuid, Uuid)>> {
    let rows = sql::query(
        c,
        "UPDATE tasks SET status = $3, finished_at = now()
          WHERE run_id = $1 AND status = ANY($4)
            AND ($2::uuid IS NULL OR (parent_invocation_id = $2 AND continuation = $5))
      RETURNING id, child_invocation_id",
        &[&run_id, &parent, &TaskStatus::Cancelled.as_str(), &unfinished(), &RETURN_TO_PARENT],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Records that the parent has read these tasks' results.
pub async fn mark_delivered(c: &impl GenericClient, ids: &[Uuid]) -> Result<()> {
    sql::execute(c, "UPDATE tasks SET delivered = true WHERE id = ANY($1)", &[&ids]).await?;
    Ok(())
}
