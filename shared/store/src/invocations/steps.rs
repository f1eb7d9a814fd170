//! The transcript of an invocation, persisted step by step as it happens.

use deadpool_postgres::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use baton_domain::opening;
use serde_json::json;

use crate::journal::{self, Event};
use crate::{invocations, profiles, sql, Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub seq: i32,
    pub kind: String,
    pub payload: Value,
}

/// The transcript's first step's kind: the opening prompt.
pub const PROMPT: &str = "prompt";

/// What the transcript keeps of an opening prompt rendered from the
/// profiles file of `version` (V31): the version, not the text. [`load`]
/// renders it again.
pub fn opening_stub(version: i64) -> Value {
    json!({ "profilesVersion": version })
}

fn stub_version(step: &Step) -> Option<i64> {
    (step.kind == PROMPT && step.payload.get("messages").is_none())
        .then(|| step.payload.get("profilesVersion").and_then(Value::as_i64))
        .flatten()
}

/// An invocation's transcript, in order, each step as the model received
/// or produced it: an opening prompt kept as its profiles version is
/// rendered again from that version's profile and skills and the
/// invocation's brief (a pure function of them).
pub async fn load(c: &impl GenericClient, invocation_id: Uuid) -> Result<Vec<Step>> {
    let rows =
        sql::query(c, "SELECT seq, kind, payload FROM steps WHERE invocation_id = $1 ORDER BY seq", &[&invocation_id])
            .await?;
    let mut steps: Vec<Step> = rows.iter().map(|r| Step { seq: r.get(0), kind: r.get(1), payload: r.get(2) }).collect();
    if let Some(version) = steps.first().and_then(stub_version) {
        steps[0].payload = rendered_opening(c, invocation_id, version).await?;
    }
    Ok(steps)
}

/// The opening prompt of an invocation whose transcript keeps its version.
async fn rendered_opening(c: &impl GenericClient, invocation_id: Uuid, version: i64) -> Result<Value> {
    let corrupt = |why: &str| Error::Corrupt(format!("transcript {invocation_id}: {why}"));
    let inv = invocations::get(c, invocation_id).await?.ok_or_else(|| corrupt("no invocation"))?;
    let (profile, skills) = profiles::at_version(c, version, &inv.profile_id)
        .await?
        .ok_or_else(|| corrupt(&format!("no profile `{}` at profiles version {version}", inv.profile_id)))?;
    Ok(opening::first_step(&profile, inv.kind, &skills, &inv.brief))
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
    let payloads = journal::json_array(steps.iter().map(|s| s.2));
    let logged = journal::columns(events);
    sql::execute(
        c,
        "WITH stored AS (INSERT INTO transcript (invocation_id, seq, kinds, payloads)
                         VALUES ($1, $2, $3::text[]::step_kind[], $4))
         INSERT INTO journal (run_id, invocation_id, invocations, types, payloads)
         VALUES ($5, $6, $7, $8::text[]::journal_event[], $9)",
        &[
            &invocation_id,
            &seq,
            &kinds,
            &payloads,
            &run_id,
            &logged.invocation,
            &logged.invocations,
            &logged.kinds,
            &logged.payloads,
        ],
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
    let payloads = journal::json_array(steps.iter().map(|s| s.2));
    sql::execute(
        c,
        "INSERT INTO transcript (invocation_id, seq, kinds, payloads) VALUES ($1, $2, $3::text[]::step_kind[], $4)",
        &[&invocation_id, &seq, &kinds, &payloads],
    )
    .await?;
    Ok(())
}
