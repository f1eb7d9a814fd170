//! The transcript of an invocation, persisted step by step as it happens.

use crate::GenericClient;
use serde_json::Value;
use uuid::Uuid;

use baton_domain::opening;
use serde_json::json;

use crate::journal::{self, Event, JsonText};
use crate::{invocations, profiles, sql, Error, OwnedParams, Result, Transaction};

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
    named_results(&mut steps);
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

/// A model turn's step kind: its payload names its tool calls
/// (`toolCalls`: `id`, `name`).
pub const MODEL_TURN: &str = "model_turn";
/// A tool result's step kind: its payload names its call (`toolCallId`)
/// and the call's tool (`name`).
pub const TOOL_RESULT: &str = "tool_result";

/// What a row keeps of its tool results: a result leaves out its tool's
/// `name` when a model turn before it in the same row named its call with
/// it, as every result of a turn stored with its calls does ([`load`]
/// puts it back: [`named_results`]). `None` for a step kept as it is.
fn kept_results(steps: &[(i32, &str, &Value)]) -> Vec<Option<Value>> {
    let mut named: Vec<(&str, &Value)> = vec![];
    steps
        .iter()
        .map(|&(_, kind, payload)| {
            if kind == MODEL_TURN {
                for call in payload["toolCalls"].as_array().into_iter().flatten() {
                    named.extend(call["id"].as_str().map(|id| (id, &call["name"])));
                }
                return None;
            }
            let call = payload.get("toolCallId").and_then(Value::as_str)?;
            let name = payload.get("name").filter(|_| kind == TOOL_RESULT)?;
            named.iter().any(|&(id, called)| id == call && called == name).then(|| {
                let mut kept = payload.clone();
                kept.as_object_mut().map(|fields| fields.remove("name"));
                kept
            })
        })
        .collect()
}

/// Puts back each tool result's `name` its row left out
/// ([`kept_results`]): its call's, from the model turn before it.
fn named_results(steps: &mut [Step]) {
    for n in 0..steps.len() {
        if steps[n].kind != TOOL_RESULT || steps[n].payload.get("name").is_some() {
            continue;
        }
        let Some(call) = steps[n].payload.get("toolCallId").and_then(Value::as_str).map(str::to_string) else {
            continue;
        };
        let name = steps[..n].iter().rev().filter(|s| s.kind == MODEL_TURN).find_map(|s| {
            let calls = s.payload["toolCalls"].as_array()?;
            calls.iter().find(|c| c["id"] == call.as_str()).map(|c| c["name"].clone())
        });
        if let (Some(name), Some(fields)) = (name, steps[n].payload.as_object_mut()) {
            fields.insert("name".into(), name);
        }
    }
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
    let Some(seq) = one_statement(steps, events) else {
        if steps.is_empty() {
            return journal::append(c, run_id, events).await;
        }
        let (stored, logged) = tokio::join!(append_all(c, invocation_id, steps), journal::append(c, run_id, events));
        return stored.and(logged);
    };
    let params = one_row(invocation_id, seq, steps, run_id, events)?;
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(|p| p.as_ref() as _).collect();
    sql::execute(c, STEPS_WITH_EVENTS, &params).await?;
    Ok(())
}

/// [`append_with_events`]'s statement: the transcript row, then the journal row.
const STEPS_WITH_EVENTS: &str = "WITH stored AS (INSERT INTO transcript (invocation_id, seq, kinds, payloads)
                         VALUES ($1, $2, $3::text[]::step_kind[], $4))
         INSERT INTO journal (run_id, invocation_id, invocations, types, payloads)
         VALUES ($5, $6, $7, $8::text[]::journal_event[], $9)";

/// The first step's `seq`, when the steps and the events are one statement:
/// there are both, and the events fit one journal row.
fn one_statement(steps: &[(i32, &str, &Value)], events: &[Event]) -> Option<i32> {
    let &(seq, _, _) = steps.first()?;
    (!events.is_empty() && events.len() <= journal::ROW_EVENTS).then_some(seq)
}

