//! Task records: one per handoff stage (TransferControl) or delegated job
//! (ReturnToParent), the seed's AgentTaskRecord.

use baton_domain::state::{Continuation, TaskStatus};
use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::{sql, Result};

pub struct NewTask<'a> {
    pub id: Uuid,
    pub run_id: Uuid,
    pub parent_invocation_id: Uuid,
    pub child_invocation_id: Uuid,
    pub target_profile_id: &'a str,
    pub workspace_key: &'a str,
    pub continuation: Continuation,
    pub task: &'a Value,
    pub budget: Option<&'a Value>,
    pub created_by_tool_call_id: &'a str,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub id: Uuid,
    pub parent_invocation_id: Uuid,
    pub child_invocation_id: Uuid,
    pub target_profile_id: String,
    pub workspace_key: String,
    pub continuation: String,
    pub status: String,
    pub task: Value,
    pub created_by_tool_call_id: String,
}

pub async fn insert(c: &impl GenericClient, t: &NewTask<'_>) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO tasks (id, run_id, parent_invocation_id, child_invocation_id, target_profile_id, workspace_key,
                            continuation, status, task, budget, created_by_tool_call_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $9, $10)",
        &[
            &t.id,
            &t.run_id,
            &t.parent_invocation_id,
            &t.child_invocation_id,
            &t.target_profile_id,
            &t.workspace_key,
            &t.continuation.as_str(),
            t.task,
            &t.budget,
            &t.created_by_tool_call_id,
        ],
    )
    .await?;
    Ok(())
}

/// Moves a task along its state machine; `false` if it was not in a state
/// that may become `to` (a terminal task is final).
pub async fn transition(c: &impl GenericClient, id: Uuid, to: TaskStatus, error: Option<&Value>) -> Result<bool> {
    let from: Vec<&str> = [TaskStatus::Queued, TaskStatus::Running]
        .into_iter()
        .filter(|s| s.can_become(to))
        .map(TaskStatus::as_str)
        .collect();
    let n = sql::execute(
        c,
        "UPDATE tasks SET status = $2, error = coalesce($3, error),
                finished_at = CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() END
          WHERE id = $1 AND status = ANY($4)",
        &[&id, &to.as_str(), &error, &from],
    )
    .await?;
    Ok(n == 1)
}

/// ReturnToParent tasks of this parent that are queued or running.
pub async fn pending_children(c: &impl GenericClient, parent: Uuid) -> Result<i64> {
    let row = sql::query_one(
        c,
        "SELECT count(*) FROM tasks WHERE parent_invocation_id = $1 AND continuation = 'return_to_parent'
            AND status IN ('queued', 'running')",
        &[&parent],
    )
    .await?;
    Ok(row.get(0))
}

pub async fn for_run(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<Task>> {
    let rows = sql::query(
        c,
        "SELECT id, parent_invocation_id, child_invocation_id, target_profile_id, workspace_key, continuation, status,
                task, created_by_tool_call_id
           FROM tasks WHERE run_id = $1 ORDER BY created_at, id",
        &[&run_id],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Task {
            id: r.get(0),
            parent_invocation_id: r.get(1),
            child_invocation_id: r.get(2),
            target_profile_id: r.get(3),
            workspace_key: r.get(4),
            continuation: r.get(5),
            status: r.get(6),
            task: r.get(7),
            created_by_tool_call_id: r.get(8),
        })
        .collect())
}
