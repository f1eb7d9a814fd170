//! One chat, one run at a time: what a request does when its conversation
//! already has a live run. The `[conversations]` section of the profiles
//! file picks a strategy per route (a `targetAgent`), over a default:
//!
//! ```toml
//! [conversations]
//! default = "enqueue"
//! [conversations.routes]
//! docs_agent = "reject"
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::wire_enum;

wire_enum! {
    /// What a request does while its conversation's run is live.
    #[derive(Default)]
    pub enum Strategy {
        /// It waits; runs start one after the other, in arrival order.
        #[default]
        Enqueue => "enqueue",
        /// It is refused with a `failed` reply, error code [`BUSY`].
        Reject => "reject",
        /// The live run is cancelled and this one starts.
        Interrupt => "interrupt",
    }
}

/// The error code of a request refused because its chat is busy.
pub const BUSY: &str = crate::protocol::contract::ErrorCode::Busy.as_str();

/// The `[conversations]` section of the profiles file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConversationsConfig {
    pub default: Strategy,
    /// Per `targetAgent` (a key of `[routes]`), over the default.
    pub routes: BTreeMap<String, Strategy>,
}

impl ConversationsConfig {
    /// The strategy of requests for `target`.
    #[must_use]
    pub fn for_target(&self, target: &str) -> Strategy {
        self.routes.get(target).copied().unwrap_or(self.default)
    }

    /// What is wrong with the section, given the file's routes.
    #[must_use]
    pub fn problems(&self, routes: &BTreeMap<String, String>) -> Vec<String> {
        let unknown = self.routes.keys().filter(|t| !routes.contains_key(*t));
        unknown.map(|t| format!("conversations `routes.{t}` names a target that [routes] does not have")).collect()
    }
}

/// What intake does with a new request of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Queue it and start the conversation's next request now.
    Start,
    /// Queue it behind the live run.
    Wait,
    /// Refuse it: the chat is busy.
    Refuse,
    /// Queue it and cancel the live run; the run's end starts the next one.
    Interrupt,
}

/// The pure decision: `busy` when the conversation has a live run.
#[must_use]
pub fn decide(strategy: Strategy, busy: bool) -> Turn {
    match (busy, strategy) {
        (false, _) => Turn::Start,
        (true, Strategy::Enqueue) => Turn::Wait,
        (true, Strategy::Reject) => Turn::Refuse,
        (true, Strategy::Interrupt) => Turn::Interrupt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_conversation_starts_at_once_under_every_strategy() {
        for strategy in Strategy::ALL {
            assert_eq!(decide(strategy, false), Turn::Start);
        }
        assert_eq!(decide(Strategy::Enqueue, true), Turn::Wait);
        assert_eq!(decide(Strategy::Reject, true), Turn::Refuse);
        assert_eq!(decide(Strategy::Interrupt, true), Turn::Interrupt);
    }

    #[test]
    fn a_route_overrides_the_default_which_is_enqueue() {
        assert_eq!(ConversationsConfig::default().for_target("codex"), Strategy::Enqueue);
        let config = ConversationsConfig {
            default: Strategy::Interrupt,
            routes: [("docs_agent".into(), Strategy::Reject)].into(),
        };
        assert_eq!(
            (config.for_target("docs_agent"), config.for_target("codex")),
            (Strategy::Reject, Strategy::Interrupt)
        );
        let routes = [("codex".to_string(), "coder".to_string())].into();
        assert_eq!(
            config.problems(&routes),
            vec!["conversations `routes.docs_agent` names a target that [routes] does not have"]
        );
    }
}
