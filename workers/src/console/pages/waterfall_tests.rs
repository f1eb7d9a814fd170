use baton_domain::protocol::request::Priority;
use baton_domain::run::journal::JournalEvent as J;
use baton_domain::run::state::{InvocationKind, InvocationStatus};
use baton_store::invocations::Invocation;
use baton_store::journal::EventRow;
use baton_store::run_page::InvocationTimes;
use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{layout, BarKind, Input, Waterfall};

fn t(ms: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + Duration::milliseconds(ms)
}

fn invocation(
    id: u128,
    parent: Option<u128>,
    agent: &str,
    kind: InvocationKind,
    status: InvocationStatus,
) -> Invocation {
    Invocation {
        id: Uuid::from_u128(id),
        run_id: Uuid::from_u128(99),
        parent_invocation_id: parent.map(Uuid::from_u128),
        incoming_task_id: None,
        profile_id: agent.into(),
        kind,
        status,
        brief: String::new(),
        claim_epoch: 1,
        budget: None,
        deadline_at: None,
        tokens_used: 0,
        await_spec: None,
        takeovers: 0,
        priority: Priority::Normal,
        handoffs: 0,
    }
}

fn times(id: u128, created: i64, finished: Option<i64>, now: i64) -> InvocationTimes {
    InvocationTimes {
        id: Uuid::from_u128(id),
        created_at: t(created),
        started_at: None,
        finished_at: finished.map(t),
        holder: None,
        woken: false,
        last_step: None,
        now: t(now),
    }
}

fn event(inv: u128, at: i64, kind: J, payload: Value) -> EventRow {
    EventRow {
        seq: at,
        invocation_id: Some(Uuid::from_u128(inv)),
        profile_id: None,
        kind: kind.as_str().into(),
        payload,
        at: t(at),
    }
}

/// A lead that delegates to a helper, awaits it, and finishes; 10 s in all.
fn delegation() -> (Vec<Invocation>, Vec<InvocationTimes>, Vec<EventRow>) {
    use InvocationKind::{Child, Root};
    use InvocationStatus::Completed;
    let invocations =
        vec![invocation(1, None, "lead", Root, Completed), invocation(2, Some(1), "helper", Child, Completed)];
    let times = vec![times(1, 0, Some(10_000), 10_000), times(2, 2_000, Some(6_000), 10_000)];
    let events = vec![
        event(1, 0, J::InvocationCreated, json!({})),
        event(1, 500, J::InvocationStarted, json!({})),
        event(1, 2_000, J::ModelResponseStored, json!({"tokens": 300, "attempts": 1, "latencyMs": 1_400})),
        event(1, 2_000, J::DelegateStarted, json!({"tool": "agent_delegate"})),
        event(1, 2_000, J::ToolCallCompleted, json!({"tool": "agent_delegate"})),
        event(2, 2_000, J::InvocationCreated, json!({})),
        event(1, 3_000, J::ModelResponseStored, json!({"tokens": 100, "latencyMs": 1_000})),
        event(1, 3_000, J::AwaitStarted, json!({"tool": "agent_await"})),
        event(1, 3_000, J::InvocationParked, json!({})),
        event(2, 2_500, J::InvocationStarted, json!({})),
        event(2, 6_000, J::ModelResponseStored, json!({"tokens": 50, "latencyMs": 3_000, "attempts": 2})),
        event(2, 6_000, J::InvocationCompleted, json!({})),
        event(1, 6_000, J::InvocationWoken, json!({})),
        event(1, 7_000, J::InvocationStarted, json!({"resumed": true})),
        event(1, 10_000, J::ModelResponseStored, json!({"tokens": 200})),
        event(1, 10_000, J::ToolCallCompleted, json!({"tool": "workspace_finish"})),
        event(1, 10_000, J::InvocationCompleted, json!({})),
    ];
    (invocations, times, events)
}

fn draw(invocations: &[Invocation], times: &[InvocationTimes], events: &[EventRow], end: i64) -> Waterfall {
    layout(&Input { invocations, times, events, start: t(0), end: t(end), now: t(end) })
}

fn kinds(w: &Waterfall, lane: usize) -> Vec<BarKind> {
    w.lanes[lane].bars.iter().map(|b| b.kind).collect()
}

