//! `agent_handoff`: parsing its arguments and deciding whether the handoff
//! may happen. Every refusal is a recoverable [`ToolError`] the agent can act on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::profiles::Profile;
use crate::run::state::InvocationKind;
use crate::tool_name::ToolName;
use crate::tools::args;
use crate::tools::error::{codes, ToolError};

/// Longest text accepted in a brief field, in characters.
pub const MAX_TEXT_CHARS: usize = 8000;

/// The only pending-task policy: refuse while delegated tasks are unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PendingTaskPolicy {
    #[default]
    DenyIfPending,
}

/// Hand the next stage of this work to another agent. Write a clear brief: the objective is required. After a successful handoff your part is complete: make no further tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffCall {
    /// The agent who takes over, from agent_list.
    pub agent_id: String,
    pub handoff: HandoffBrief,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_task_policy: Option<PendingTaskPolicy>,
}

/// The brief the next agent reads first. Fields beyond these are kept and shown to it too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandoffBrief {
    /// What the next agent must achieve.
    pub objective: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Why you are handing over now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What has been done so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_summary: Option<String>,
    /// Workspace files the next agent should read first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_refs: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub must_preserve: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_criteria: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Validated `agent_handoff` arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffArgs {
    pub agent_id: String,
    /// The brief exactly as the agent wrote it (rendered to markdown later).
    pub brief: Map<String, Value>,
    pub pending_task_policy: PendingTaskPolicy,
}

impl HandoffArgs {
    pub fn objective(&self) -> &str {
        self.brief.get("objective").and_then(Value::as_str).unwrap_or_default()
    }

    pub fn title(&self) -> Option<&str> {
        self.brief.get("title").and_then(Value::as_str)
    }
}

pub fn parse_args(args: &Value) -> Result<HandoffArgs, ToolError> {
    let call: HandoffCall = args::parse(args)?;
    let agent_id = call.agent_id.trim().to_string();
    if agent_id.is_empty() {
        return Err(ToolError::invalid_arguments("`agentId` is required and must be a non-empty string."));
    }
    validate_brief(&call.handoff)?;
    let brief = match serde_json::to_value(&call.handoff) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a struct serializes to an object"),
    };
    Ok(HandoffArgs { agent_id, brief, pending_task_policy: call.pending_task_policy.unwrap_or_default() })
}

fn validate_brief(brief: &HandoffBrief) -> Result<(), ToolError> {
    if brief.objective.trim().is_empty() {
        return Err(ToolError::invalid_arguments(
            "`handoff.objective` is required: say what the next agent must achieve.",
        ));
    }
    let texts = [
        ("objective", Some(&brief.objective)),
        ("title", brief.title.as_ref()),
        ("reason", brief.reason.as_ref()),
        ("contextSummary", brief.context_summary.as_ref()),
    ];
    for (field, text) in texts {
        if text.is_some_and(|s| s.chars().count() > MAX_TEXT_CHARS) {
            return Err(ToolError::invalid_arguments(format!(
                "`handoff.{field}` is longer than {MAX_TEXT_CHARS} characters; shorten it or put details in a workspace file."
            )));
        }
    }
    Ok(())
}

/// The source side: may this agent hand off at all?
pub fn check_source(source: &Profile, kind: InvocationKind) -> Result<(), ToolError> {
    if !kind.is_foreground() {
        return Err(denied(
            "You are working on a delegated task: return your result with task_return instead of handing off.",
        ));
    }
    if !source.delegation.can_handoff || !source.has_tool(ToolName::AgentHandoff) {
        return Err(denied("You are not allowed to hand off in this run. Finish the work yourself."));
    }
    Ok(())
}

/// Refuses while this agent still has delegated tasks queued or running.
pub fn check_pending(pending_tasks: usize) -> Result<(), ToolError> {
    if pending_tasks == 0 {
        return Ok(());
    }
    Err(ToolError::new(
        codes::HANDOFF_PENDING_TASKS,
        format!("You still have {pending_tasks} delegated task(s) in progress. Wait for them with agent_await before handing off."),
    ))
}

/// The run's handoff budget.
pub fn check_depth(handoffs_so_far: u32, max_depth: u32) -> Result<(), ToolError> {
    if handoffs_so_far < max_depth {
        return Ok(());
    }
    Err(ToolError::new(
        codes::HANDOFF_DEPTH_EXHAUSTED,
        format!(
            "This work has already been handed over {handoffs_so_far} time(s), the most allowed. Finish it yourself."
        ),
    ))
}

/// The target side: does the named agent exist and will it take over from this caller?
pub fn check_target(caller_id: &str, agent_id: &str, target: Option<&Profile>) -> Result<(), ToolError> {
    let Some(target) = target else {
        return Err(ToolError::new(
            codes::TARGET_NOT_FOUND,
            format!(
                "There is no agent `{agent_id}`. Use agent_list with purpose \"handoff\" to see who can take over."
            ),
        ));
    };
    let policy = &target.delegation;
    if !policy.callable || !policy.allow_as_handoff_target {
        return Err(denied(format!(
            "Agent `{agent_id}` does not take over work from other agents. Choose another agent."
        )));
    }
    if !policy.accepts_caller(caller_id) {
        return Err(denied(format!("Agent `{agent_id}` does not take over work from you. Choose another agent.")));
    }
    if !target.is_configured() {
        return Err(ToolError::new(
            codes::TARGET_REQUIRES_CONFIGURATION,
            format!("Agent `{agent_id}` is not set up to run yet. Choose another agent."),
        ));
    }
    Ok(())
}

