//! Journal event names, as in the reference runtime (seed 000, section 9).

pub const RUN_CREATED: &str = "run_created";
pub const PROFILE_RESOLVED: &str = "profile_resolved";
pub const RUN_COMPLETED: &str = "run_completed";
pub const RUN_FAILED: &str = "run_failed";
pub const RUN_CANCELLED: &str = "run_cancelled";
/// An operator retried a failed run (`baton runs retry`); the payload has its attempt.
pub const RUN_RETRIED: &str = "run_retried";
pub const WORKSPACE_INITIALIZED: &str = "workspace_initialized";
pub const CONTEXT_ASSEMBLED: &str = "context_assembled";
pub const SKILL_SCOPES_RESOLVED: &str = "skill_scopes_resolved";
pub const MODEL_BINDING_RESOLVED: &str = "agent_model_binding_resolved";
pub const INVOCATION_CREATED: &str = "agent_invocation_created";
pub const INVOCATION_STARTED: &str = "agent_invocation_started";
pub const INVOCATION_COMPLETED: &str = "agent_invocation_completed";
pub const INVOCATION_FAILED: &str = "agent_invocation_failed";
pub const INVOCATION_TRANSFERRED: &str = "agent_invocation_transferred";
pub const LOOP_FINISHED: &str = "agent_loop_finished";
pub const TASK_REGISTERED: &str = "agent_task_registered";
pub const TASK_STARTED: &str = "agent_task_started";
pub const TASK_COMPLETED: &str = "agent_task_completed";
pub const TASK_FAILED: &str = "agent_task_failed";
pub const HANDOFF_REQUESTED: &str = "agent_handoff_requested";
pub const HANDOFF_ACCEPTED: &str = "agent_handoff_accepted";
pub const MODEL_RESPONSE_STORED: &str = "model_response_stored";
pub const TOOL_CALL_COMPLETED: &str = "tool_call_completed";
pub const TOOL_CALL_FAILED: &str = "tool_call_failed";
pub const WORKSPACE_FILE_WRITTEN: &str = "workspace_file_written";
pub const WORKSPACE_PATCH_APPLIED: &str = "workspace_patch_applied";
pub const CHAT_COMMIT_COMPLETED: &str = "chat_commit_completed";
pub const CLAIM_FENCED: &str = "claim_fenced";
pub const RUN_CANCEL_REQUESTED: &str = "run_cancel_requested";
pub const INVOCATION_CANCELLED: &str = "agent_invocation_cancelled";
pub const INVOCATION_PARKED: &str = "agent_invocation_parked";
pub const INVOCATION_WOKEN: &str = "agent_invocation_woken";
pub const CHILD_INVOCATION_FAILED: &str = "agent_child_invocation_failed";
pub const TASK_CANCELLED: &str = "agent_task_cancelled";
pub const DELEGATE_STARTED: &str = "agent_delegate_started";
pub const AWAIT_STARTED: &str = "agent_await_started";
pub const AWAIT_COMPLETED: &str = "agent_await_completed";
pub const ASK_USER_STARTED: &str = "ask_user_started";
pub const ASK_USER_ANSWERED: &str = "ask_user_answered";
pub const ASK_USER_TIMED_OUT: &str = "ask_user_timed_out";
pub const TASK_RETURN_RECORDED: &str = "task_return_recorded";
pub const HOST_ERROR: &str = "host_error";
/// A run reached one of its budget's limits; the payload carries the spend.
pub const RUN_BUDGET_EXHAUSTED: &str = "run_budget_exhausted";
pub const EXTERNAL_AGENT_RERUN: &str = "external_agent_rerun";
/// A message of the run that the broker could never take (too big, refused):
/// moved to the dead-letter queue, with the reason.
pub const MESSAGE_DEAD_LETTERED: &str = "message_dead_lettered";
/// A model call waits its turn under a fleet-wide limit (`[[limits]]`):
/// the limit's name and why (`requests_per_minute`, `tokens_per_minute`,
/// `concurrent_calls`, `retry_after`). Waiting, not failing.
pub const MODEL_CALL_WAITING: &str = "model_call_waiting";
/// A model call that waited under a limit may go: how long it waited (`waitedMs`).
pub const MODEL_CALL_THROTTLED: &str = "model_call_throttled";
