//! The fleet's wire vocabulary: the logical queues (docs/bridge-protocol.md#queues) and the
//! internal messages that travel on them. Internal messages carry ids only:
//! Postgres is the source of truth, a message only says "look at this row now".
//!
//! A deployment's prefix (one per test) is the bus's business; the names
//! here are the logical ones, the same on every broker.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::protocol::request::Priority;
use crate::run::state::InvocationKind;
use crate::wire_enum;

/// The exchange the fleet's queues dead-letter to (a fanout to the two dead-letter queues).
pub const DEAD_LETTER_EXCHANGE: &str = "baton.dlx";

/// The direct exchange bridges may publish their messages to (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other),
/// with [`BRIDGE_ROUTING_KEY`]: it routes to `baton.bridge.requests`, so a
/// bridge's RabbitMQ user needs write access to this exchange alone.
pub const BRIDGE_EXCHANGE: &str = "baton.bridge";
pub const BRIDGE_ROUTING_KEY: &str = "requests";

/// A queue the fleet reads or writes, by its logical name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    /// `HandoffRequest`s from bridges, read by intake.
    BridgeRequests,
    /// Statuses and replies for requests without `reply_to`.
    BridgeReplies,
    /// "Run invocation X": root and handoff stages.
    InvocationsHandoff,
    /// "Run invocation X": delegated children, and parked parents' wake-ups.
    InvocationsDelegate,
    /// [`Queue::InvocationsHandoff`] for runs of `high` priority.
    InvocationsHandoffHigh,
    /// [`Queue::InvocationsHandoff`] for runs of `low` priority.
    InvocationsHandoffLow,
    /// [`Queue::InvocationsDelegate`] for runs of `high` priority.
    InvocationsDelegateHigh,
    /// [`Queue::InvocationsDelegate`] for runs of `low` priority.
    InvocationsDelegateLow,
    /// "Run X reached a terminal or blocked state", read by the collector.
    RunsFinished,
    /// Everything rejected, with the reason in `x-baton-error`, for operators.
    Dead,
    /// A second copy of everything the broker itself dead-letters (through
    /// [`DEAD_LETTER_EXCHANGE`]: a delivery limit reached), which intake
    /// reads to answer bridge requests that met it. Operators keep reading [`Queue::Dead`].
    DeadRequests,
}

impl Queue {
    /// Every queue the fleet reads or writes.
    pub const ALL: [Queue; 11] = [
        Queue::BridgeRequests,
        Queue::BridgeReplies,
        Queue::InvocationsHandoff,
        Queue::InvocationsDelegate,
        Queue::InvocationsHandoffHigh,
        Queue::InvocationsHandoffLow,
        Queue::InvocationsDelegateHigh,
        Queue::InvocationsDelegateLow,
        Queue::RunsFinished,
        Queue::Dead,
        Queue::DeadRequests,
    ];

    /// The logical name, as in docs/bridge-protocol.md#queues.
    pub fn as_str(self) -> &'static str {
        match self {
            Queue::BridgeRequests => "baton.bridge.requests",
            Queue::BridgeReplies => "baton.bridge.replies",
            Queue::InvocationsHandoff => "baton.invocations.handoff",
            Queue::InvocationsDelegate => "baton.invocations.delegate",
            Queue::InvocationsHandoffHigh => "baton.invocations.handoff.high",
            Queue::InvocationsHandoffLow => "baton.invocations.handoff.low",
            Queue::InvocationsDelegateHigh => "baton.invocations.delegate.high",
            Queue::InvocationsDelegateLow => "baton.invocations.delegate.low",
            Queue::RunsFinished => "baton.runs.finished",
            Queue::Dead => "baton.dead",
            Queue::DeadRequests => "baton.dead.requests",
        }
    }

    /// A dead-letter queue: what reaches it stays until someone reads it,
    /// so it has no delivery limit and no dead-letter exchange of its own.
    pub fn is_dead_letter(self) -> bool {
        matches!(self, Queue::Dead | Queue::DeadRequests)
    }

    /// The invocation queue of one kind (`handoff`: root and handoff stages;
    /// `delegate`: children and wake-ups) at one priority. Normal keeps the
    /// contract's names; high and low have queues of their own, because
    /// quorum queues order no messages by priority before RabbitMQ 4.0.
    pub fn invocations(delegate: bool, priority: Priority) -> Queue {
        match (delegate, priority) {
            (false, Priority::High) => Queue::InvocationsHandoffHigh,
            (false, Priority::Normal) => Queue::InvocationsHandoff,
            (false, Priority::Low) => Queue::InvocationsHandoffLow,
            (true, Priority::High) => Queue::InvocationsDelegateHigh,
            (true, Priority::Normal) => Queue::InvocationsDelegate,
            (true, Priority::Low) => Queue::InvocationsDelegateLow,
        }
    }

    /// An invocation queue's kind (`true`: delegate) and priority; `None`
    /// for the other queues.
    pub fn invocation_lane(self) -> Option<(bool, Priority)> {
        let lanes = [false, true].into_iter().flat_map(|d| Priority::ALL.map(|p| (d, p)));
        lanes.into_iter().find(|(d, p)| Queue::invocations(*d, *p) == self)
    }
}

