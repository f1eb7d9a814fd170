//! The model-visible tools: their names, their surfaces, and the function
//! specs a model receives. Every description is written from the calling
//! agent's point of view and names no runtime internals.

use serde_json::{json, Value};

use crate::state::InvocationKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    AgentList,
    AgentHandoff,
    AgentDelegate,
    AgentAwait,
    TaskReturn,
    WorkspaceList,
    WorkspaceRead,
    WorkspaceWrite,
    WorkspacePatch,
    WorkspaceCommit,
    WorkspaceFinish,
}

impl ToolName {
    pub const ALL: [ToolName; 11] = [
        ToolName::AgentList,
        ToolName::AgentHandoff,
        ToolName::AgentDelegate,
        ToolName::AgentAwait,
        ToolName::TaskReturn,
        ToolName::WorkspaceList,
        ToolName::WorkspaceRead,
        ToolName::WorkspaceWrite,
        ToolName::WorkspacePatch,
        ToolName::WorkspaceCommit,
        ToolName::WorkspaceFinish,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::AgentList => "agent_list",
            ToolName::AgentHandoff => "agent_handoff",
            ToolName::AgentDelegate => "agent_delegate",
            ToolName::AgentAwait => "agent_await",
            ToolName::TaskReturn => "task_return",
            ToolName::WorkspaceList => "workspace_list",
            ToolName::WorkspaceRead => "workspace_read",
            ToolName::WorkspaceWrite => "workspace_write",
            ToolName::WorkspacePatch => "workspace_patch",
            ToolName::WorkspaceCommit => "workspace_commit",
            ToolName::WorkspaceFinish => "workspace_finish",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// A closing tool ends the agent's turn: nothing may follow it in the same round.
    pub fn is_closing(self) -> bool {
        matches!(self, ToolName::AgentHandoff | ToolName::WorkspaceFinish | ToolName::TaskReturn)
    }

    /// Tools only the run's foreground owner may call.
    fn is_owner_only(self) -> bool {
        matches!(
            self,
            ToolName::WorkspaceCommit
                | ToolName::WorkspaceFinish
                | ToolName::AgentHandoff
                | ToolName::AgentDelegate
                | ToolName::AgentAwait
                | ToolName::AgentList
        )
    }
}

/// The tools an invocation actually sees: its profile's list, narrowed by its
/// role. Children lose commit, finish and the `agent_*` tools and gain
/// `task_return`; owners never see `task_return`.
pub fn surface(profile_tools: &[ToolName], kind: InvocationKind) -> Vec<ToolName> {
    let mut tools: Vec<ToolName> = profile_tools
        .iter()
        .copied()
        .filter(|t| match kind {
            InvocationKind::Child => !t.is_owner_only() && *t != ToolName::TaskReturn,
            _ => *t != ToolName::TaskReturn,
        })
        .collect();
    if kind == InvocationKind::Child {
        tools.push(ToolName::TaskReturn);
    }
    tools
}

/// The OpenAI function spec for a tool.
pub fn spec(tool: ToolName) -> Value {
    let (description, parameters) = description_and_schema(tool);
    json!({
        "type": "function",
        "function": { "name": tool.as_str(), "description": description, "parameters": parameters }
    })
}

fn description_and_schema(tool: ToolName) -> (&'static str, Value) {
    match tool {
        ToolName::AgentList => (
            "List the agents you can hand work to. Use purpose \"handoff\" to find who can take over the next stage.",
            json!({"type": "object", "properties": {
                "purpose": {"type": "string", "enum": ["any", "delegate", "handoff"]},
                "query": {"type": "string", "description": "Words to look for in an agent's id, name or description."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20}
            }}),
        ),
        ToolName::AgentHandoff => (
            "Hand the next stage of this work to another agent. Write a clear brief: the objective is required. After a successful handoff your part is complete: make no further tool calls.",
            json!({"type": "object", "required": ["agentId", "handoff"], "properties": {
                "agentId": {"type": "string", "description": "The agent who takes over, from agent_list."},
                "handoff": {"type": "object", "required": ["objective"], "properties": {
                    "objective": {"type": "string", "description": "What the next agent must achieve."},
                    "title": {"type": "string"},
                    "reason": {"type": "string", "description": "Why you are handing over now."},
                    "contextSummary": {"type": "string", "description": "What has been done so far."},
                    "workspaceRefs": {"type": "array", "items": {"type": "string"}, "description": "Workspace files the next agent should read first."},
                    "mustPreserve": {"type": "array", "items": {"type": "string"}},
                    "completionCriteria": {"type": "array", "items": {"type": "string"}}
                }},
                "pendingTaskPolicy": {"type": "string", "enum": ["denyIfPending"]}
            }}),
        ),
        ToolName::AgentDelegate => (
            "Ask another agent to do a task for you; its result comes back to you. You may carry on working and wait for it later with agent_await.",
            json!({"type": "object", "required": ["agentId", "task"], "properties": {
                "agentId": {"type": "string"},
                "task": {"type": "object", "required": ["objective"], "properties": {
                    "objective": {"type": "string"}, "title": {"type": "string"},
                    "context": {"type": "string"}, "expectedOutput": {"type": "string"}
                }},
                "budget": {"type": "object", "properties": {
                    "maxRounds": {"type": "integer", "minimum": 1},
                    "maxToolCalls": {"type": "integer", "minimum": 1}
                }}
            }}),
        ),
        ToolName::AgentAwait => (
            "Wait for tasks you delegated and read their results.",
            json!({"type": "object", "properties": {
                "taskIds": {"type": "array", "items": {"type": "string"}, "description": "The handles you were given when you delegated; all of yours when omitted."},
                "mode": {"type": "string", "enum": ["nextCompleted", "allCompleted", "statusOnly"]},
                "timeoutMs": {"type": "integer", "minimum": 1, "maximum": 300000}
            }}),
        ),
        ToolName::TaskReturn => (
            "Return your result to the agent who asked for it. This ends your task.",
            json!({"type": "object", "required": ["summary"], "properties": {
                "summary": {"type": "string"},
                "status": {"type": "string", "enum": ["completed", "failed"]},
                "confidence": {"type": "string", "enum": ["low", "medium", "high"]},
                "findings": {"type": "array", "items": {"type": "string"}},
                "warnings": {"type": "array", "items": {"type": "string"}},
                "suggestedNextActions": {"type": "array", "items": {"type": "string"}},
                "questionsForCaller": {"type": "array", "items": {"type": "string"}}
            }}),
        ),
        ToolName::WorkspaceList => (
            "List files in the shared workspace.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "A folder such as output/; the whole workspace when omitted."},
                "depth": {"type": "integer", "minimum": 1, "maximum": 4}
            }}),
        ),
        ToolName::WorkspaceRead => (
            "Read a workspace file. Give start_line and line_count, or start_char and max_chars, or neither for the whole file.",
            json!({"type": "object", "required": ["path"], "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer", "minimum": 1}, "line_count": {"type": "integer", "minimum": 1, "maximum": 1200},
                "start_char": {"type": "integer", "minimum": 0}, "max_chars": {"type": "integer", "minimum": 1, "maximum": 80000}
            }}),
        ),
        ToolName::WorkspaceWrite => (
            "Write a workspace file. To replace a file that already exists, read it first.",
            json!({"type": "object", "required": ["path", "content"], "properties": {
                "path": {"type": "string", "description": "For example output/main.md."},
                "content": {"type": "string"},
                "mode": {"type": "string", "enum": ["replace", "append"]}
            }}),
        ),
        ToolName::WorkspacePatch => (
            "Replace text in a workspace file you have read. old_string must appear exactly once unless replace_all is true.",
            json!({"type": "object", "required": ["path", "old_string", "new_string"], "properties": {
                "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            }}),
        ),
        ToolName::WorkspaceCommit => (
            "Publish a workspace file as the reply the user will receive. You may edit and commit again; the latest commit wins. Close with workspace_finish.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Defaults to output/main.md."},
                "mode": {"type": "string", "enum": ["replace", "append"]},
                "reason": {"type": "string"}
            }}),
        ),
        ToolName::WorkspaceFinish => (
            "Finish the work. The reply you committed is sent to the user. Commit at least once before finishing.",
            json!({"type": "object", "properties": {"reason": {"type": "string"}}}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that would leak the runtime into what a model reads.
    const RUNTIME_TERMS: [&str; 9] = [
        "invocation", "task_id", "task id", "queue", "provider", "session", "runid", "uuid", "/tmp",
    ];

    #[test]
    fn agent_tool_specs_keep_runtime_terms_out_of_model_descriptions() {
        for tool in ToolName::ALL {
            let text = spec(tool).to_string().to_lowercase();
            for term in RUNTIME_TERMS {
                assert!(!text.contains(term), "{} mentions {term}", tool.as_str());
            }
        }
    }

    #[test]
    fn tool_names_have_no_dots_and_round_trip() {
        for tool in ToolName::ALL {
            assert!(!tool.as_str().contains('.'));
            assert_eq!(ToolName::parse(tool.as_str()), Some(tool));
        }
    }

    #[test]
    fn children_lose_owner_tools_and_gain_task_return() {
        let all = ToolName::ALL.to_vec();
        let child = surface(&all, InvocationKind::Child);
        assert!(child.contains(&ToolName::TaskReturn));
        assert!(!child.contains(&ToolName::WorkspaceCommit));
        assert!(!child.contains(&ToolName::AgentHandoff));
        let owner = surface(&all, InvocationKind::Handoff);
        assert!(!owner.contains(&ToolName::TaskReturn));
        assert!(owner.contains(&ToolName::WorkspaceFinish));
    }
}
