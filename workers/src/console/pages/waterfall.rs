//! The run page's waterfall, pure: a run's invocations, their stored times
//! and its journal become lanes (children under their parents) of bars on a
//! shared time axis, as percentages the template draws. Nothing here reads
//! a clock or a database; the time "now" is the database's, passed in.
//!
//! What a bar stands on: a model call ends when its turn's step committed
//! (`model_response_stored`) and lasts the latency its runner measured
//! (`latencyMs`; older rows: since the step before). Tool calls run inside
//! that step's transaction, so they are marks at its commit. Waits are
//! spans between events: created or woken → claimed (waiting to be
//! claimed), parked → woken (on delegated tasks, or on the user's answer),
//! `model_call_waiting` → `model_call_throttled`. A live invocation's open
//! span says what it is doing now (see [`Lane::now`]).

use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{InvocationKind, InvocationStatus};
use baton_store::invocations::Invocation;
use baton_store::journal::EventRow;
use baton_store::run_page::InvocationTimes;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::span;

/// A bar narrower than this (percent of the axis) is drawn this wide.
const MIN_WIDTH: f64 = 0.4;

/// What the page draws.
#[derive(Debug, Serialize)]
pub struct Waterfall {
    pub lanes: Vec<Lane>,
    pub ticks: Vec<Tick>,
    pub total: String,
}

/// One invocation's lane.
#[derive(Debug, Serialize)]
pub struct Lane {
    pub invocation: String,
    pub parent: Option<String>,
    pub agent: String,
    pub kind: String,
    pub status: String,
    /// 0 for a root or handoff stage; a delegated child is one deeper than its parent.
    pub depth: usize,
    pub colour: usize,
    /// From its creation to its end (or now).
    pub life: Bar,
    pub bars: Vec<Bar>,
    /// `3 model calls · 2.1s · 450 tokens · 4 tool calls`.
    pub summary: String,
    /// What it is doing now, for a live invocation: "waiting for the model, 21s".
    pub now: Option<String>,
}

/// What a bar stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BarKind {
    Life,
    Model,
    /// An external (coding) agent's turn.
    External,
    Tool,
    /// Created or woken, no worker holds it yet.
    Queued,
    /// Parked until its delegated tasks end.
    Children,
    /// Parked until the user answers.
    Question,
    /// A model call waiting its turn under a fleet-wide limit.
    Throttled,
}

/// A span on the axis, in percent of it.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub kind: BarKind,
    pub left: f64,
    pub width: f64,
    pub ms: i64,
    /// Drawn inside the bar when it is wide enough (`1.4s · 300 tok`)…
    pub label: String,
    /// …or this, when it is narrower (`1.4s`).
    pub short: String,
    /// Shown on hover.
    pub title: String,
    /// Still going.
    pub open: bool,
    pub tokens: Option<i64>,
}

/// A labelled mark on the axis.
#[derive(Debug, Serialize)]
pub struct Tick {
    pub left: f64,
    pub label: String,
}

/// Everything the layout reads, as stored.
pub struct Input<'a> {
    pub invocations: &'a [Invocation],
    pub times: &'a [InvocationTimes],
    pub events: &'a [EventRow],
    /// The run's start and end (its finish, or now).
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// The database's clock.
    pub now: DateTime<Utc>,
}

/// A span in time, before it is placed on the axis.
#[derive(Debug, Clone)]
struct Span {
    kind: BarKind,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    open: bool,
    label: String,
    title: String,
    tokens: Option<i64>,
}

/// The lanes of `input`, ordered as a tree: each root or handoff stage in
/// the order it was created, its delegated children (and theirs) under it.
pub fn layout(input: &Input<'_>) -> Waterfall {
    let axis = Axis::new(input.start, input.end);
    let mut agents: Vec<&str> = vec![];
    let mut lanes = vec![];
    for (inv, depth) in tree_order(input.invocations) {
        let Some(times) = input.times.iter().find(|t| t.id == inv.id) else { continue };
        let colour = colour(&mut agents, &inv.profile_id);
        lanes.push(lane(input, &axis, inv, times, depth, colour));
    }
    Waterfall { lanes, ticks: axis.ticks(), total: span(axis.total_ms) }
}

impl Waterfall {
    /// Nothing but the user's answer can move the run on: some invocation
    /// waits for it, and every other live one waits on delegated tasks.
    pub fn waits_for_the_user(&self) -> bool {
        let open = || self.lanes.iter().flat_map(|l| &l.bars).filter(|b| b.open);
        open().any(|b| b.kind == BarKind::Question)
            && open().all(|b| matches!(b.kind, BarKind::Question | BarKind::Children))
    }
}

