//! The persisted transcript and what it means: the chat messages a model
//! sees, and which tool calls of the last turn still await a result.

use baton_domain::tools::ToolName;
use baton_store::invocations::steps::Step;
use serde_json::{json, Value};

use crate::providers::{ModelTurn, ToolCall};

pub const PROMPT: &str = baton_store::invocations::steps::PROMPT;
pub const MODEL_TURN: &str = baton_store::invocations::steps::MODEL_TURN;
pub const TOOL_RESULT: &str = baton_store::invocations::steps::TOOL_RESULT;
pub const NUDGE: &str = "nudge";
/// An external agent was started; its result is the next model turn.
pub const EXTERNAL_STARTED: &str = "external_started";
/// Every kind of step a transcript holds (the database's `step_kind`, V50).
pub const KINDS: [&str; 5] = [PROMPT, MODEL_TURN, TOOL_RESULT, NUDGE, EXTERNAL_STARTED];

/// A tool result as stored (and as the model reads it back).
///
/// `isError` is written only when true and `structured` only when there is
/// one: every reader takes a missing one as false or none.
pub fn tool_result_payload(call: &ToolCall, content: &str, is_error: bool, structured: &Value) -> Value {
    let mut payload = json!({ "toolCallId": call.id, "name": call.name, "content": content });
    if is_error {
        payload["isError"] = json!(true);
    }
    if !structured.is_null() {
        payload["structured"] = structured.clone();
    }
    payload
}

/// The conversation in OpenAI chat shape.
pub fn messages(steps: &[Step]) -> Vec<Value> {
    let mut out = vec![];
    for step in steps {
        match step.kind.as_str() {
            PROMPT => out.extend(step.payload["messages"].as_array().cloned().unwrap_or_default()),
            MODEL_TURN => out.push(assistant_message(&step.payload)),
            TOOL_RESULT => out.push(json!({
                "role": "tool",
                "tool_call_id": step.payload["toolCallId"],
                "content": step.payload["content"],
            })),
            NUDGE => out.push(json!({"role": "user", "content": step.payload["content"]})),
            _ => {}
        }
    }
    out
}

fn assistant_message(payload: &Value) -> Value {
    let turn: ModelTurn = serde_json::from_value(payload.clone()).unwrap_or_default();
    let calls: Vec<Value> = turn
        .tool_calls
        .iter()
        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.to_string()}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": turn.content});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

/// Where the loop stands, read off the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Position {
    /// Nothing persisted yet: assemble the prompt.
    Fresh,
    /// The next step is a model call.
    NeedsModel,
    /// The last model turn has calls without results; run the first of them.
    PendingCall(ToolCall),
}

pub fn position(steps: &[Step]) -> Position {
    let Some(last_turn) = steps.iter().rposition(|s| s.kind == MODEL_TURN) else {
        return if steps.is_empty() { Position::Fresh } else { Position::NeedsModel };
    };
    let turn: ModelTurn = serde_json::from_value(steps[last_turn].payload.clone()).unwrap_or_default();
    let answered: Vec<&str> = steps[last_turn + 1..]
        .iter()
        .filter(|s| s.kind == TOOL_RESULT)
        .filter_map(|s| s.payload["toolCallId"].as_str())
        .collect();
    match turn.tool_calls.into_iter().find(|c| !answered.contains(&c.id.as_str())) {
        Some(call) => Position::PendingCall(call),
        None => Position::NeedsModel,
    }
}

pub fn model_turns(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.kind == MODEL_TURN).count()
}

pub fn nudges(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.kind == NUDGE).count()
}

pub fn tool_calls_made(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.kind == TOOL_RESULT).count()
}

/// Whether a model turn of these steps asked to delegate: until one has,
/// the invocation has no delegated tasks (only its own `agent_delegate`
/// calls create them), so nothing needs to be read to know it.
pub fn asked_to_delegate(steps: &[Step]) -> bool {
    let delegate = ToolName::AgentDelegate.as_str();
    steps
        .iter()
        .filter(|s| s.kind == MODEL_TURN)
        .filter_map(|s| s.payload["toolCalls"].as_array())
        .flatten()
        .any(|call| call["name"] == delegate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(seq: i32, kind: &str, payload: Value) -> Step {
        Step { seq, kind: kind.into(), payload }
    }

    #[test]
    fn a_turn_with_unanswered_calls_resumes_at_the_first_unanswered_one() {
        let turn = json!({"toolCalls": [
            {"id": "a", "name": "workspace_write", "arguments": {}},
            {"id": "b", "name": "workspace_commit", "arguments": {}}
        ]});
        let mut steps = vec![step(0, PROMPT, json!({"messages": []})), step(1, MODEL_TURN, turn)];
        assert!(matches!(position(&steps), Position::PendingCall(c) if c.id == "a"));
        steps.push(step(2, TOOL_RESULT, json!({"toolCallId": "a", "content": "ok"})));
        assert!(matches!(position(&steps), Position::PendingCall(c) if c.id == "b"));
        steps.push(step(3, TOOL_RESULT, json!({"toolCallId": "b", "content": "ok"})));
        assert_eq!(position(&steps), Position::NeedsModel);
        assert_eq!(position(&[]), Position::Fresh);
    }

    #[test]
    fn only_a_turn_that_asked_to_delegate_can_have_left_delegated_tasks() {
        let turn = |name: &str| step(1, MODEL_TURN, json!({"toolCalls": [{"id": "a", "name": name, "arguments": {}}]}));
        let prompt = step(0, PROMPT, json!({"messages": []}));
        assert!(!asked_to_delegate(&[prompt.clone(), turn("workspace_write"), turn("agent_handoff")]));
        assert!(asked_to_delegate(&[prompt.clone(), turn("workspace_write"), turn("agent_delegate")]));
        // A result that merely mentions the tool is not a call of it.
        let result =
            step(2, TOOL_RESULT, json!({"toolCallId": "a", "content": "agent_delegate", "name": "agent_delegate"}));
        assert!(!asked_to_delegate(&[prompt, result]));
    }

    #[test]
    fn messages_follow_the_openai_chat_shape() {
        let steps = vec![
            step(
                0,
                PROMPT,
                json!({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}),
            ),
            step(1, MODEL_TURN, json!({"toolCalls": [{"id": "a", "name": "workspace_list", "arguments": {}}]})),
            step(2, TOOL_RESULT, json!({"toolCallId": "a", "content": "none"})),
        ];
        let m = messages(&steps);
        assert_eq!(m.len(), 4);
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "workspace_list");
        assert_eq!(m[3]["role"], "tool");
        assert_eq!(m[3]["tool_call_id"], "a");
    }
}
