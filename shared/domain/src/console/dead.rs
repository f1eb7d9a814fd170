//! Which dead letters a Replay can help. A replay republishes the copy kept
//! in `baton.dead` to its queue as it is, so it is offered only where that
//! copy, sent again, can be taken: not a body its consumer cannot read, nor
//! a request intake refused (and already answered `failed`), nor a copy cut
//! or redacted for the operator's eyes. The bus's `dead::replay` applies
//! this to every replay, the console's and `baton dead replay`'s, so what the
//! page offers and what a replay takes are one decision; `--force` keeps only
//! [`reachable`].

use crate::fleet::Queue;

/// What a dead letter's reason says happened, by the codes of
/// `baton_dead_letters_total` (`malformed`, `refused`, `unprocessable`,
/// the relay's `unpublishable` split by why) and the broker's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The body is not the message its queue's consumer reads.
    Malformed,
    /// Intake refused a bridge's message (and told the bridge when it could).
    Refused,
    /// Its consumer read it but could not process it.
    Unprocessable,
    /// The relay could not send it: larger than `BATON_MAX_MESSAGE_BYTES`.
    TooLarge,
    /// The relay's mandatory publish found no queue of that name.
    NoQueue,
    /// The broker closed the channel over this very message.
    BrokerRefused,
    /// The broker dead-lettered it (a delivery limit reached, say).
    Broker,
}

impl Cause {
    /// Reads a dead letter's reason; `from` is the logical queue it came
    /// from, when it is one of the fleet's.
    pub fn of(from: Option<Queue>, reason: &str) -> Self {
        if reason.starts_with("dead-lettered by the broker") {
            Cause::Broker
        } else if from == Some(Queue::BridgeRequests) {
            Cause::Refused
        } else if reason.starts_with("not a ") || reason.starts_with("not an ") || reason.contains("is not JSON") {
            Cause::Malformed
        } else if reason.starts_with("the message is ") && reason.contains("over the limit") {
            Cause::TooLarge
        } else if reason.starts_with("no queue took the message") {
            Cause::NoQueue
        } else if reason.starts_with("the broker closed the channel") {
            Cause::BrokerRefused
        } else {
            Cause::Unprocessable
        }
    }
}

/// Where a replay would publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// No queue is recorded.
    Unknown,
    /// One of the fleet's queues.
    Fleet(Queue),
    /// Another queue: a bridge's reply queue when `named` (a stored request
    /// named it as its `reply_to`), else one a replay must not reach.
    Other { named: bool },
}

/// Whether the console offers Replay, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    Offered,
    Withheld(&'static str),
}

/// Whether a replay may go to `to` at all, whatever the letter: a queue is
/// recorded, it is not a dead-letter queue, and it is the fleet's or a stored
/// request's `reply_to`. This alone holds for a forced replay
/// (`baton dead replay --force`); [`replay`] starts with it.
pub fn reachable(to: Destination) -> Replay {
    use Replay::{Offered, Withheld};
    match to {
        Destination::Unknown => Withheld("no queue is recorded, so there is nowhere to replay it"),
        Destination::Fleet(q) if q.is_dead_letter() => Withheld("it came from a dead-letter queue"),
        Destination::Other { named: false } => {
            Withheld("its queue is neither the fleet's nor a reply queue a stored request named")
        }
        Destination::Fleet(_) | Destination::Other { named: true } => Offered,
    }
}

