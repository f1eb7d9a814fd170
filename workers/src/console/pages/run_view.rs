//! A run's page as plain data: its timeline with agents as lanes, briefs,
//! transcripts (children nested under their parents), workspace, request
//! after disclosure, what the bridge was sent, and usage per agent.

use std::collections::BTreeMap;

use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::state::InvocationKind;
use baton_store::invocations::steps::Step;
use baton_store::invocations::Invocation;
use baton_store::journal::EventRow;
use baton_store::runs::Run;
use baton_store::GenericClient;
use serde::Serialize;
use serde_json::Value;

use super::{age, at, clip, pretty, span};

#[derive(Serialize)]
pub struct RunView {
    pub id: String,
    pub handoff_id: Option<String>,
    pub status: String,
    pub live: bool,
    pub root: String,
    pub created: String,
    pub age: String,
    pub duration: String,
    pub error: Option<String>,
    pub final_text: Option<String>,
    pub lanes: Vec<Lane>,
    pub events: Vec<EventView>,
    pub invocations: Vec<InvocationView>,
    pub briefs: Vec<BriefView>,
    pub files: Vec<(String, usize)>,
    pub ledger: Vec<(i32, String, String)>,
    pub request: Option<RequestView>,
    pub bridge: Vec<BridgeMessage>,
    pub usage: Vec<(String, i64)>,
    pub tokens: i64,
    pub spend: Option<String>,
    /// What the run's model calls waited under fleet-wide limits.
    pub throttled: Option<String>,
    /// What its coding agents changed in their projects.
    pub changes: Vec<ChangesView>,
}

#[derive(Serialize)]
pub struct ChangesView {
    pub project: String,
    pub files: Vec<String>,
    pub insertions: i32,
    pub deletions: i32,
    pub branch: Option<String>,
    pub commit: Option<String>,
    pub push_error: Option<String>,
    pub patch: String,
    pub patch_lines: usize,
}

fn changes_view(stored: baton_store::coding::StoredChanges) -> ChangesView {
    let c = stored.changes;
    ChangesView {
        patch_lines: stored.patch.lines().count(),
        patch: stored.patch,
        project: c.project,
        files: c.files,
        insertions: c.insertions,
        deletions: c.deletions,
        branch: c.branch,
        commit: c.commit,
        push_error: stored.push_error,
    }
}

#[derive(Serialize)]
pub struct Lane {
    pub agent: String,
    pub colour: usize,
}

#[derive(Serialize)]
pub struct EventView {
    pub seq: i64,
    pub offset: String,
    pub agent: String,
    pub colour: usize,
    pub kind: String,
    pub detail: String,
    pub payload: String,
}

#[derive(Serialize)]
pub struct BriefView {
    pub agent: String,
    pub kind: String,
    pub brief: String,
}

#[derive(Serialize)]
pub struct InvocationView {
    pub agent: String,
    pub kind: String,
    pub status: String,
    pub tokens: i64,
    pub takeovers: i32,
    pub steps: Vec<StepView>,
    pub children: Vec<InvocationView>,
}

#[derive(Serialize)]
pub struct StepView {
    pub kind: String,
    pub title: String,
    pub text: String,
    pub is_error: bool,
}

#[derive(Serialize)]
pub struct RequestView {
    pub source: String,
    pub target: String,
    pub status: String,
    pub intent: String,
    pub context: String,
    pub constraints: String,
    pub redactions: Vec<(String, String)>,
    pub events: Vec<(String, String, String)>,
}

#[derive(Serialize)]
pub struct BridgeMessage {
    pub kind: String,
    pub message_id: String,
    pub queue: String,
    pub at: String,
    pub status: Option<String>,
    pub seq: Option<i64>,
    pub parts: Vec<String>,
    pub body: String,
}