#[test]
fn a_child_has_its_own_lane_under_its_parent() {
    let (invocations, times, events) = delegation();
    let w = draw(&invocations, &times, &events, 10_000);
    let lanes: Vec<(&str, usize, Option<&str>)> =
        w.lanes.iter().map(|l| (l.agent.as_str(), l.depth, l.parent.as_deref())).collect();
    let lead = Uuid::from_u128(1).to_string();
    assert_eq!(lanes, vec![("lead", 0, None), ("helper", 1, Some(lead.as_str()))]);
    assert_eq!((w.lanes[1].life.left, w.lanes[1].life.width), (20.0, 40.0), "2 s to 6 s of 10 s");
    assert_ne!(w.lanes[0].colour, w.lanes[1].colour, "each agent its colour");
}

#[test]
fn model_calls_last_their_latency_and_end_at_their_commit() {
    let (invocations, times, events) = delegation();
    let w = draw(&invocations, &times, &events, 10_000);
    let models: Vec<_> = w.lanes[0].bars.iter().filter(|b| b.kind == BarKind::Model).collect();
    assert_eq!(models.len(), 3);
    assert_eq!((models[0].left, models[0].width, models[0].ms), (6.0, 14.0, 1_400), "0.6 s to 2 s");
    assert_eq!(models[0].tokens, Some(300));
    assert_eq!((models[0].label.as_str(), models[0].short.as_str()), ("1.4s · 300 tok", "1.4s"));
    assert_eq!(models[0].title, "model call 1 · 1.4s · 300 tokens");
    // A row without a latency (older binaries) spans from the step before, marked approximate.
    assert_eq!((models[2].left, models[2].width), (70.0, 30.0));
    assert!(models[2].title.starts_with("model call 3 · ≈3.0s"), "{}", models[2].title);
    let helper = &w.lanes[1].bars.iter().find(|b| b.kind == BarKind::Model).unwrap();
    assert!(helper.title.ends_with("· 2 attempts"), "{}", helper.title);
    assert_eq!(w.lanes[0].summary, "3 model calls · 5.4s · 600 tokens · 3 tool calls");
}

#[test]
fn waits_are_claiming_parking_and_claiming_again() {
    let (invocations, times, events) = delegation();
    let w = draw(&invocations, &times, &events, 10_000);
    let waits: Vec<(BarKind, f64, f64)> = w.lanes[0]
        .bars
        .iter()
        .filter(|b| matches!(b.kind, BarKind::Queued | BarKind::Children))
        .map(|b| (b.kind, b.left, b.width))
        .collect();
    assert_eq!(
        waits,
        vec![(BarKind::Queued, 0.0, 5.0), (BarKind::Children, 30.0, 30.0), (BarKind::Queued, 60.0, 10.0)],
        "created → claimed, parked → woken, woken → claimed"
    );
    assert!(w.lanes.iter().all(|l| l.now.is_none()), "nothing is live");
    assert!(!w.waits_for_the_user(), "an ended run waits for nobody");
    assert!(w.lanes.iter().flat_map(|l| &l.bars).all(|b| !b.open));
}

#[test]
fn tool_calls_are_marks_a_bar_never_leaves_the_axis() {
    let (invocations, times, events) = delegation();
    let w = draw(&invocations, &times, &events, 10_000);
    let tools: Vec<_> = w.lanes[0].bars.iter().filter(|b| b.kind == BarKind::Tool).collect();
    assert_eq!(tools.len(), 3);
    assert_eq!((tools[0].left, tools[0].width, tools[0].title.as_str()), (20.0, 0.4, "agent_delegate"));
    assert_eq!(tools[2].left, 99.6, "a mark at the very end is drawn inside the axis");
    assert!(w.lanes.iter().flat_map(|l| &l.bars).all(|b| b.left >= 0.0 && b.left + b.width <= 100.0 + 1e-9));
}

#[test]
fn the_axis_ticks_at_a_round_step() {
    let (invocations, times, events) = delegation();
    let w = draw(&invocations, &times, &events, 10_000);
    let labels: Vec<&str> = w.ticks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, vec!["0", "2s", "4s", "6s", "8s", "10s"]);
    assert_eq!(w.ticks[1].left, 20.0);
    assert_eq!(w.total, "10.0s");
    let halves = draw(&invocations, &times, &events, 3_000);
    let labels: Vec<&str> = halves.ticks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, vec!["0", "500ms", "1s", "1.5s", "2s", "2.5s", "3s"]);
    let short = draw(&invocations, &times, &events, 900);
    assert_eq!(
        short.ticks.iter().map(|t| t.label.as_str()).collect::<Vec<_>>(),
        vec!["0", "200ms", "400ms", "600ms", "800ms"]
    );
}