wire_enum! {
    /// The two kinds of invocation queue, by the names `BATON_INVOCATION_QUEUES`
    /// takes: a worker consumes a kind at every priority, so foreground and
    /// delegated work can be scaled apart.
    pub enum InvocationQueue {
        /// Root and handoff stages (`baton.invocations.handoff`, and its `.high` and `.low`).
        Handoff => "handoff",
        /// Delegated children and parked parents' wake-ups (`baton.invocations.delegate`, …).
        Delegate => "delegate",
    }
}

impl InvocationQueue {
    /// This kind's queue at `priority`.
    pub fn at(self, priority: Priority) -> Queue {
        Queue::invocations(self == InvocationQueue::Delegate, priority)
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of "run (or resume) this invocation", also a parked parent's wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInvocation {
    pub invocation_id: Uuid,
    pub run_id: Uuid,
}

/// The body of "this run reached a terminal state".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFinished {
    pub run_id: Uuid,
}

/// A message one part of the fleet sends another through the outbox. Each
/// knows its queue and its body; consumers read the body back as
/// [`RunInvocation`] or [`RunFinished`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetMessage {
    /// Run (or resume) this invocation: a root or handoff stage goes to the
    /// handoff queue, a delegated child to the delegate queue.
    Run { invocation: RunInvocation, kind: InvocationKind },
    /// A parked parent's wait may be over: run it again (delegate queue).
    Wake(RunInvocation),
    /// The run reached a terminal state: the collector replies to the bridge.
    Finished(RunFinished),
}

impl FleetMessage {
    pub fn run(run_id: Uuid, invocation_id: Uuid, kind: InvocationKind) -> Self {
        FleetMessage::Run { invocation: RunInvocation { invocation_id, run_id }, kind }
    }

    pub fn wake(run_id: Uuid, parent: Uuid) -> Self {
        FleetMessage::Wake(RunInvocation { invocation_id: parent, run_id })
    }

    pub fn finished(run_id: Uuid) -> Self {
        FleetMessage::Finished(RunFinished { run_id })
    }

    /// The queue the message travels on.
    pub fn queue(&self) -> Queue {
        match self {
            FleetMessage::Run { kind: InvocationKind::Child, .. } | FleetMessage::Wake(_) => Queue::InvocationsDelegate,
            FleetMessage::Run { .. } => Queue::InvocationsHandoff,
            FleetMessage::Finished(_) => Queue::RunsFinished,
        }
    }

    /// The queue the message travels on for a run of `priority`: a run's
    /// invocations (stages, children, wake-ups) all take its priority.
    pub fn queue_at(&self, priority: Priority) -> Queue {
        match self.queue().invocation_lane() {
            Some((delegate, _)) => Queue::invocations(delegate, priority),
            None => self.queue(),
        }
    }

    /// The run whose priority decides this message's queue (`None`: the
    /// message is no invocation's and has one queue).
    pub fn prioritized_run(&self) -> Option<Uuid> {
        match self {
            FleetMessage::Run { invocation, .. } | FleetMessage::Wake(invocation) => Some(invocation.run_id),
            FleetMessage::Finished(_) => None,
        }
    }