/// [`STEPS_WITH_EVENTS`]'s parameters: consecutive steps from `seq` and
/// the events that fit one journal row ([`one_statement`]).
fn one_row(
    invocation_id: Uuid,
    seq: i32,
    steps: &[(i32, &str, &Value)],
    run_id: Uuid,
    events: &[Event],
) -> Result<OwnedParams> {
    debug_assert!(steps.iter().enumerate().all(|(i, s)| s.0 == seq + i as i32), "steps are consecutive");
    let kept = kept_results(steps);
    let payloads = JsonText::array(steps.iter().zip(&kept).map(|(s, k)| k.as_ref().unwrap_or(s.2)))?;
    let logged = journal::columns(events);
    let owned = |texts: &[&str]| texts.iter().map(ToString::to_string).collect::<Vec<String>>();
    Ok(vec![
        Box::new(invocation_id),
        Box::new(seq),
        Box::new(owned(&steps.iter().map(|s| s.1).collect::<Vec<_>>())),
        Box::new(payloads),
        Box::new(run_id),
        Box::new(logged.invocation),
        Box::new(logged.invocations),
        Box::new(owned(&logged.kinds)),
        Box::new(JsonText::array(events.iter().map(|e| &e.payload))?),
    ])
}

/// [`append_with_events`] as a write nothing in the transaction reads
/// afterwards: its statement goes out with the commit
/// ([`Transaction::write_at_commit`]), so it costs no round trip of its
/// own. (Steps and events that take more than one statement are written as
/// [`append_with_events`] writes them.)
pub async fn append_with_events_at_commit(
    tx: &Transaction<'_>,
    invocation_id: Uuid,
    steps: &[(i32, &str, &Value)],
    run_id: Uuid,
    events: &[Event],
) -> Result<()> {
    let Some(seq) = one_statement(steps, events) else {
        return append_with_events(tx, invocation_id, steps, run_id, events).await;
    };
    let params = one_row(invocation_id, seq, steps, run_id, events)?;
    let statement = tx.prepare_cached(STEPS_WITH_EVENTS).await?;
    tx.write_at_commit(statement, params);
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
    let kept = kept_results(steps);
    let payloads = journal::json_array(steps.iter().zip(&kept).map(|(s, k)| k.as_ref().unwrap_or(s.2)));
    sql::execute(
        c,
        "INSERT INTO transcript (invocation_id, seq, kinds, payloads) VALUES ($1, $2, $3::text[]::step_kind[], $4)",
        &[&invocation_id, &seq, &kinds, &payloads],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(seq: i32, kind: &str, payload: Value) -> Step {
        Step { seq, kind: kind.into(), payload }
    }

    #[test]
    fn a_tool_result_keeps_no_name_its_call_gave_and_reads_back_with_it() {
        let turn = json!({"toolCalls": [{"id": "c1", "name": "workspace_write", "arguments": {}},
                                        {"id": "c2", "name": "workspace_finish", "arguments": {}}]});
        let first = json!({"toolCallId": "c1", "name": "workspace_write", "content": "Wrote it."});
        let second = json!({"toolCallId": "c2", "name": "workspace_finish", "content": "Finished."});
        let row = [(1, MODEL_TURN, &turn), (2, TOOL_RESULT, &first), (3, TOOL_RESULT, &second)];
        let kept = kept_results(&row);
        assert_eq!(kept[0], None, "a model turn is kept whole");
        assert_eq!(kept[1], Some(json!({"toolCallId": "c1", "content": "Wrote it."})));
        assert_eq!(kept[2], Some(json!({"toolCallId": "c2", "content": "Finished."})));
        let mut read: Vec<Step> = row
            .iter()
            .zip(&kept)
            .map(|(&(seq, kind, whole), k)| step(seq, kind, k.clone().unwrap_or_else(|| whole.clone())))
            .collect();
        named_results(&mut read);
        let whole: Vec<Step> = row.iter().map(|&(seq, kind, p)| step(seq, kind, p.clone())).collect();
        assert_eq!(read, whole);
    }

    #[test]
    fn a_tool_result_whose_call_is_in_another_row_or_named_otherwise_keeps_its_name() {
        let turn = json!({"toolCalls": [{"id": "c1", "name": "workspace_read", "arguments": {}}]});
        let alone = json!({"toolCallId": "c9", "name": "agent_await", "content": "Woken."});
        let other = json!({"toolCallId": "c1", "name": "not_the_call_s", "content": "?"});
        let kept = kept_results(&[(4, TOOL_RESULT, &alone), (5, MODEL_TURN, &turn), (6, TOOL_RESULT, &other)]);
        assert_eq!(kept, vec![None, None, None]);
        // A result stored before its name was left out reads as it was.
        let mut old = vec![step(1, MODEL_TURN, turn.clone()), step(2, TOOL_RESULT, other.clone())];
        named_results(&mut old);
        assert_eq!(old[1].payload, other);
    }
}