fn denied(message: impl Into<String>) -> ToolError {
    ToolError::new(codes::HANDOFF_POLICY_DENIED, message)
}

/// What the handing-off agent reads after a successful handoff.
pub fn acceptance_text(agent_id: &str) -> String {
    format!("Handoff accepted for Agent {agent_id}. Your part is complete.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::{DelegationPolicy, ModelBinding, ScriptedTurn};
    use serde_json::json;

    fn profile(id: &str, delegation: DelegationPolicy) -> Profile {
        Profile {
            id: id.into(),
            name: id.into(),
            description: format!("{id} agent"),
            system_prompt: String::new(),
            tools: vec!["agent_handoff".into(), "workspace_finish".into()],
            skills: vec![],
            model: ModelBinding::Scripted {
                script: vec![ScriptedTurn {
                    tool: None,
                    args: json!({}),
                    text: Some("hi".into()),
                    delay_ms: None,
                    calls: vec![],
                }],
            },
            delegation,
            ask_timeout: None,
            model_limit: None,
        }
    }

    fn can_handoff() -> DelegationPolicy {
        DelegationPolicy { can_handoff: true, ..Default::default() }
    }

    #[test]
    fn objective_is_required_and_non_empty() {
        for args in [
            json!({"agentId": "editor", "handoff": {}}),
            json!({"agentId": "editor", "handoff": {"objective": "  "}}),
            json!({"agentId": "editor", "handoff": {"objective": 3}}),
            json!({"agentId": "editor"}),
        ] {
            let err = parse_args(&args).unwrap_err();
            assert_eq!(err.code, codes::INVALID_ARGUMENTS, "{args}");
        }
    }

    #[test]
    fn pending_task_policy_defaults_to_deny_if_pending() {
        let args = parse_args(&json!({"agentId": "editor", "handoff": {"objective": "Edit"}})).unwrap();
        assert_eq!(args.pending_task_policy, PendingTaskPolicy::DenyIfPending);
        assert_eq!(args.objective(), "Edit");
    }

    #[test]
    fn unsupported_pending_task_policy_is_recoverable() {
        let err = parse_args(&json!({"agentId": "e", "handoff": {"objective": "x"}, "pendingTaskPolicy": "transfer"}))
            .unwrap_err();
        assert_eq!(err.code, codes::INVALID_ARGUMENTS);
        assert!(err.message.contains("denyIfPending"));
    }

    #[test]
    fn overlong_text_fields_are_refused() {
        let long = "x".repeat(MAX_TEXT_CHARS + 1);
        let err = parse_args(&json!({"agentId": "e", "handoff": {"objective": "x", "reason": long}})).unwrap_err();
        assert!(err.message.contains("handoff.reason"));
    }

    #[test]
    fn extra_brief_fields_are_kept() {
        let args = parse_args(&json!({"agentId": "e", "handoff": {"objective": "x", "tone": "warm"}})).unwrap();
        assert_eq!(args.brief["tone"], "warm");
    }

    #[test]
    fn source_policy_requires_can_handoff_and_a_foreground_owner() {
        let writer = profile("writer", can_handoff());
        assert!(check_source(&writer, InvocationKind::Root).is_ok());
        assert_eq!(check_source(&writer, InvocationKind::Child).unwrap_err().code, codes::HANDOFF_POLICY_DENIED);
        let mute = profile("mute", DelegationPolicy::default());
        assert_eq!(check_source(&mute, InvocationKind::Handoff).unwrap_err().code, codes::HANDOFF_POLICY_DENIED);
    }

    #[test]
    fn target_policy_covers_unknown_uncallable_unlisted_and_unconfigured() {
        assert_eq!(check_target("w", "ghost", None).unwrap_err().code, codes::TARGET_NOT_FOUND);
        let closed = profile("t", DelegationPolicy { callable: false, ..Default::default() });
        assert_eq!(check_target("w", "t", Some(&closed)).unwrap_err().code, codes::HANDOFF_POLICY_DENIED);
        let picky = profile("t", DelegationPolicy { allowed_callers: vec!["other".into()], ..Default::default() });
        assert_eq!(check_target("w", "t", Some(&picky)).unwrap_err().code, codes::HANDOFF_POLICY_DENIED);
        let mut bare = profile("t", DelegationPolicy::default());
        bare.model = ModelBinding::Openai {
            base_url: None,
            model: None,
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            timeout_secs: None,
            max_attempts: None,
        };
        assert_eq!(check_target("w", "t", Some(&bare)).unwrap_err().code, codes::TARGET_REQUIRES_CONFIGURATION);
        assert!(check_target("w", "t", Some(&profile("t", DelegationPolicy::default()))).is_ok());
    }

    #[test]
    fn depth_and_pending_tasks_are_enforced() {
        assert!(check_depth(1, 2).is_ok());
        assert_eq!(check_depth(2, 2).unwrap_err().code, codes::HANDOFF_DEPTH_EXHAUSTED);
        assert!(check_pending(0).is_ok());
        assert_eq!(check_pending(2).unwrap_err().code, codes::HANDOFF_PENDING_TASKS);
    }

    #[test]
    fn acceptance_text_is_light() {
        assert_eq!(acceptance_text("final-editor"), "Handoff accepted for Agent final-editor. Your part is complete.");
    }
}
