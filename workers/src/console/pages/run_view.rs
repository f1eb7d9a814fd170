//! A run's page as plain data: its waterfall (see [`super::waterfall`]) and
//! what each live invocation is doing now, its event log, briefs,
//! transcripts (children nested under their parents, each model call with
//! its latency and tokens), workspace, request after disclosure, what the
//! bridge was sent, and usage per agent.

use std::collections::BTreeMap;

use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{CancelledBy, InvocationKind, RunStatus};
use baton_store::invocations::steps::Step;
use baton_store::invocations::Invocation;
use baton_store::journal::EventRow;
use baton_store::runs::Run;
use baton_store::GenericClient;
use serde::Serialize;
use serde_json::Value;

use super::waterfall::{self, Waterfall};
use super::{age, at, clip, pretty, short_run_id, span};

#[derive(Serialize)]
pub struct RunView {
    pub id: String,
    /// `…` and the id's last 8 hex digits, which tell runs apart.
    pub short_id: String,
    pub handoff_id: Option<String>,
    pub status: String,
    /// Not ended: it can still be cancelled.
    pub live: bool,
    /// Something in it can change without the user: the page reloads itself.
    pub refresh: bool,
    /// Every live invocation waits for the user's answer.
    pub blocked: bool,
    pub root: String,
    pub created: String,
    pub age: String,
    pub duration: String,
    /// Why it failed (a cancelled run has `cancelled` instead).
    pub error: Option<String>,
    /// Who cancelled it, and why.
    pub cancelled: Option<String>,
    pub final_text: Option<String>,
    pub waterfall: Waterfall,
    /// What each live invocation is doing: agent, sentence.
    pub now: Vec<(String, String)>,
    pub lanes: Vec<Lane>,
    pub events: Vec<EventView>,
    /// The event kinds in the log, for its filter.
    pub kinds: Vec<String>,
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
    /// A model turn's latency, tokens and attempts.
    pub meta: Option<String>,
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
    /// Not yet confirmed by the broker, and why if it refused it.
    pub pending: bool,
    pub last_error: Option<String>,
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
    let times = baton_store::run_page::invocation_times(c, run.id).await?;
    let now = times.first().map_or_else(chrono::Utc::now, |t| t.now);
    let end = run.finished_at.unwrap_or(now);
    let input =
        waterfall::Input { invocations: &invocations, times: &times, events: &events, start: run.created_at, end, now };
    let waterfall = waterfall::layout(&input);
    let blocked = run.status == RunStatus::Running && waterfall.waits_for_the_user();
    let cancelled = (run.status == RunStatus::Cancelled).then(|| cancelled(&run, &events));
    Ok(RunView {
        id: run.id.to_string(),
        short_id: short_run_id(run.id),
        handoff_id: run.handoff_id.clone(),
        // Shown as operators see it: a run waiting on the user's answer is blocked.
        status: if blocked { "blocked".into() } else { run.status.as_str().to_string() },
        live: !run.status.is_terminal(),
        refresh: run.status == RunStatus::Running && !blocked,
        blocked,
        root: run.root_profile_id.clone(),
        created: at(run.created_at),
        age: age(run.created_at),
        duration: span((end - run.created_at).num_milliseconds()),
        // The real cause first (a model endpoint's own words), not only what the bridge was told.
        error: run.error.as_ref().filter(|_| cancelled.is_none()).map(|e| match e.reason() == e.message {
            true => format!("{}: {}", e.code, e.message),
            false => format!("{}: {} — the bridge was told: {}", e.code, e.reason(), e.message),
        }),
        cancelled,
        final_text: run.final_text.clone(),
        now: waterfall.lanes.iter().filter_map(|l| Some((l.agent.clone(), l.now.clone()?))).collect(),
        waterfall,
        events: event_views(&events, &lanes),
        kinds: kinds(&events),
        briefs: invocations
            .iter()
            .map(|i| BriefView { agent: i.profile_id.clone(), kind: i.kind.as_str().into(), brief: i.brief.clone() })
            .collect(),
        invocations: tree(&invocations, &steps, &events, None),
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

/// `Cancelled by an operator in the console: the user changed their mind`,
/// from its cancel event (older rows, with no `by`: just the reason).
fn cancelled(run: &Run, events: &[EventRow]) -> String {
    let event = events.iter().rev().find(|e| e.is(JournalEvent::RunCancelled));
    let reason = event
        .and_then(|e| e.payload["message"].as_str())
        .map(str::to_string)
        .or_else(|| run.error.as_ref().map(|e| e.message.clone()));
    let by = event.and_then(|e| e.payload["by"].as_str()).and_then(CancelledBy::parse);
    match (by, reason) {
        (Some(by), Some(reason)) => format!("Cancelled by {}: {reason}", by.describe()),
        (Some(by), None) => format!("Cancelled by {}.", by.describe()),
        (None, Some(reason)) => format!("Cancelled: {reason}"),
        (None, None) => "Cancelled.".into(),
    }
}

/// Each event kind once, in the order it first appears.
fn kinds(events: &[EventRow]) -> Vec<String> {
    let mut kinds: Vec<String> = vec![];
    for e in events {
        if !kinds.contains(&e.kind) {
            kinds.push(e.kind.clone());
        }
    }
    kinds
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
    events: &[EventRow],
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
            steps: steps.get(&i.id).map(|s| transcript(s, events, i.id)).unwrap_or_default(),
            children: tree(all, steps, events, Some(i.id)),
        })
        .collect()
}

/// An invocation's steps as entries, each model turn with what its journal
/// event recorded of the call: the n-th turn's is the invocation's n-th
/// `model_response_stored` (a turn and its event commit together).
fn transcript(steps: &[Step], events: &[EventRow], invocation: uuid::Uuid) -> Vec<StepView> {
    let mut stored =
        events.iter().filter(|e| e.invocation_id == Some(invocation) && e.is(JournalEvent::ModelResponseStored));
    let mut out = vec![];
    for step in steps {
        let mut entries = step_views(step);
        if step.kind == "model_turn" {
            let meta = model_call_meta(&step.payload, stored.next().map(|e| &e.payload));
            if entries.is_empty() {
                entries
                    .extend(step_views(&Step { payload: serde_json::json!({"content": "(no text)"}), ..step.clone() }));
            }
            if let Some(first) = entries.first_mut() {
                first.meta = Some(meta);
            }
        }
        out.extend(entries);
    }
    out
}

/// `1.4s · 300 tokens (120 in, 180 out) · 2 attempts`.
fn model_call_meta(turn: &Value, stored: Option<&Value>) -> String {
    let mut parts = vec![];
    if let Some(ms) = stored.and_then(|p| p["latencyMs"].as_i64()) {
        parts.push(span(ms));
    }
    let usage = &turn["usage"];
    let figure = |snake: &str, camel: &str| usage[snake].as_i64().or(usage[camel].as_i64());
    let tokens = stored.and_then(|p| p["tokens"].as_i64());
    match (tokens, figure("prompt_tokens", "promptTokens"), figure("completion_tokens", "completionTokens")) {
        (Some(t), Some(i), Some(o)) => parts.push(format!("{t} tokens ({i} in, {o} out)")),
        (Some(t), _, _) => parts.push(format!("{t} tokens")),
        (None, _, _) => {}
    }
    if let Some(n) = stored.and_then(|p| p["attempts"].as_i64()).filter(|n| *n > 1) {
        parts.push(format!("{n} attempts"));
    }
    if parts.is_empty() {
        "no latency or tokens recorded".into()
    } else {
        parts.join(" · ")
    }
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
        meta: None,
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
        pending: m.pending,
        last_error: m.last_error.clone(),
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