/// Invocations with their depth, parents before their children.
fn tree_order(all: &[Invocation]) -> Vec<(&Invocation, usize)> {
    fn under<'a>(all: &'a [Invocation], parent: uuid::Uuid, depth: usize, out: &mut Vec<(&'a Invocation, usize)>) {
        for child in all.iter().filter(|i| i.kind == InvocationKind::Child && i.parent_invocation_id == Some(parent)) {
            out.push((child, depth));
            under(all, child.id, depth + 1, out);
        }
    }
    let mut out = vec![];
    let known = |id: Option<uuid::Uuid>| id.is_some_and(|p| all.iter().any(|i| i.id == p));
    // A child whose parent is not listed stands at the top rather than vanish.
    for top in all.iter().filter(|i| i.kind != InvocationKind::Child || !known(i.parent_invocation_id)) {
        out.push((top, 0));
        under(all, top.id, 1, &mut out);
    }
    out
}

/// The colour of `agent`: the n-th agent to appear gets colour n (of 8).
fn colour<'a>(agents: &mut Vec<&'a str>, agent: &'a str) -> usize {
    let at = agents.iter().position(|a| *a == agent).unwrap_or_else(|| {
        agents.push(agent);
        agents.len() - 1
    });
    at % 8
}

fn lane(
    input: &Input<'_>,
    axis: &Axis,
    inv: &Invocation,
    times: &InvocationTimes,
    depth: usize,
    colour: usize,
) -> Lane {
    let events: Vec<&EventRow> = input.events.iter().filter(|e| e.invocation_id == Some(inv.id)).collect();
    let live = !inv.status.is_terminal();
    let end = match (live, times.finished_at) {
        (false, Some(at)) => at,
        (false, None) => events.last().map_or(input.end, |e| e.at),
        (true, _) => input.now,
    };
    let spans = Walk::new(times.created_at).spans(&events, inv.status, times, end);
    let now = spans.iter().rev().find(|s| s.open).map(|s| now_text(s, input.now));
    let life = Span {
        kind: BarKind::Life,
        from: times.created_at,
        to: end,
        open: live,
        label: String::new(),
        title: format!(
            "{} · {} · {}",
            inv.profile_id,
            inv.status.as_str(),
            span((end - times.created_at).num_milliseconds())
        ),
        tokens: None,
    };
    Lane {
        invocation: inv.id.to_string(),
        parent: inv.parent_invocation_id.filter(|_| inv.kind == InvocationKind::Child).map(|p| p.to_string()),
        agent: inv.profile_id.clone(),
        kind: inv.kind.as_str().into(),
        status: inv.status.as_str().into(),
        depth,
        colour,
        life: axis.place(&life),
        summary: summary(&spans),
        bars: spans.iter().map(|s| axis.place(s)).collect(),
        now,
    }
}

/// `3 model calls · 2.1s · 450 tokens · 4 tool calls`.
fn summary(spans: &[Span]) -> String {
    // A call still in flight is said by `now`, not counted.
    let models: Vec<&Span> =
        spans.iter().filter(|s| matches!(s.kind, BarKind::Model | BarKind::External) && !s.open).collect();
    let ms: i64 = models.iter().map(|s| (s.to - s.from).num_milliseconds()).sum();
    let tokens: i64 = models.iter().filter_map(|s| s.tokens).sum();
    let tools = spans.iter().filter(|s| s.kind == BarKind::Tool).count();
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!("{} · {} · {tokens} tokens · {}", plural(models.len(), "model call"), span(ms), plural(tools, "tool call"))
}

/// The sentence for what a live invocation is doing, from its open span.
fn now_text(open: &Span, now: DateTime<Utc>) -> String {
    let took = span((now - open.from).num_milliseconds().max(0));
    match open.kind {
        BarKind::External => format!("the coding agent has been running for {took}"),
        BarKind::Model => format!("waiting for the model, {took}"),
        BarKind::Throttled => format!("{}, {took}", open.label),
        BarKind::Queued => format!("{}, {took}", open.title),
        BarKind::Children => format!("waiting on its delegated tasks, {took}"),
        BarKind::Question => format!("blocked on the user's answer, {took}"),
        BarKind::Life | BarKind::Tool => format!("running, {took}"),
    }
}

