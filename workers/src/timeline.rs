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
    let keys = ["tool", "agentId", "path", "kind", "code", "limit", "message", "exit", "provider", "resumed"];
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| payload.get(*k).filter(|v| !v.is_null()).map(|v| format!("{k}={}", v.as_str().map(str::to_string).unwrap_or(v.to_string()))))
        .collect();
    let line = parts.join(" ");
    if line.chars().count() > 60 {
        line.chars().take(57).collect::<String>() + "..."
    } else {
        line
    }
}

/// What a run spent against its budget, on one line.
pub fn render_spend(spend: &baton_store::budgets::RunSpend) -> String {
    let (b, s) = (&spend.budget, &spend.spent);
    format!(
        "spent: {} of {} model calls, {} of {} tool calls, {} of {} tokens, {}s of {}s",
        s.model_calls, b.max_model_calls, s.tool_calls, b.max_tool_calls, s.tokens, b.max_tokens,
        s.elapsed.as_secs(), b.max_wall_clock_secs
    )
}

#[cfg(test)]
mod tests {
    use baton_domain::budget::{RunBudget, Spent};
    use baton_store::budgets::RunSpend;

    #[test]
    fn the_spend_line_shows_each_figure_against_its_limit() {
        let spent = Spent { tokens: 150, model_calls: 3, tool_calls: 6, elapsed: std::time::Duration::from_millis(2400) };
        let line = super::render_spend(&RunSpend { budget: RunBudget { max_tool_calls: 5, ..Default::default() }, spent });
        assert_eq!(line, "spent: 3 of 200 model calls, 6 of 5 tool calls, 150 of 2000000 tokens, 2s of 3600s");
    }
}