#[test]
fn a_claimed_invocation_past_its_last_step_is_waiting_for_its_model() {
    let inv = [invocation(1, None, "writer", InvocationKind::Root, InvocationStatus::Running)];
    let mut held = times(1, 0, None, 30_000);
    held.holder = Some("worker-a".into());
    held.last_step = Some(("tool_result".into(), t(8_000)));
    let events = [event(1, 1_000, J::InvocationStarted, json!({})), event(1, 9_000, J::ModelResponseStored, json!({}))];
    let w = draw(&inv, std::slice::from_ref(&held), &events, 30_000);
    assert_eq!(w.lanes[0].now.as_deref(), Some("waiting for the model, 21.0s"));
    let last = w.lanes[0].bars.last().unwrap();
    assert_eq!((last.kind, last.open, last.left, last.width), (BarKind::Model, true, 30.0, 70.0));
    assert!(
        w.lanes[0].summary.starts_with("1 model call · "),
        "the call in flight is not counted: {}",
        w.lanes[0].summary
    );

    held.last_step = Some(("external_started".into(), t(10_000)));
    let w = draw(&inv, std::slice::from_ref(&held), &events, 200_000);
    assert_eq!(w.lanes[0].now.as_deref(), Some("the coding agent has been running for 3m 10s"));
    assert_eq!(w.lanes[0].bars.last().unwrap().kind, BarKind::External);
}

#[test]
fn a_created_invocation_nobody_holds_shows_its_age_and_a_lapsed_claim_says_so() {
    let inv = [invocation(1, None, "writer", InvocationKind::Root, InvocationStatus::Created)];
    let w = draw(&inv, &[times(1, 0, None, 12_000)], &[], 12_000);
    assert_eq!(w.lanes[0].now.as_deref(), Some("waiting to be claimed, 12.0s"));

    let running = [invocation(1, None, "writer", InvocationKind::Root, InvocationStatus::Running)];
    let events = [event(1, 1_000, J::InvocationStarted, json!({}))];
    let w = draw(&running, &[times(1, 0, None, 6_000)], &events, 6_000);
    assert_eq!(w.lanes[0].now.as_deref(), Some("its worker's claim lapsed; waiting to be taken over, 5.0s"));
}

#[test]
fn a_question_blocks_and_a_throttled_call_waits_its_turn() {
    let inv = [invocation(1, None, "writer", InvocationKind::Root, InvocationStatus::Parked)];
    let events = [
        event(1, 1_000, J::InvocationStarted, json!({})),
        event(1, 1_500, J::ModelCallWaiting, json!({"limit": "deepseek"})),
        event(1, 2_500, J::ModelCallThrottled, json!({"limit": "deepseek", "waitedMs": 1000})),
        event(1, 3_000, J::ModelResponseStored, json!({"latencyMs": 1_500})),
        event(1, 3_000, J::AskUserStarted, json!({"tool": "ask_user"})),
        event(1, 3_000, J::InvocationParked, json!({})),
    ];
    let w = draw(&inv, &[times(1, 0, None, 63_000)], &events, 63_000);
    assert_eq!(w.lanes[0].now.as_deref(), Some("blocked on the user's answer, 1m 0s"));
    assert_eq!(
        kinds(&w, 0),
        vec![BarKind::Queued, BarKind::Throttled, BarKind::Model, BarKind::Question],
        "{:?}",
        w.lanes[0].bars
    );
    assert_eq!(w.lanes[0].bars[1].title, "waited its turn under limit `deepseek` · 1.0s");
    assert!(w.waits_for_the_user(), "only the answer moves it on: the page stops refreshing");

    let waiting = &events[..2];
    let running = [invocation(1, None, "writer", InvocationKind::Root, InvocationStatus::Running)];
    let mut held = times(1, 0, None, 5_500);
    held.holder = Some("worker-a".into());
    let w = draw(&running, &[held], waiting, 5_500);
    assert_eq!(w.lanes[0].now.as_deref(), Some("waiting its turn under limit `deepseek`, 4.0s"));
    assert!(!w.waits_for_the_user());
}

#[test]
fn a_coding_agents_turn_is_drawn_as_the_external_agents() {
    let inv = [invocation(1, None, "coder", InvocationKind::Root, InvocationStatus::Completed)];
    let events = [
        event(1, 100, J::InvocationStarted, json!({})),
        event(1, 200, J::CodingAgentStarted, json!({"cli": "codex"})),
        event(1, 5_000, J::ModelResponseStored, json!({"latencyMs": 4_800, "tokens": 900})),
        event(1, 5_500, J::ModelResponseStored, json!({"latencyMs": 400})),
    ];
    let w = draw(&inv, &[times(1, 0, Some(5_500), 5_500)], &events, 5_500);
    assert_eq!(kinds(&w, 0), vec![BarKind::Queued, BarKind::External, BarKind::Model]);
}
