//! The state machines of runs, invocations and tasks.
//!
//! Each status is stored as text in Postgres; the transitions allowed here are
//! the only ones the store ever asks for, and every write is conditional on the
//! current status, so a transition that is not listed cannot happen.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::wire_enum;

wire_enum! {
    /// Where an invocation sits in its run.
    pub enum InvocationKind { Root => "root", Handoff => "handoff", Child => "child" }
}

wire_enum! {
    /// The life of one agent invocation.
    pub enum InvocationStatus {
        Created => "created",
        Running => "running",
        Parked => "parked",
        Transferred => "transferred",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

wire_enum! {
    /// What an invocation may do to end: finish the run, or return to a parent.
    pub enum ExitPolicy { RunFinishAllowed => "run_finish_allowed", TaskReturnRequired => "task_return_required" }
}

wire_enum! {
    /// How a task's result flows: control passes on, or comes back.
    pub enum Continuation { TransferControl => "transfer_control", ReturnToParent => "return_to_parent" }
}

wire_enum! {
    /// The life of one task (a handoff stage or a delegated job).
    pub enum TaskStatus {
        Queued => "queued",
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

wire_enum! {
    /// The life of a run.
    pub enum RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

wire_enum! {
    /// A run as operators see it: its [`RunStatus`], except that a running
    /// run waiting on the user's answer to an `ask_user` question is
    /// `blocked` (no worker holds it, and it is still live). Derived when
    /// read, never stored: the state machine has no such state to move through.
    pub enum RunState {
        Running => "running",
        Blocked => "blocked",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl RunState {
    /// Ended: nothing about it changes any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Completed | RunState::Failed | RunState::Cancelled)
    }

    /// The state of a run of `status`, `waiting` on a question or not.
    pub fn of(status: RunStatus, waiting: bool) -> Self {
        match status {
            RunStatus::Running if waiting => RunState::Blocked,
            RunStatus::Running => RunState::Running,
            RunStatus::Completed => RunState::Completed,
            RunStatus::Failed => RunState::Failed,
            RunStatus::Cancelled => RunState::Cancelled,
        }
    }
}

impl InvocationKind {
    /// Root and handoff stages own the run's foreground; children never do.
    pub fn is_foreground(self) -> bool {
        !matches!(self, InvocationKind::Child)
    }

    pub fn exit_policy(self) -> ExitPolicy {
        if self.is_foreground() {
            ExitPolicy::RunFinishAllowed
        } else {
            ExitPolicy::TaskReturnRequired
        }
    }
}

impl InvocationStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Transferred | Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The statuses an invocation can still leave (created, running, parked).
    pub fn live() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|s| !s.is_terminal())
    }

    /// The invocation state machine (see the diagram in docs/concepts.md#state-machines).
    pub fn can_become(self, next: Self) -> bool {
        use InvocationStatus::*;
        match (self, next) {
            (Created, Running | Failed | Cancelled) => true,
            (Running, Running) => true, // a takeover after an expired lease
            (Running, Parked | Transferred | Completed | Failed | Cancelled) => true,
            (Parked, Running | Failed | Cancelled) => true,
            _ => false,
        }
    }
}

impl TaskStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The statuses a task can still leave (queued, running).
    pub fn unfinished() -> impl Iterator<Item = Self> {
        Self::ALL.into_iter().filter(|s| !s.is_terminal())
    }

    /// The task state machine: queued → running → one terminal state, which is final.
    pub fn can_become(self, next: Self) -> bool {
        use TaskStatus::*;
        matches!((self, next), (Queued, Running | Failed | Cancelled) | (Running, Completed | Failed | Cancelled))
    }
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Running)
    }
}

wire_enum! {
    /// Who cancelled a run, stored with the cancel (`by`).
    pub enum CancelledBy {
        /// An operator, with a Cancel button of the console (a run's page, a handoff's).
        Console => "console",
        /// An operator, with `baton runs cancel` or `baton handoff cancel`.
        Cli => "cli",
        /// An operator who cancelled the run's handoff by hand: stored
        /// before a handoff's cancel was told apart as `console` or `cli`.
        Operator => "operator",
        /// The bridge, with a cancel message from the user's chat.
        Bridge => "bridge",
        /// The user sent a new request in the same chat, which replaces this one.
        NewRequest => "new_request",
    }
}

impl CancelledBy {
    /// Who it was, for people: "an operator in the console".
    pub fn describe(self) -> &'static str {
        match self {
            CancelledBy::Console => "an operator in the console",
            CancelledBy::Cli => "an operator on the command line",
            CancelledBy::Operator => "an operator, who cancelled its handoff by hand",
            CancelledBy::Bridge => "the bridge, on the user's cancel message",
            CancelledBy::NewRequest => "a new request in the same chat",
        }
    }
}

