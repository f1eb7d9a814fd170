//! The state machines of runs, invocations and tasks.
//!
//! Each status is stored as text in Postgres; the transitions allowed here are
//! the only ones the store ever asks for, and every write is conditional on the
//! current status, so a transition that is not listed cannot happen.

use serde::{Deserialize, Serialize};

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_enum!(
    /// Where an invocation sits in its run.
    InvocationKind { Root => "root", Handoff => "handoff", Child => "child" }
);

text_enum!(
    /// The life of one agent invocation.
    InvocationStatus {
        Created => "created",
        Running => "running",
        Parked => "parked",
        Transferred => "transferred",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

text_enum!(
    /// What an invocation may do to end: finish the run, or return to a parent.
    ExitPolicy { RunFinishAllowed => "run_finish_allowed", TaskReturnRequired => "task_return_required" }
);

text_enum!(
    /// How a task's result flows: control passes on, or comes back.
    Continuation { TransferControl => "transfer_control", ReturnToParent => "return_to_parent" }
);

text_enum!(
    /// The life of one task (a handoff stage or a delegated job).
    TaskStatus {
        Queued => "queued",
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

text_enum!(
    /// The life of a run.
    RunStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
);

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
        matches!(
            self,
            Self::Transferred | Self::Completed | Self::Failed | Self::Cancelled
        )
    }

    /// The invocation state machine (see the README's diagram).
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

#[cfg(test)]
mod tests {
    use super::*;

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
