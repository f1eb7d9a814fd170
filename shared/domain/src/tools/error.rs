//! Recoverable tool errors: what an agent can read, understand and fix.

use serde_json::{json, Value};

/// A tool call the agent can correct: bad arguments, a policy refusal, a
/// missing file. It becomes an `isError` tool result and the run goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    pub code: &'static str,
    pub message: String,
}

impl ToolError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_ARGUMENTS, message)
    }

    /// The audit shape stored beside the model-visible text.
    pub fn structured(&self) -> Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }
}

/// Error codes, those of the runtime the tools were modelled on
/// (docs/concepts.md#model-visible-tools) and Baton's own.
pub mod codes {
    pub const INVALID_ARGUMENTS: &str = "tool.invalid_arguments";
    pub const TOOL_POLICY_DENIED: &str = "agent.tool_policy_denied";
    pub const TOOL_BUDGET_EXHAUSTED: &str = "agent.tool_budget_exhausted";
    pub const HANDOFF_POLICY_DENIED: &str = "agent.handoff_policy_denied";
    pub const HANDOFF_PENDING_TASKS: &str = "agent.handoff_pending_tasks";
    pub const HANDOFF_DEPTH_EXHAUSTED: &str = "agent.handoff_depth_exhausted";
    pub const TARGET_NOT_FOUND: &str = "agent.target_profile_not_found";
    pub const TARGET_REQUIRES_CONFIGURATION: &str = "agent.target_requires_configuration";
    pub const FOREGROUND_COMMIT_REQUIRED: &str = "agent.foreground_commit_required";
    pub const INVALID_PATH: &str = "workspace.invalid_path";
    pub const PATH_NOT_VISIBLE: &str = "workspace.path_not_visible";
    pub const FILE_NOT_FOUND: &str = "workspace.file_not_found";
    pub const PATH_IS_DIRECTORY: &str = "workspace.path_is_directory";
    pub const INVALID_LINE_RANGE: &str = "workspace.invalid_line_range";
    pub const MIXED_READ_RANGE: &str = "workspace.mixed_read_range";
    pub const READ_TOO_LARGE: &str = "workspace.read_too_large";
    pub const WRITE_REQUIRES_READ: &str = "workspace.write_requires_read";
    pub const WRITE_STALE_FILE: &str = "workspace.write_stale_file";
    pub const PATCH_REQUIRES_READ: &str = "workspace.patch_requires_read";
    pub const PATCH_STALE_FILE: &str = "workspace.patch_stale_file";
    pub const PATCH_OLD_STRING_NOT_FOUND: &str = "workspace.patch_old_string_not_found";
    pub const PATCH_NOT_UNIQUE: &str = "workspace.patch_not_unique";
    pub const REQUIRED_ARTIFACT_EMPTY: &str = "workspace.required_artifact_empty";
    pub const COMMIT_MODE_INVALID: &str = "workspace.commit_mode_invalid";
    pub const ASK_DENIED: &str = "agent.ask_denied";
}

pub mod delegation_codes {
    pub const DELEGATION_POLICY_DENIED: &str = "agent.delegation_policy_denied";
    pub const DELEGATION_BUDGET_EXHAUSTED: &str = "agent.delegation_budget_exhausted";
    pub const AWAIT_TASK_NOT_FOUND: &str = "agent.await_task_not_found";
    pub const NO_CHILD_TASKS: &str = "agent.no_child_tasks";
    pub const TASK_RETURN_DENIED: &str = "agent.task_return_denied";
}
