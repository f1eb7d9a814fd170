//! The transcript of an invocation, persisted step by step as it happens.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use crate::journal::{self, Event};
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

/// Appends steps (numbered in order from the first one's `seq`) as one
/// transcript row and `events` as one journal row of `run_id`, in one
/// statement when there are both (a step and what it did, together).
pub async fn append_with_events(
    c: &impl GenericClient,
    invocation_id: Uuid,
    steps: &[(i32, &str, &Value)],
    run_id: Uuid,
    events: &[Event],
) -> Result<()> {
    let Some(&(seq, _, _)) = steps.first() else {
        return journal::append(c, run_id, events).await;
    };
    if events.is_empty() || events.len() > journal::ROW_EVENTS {
        return tokio::try_join!(append_all(c, invocation_id, steps), journal::append(c, run_id, events)).map(|_| ());
    }
    debug_assert!(steps.iter().enumerate().all(|(i, s)| s.0 == seq + i as i32), "steps are consecutive");
    let kinds: Vec<&str> = steps.iter().map(|s| s.1).collect();
    let payloads: Vec<&Value> = steps.iter().map(|s| s.2).collect();
    let (invocations, types, logged) = journal::columns(events);
    sql::execute(
        c,
        "WITH stored AS (INSERT INTO transcript (invocation_id, seq, kinds, payloads) VALUES ($1, $2, $3, $4))
         INSERT INTO journal (run_id, invocations, types, payloads) VALUES ($5, $6, $7, $8)",
        &[&invocation_id, &seq, &kinds, &payloads, &run_id, &invocations, &types, &logged],
    )
    .await?;
    Ok(())
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