/// Why a run, an invocation or a task failed or was cancelled, as stored
/// with it: a code, a message for people, and any figures behind it (a spent
/// budget's limit, say).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub code: String,
    pub message: String,
    #[serde(flatten)]
    pub details: Map<String, Value>,
}

impl Failure {
    /// The key of a run's failure that holds the host's own words for what
    /// went wrong (a model endpoint's HTTP status and body, say), for
    /// operators: the bridge reads `message` only.
    pub const CAUSE: &'static str = "cause";

    /// The failure as the JSON it is stored as.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a failure always serializes")
    }

    /// Why it failed, for an operator: the recorded cause, else the message.
    pub fn reason(&self) -> &str {
        self.details.get(Self::CAUSE).and_then(Value::as_str).unwrap_or(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_run_waiting_on_a_question_is_blocked() {
        assert_eq!(RunState::of(RunStatus::Running, true), RunState::Blocked);
        assert_eq!(RunState::of(RunStatus::Running, false), RunState::Running);
        assert_eq!(RunState::of(RunStatus::Cancelled, true), RunState::Cancelled);
        assert_eq!(RunState::parse("blocked"), Some(RunState::Blocked));
    }

    #[test]
    fn a_failures_reason_is_its_cause_when_one_was_recorded() {
        let plain: Failure =
            serde_json::from_value(serde_json::json!({"code": "failed", "message": "it broke"})).unwrap();
        assert_eq!(plain.reason(), "it broke");
        let caused: Failure = serde_json::from_value(
            serde_json::json!({"code": "model_unavailable", "message": "the model did not answer", "cause": "HTTP 500: overloaded"}),
        )
        .unwrap();
        assert_eq!(caused.reason(), "HTTP 500: overloaded");
        assert_eq!(caused.to_value()["cause"], "HTTP 500: overloaded", "the cause is kept where it is stored");
    }

    #[test]
    fn statuses_round_trip_through_their_text() {
        for s in [
            InvocationStatus::Created,
            InvocationStatus::Running,
            InvocationStatus::Parked,
            InvocationStatus::Transferred,
            InvocationStatus::Completed,
            InvocationStatus::Failed,
            InvocationStatus::Cancelled,
        ] {
            assert_eq!(InvocationStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(TaskStatus::parse("queued"), Some(TaskStatus::Queued));
        assert_eq!(InvocationKind::parse("nope"), None);
        assert_eq!(
            InvocationStatus::live().collect::<Vec<_>>(),
            [InvocationStatus::Created, InvocationStatus::Running, InvocationStatus::Parked]
        );
        assert_eq!(TaskStatus::unfinished().collect::<Vec<_>>(), [TaskStatus::Queued, TaskStatus::Running]);
    }

    #[test]
    fn a_failure_keeps_its_figures_through_json() {
        let stored = serde_json::json!({"code": "budget_exhausted", "message": "m", "limit": "tokens", "max": 5});
        let failure: Failure = serde_json::from_value(stored.clone()).unwrap();
        assert_eq!(failure.code, "budget_exhausted");
        assert_eq!(failure.to_value(), stored);
        assert!(serde_json::from_value::<Failure>(serde_json::json!({"message": "no code"})).is_err());
    }

    #[test]
    fn terminal_invocations_never_move_again() {
        use InvocationStatus::*;
        for from in [Transferred, Completed, Failed, Cancelled] {
            for to in [Created, Running, Parked, Transferred, Completed, Failed, Cancelled] {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
        assert!(Created.can_become(Running));
        assert!(Running.can_become(Transferred));
        assert!(!Created.can_become(Transferred));
    }

    #[test]
    fn a_terminal_task_is_final() {
        assert!(TaskStatus::Queued.can_become(TaskStatus::Running));
        assert!(TaskStatus::Running.can_become(TaskStatus::Completed));
        assert!(!TaskStatus::Completed.can_become(TaskStatus::Failed));
        assert!(!TaskStatus::Queued.can_become(TaskStatus::Completed));
    }

    #[test]
    fn only_children_must_return_to_a_parent() {
        assert_eq!(InvocationKind::Root.exit_policy(), ExitPolicy::RunFinishAllowed);
        assert_eq!(InvocationKind::Handoff.exit_policy(), ExitPolicy::RunFinishAllowed);
        assert_eq!(InvocationKind::Child.exit_policy(), ExitPolicy::TaskReturnRequired);
    }
}
