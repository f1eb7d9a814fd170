//! A handoff's own log (the `type` of a row in `handoff_events`): what
//! became of a bridge's request, beside the run journal
//! ([`crate::run::journal::JournalEvent`]), which says what its agents did.
//! Operators read it (`baton handoff show`, the console's run page) and so
//! do outside checks, so every name is one [`HandoffEvent`] and writers take
//! the enum. A stored row keeps its name as a string: one this version does
//! not know still reads. `run_retried` is in both logs: the journal's is the
//! run's, this one the handoff's.

use crate::wire_enum;

wire_enum! {
    /// What became of a handoff: one row of its log.
    pub enum HandoffEvent {
        /// The request was stored, with its status (`requested` or `draft`).
        Created => "created",
        /// The request's context, after the disclosure policy, is stored for its agents.
        ContextPackaged => "context_packaged",
        /// The request went to its root agent (the message is the profile's id).
        Sent => "sent",
        /// The request was accepted: its run started, or it waits for its chat's turn.
        Accepted => "accepted",
        /// A status went to the bridge, with its note.
        StatusChanged => "status_changed",
        /// An agent's question went to the bridge (the message is its id); the handoff is `blocked`.
        QuestionSent => "question_sent",
        /// The user's answer to a question was applied.
        AnswerReceived => "answer_received",
        /// The same answer (by id) came again; nothing changed.
        AnswerDuplicate => "answer_duplicate",
        /// An answer changed nothing (an unknown or closed question, an ended run), and why.
        AnswerIgnored => "answer_ignored",
        /// An operator answered a question in the console, and what became of it.
        OperatorAnswered => "operator_answered",
        /// A bridge's cancel stopped the run, or the request before it ran.
        CancelReceived => "cancel_received",
        /// The same cancel (by id) came again; nothing changed.
        CancelDuplicate => "cancel_duplicate",
        /// A cancel came after the handoff or its run had ended; nothing changed.
        CancelIgnored => "cancel_ignored",
        /// The request waits for its chat's live run to end (the strategy, its place).
        Queued => "queued",
        /// The run completed; its reply goes to the bridge.
        ResultReceived => "result_received",
        /// The handoff failed (no agent, a busy chat, the run's failure), with why.
        Failed => "failed",
        /// A request without a run was cancelled (it waited for its turn, or its cancel came first),
        /// or an operator cancelled a manual handoff (the message says who: `by console: …`, `by cli: …`).
        Cancelled => "cancelled",
        /// The final reply was queued for the bridge, with its status.
        ReplySent => "reply_sent",
        /// The disclosure policy removed something from the request or an answer: what, and why.
        DisclosureFiltered => "disclosure_filtered",
        /// The broker had dead-lettered this request; intake took it from `baton.dead.requests`.
        DeadLetterRecovered => "dead_letter_recovered",
        /// An invalid body with this stored request's id was ignored; the request stands.
        InvalidRedelivery => "invalid_redelivery",
        /// A redelivery of this id whose body differs from the stored request was
        /// dead-lettered (`conflicting_duplicate`); the request stands.
        ConflictingDuplicate => "conflicting_duplicate",
        /// A status callback will not be delivered (refused or given up), and why.
        CallbackFailed => "callback_failed",
        /// A message to the bridge was over the size bound and was sent cut (the full text is kept).
        MessageCut => "message_cut",
        /// The bridge's queue refused a message for now; the relay retries it.
        DeliveryDelayed => "delivery_delayed",
        /// A message to the bridge could never be delivered: dead-lettered, with the reason.
        DeliveryFailed => "delivery_failed",
        /// An operator retried the handoff's failed run (`baton runs retry`), with its attempt.
        RunRetried => "run_retried",
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::run::journal::JournalEvent;

    #[test]
    fn only_a_retried_run_is_in_both_logs() {
        let both: Vec<&str> =
            HandoffEvent::ALL.iter().map(|e| e.as_str()).filter(|name| JournalEvent::parse(name).is_some()).collect();
        assert_eq!(both, [HandoffEvent::RunRetried.as_str()]);
        assert_eq!(JournalEvent::RunRetried.as_str(), HandoffEvent::RunRetried.as_str());
    }
}