    /// The JSON body: `{"invocationId", "runId"}` or `{"runId"}`.
    pub fn body(&self) -> Value {
        let body = match self {
            FleetMessage::Run { invocation, .. } | FleetMessage::Wake(invocation) => serde_json::to_value(invocation),
            FleetMessage::Finished(finished) => serde_json::to_value(finished),
        };
        body.expect("a struct of ids serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queues_keep_their_contract_names() {
        let names: Vec<&str> = Queue::ALL.iter().map(|q| q.as_str()).collect();
        assert_eq!(
            names,
            [
                "baton.bridge.requests",
                "baton.bridge.replies",
                "baton.invocations.handoff",
                "baton.invocations.delegate",
                "baton.invocations.handoff.high",
                "baton.invocations.handoff.low",
                "baton.invocations.delegate.high",
                "baton.invocations.delegate.low",
                "baton.runs.finished",
                "baton.dead",
                "baton.dead.requests",
            ]
        );
        assert_eq!(Queue::Dead.to_string(), "baton.dead");
        let dead: Vec<Queue> = Queue::ALL.into_iter().filter(|q| q.is_dead_letter()).collect();
        assert_eq!(dead, [Queue::Dead, Queue::DeadRequests]);
    }

    #[test]
    fn each_message_knows_its_queue() {
        let (run, inv) = (Uuid::now_v7(), Uuid::now_v7());
        assert_eq!(FleetMessage::run(run, inv, InvocationKind::Root).queue(), Queue::InvocationsHandoff);
        assert_eq!(FleetMessage::run(run, inv, InvocationKind::Handoff).queue(), Queue::InvocationsHandoff);
        assert_eq!(FleetMessage::run(run, inv, InvocationKind::Child).queue(), Queue::InvocationsDelegate);
        assert_eq!(FleetMessage::wake(run, inv).queue(), Queue::InvocationsDelegate);
        assert_eq!(FleetMessage::finished(run).queue(), Queue::RunsFinished);
    }

    #[test]
    fn a_runs_priority_picks_its_invocation_queues_and_nothing_else() {
        let (run, inv) = (Uuid::now_v7(), Uuid::now_v7());
        let root = FleetMessage::run(run, inv, InvocationKind::Root);
        assert_eq!(root.queue_at(Priority::High).as_str(), "baton.invocations.handoff.high");
        assert_eq!(root.queue_at(Priority::Normal), Queue::InvocationsHandoff);
        assert_eq!(root.queue_at(Priority::Low).as_str(), "baton.invocations.handoff.low");
        assert_eq!(
            FleetMessage::run(run, inv, InvocationKind::Child).queue_at(Priority::High),
            Queue::InvocationsDelegateHigh
        );
        assert_eq!(FleetMessage::wake(run, inv).queue_at(Priority::Low), Queue::InvocationsDelegateLow);
        assert_eq!(FleetMessage::finished(run).queue_at(Priority::High), Queue::RunsFinished);
        assert_eq!(FleetMessage::finished(run).prioritized_run(), None);
        assert_eq!(root.prioritized_run(), Some(run));
        let lanes: Vec<Queue> = Queue::ALL.into_iter().filter(|q| q.invocation_lane().is_some()).collect();
        assert_eq!(lanes.len(), 6);
        assert_eq!(Queue::InvocationsDelegateHigh.invocation_lane(), Some((true, Priority::High)));
    }

    #[test]
    fn each_kind_of_invocation_queue_has_one_queue_per_priority() {
        let names: Vec<&str> = InvocationQueue::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, ["handoff", "delegate"]);
        for kind in InvocationQueue::ALL {
            assert_eq!(InvocationQueue::parse(kind.as_str()), Some(kind));
            for priority in Priority::ALL {
                let lane = kind.at(priority).invocation_lane();
                assert_eq!(lane, Some((kind == InvocationQueue::Delegate, priority)));
            }
        }
        assert_eq!(InvocationQueue::Handoff.at(Priority::Normal), Queue::InvocationsHandoff);
    }

    #[test]
    fn bodies_carry_ids_only_and_read_back() {
        let (run, inv) = (Uuid::now_v7(), Uuid::now_v7());
        let body = FleetMessage::run(run, inv, InvocationKind::Child).body();
        assert_eq!(body, json!({"invocationId": inv.to_string(), "runId": run.to_string()}));
        assert_eq!(
            serde_json::from_value::<RunInvocation>(body).unwrap(),
            RunInvocation { invocation_id: inv, run_id: run }
        );
        assert_eq!(
            FleetMessage::wake(run, inv).body(),
            json!({"invocationId": inv.to_string(), "runId": run.to_string()})
        );
        let body = FleetMessage::finished(run).body();
        assert_eq!(body, json!({"runId": run.to_string()}));
        assert_eq!(serde_json::from_value::<RunFinished>(body).unwrap(), RunFinished { run_id: run });
    }
}
