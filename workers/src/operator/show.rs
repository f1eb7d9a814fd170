//! `baton runs show ID`: a run found by its own id or by its handoff's,
//! opened with what an operator asks first (its status, why it ended so,
//! its handoff, the chain of agents, how long it took, its tokens), then
//! who did what (one row per agent), then the timeline.

use anyhow::{bail, Context};
use baton_store::runs::Run;
use baton_store::GenericClient;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::agents::{self, AgentRow, Lane};
use super::{reason, table};

/// The run that `id` names: a run id, or a handoff id (the request's run).
/// An id that names neither is an error, whatever the output format.
pub async fn resolve(c: &impl GenericClient, id: &str) -> anyhow::Result<Run> {
    if let Ok(run_id) = id.trim().parse::<Uuid>() {
        if let Some(run) = baton_store::runs::get(c, run_id).await? {
            return Ok(run);
        }
    }
    let Some(request) = baton_store::requests::get(c, id).await? else {
        bail!("no run or handoff `{id}` (see `baton runs list`)");
    };
    let run_id = request.run_id.with_context(|| format!("handoff `{id}` has no run ({})", request.status))?;
    baton_store::runs::get(c, run_id).await?.with_context(|| format!("handoff `{id}`'s run {run_id} is gone (pruned?)"))
}

/// What `runs show` opens with.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub run_id: Uuid,
    pub status: String,
    pub reason: Option<String>,
    pub handoff_id: Option<String>,
    /// The agents that held the foreground, in order.
    pub chain: Vec<String>,
    /// From its creation to its end (`None` while it runs).
    pub duration_ms: Option<i64>,
    pub tokens: i64,
    pub attempt: i32,
    pub created_at: DateTime<Utc>,
    pub agents: Vec<AgentRow>,
}

/// The header of `run`, read with its invocations and journal.
pub async fn header(c: &impl GenericClient, run: &Run) -> anyhow::Result<Header> {
    let invocations = baton_store::invocations::for_run(c, run.id).await?;
    let events = baton_store::journal::timeline(c, run.id).await?;
    let lanes: Vec<Lane> = invocations.iter().map(Lane::from).collect();
    Ok(Header {
        run_id: run.id,
        status: run.status.to_string(),
        reason: reason::of(run.error.as_ref()),
        handoff_id: run.handoff_id.clone(),
        chain: chain(&lanes),
        duration_ms: run.finished_at.map(|end| (end - run.created_at).num_milliseconds()),
        tokens: baton_store::runs::tokens_used(c, run.id).await?,
        attempt: baton_store::requests::bridge::attempt(c, run.id).await?,
        created_at: run.created_at,
        agents: agents::summarize(&lanes, &events),
    })
}

/// The foreground agents (root, then each handoff's), a repeat collapsed.
fn chain(lanes: &[Lane]) -> Vec<String> {
    let mut chain: Vec<String> = lanes
        .iter()
        .filter(|l| l.kind != baton_domain::run::state::InvocationKind::Child)
        .map(|l| l.agent.clone())
        .collect();
    chain.dedup();
    chain
}

/// The header for people; `now` dates a run still going.
pub fn render(h: &Header, now: DateTime<Utc>) -> String {
    let duration = match h.duration_ms {
        Some(ms) => table::duration(chrono::Duration::milliseconds(ms)),
        None => format!("{} so far", table::duration(now - h.created_at)),
    };
    let mut lines = vec![
        ("run", h.run_id.to_string()),
        ("status", h.status.clone()),
        ("reason", h.reason.clone().unwrap_or_else(|| "-".into())),
        ("handoff", h.handoff_id.clone().unwrap_or_else(|| "-".into())),
        ("chain", if h.chain.is_empty() { "-".into() } else { h.chain.join(" → ") }),
        ("duration", duration),
        ("tokens", h.tokens.to_string()),
    ];
    if h.attempt > 1 {
        lines.push(("attempt", h.attempt.to_string()));
    }
    let mut out: String = lines.iter().map(|(k, v)| format!("{k:<9} {v}\n")).collect();
    if !h.agents.is_empty() {
        out.push('\n');
        out.push_str(&agents::render(&h.agents));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_domain::run::state::InvocationKind;

    fn lane(agent: &str, kind: InvocationKind) -> Lane {
        Lane { id: Uuid::now_v7(), agent: agent.into(), kind, tokens: 0 }
    }

    #[test]
    fn the_chain_is_the_foreground_agents_in_order_without_children() {
        let lanes = [
            lane("writer", InvocationKind::Root),
            lane("editor", InvocationKind::Handoff),
            lane("checker", InvocationKind::Child),
            lane("editor", InvocationKind::Handoff),
            lane("finalizer", InvocationKind::Handoff),
        ];
        assert_eq!(chain(&lanes), ["writer", "editor", "finalizer"]);
    }

    #[test]
    fn the_header_says_status_reason_handoff_chain_duration_and_tokens() {
        let at = Utc::now();
        let h = Header {
            run_id: Uuid::now_v7(),
            status: "failed".into(),
            reason: Some("host_error: the model answered 500".into()),
            handoff_id: Some("hand-1".into()),
            chain: vec!["writer".into(), "editor".into()],
            duration_ms: Some(830),
            tokens: 1234,
            attempt: 2,
            created_at: at,
            agents: vec![],
        };
        let text = render(&h, at);
        for line in [
            "status    failed",
            "reason    host_error: the model answered 500",
            "handoff   hand-1",
            "chain     writer → editor",
            "duration  830ms",
            "tokens    1234",
            "attempt   2",
        ] {
            assert!(text.contains(line), "`{line}` missing:\n{text}");
        }
        let running = Header { duration_ms: None, created_at: at - chrono::Duration::seconds(12), ..h };
        assert!(render(&running, at).contains("duration  12s so far"));
    }
}
