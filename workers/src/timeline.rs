//! A run's journal across agents, as a table for people.

use std::fmt::Write;

use baton_store::journal::EventRow;

/// Renders events as `#  +ms  agent  event  detail`.
pub fn render(events: &[EventRow]) -> String {
    let Some(first) = events.first() else {
        return "(no events)\n".to_string();
    };
    let mut out = format!("{:>3}  {:>7}  {:<10}  {:<30}  {}\n", "#", "+ms", "agent", "event", "detail");
    out.push_str(&format!("{}\n", "-".repeat(90)));
    for e in events {
        let ms = (e.at - first.at).num_milliseconds();
        let agent = e.profile_id.as_deref().unwrap_or("run");
        let _ = writeln!(out, "{:>3}  {:>7}  {:<10}  {:<30}  {}", e.seq, ms, agent, e.kind, detail(&e.payload));
    }
    out
}

/// The few payload fields worth a glance, on one short line.
pub fn detail(payload: &serde_json::Value) -> String {
    let keys = [
        "tool",
        "agentId",
        "path",
        "kind",
        "code",
        "limit",
        "reason",
        "waitedMs",
        "message",
        "exit",
        "provider",
        "resumed",
        "cli",
        "project",
        "command",
        "exitCode",
        "inputTokens",
        "outputTokens",
        "tokens",
        "latencyMs",
        "sessionId",
        "modelCalls",
    ];
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| {
            payload
                .get(*k)
                .filter(|v| !v.is_null())
                .map(|v| format!("{k}={}", v.as_str().map(str::to_string).unwrap_or(v.to_string())))
        })
        .collect();
    let line = parts.join(" ");
    if line.chars().count() > 60 {
        line.chars().take(57).collect::<String>() + "..."
    } else {
        line
    }
}

/// What a run spent against its budget, on one line.
pub fn render_spend(spend: &baton_store::runs::budgets::RunSpend) -> String {
    let (b, s) = (&spend.budget, &spend.spent);
    format!(
        "spent: {} of {} model calls, {} of {} tool calls, {} of {} tokens, {}s of {}s",
        s.model_calls,
        b.max_model_calls,
        s.tool_calls,
        b.max_tool_calls,
        s.tokens,
        b.max_tokens,
        s.elapsed.as_secs(),
        b.max_wall_clock_secs
    )
}

/// What a run's model calls waited under fleet-wide limits, on one line:
/// how many waited, how long in all, under which limits, and whether one
/// waits right now. `None` when none waited.
pub fn render_throttled(events: &[EventRow]) -> Option<String> {
    use baton_domain::run::journal::JournalEvent;
    let (mut waited, mut total_ms, mut waiting_now, mut limits) = (0, 0u64, 0i64, std::collections::BTreeSet::new());
    for e in events {
        let limit = e.payload["limit"].as_str().unwrap_or("?").to_string();
        // A name this version does not know is some other event.
        match JournalEvent::parse(&e.kind) {
            Some(JournalEvent::ModelCallWaiting) => {
                waiting_now += 1;
                limits.insert(limit);
            }
            Some(JournalEvent::ModelCallThrottled) => {
                waiting_now -= 1;
                waited += 1;
                total_ms += e.payload["waitedMs"].as_u64().unwrap_or(0);
            }
            _ => {}
        }
    }
    if limits.is_empty() {
        return None;
    }
    let names: Vec<String> = limits.into_iter().map(|l| format!("`{l}`")).collect();
    let mut line = format!(
        "throttled: {waited} model call{} waited {:.1}s in all under limit {}",
        if waited == 1 { "" } else { "s" },
        total_ms as f64 / 1000.0,
        names.join(", ")
    );
    if waiting_now > 0 {
        line.push_str("; a model call is waiting for its turn now");
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use baton_domain::policy::budget::{RunBudget, Spent};
    use baton_store::runs::budgets::RunSpend;

    #[test]
    fn the_spend_line_shows_each_figure_against_its_limit() {
        let spent =
            Spent { tokens: 150, model_calls: 3, tool_calls: 6, elapsed: std::time::Duration::from_millis(2400) };
        let line =
            super::render_spend(&RunSpend { budget: RunBudget { max_tool_calls: 5, ..Default::default() }, spent });
        assert_eq!(line, "spent: 3 of 200 model calls, 6 of 5 tool calls, 150 of 2000000 tokens, 2s of 3600s");
    }

    #[test]
    fn throttled_waits_are_summed_and_a_wait_under_way_is_said() {
        use baton_domain::run::journal::JournalEvent::{ModelCallThrottled, ModelCallWaiting};
        use baton_store::journal::EventRow;
        let event = |seq: i64, kind: baton_domain::run::journal::JournalEvent, payload: serde_json::Value| EventRow {
            seq,
            invocation_id: None,
            profile_id: Some("writer".into()),
            kind: kind.as_str().into(),
            payload,
            at: chrono::Utc::now(),
        };
        let mut events = vec![
            event(1, ModelCallWaiting, serde_json::json!({"limit": "deepseek", "reason": "requests_per_minute"})),
            event(2, ModelCallThrottled, serde_json::json!({"limit": "deepseek", "waitedMs": 1500})),
            event(3, ModelCallWaiting, serde_json::json!({"limit": "deepseek", "reason": "concurrent_calls"})),
        ];
        let line = super::render_throttled(&events).unwrap();
        assert_eq!(line, "throttled: 1 model call waited 1.5s in all under limit `deepseek`; a model call is waiting for its turn now");
        events.push(event(4, ModelCallThrottled, serde_json::json!({"limit": "deepseek", "waitedMs": 500})));
        assert_eq!(
            super::render_throttled(&events).unwrap(),
            "throttled: 2 model calls waited 2.0s in all under limit `deepseek`"
        );
        assert_eq!(super::render_throttled(&events[..0]), None);
        assert!(super::detail(&events[0].payload).contains("reason=requests_per_minute"));
        let stored = serde_json::json!({"toolCalls": 1, "tokens": 50, "attempts": 1, "latencyMs": 312});
        assert_eq!(super::detail(&stored), "tokens=50 latencyMs=312");
    }
}
