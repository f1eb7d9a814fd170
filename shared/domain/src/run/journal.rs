//! The run journal's event names (the `type` of a row in `events`): those of
//! a handoff (docs/concepts.md#a-handoff-in-the-journal) and every other, one
//! closed [`JournalEvent`]. Whoever writes the journal names its event with it, so
//! no name is spelled twice and the guide's list of events
//! (docs/concepts.md#events-an-operator-reads) can be checked
//! against [`JournalEvent::ALL`]. A stored row keeps its name as a string:
//! one this version does not know (an older or newer binary wrote it)
//! still reads.

use crate::wire_enum;

wire_enum! {
    /// What happened in a run: one row of its journal.
    pub enum JournalEvent {
        /// A run began: its handoff, source and budget (or `manual`, an operator's).
        RunCreated => "run_created",
        /// The request's target agent resolved to the root's profile.
        ProfileResolved => "profile_resolved",
        /// The run's final owner finished; the bridge is told `completed`.
        RunCompleted => "run_completed",
        /// The run failed; the payload is its error.
        RunFailed => "run_failed",
        /// The run was cancelled (a bridge's cancel, an operator, a newer request in its chat).
        RunCancelled => "run_cancelled",
        /// An operator retried a failed run (`baton runs retry`); the payload has its attempt.
        RunRetried => "run_retried",
        /// The run's shared workspace is ready, with the run.
        WorkspaceInitialized => "workspace_initialized",
        /// An invocation's first prompt was put together (the length of its brief).
        ContextAssembled => "context_assembled",
        /// The skills an invocation's profile gives it.
        SkillScopesResolved => "skill_scopes_resolved",
        /// The model provider an invocation calls.
        ModelBindingResolved => "agent_model_binding_resolved",
        /// An invocation was written (root, handoff stage or child), with its kind and profile.
        InvocationCreated => "agent_invocation_created",
        /// A worker claimed an invocation, or took it over (`resumed`, with its epoch).
        InvocationStarted => "agent_invocation_started",
        InvocationCompleted => "agent_invocation_completed",
        InvocationFailed => "agent_invocation_failed",
        /// An invocation handed the run to the next agent (`agent_handoff`).
        InvocationTransferred => "agent_invocation_transferred",
        /// An invocation's loop ended: `finished`, `transferred` or `returned`.
        LoopFinished => "agent_loop_finished",
        /// The task a new invocation takes up (a handoff's or a delegation's) was written.
        TaskRegistered => "agent_task_registered",
        TaskStarted => "agent_task_started",
        TaskCompleted => "agent_task_completed",
        TaskFailed => "agent_task_failed",
        /// An agent called `agent_handoff`.
        HandoffRequested => "agent_handoff_requested",
        /// The handoff was accepted: the successor invocation and its task exist.
        HandoffAccepted => "agent_handoff_accepted",
        /// A model's turn was stored (its text, tool calls and usage).
        ModelResponseStored => "model_response_stored",
        ToolCallCompleted => "tool_call_completed",
        /// A tool call was the agent's mistake: its error code and message.
        ToolCallFailed => "tool_call_failed",
        /// `workspace_write` wrote a file (path, bytes).
        WorkspaceFileWritten => "workspace_file_written",
        /// `workspace_patch` changed a file.
        WorkspacePatchApplied => "workspace_patch_applied",
        /// `workspace_commit` made a file the run's reply (path, mode, ordinal).
        ChatCommitCompleted => "chat_commit_completed",
        /// Named since Baton's first version but written by none: a fenced-out
        /// worker's writes are refused and it stops (the takeover is an
        /// `agent_invocation_started` with `resumed`).
        ClaimFenced => "claim_fenced",
        /// A cancel reached the run, with its reason, before the run ends `cancelled`.
        RunCancelRequested => "run_cancel_requested",
        /// A live invocation was cancelled with its task (its run or its owner ended).
        InvocationCancelled => "agent_invocation_cancelled",
        /// An invocation waits without a worker, for its children or its user, until a deadline.
        InvocationParked => "agent_invocation_parked",
        /// A parked invocation may go on (its children ended, its user answered, its wait ran out).
        InvocationWoken => "agent_invocation_woken",
        /// A delegated child failed; its parent reads the failure as its task's result.
        ChildInvocationFailed => "agent_child_invocation_failed",
        TaskCancelled => "agent_task_cancelled",
        /// `agent_delegate` started a child (its agent and task).
        DelegateStarted => "agent_delegate_started",
        /// `agent_await` began to wait (its mode and keys).
        AwaitStarted => "agent_await_started",
        /// `agent_await` ended, with whether it timed out.
        AwaitCompleted => "agent_await_completed",
        /// `ask_user` asked the user a question (or asks it again after a wake-up).
        AskUserStarted => "ask_user_started",
        /// The user's answer reached the asking agent.
        AskUserAnswered => "ask_user_answered",
        /// The question expired unanswered; the agent goes on without it.
        AskUserTimedOut => "ask_user_timed_out",
        /// A child's `task_return` was recorded for its parent (its status).
        TaskReturnRecorded => "task_return_recorded",
        /// The host broke, not the agent: a code and the host's own words, before the invocation fails.
        HostError => "host_error",
        /// A run reached one of its budget's limits; the payload carries the spend.
        RunBudgetExhausted => "run_budget_exhausted",
        /// An external agent whose earlier start was interrupted runs again.
        ExternalAgentRerun => "external_agent_rerun",
        /// A message of the run that the broker could never take (too big, refused):
        /// moved to the dead-letter queue, with the reason.
        MessageDeadLettered => "message_dead_lettered",
        /// A model call waits its turn under a fleet-wide limit (`[[limits]]`):
        /// the limit's name and why (`requests_per_minute`, `tokens_per_minute`,
        /// `concurrent_calls`, `retry_after`). Waiting, not failing.
        ModelCallWaiting => "model_call_waiting",
        /// A model call that waited under a limit may go: how long it waited (`waitedMs`).
        ModelCallThrottled => "model_call_throttled",
        /// A coding agent (docs/profiles.md#coding-agents) starts: the CLI, its project and
        /// checkout base, whether it resumes a session, and its permissions
        /// (what was enforced, what could not be).
        CodingAgentStarted => "coding_agent_started",
        /// A coding agent ran a shell command: the command, its exit code, the end of its output.
        CodingAgentCommand => "coding_agent_command",
        /// A coding agent created or edited a file: its path in the project.
        CodingAgentFileEdited => "coding_agent_file_edited",
        /// A coding agent's model call went through its gateway: path, status, tokens, duration.
        CodingModelCall => "coding_agent_model_call",
        /// A conversation's session could not be resumed; the agent starts a new one (why).
        CodingSessionRestarted => "coding_agent_session_restarted",
        /// A coding agent ended: its CLI's session id, the files it changed, the branch and commit
        /// pushed (or why the push failed), the model calls and tokens it spent.
        CodingAgentFinished => "coding_agent_finished",
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_name_no_version_wrote_is_no_journal_event() {
        assert_eq!(JournalEvent::parse("agent_invocation_exploded"), None);
        assert_eq!(JournalEvent::parse("RUN_CREATED"), None);
    }
}