/// Everything the run page shows, read in one go.
pub async fn load(c: &impl GenericClient, run: Run) -> anyhow::Result<RunView> {
    let events = baton_store::journal::timeline(c, run.id).await?;
    let invocations = baton_store::invocations::for_run(c, run.id).await?;
    let mut steps = BTreeMap::new();
    for inv in &invocations {
        steps.insert(inv.id, baton_store::invocations::steps::load(c, inv.id).await?);
    }
    let request = match &run.handoff_id {
        Some(id) => baton_store::requests::get(c, id).await?,
        None => None,
    };
    let request_events = match &run.handoff_id {
        Some(id) => baton_store::requests::events(c, id).await?,
        None => vec![],
    };
    let sent = match &run.handoff_id {
        Some(id) => baton_store::outbox::sent::for_handoff(c, id).await?,
        None => vec![],
    };
    let lanes = lanes(&events, &invocations);
    let end = run.finished_at.unwrap_or_else(chrono::Utc::now);
    Ok(RunView {
        id: run.id.to_string(),
        handoff_id: run.handoff_id.clone(),
        status: run.status.as_str().to_string(),
        live: !run.status.is_terminal(),
        root: run.root_profile_id.clone(),
        created: at(run.created_at),
        age: age(run.created_at),
        duration: span((end - run.created_at).num_milliseconds()),
        error: run.error.as_ref().map(|e| format!("{}: {}", e.code, e.message)),
        final_text: run.final_text.clone(),
        events: event_views(&events, &lanes),
        briefs: invocations
            .iter()
            .map(|i| BriefView { agent: i.profile_id.clone(), kind: i.kind.as_str().into(), brief: i.brief.clone() })
            .collect(),
        invocations: tree(&invocations, &steps, None),
        files: baton_store::runs::workspace::list(c, run.id).await?,
        ledger: baton_store::runs::workspace::ledger(c, run.id).await?,
        request: request.map(|r| request_view(&r, &request_events)),
        bridge: sent.iter().map(bridge_message).collect(),
        usage: usage(&invocations),
        tokens: invocations.iter().map(|i| i.tokens_used).sum(),
        spend: baton_store::runs::budgets::get(c, run.id).await?.map(|s| crate::timeline::render_spend(&s)),
        throttled: crate::timeline::render_throttled(&events),
        changes: baton_store::coding::changes_of_run(c, run.id).await?.into_iter().map(changes_view).collect(),
        lanes,
    })
}

/// Each agent in the order it first appears, with a colour of its own.
fn lanes(events: &[EventRow], invocations: &[Invocation]) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = vec![];
    let agents = events
        .iter()
        .map(|e| e.profile_id.as_deref().unwrap_or("run"))
        .chain(invocations.iter().map(|i| i.profile_id.as_str()));
    for agent in agents {
        if !lanes.iter().any(|l| l.agent == agent) {
            lanes.push(Lane { agent: agent.to_string(), colour: lanes.len() % 8 });
        }
    }
    lanes
}

fn colour_of(lanes: &[Lane], agent: &str) -> usize {
    lanes.iter().find(|l| l.agent == agent).map_or(0, |l| l.colour)
}

fn event_views(events: &[EventRow], lanes: &[Lane]) -> Vec<EventView> {
    let first = events.first().map(|e| e.at);
    events
        .iter()
        .map(|e| {
            let agent = e.profile_id.clone().unwrap_or_else(|| "run".into());
            EventView {
                seq: e.seq,
                offset: first.map(|f| format!("+{}", span((e.at - f).num_milliseconds()))).unwrap_or_default(),
                colour: colour_of(lanes, &agent),
                agent,
                kind: e.kind.clone(),
                detail: crate::timeline::detail(&e.payload),
                payload: pretty(&e.payload),
            }
        })
        .collect()
}

/// Invocations whose parent is `parent`, each with its delegated children
/// inside; handoff stages are listed in order at the top level.
fn tree(
    all: &[Invocation],
    steps: &BTreeMap<uuid::Uuid, Vec<Step>>,
    parent: Option<uuid::Uuid>,
) -> Vec<InvocationView> {
    all.iter()
        .filter(|i| match parent {
            None => i.kind != InvocationKind::Child,
            Some(p) => i.kind == InvocationKind::Child && i.parent_invocation_id == Some(p),
        })
        .map(|i| InvocationView {
            agent: i.profile_id.clone(),
            kind: i.kind.as_str().into(),
            status: i.status.as_str().into(),
            tokens: i.tokens_used,
            takeovers: i.takeovers,
            steps: steps.get(&i.id).map(|s| s.iter().flat_map(step_views).collect()).unwrap_or_default(),
            children: tree(all, steps, Some(i.id)),
        })
        .collect()
}