/// Walks one invocation's events in order, turning them into spans.
struct Walk {
    spans: Vec<Span>,
    /// When its last step committed (or it was created).
    last: DateTime<Utc>,
    queued: Option<(DateTime<Utc>, &'static str)>,
    parked: Option<(DateTime<Utc>, BarKind)>,
    throttled: Option<(DateTime<Utc>, String)>,
    asking: bool,
    /// A coding agent started since the last model call: the next turn is its.
    external: bool,
    calls: usize,
    ended: bool,
}

impl Walk {
    fn new(created: DateTime<Utc>) -> Self {
        Walk {
            spans: vec![],
            last: created,
            queued: Some((created, "waiting to be claimed")),
            parked: None,
            throttled: None,
            asking: false,
            external: false,
            calls: 0,
            ended: false,
        }
    }

    fn spans(
        mut self,
        events: &[&EventRow],
        status: InvocationStatus,
        times: &InvocationTimes,
        end: DateTime<Utc>,
    ) -> Vec<Span> {
        for e in events {
            self.event(e);
        }
        self.close(status, times, end);
        self.spans
    }

    fn push(&mut self, kind: BarKind, from: DateTime<Utc>, to: DateTime<Utc>, label: String, title: String) {
        self.spans.push(Span { kind, from, to: to.max(from), open: false, label, title, tokens: None });
    }

    fn event(&mut self, e: &EventRow) {
        use JournalEvent as J;
        // A name this version does not know is some other event.
        let Some(kind) = JournalEvent::parse(&e.kind) else { return };
        match kind {
            J::InvocationStarted => {
                if let Some((from, what)) = self.queued.take() {
                    self.push(BarKind::Queued, from, e.at, String::new(), format!("{what} · {}", took(from, e.at)));
                }
                self.last = e.at;
            }
            J::ModelCallWaiting => self.throttled = Some((e.at, e.payload["limit"].as_str().unwrap_or("?").into())),
            J::ModelCallThrottled => {
                if let Some((from, limit)) = self.throttled.take() {
                    let title = format!("waited its turn under limit `{limit}` · {}", took(from, e.at));
                    self.push(BarKind::Throttled, from, e.at, String::new(), title);
                }
            }
            J::ModelResponseStored => self.model_call(e),
            J::ToolCallCompleted | J::ToolCallFailed | J::DelegateStarted => self.tool_call(e, kind),
            J::CodingAgentStarted => self.external = true,
            J::AskUserStarted => self.asking = true,
            J::AwaitStarted => self.asking = false,
            J::InvocationParked => {
                self.parked = Some((e.at, if self.asking { BarKind::Question } else { BarKind::Children }));
                self.last = e.at;
            }
            J::InvocationWoken => {
                if let Some((from, kind)) = self.parked.take() {
                    self.push(kind, from, e.at, String::new(), format!("{} · {}", wait_name(kind), took(from, e.at)));
                }
                self.queued = Some((e.at, "woken, waiting to be claimed"));
            }
            J::InvocationCompleted
            | J::InvocationFailed
            | J::InvocationCancelled
            | J::InvocationTransferred
            | J::LoopFinished => self.ended = true,
            _ => {}
        }
    }

    fn model_call(&mut self, e: &EventRow) {
        self.calls += 1;
        let p = &e.payload;
        let latency = p["latencyMs"].as_i64();
        let from = latency.map_or(self.last, |ms| (e.at - chrono::Duration::milliseconds(ms)).max(self.last.min(e.at)));
        let ms = latency.unwrap_or((e.at - from).num_milliseconds());
        let tokens = p["tokens"].as_i64();
        let approx = if latency.is_some() { "" } else { "≈" };
        let mut title = format!("model call {} · {approx}{}", self.calls, span(ms));
        if let Some(t) = tokens {
            title.push_str(&format!(" · {t} tokens"));
        }
        match p["attempts"].as_i64() {
            Some(n) if n > 1 => title.push_str(&format!(" · {n} attempts")),
            _ => {}
        }
        let label = format!("{approx}{}{}", span(ms), tokens.map(|t| format!(" · {t} tok")).unwrap_or_default());
        let kind = if std::mem::take(&mut self.external) { BarKind::External } else { BarKind::Model };
        self.spans.push(Span { kind, from, to: e.at, open: false, label, title, tokens });
        self.last = e.at;
    }

    fn tool_call(&mut self, e: &EventRow, kind: JournalEvent) {
        let tool = e.payload["tool"].as_str().unwrap_or("tool");
        let title = match kind {
            JournalEvent::ToolCallFailed => {
                format!("{tool} · refused: {}", e.payload["message"].as_str().unwrap_or_default())
            }
            _ => tool.to_string(),
        };
        self.push(BarKind::Tool, e.at, e.at, String::new(), title);
        self.last = e.at;
    }

