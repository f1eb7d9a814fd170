//! The names of the model-visible tools, and what kind of call each is.

use crate::wire_enum;

wire_enum! {
    /// A tool a model may call, by the name it calls it.
    pub enum ToolName {
        AgentList => "agent_list",
        AgentHandoff => "agent_handoff",
        AgentDelegate => "agent_delegate",
        AgentAwait => "agent_await",
        TaskReturn => "task_return",
        WorkspaceList => "workspace_list",
        WorkspaceRead => "workspace_read",
        WorkspaceWrite => "workspace_write",
        WorkspacePatch => "workspace_patch",
        WorkspaceCommit => "workspace_commit",
        WorkspaceFinish => "workspace_finish",
        AskUser => "ask_user",
    }
}

impl ToolName {
    /// A closing tool ends the agent's turn: nothing may follow it in the same round.
    pub fn is_closing(self) -> bool {
        matches!(self, ToolName::AgentHandoff | ToolName::WorkspaceFinish | ToolName::TaskReturn)
    }

    /// Tools only the run's foreground owner may call.
    pub(crate) fn is_owner_only(self) -> bool {
        matches!(
            self,
            ToolName::WorkspaceCommit
                | ToolName::WorkspaceFinish
                | ToolName::AgentHandoff
                | ToolName::AgentDelegate
                | ToolName::AgentAwait
                | ToolName::AgentList
                | ToolName::AskUser
        )
    }
}
