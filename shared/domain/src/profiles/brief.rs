//! Rendering what an agent reads first: a markdown brief, never raw JSON.

use std::fmt::Write;

use serde_json::{Map, Value};

use crate::protocol::request::HandoffRequest;

/// Fields the handoff brief renders in their own sections, in this order.
const KNOWN_SECTIONS: [(&str, &str); 7] = [
    ("title", "Title"),
    ("reason", "Reason"),
    ("objective", "Objective"),
    ("contextSummary", "Context Summary"),
    ("workspaceRefs", "Workspace References"),
    ("mustPreserve", "Must Preserve"),
    ("completionCriteria", "Completion Criteria"),
];

const WORKING_NOTES: [&str; 4] = [
    "Inspect the referenced workspace files before editing existing content.",
    "Preserve previous decisions and committed text unless this brief asks you to revise them.",
    "If commit and finish tools are available to you, use them only when this run is ready to end.",
    "If another Agent should continue after your stage, hand off with a clear brief.",
];

/// The `# Handoff Brief` the next agent receives.
pub fn render_handoff_brief(brief: &Map<String, Value>) -> String {
    let mut out = String::from(
        "# Handoff Brief\n\nYou are now responsible for the next stage of this run.\n\
         Continue from the shared workspace paths and constraints below.\n",
    );
    for (key, heading) in KNOWN_SECTIONS {
        if let Some(value) = brief.get(key).filter(|v| !is_blank(v)) {
            section(&mut out, heading, &render_value(value));
        }
    }
    let extra: Vec<(&String, &Value)> =
        brief.iter().filter(|(k, v)| !KNOWN_SECTIONS.iter().any(|(known, _)| known == k) && !is_blank(v)).collect();
    if !extra.is_empty() {
        let body: Vec<String> = extra.iter().map(|(k, v)| format!("- {k}: {}", inline(v))).collect();
        section(&mut out, "Additional Instructions", &body.join("\n"));
    }
    section(&mut out, "Working Notes", &bullets(WORKING_NOTES.iter().copied()));
    out
}

/// The first brief of a run: the user's request as the bridge packaged it.
pub fn render_request_brief(request: &HandoffRequest) -> String {
    let mut out = String::from("# Request\n\nA user asked for the following through a chat bridge.\n");
    section(&mut out, "What the user wants", request.user_intent.trim());
    let ctx = &request.context;
    if !ctx.recent_conversation.is_empty() {
        let turns =
            ctx.recent_conversation.iter().map(|t| format!("**{}**: {}", role_label(&t.role), t.content.trim()));
        section(&mut out, "Recent Conversation", &turns.collect::<Vec<_>>().join("\n"));
    }
    let memories: Vec<&str> = ctx.user_memories.iter().chain(&ctx.project_memories).map(|m| m.content.trim()).collect();
    if !memories.is_empty() {
        section(&mut out, "What We Know", &bullets(memories.into_iter()));
    }
    for (heading, text) in
        [("Session Summary", &ctx.session_summary), ("Earlier Agent Work", &ctx.agent_runtime_summary)]
    {
        if let Some(text) = text.as_deref().filter(|t| !t.trim().is_empty()) {
            section(&mut out, heading, text.trim());
        }
    }
    render_constraints(&mut out, request);
    out
}

fn render_constraints(out: &mut String, request: &HandoffRequest) {
    let c = &request.constraints;
    let mut lines = vec![format!("- Reply in {}.", language_name(request))];
    if !c.allowed_actions.is_empty() {
        lines.push(format!("- You may: {}.", c.allowed_actions.join(", ")));
    }
    if !c.forbidden_actions.is_empty() {
        lines.push(format!("- Never: {}.", c.forbidden_actions.join(", ")));
    }
    if !c.require_confirmation_for.is_empty() {
        lines.push(format!(
            "- The user must confirm these first: {}. Before doing any of them, ask the user (ask_user) and wait for the answer; \
             if the user says no or does not answer, do not do it.",
            c.require_confirmation_for.join(", ")
        ));
    }
    if let Some(expected) = c.expected_output.as_deref().filter(|e| !e.trim().is_empty()) {
        lines.push(format!("- Expected output: {}", expected.trim()));
    }
    section(out, "Constraints", &lines.join("\n"));
}