/// One stored step as readable entries: a prompt's messages, a model turn's
/// text and tool calls, a tool's result.
fn step_views(step: &Step) -> Vec<StepView> {
    let p = &step.payload;
    let text = |v: &Value| {
        v.as_str().map(str::to_string).unwrap_or_else(|| if v.is_null() { String::new() } else { pretty(v) })
    };
    let entry = |kind: &str, title: String, body: String, is_error: bool| StepView {
        kind: kind.into(),
        title,
        text: body,
        is_error,
    };
    match step.kind.as_str() {
        "prompt" => p["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .map(|m| entry("prompt", format!("prompt · {}", text(&m["role"])), text(&m["content"]), false))
                    .collect()
            })
            .unwrap_or_default(),
        "model_turn" => {
            let mut out = vec![];
            let content = text(&p["content"]);
            if !content.is_empty() {
                out.push(entry("model", "model".into(), content, false));
            }
            for call in p["tool_calls"].as_array().or(p["toolCalls"].as_array()).into_iter().flatten() {
                out.push(entry(
                    "call",
                    format!("tool call · {}", text(&call["name"])),
                    pretty(&call["arguments"]),
                    false,
                ));
            }
            out
        }
        "tool_result" => {
            vec![entry(
                "result",
                format!("result · {}", text(&p["name"])),
                text(&p["content"]),
                p["isError"].as_bool().unwrap_or(false),
            )]
        }
        other => vec![entry(other, other.replace('_', " "), pretty(p), false)],
    }
}

fn request_view(r: &baton_store::requests::Request, events: &[baton_store::requests::EventRow]) -> RequestView {
    let parsed: Option<HandoffRequest> = serde_json::from_value(r.body.clone()).ok();
    RequestView {
        source: r.source.to_string(),
        target: r.target_agent.to_string(),
        status: r.status.to_string(),
        intent: parsed.as_ref().map(|p| p.user_intent.clone()).unwrap_or_else(|| text_of(&r.body["userIntent"])),
        context: pretty(&r.body["context"]),
        constraints: pretty(&r.body["constraints"]),
        redactions: parsed
            .map(|p| p.context.redactions.iter().map(|x| (x.field.clone(), x.reason.clone())).collect())
            .unwrap_or_default(),
        events: events
            .iter()
            .map(|e| {
                let status = e.status.map(|s| s.as_str().to_string()).unwrap_or_default();
                (at(e.at), e.kind.clone(), [status, e.message.clone().unwrap_or_default()].join(" ").trim().to_string())
            })
            .collect(),
    }
}

fn text_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn bridge_message(m: &baton_store::outbox::sent::Sent) -> BridgeMessage {
    let b = &m.body;
    BridgeMessage {
        kind: b["type"].as_str().unwrap_or("message").to_string(),
        message_id: m.message_id.clone().unwrap_or_default(),
        queue: m.queue.clone(),
        at: at(m.at),
        status: b["status"].as_str().map(str::to_string),
        seq: b["seq"].as_i64(),
        parts: b["parts"]
            .as_array()
            .map(|ps| ps.iter().map(|p| clip(&text_of(p), 20_000)).collect())
            .unwrap_or_default(),
        body: pretty(b),
    }
}

/// Tokens per agent, in the order the agents first ran.
fn usage(invocations: &[Invocation]) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = vec![];
    for i in invocations {
        match out.iter_mut().find(|(a, _)| *a == i.profile_id) {
            Some((_, n)) => *n += i.tokens_used,
            None => out.push((i.profile_id.clone(), i.tokens_used)),
        }
    }
    out
}