/// Decides Replay for a letter going to `to` for `cause`; `cut` says the
/// copy kept is not the whole message (the relay cut it, or dropped its body).
/// The console's Replay and Replay all, and `baton dead replay`, take only
/// the letters this offers.
pub fn replay(to: Destination, cause: Cause, cut: bool) -> Replay {
    use Replay::{Offered, Withheld};
    if let Withheld(why) = reachable(to) {
        return Withheld(why);
    }
    if cut {
        return Withheld("the copy kept is cut: replayed, it would not be the message that was sent");
    }
    match (cause, to) {
        (Cause::Malformed, _) => {
            Withheld("its body is not a message its queue's consumer reads: it would be refused again")
        }
        (Cause::Refused, _) => Withheld(
            "intake refused it and answered the bridge `failed`; the copy kept is redacted, and would be refused again",
        ),
        (Cause::Broker, Destination::Fleet(Queue::BridgeRequests)) => {
            Withheld("intake took the broker's copy from baton.dead.requests and ran or refused it already")
        }
        (Cause::TooLarge, _) => Withheld("it is over the message size limit: it would be refused again"),
        (Cause::BrokerRefused, _) => Withheld("the broker refused this message itself: it would refuse it again"),
        (Cause::Broker | Cause::NoQueue | Cause::Unprocessable, _) => Offered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offered(from: Option<Queue>, reason: &str) -> bool {
        let to = from.map_or(Destination::Unknown, Destination::Fleet);
        replay(to, Cause::of(from, reason), false) == Replay::Offered
    }

    #[test]
    fn reasons_read_as_the_metric_codes_and_the_relays_causes() {
        let finished = Some(Queue::RunsFinished);
        assert_eq!(Cause::of(finished, "not a run-finished message: expected value"), Cause::Malformed);
        assert_eq!(Cause::of(Some(Queue::InvocationsHandoff), "not an invocation message: eof"), Cause::Malformed);
        assert_eq!(Cause::of(Some(Queue::BridgeRequests), "body is not JSON: expected value"), Cause::Refused);
        assert_eq!(Cause::of(Some(Queue::BridgeRequests), "conflicting_duplicate: a request …"), Cause::Refused);
        assert_eq!(Cause::of(finished, "could not collect the run: a corrupt row"), Cause::Unprocessable);
        assert_eq!(
            Cause::of(None, "the message is 9000 bytes, over the limit of 4096 (BATON_MAX_MESSAGE_BYTES)"),
            Cause::TooLarge
        );
        assert_eq!(Cause::of(None, "no queue took the message for `wechat.replies` (312 NO_ROUTE)"), Cause::NoQueue);
        assert_eq!(Cause::of(None, "the broker closed the channel: 406 PRECONDITION_FAILED"), Cause::BrokerRefused);
        let broker = "dead-lettered by the broker: delivery_limit";
        assert_eq!(Cause::of(Some(Queue::BridgeRequests), broker), Cause::Broker);
    }

    #[test]
    fn replay_is_offered_only_where_the_copy_can_be_taken() {
        let broker = "dead-lettered by the broker: delivery_limit";
        assert!(offered(Some(Queue::InvocationsHandoff), broker), "a delivery limit on a hint");
        assert!(offered(Some(Queue::RunsFinished), "could not collect the run: a corrupt row"), "once fixed");
        assert!(!offered(Some(Queue::RunsFinished), "not a run-finished message: eof"), "malformed again");
        assert!(!offered(Some(Queue::BridgeRequests), "body is not JSON: eof"), "refused again");
        assert!(!offered(Some(Queue::BridgeRequests), broker), "intake handled the broker's copy");
        assert!(!offered(None, "could not collect the run"), "nowhere to go");
        assert!(!offered(Some(Queue::Dead), "could not collect the run"), "not into a dead-letter queue");
        let no_queue = Cause::of(None, "no queue took the message for `wechat.replies` (312 NO_ROUTE)");
        assert_eq!(replay(Destination::Other { named: true }, no_queue, false), Replay::Offered, "its queue came back");
        assert!(matches!(replay(Destination::Other { named: false }, no_queue, false), Replay::Withheld(_)));
        assert!(
            matches!(replay(Destination::Other { named: true }, no_queue, true), Replay::Withheld(_)),
            "a cut copy"
        );
        let big = Cause::of(None, "the message is 9000 bytes, over the limit of 4096 (BATON_MAX_MESSAGE_BYTES)");
        assert!(matches!(replay(Destination::Fleet(Queue::BridgeReplies), big, false), Replay::Withheld(_)));
        let refused = Cause::BrokerRefused;
        assert!(matches!(replay(Destination::Fleet(Queue::BridgeReplies), refused, false), Replay::Withheld(_)));
    }

    #[test]
    fn a_forced_replay_still_goes_only_where_a_replay_may() {
        assert_eq!(reachable(Destination::Fleet(Queue::BridgeRequests)), Replay::Offered, "refused, but reachable");
        assert_eq!(reachable(Destination::Other { named: true }), Replay::Offered);
        for never in [Destination::Unknown, Destination::Fleet(Queue::Dead), Destination::Other { named: false }] {
            assert!(matches!(reachable(never), Replay::Withheld(_)), "{never:?}");
        }
    }
}