fn language_name(request: &HandoffRequest) -> &'static str {
    match request.language() {
        crate::protocol::language::Language::ZhCn => "Simplified Chinese (zh-CN)",
        crate::protocol::language::Language::En => "English",
    }
}

fn role_label(role: &impl serde::Serialize) -> String {
    serde_json::to_value(role).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

fn section(out: &mut String, heading: &str, body: &str) {
    let _ = write!(out, "\n## {heading}\n{body}\n");
}

fn bullets<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")
}

fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.trim().to_string(),
        Value::Array(items) => items.iter().map(|i| format!("- {}", inline(i))).collect::<Vec<_>>().join("\n"),
        Value::Object(map) => map.iter().map(|(k, v)| format!("- {k}: {}", inline(v))).collect::<Vec<_>>().join("\n"),
        other => other.to_string(),
    }
}

/// One-line rendering for nested values: lists joined, objects as `key: value`.
fn inline(value: &Value) -> String {
    match value {
        Value::String(s) => s.trim().to_string(),
        Value::Array(items) => items.iter().map(inline).collect::<Vec<_>>().join("; "),
        Value::Object(map) => map.iter().map(|(k, v)| format!("{k}: {}", inline(v))).collect::<Vec<_>>().join("; "),
        other => other.to_string(),
    }
}

fn is_blank(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.trim().is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn seed_brief() -> Map<String, Value> {
        json!({
            "title": "Final revision pass",
            "reason": "I have drafted and committed the main scene; a revision-focused Agent should polish it.",
            "objective": "Revise output/main.md for rhythm, dialogue flow, and final coherence, then commit and finish when ready.",
            "contextSummary": "The draft has been written and committed once.",
            "workspaceRefs": ["output/main.md", "persist/story_state.md"],
            "mustPreserve": ["Do not change the core plot outcome.", "Keep the established character voice."],
            "completionCriteria": ["output/main.md is polished."]
        })
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn handoff_brief_has_the_seed_sections_in_order() {
        let text = render_handoff_brief(&seed_brief());
        let order = [
            "# Handoff Brief",
            "You are now responsible for the next stage of this run.",
            "## Title\nFinal revision pass",
            "## Reason\n",
            "## Objective\nRevise output/main.md",
            "## Context Summary\n",
            "## Workspace References\n- output/main.md\n- persist/story_state.md",
            "## Must Preserve\n- Do not change the core plot outcome.",
            "## Completion Criteria\n- output/main.md is polished.",
            "## Working Notes\n- Inspect the referenced workspace files before editing existing content.",
        ];
        let mut at = 0;
        for needle in order {
            let found = text[at..].find(needle).unwrap_or_else(|| panic!("missing or out of order: {needle}\n{text}"));
            at += found;
        }
        assert!(!text.contains('{'), "a brief is markdown, not JSON:\n{text}");
    }

    #[test]
    fn extra_fields_go_under_additional_instructions() {
        let mut brief = seed_brief();
        brief.insert("tone".into(), json!("warm and brief"));
        brief.insert("audience".into(), json!(["parents", "teachers"]));
        let text = render_handoff_brief(&brief);
        assert!(
            text.contains("## Additional Instructions\n- audience: parents; teachers\n- tone: warm and brief"),
            "{text}"
        );
    }

    #[test]
    fn absent_and_blank_sections_are_left_out() {
        let brief = json!({"objective": "Do it", "title": " ", "mustPreserve": []}).as_object().unwrap().clone();
        let text = render_handoff_brief(&brief);
        assert!(!text.contains("## Title"));
        assert!(!text.contains("## Must Preserve"));
        assert!(!text.contains("## Additional Instructions"));
    }

    #[test]
    fn actions_that_need_confirmation_tell_the_agent_to_ask_first() {
        let json = crate::protocol::request::sample_request_json("h1", "docs_agent", "en");
        let mut request = crate::protocol::request::parse_request(&serde_json::to_vec(&json).unwrap()).unwrap();
        request.constraints.require_confirmation_for = vec!["publishing".into(), "paying".into()];
        let text = render_request_brief(&request);
        assert!(
            text.contains("- The user must confirm these first: publishing, paying. Before doing any of them, ask the user (ask_user) and wait for the answer;"),
            "{text}"
        );
        request.constraints.require_confirmation_for.clear();
        assert!(!render_request_brief(&request).contains("confirm"));
    }
}
