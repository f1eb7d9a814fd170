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

pub async fn append(c: &impl GenericClient, invocation_id: Uuid, seq: i32, kind: &str, payload: &Value) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO steps (invocation_id, seq, kind, payload) VALUES ($1, $2, $3, $4)",
        &[&invocation_id, &seq, &kind, payload],
    )
    .await?;
    Ok(())
}
