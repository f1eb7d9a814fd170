//! The transcript of an invocation, persisted step by step as it happens.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::{sql, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub seq: i32,
    pub kind: String,
    pub payload: Value,
}

pub async fn load(c: &impl GenericClient, invocation_id: Uuid) -> Result<Vec<Step>> {
    let rows =
        sql::query(c, "SELECT seq, kind, payload FROM steps WHERE invocation_id = $1 ORDER BY seq", &[&invocation_id])
            .await?;
    Ok(rows.iter().map(|r| Step { seq: r.get(0), kind: r.get(1), payload: r.get(2) }).collect())
}

/// Appends one step.
pub async fn append(c: &impl GenericClient, invocation_id: Uuid, seq: i32, kind: &str, payload: &Value) -> Result<()> {
    append_all(c, invocation_id, &[(seq, kind, payload)]).await
}

/// Appends steps numbered in order from the first one's `seq`, in one
/// statement, as one transcript row (the `steps` view reads them back one
/// per row). Nothing is written for none.
pub async fn append_all(c: &impl GenericClient, invocation_id: Uuid, steps: &[(i32, &str, &Value)]) -> Result<()> {
    let Some(&(seq, _, _)) = steps.first() else {
        return Ok(());
    };
    debug_assert!(steps.iter().enumerate().all(|(i, s)| s.0 == seq + i as i32), "steps are consecutive");
    let kinds: Vec<&str> = steps.iter().map(|s| s.1).collect();
    let payloads: Vec<&Value> = steps.iter().map(|s| s.2).collect();
    sql::execute(
        c,
        "INSERT INTO transcript (invocation_id, seq, kinds, payloads) VALUES ($1, $2, $3, $4)",
        &[&invocation_id, &seq, &kinds, &payloads],
    )
    .await?;
    Ok(())
}
