//! The dead-letter counter. Its labels are bounded: a fleet queue by its
//! logical name (any prefix dropped), every other queue (a bridge's own
//! reply queue) as `bridge`; the reason as a code, never its text.

use baton_domain::fleet::Queue;

pub const DEAD_LETTERS: &str = "baton_dead_letters_total";

/// Counts one message moved to `baton.dead`.
pub fn dead_lettered(queue: &str, reason_code: &'static str) {
    ::metrics::counter!(DEAD_LETTERS, "queue" => queue_label(queue), "reason" => reason_code).increment(1);
}

/// Every (queue, reason) label pair a process can count, so the counter
/// starts at 0 for each and an alert's `increase` sees the first dead
/// letter: a consumer's codes ([`reason_code`]) on every fleet queue, and the
/// relay's `unpublishable` on every queue it publishes to, a bridge's too.
pub fn dead_letter_labels() -> Vec<(&'static str, &'static str)> {
    let mut pairs = vec![];
    for queue in Queue::ALL {
        let refused = if queue == Queue::BridgeRequests { "refused" } else { "unprocessable" };
        for reason in ["malformed", refused, "unpublishable"] {
            pairs.push((queue.as_str(), reason));
        }
    }
    pairs.push(("bridge", "unpublishable"));
    pairs
}

/// A queue's name as a label: `baton.runs.finished` for it and for any
/// prefixed form of it; `bridge` for a queue the fleet does not own.
pub fn queue_label(name: &str) -> &'static str {
    Queue::ALL.into_iter().map(Queue::as_str).find(|logical| name.ends_with(logical)).unwrap_or("bridge")
}

/// The code of a consumer's dead-letter reason: a body that is not the
/// message expected is `malformed`; a refused bridge request or answer is
/// `refused`; anything else could not be processed.
pub fn reason_code(source_queue: &str, reason: &str) -> &'static str {
    if reason.starts_with("not a") {
        "malformed"
    } else if queue_label(source_queue) == Queue::BridgeRequests.as_str() {
        "refused"
    } else {
        "unprocessable"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_labels_drop_prefixes_and_hide_bridge_queues() {
        assert_eq!(queue_label("t-1234.baton.runs.finished"), "baton.runs.finished");
        assert_eq!(queue_label("baton.bridge.requests"), "baton.bridge.requests");
        assert_eq!(queue_label("wechat.replies.0f8e"), "bridge");
    }
}