    /// Ends what is still open: at `end` for an invocation that ended, as
    /// open spans up to now for a live one.
    fn close(&mut self, status: InvocationStatus, times: &InvocationTimes, end: DateTime<Utc>) {
        let live = !status.is_terminal();
        let mut open = |kind: BarKind, from: DateTime<Utc>, label: String, title: String| {
            self.spans.push(Span { kind, from, to: end.max(from), open: live, label, title, tokens: None });
        };
        if let Some((from, limit)) = self.throttled.take() {
            // Its model call waits its turn: no model is at work yet.
            open(BarKind::Throttled, from, format!("waiting its turn under limit `{limit}`"), String::new());
            return;
        }
        if let Some((from, kind)) = self.parked.take() {
            open(kind, from, String::new(), wait_name(kind).into());
        }
        if let Some((from, what)) = self.queued.take() {
            open(BarKind::Queued, from, String::new(), what.into());
            return;
        }
        if !live || self.ended || status != InvocationStatus::Running {
            return;
        }
        match &times.holder {
            // Claimed and past its last step: its model (or external agent) is at work.
            Some(_) => {
                let step = times.last_step.as_ref();
                let from = step.map_or(self.last, |(_, at)| self.last.max(*at));
                let external = step.is_some_and(|(kind, _)| kind == "external_started");
                let (kind, title) = if external {
                    (BarKind::External, "the coding agent is running")
                } else {
                    (BarKind::Model, "waiting for the model")
                };
                open(kind, from, String::new(), title.into());
            }
            None => open(
                BarKind::Queued,
                self.last,
                String::new(),
                "its worker's claim lapsed; waiting to be taken over".into(),
            ),
        }
    }
}

fn wait_name(kind: BarKind) -> &'static str {
    match kind {
        BarKind::Question => "blocked on the user's answer",
        _ => "waiting on its delegated tasks",
    }
}

fn took(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    span((to - from).num_milliseconds().max(0))
}

/// The shared time axis: the run's start to its end.
struct Axis {
    start: DateTime<Utc>,
    total_ms: i64,
}

impl Axis {
    fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Self {
        Axis { start, total_ms: (end - start).num_milliseconds().max(1) }
    }

    /// Where `at` falls, in percent, kept on the axis.
    fn pct(&self, at: DateTime<Utc>) -> f64 {
        let ms = (at - self.start).num_milliseconds().clamp(0, self.total_ms);
        ms as f64 * 100.0 / self.total_ms as f64
    }

    fn place(&self, s: &Span) -> Bar {
        let (from, to) = (self.pct(s.from), self.pct(s.to));
        let width = (to - from).max(MIN_WIDTH);
        let left = from.min(100.0 - width);
        Bar {
            kind: s.kind,
            left: round(left),
            width: round(width),
            ms: (s.to - s.from).num_milliseconds(),
            label: s.label.clone(),
            short: s.label.split(" · ").next().unwrap_or_default().to_string(),
            title: if s.title.is_empty() { s.label.clone() } else { s.title.clone() },
            open: s.open,
            tokens: s.tokens,
        }
    }

    /// Marks at a round step, at most eight of them after 0.
    fn ticks(&self) -> Vec<Tick> {
        const STEPS: [i64; 18] = [
            100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000, 900_000,
            1_800_000, 3_600_000, 7_200_000, 21_600_000,
        ];
        let step = STEPS.into_iter().find(|s| self.total_ms / s <= 8).unwrap_or((self.total_ms + 7) / 8);
        (0..=self.total_ms / step)
            .map(|n| n * step)
            .map(|ms| Tick { left: round(ms as f64 * 100.0 / self.total_ms as f64), label: tick_label(ms) })
            .collect()
    }
}

/// `0`, `500ms`, `2s`, `1.5s`, `1m 30s`: a tick's time, decimals only where needed.
fn tick_label(ms: i64) -> String {
    match ms {
        0 => "0".into(),
        ..1_000 => format!("{ms}ms"),
        1_000..60_000 if ms % 1000 == 0 => format!("{}s", ms / 1000),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => span(ms),
    }
}

fn round(pct: f64) -> f64 {
    (pct * 100.0).round() / 100.0
}

#[cfg(test)]
#[path = "waterfall_tests.rs"]
mod tests;
