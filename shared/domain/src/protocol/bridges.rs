//! `[[bridges]]` (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other): who may speak for a request. A bridge is
//! known by the RabbitMQ user whose messages are its own (the AMQP
//! `user_id` property, which the broker checks against the connection's
//! user); what it may send (sources, reply queues, target agents) is
//! checked before anything is stored. Its ids live in a namespace of their
//! own: the fleet stores `<bridge>:<id>`, so no bridge can reach another's
//! handoff, answer, cancel or chat, and speaks to the bridge in its own ids.

use serde::{Deserialize, Serialize};

use crate::protocol::request::{HandoffRequest, Source, TargetAgent};

/// Between a bridge's id and its own ids in the fleet's keys.
pub const SEPARATOR: char = ':';

/// The header a dead letter keeps its sender's RabbitMQ user in, so a replay
/// by the fleet's own user keeps its bridge (trusted only from the fleet's user).
pub const REPLAY_USER_HEADER: &str = "x-baton-user-id";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bridge {
    /// The tenant: letters, digits, `-` and `_`.
    pub id: String,
    /// The RabbitMQ user whose messages are this bridge's.
    pub user: String,
    /// `HandoffRequest.source` values it may send.
    pub sources: Vec<Source>,
    /// `reply_to` values it may name; the first is the default.
    pub reply_queues: Vec<String>,
    /// `targetAgent` values it may use (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<TargetAgent>,
    /// The variable holding the `whsec_` secret that signs its callbacks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_secret_env: Option<String>,
    /// Where its callbacks may go (scheme, host and port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callback_origins: Vec<String>,
}

/// Why a message may not speak for a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the message has no user_id: with [[bridges]] configured, every bridge message must name its RabbitMQ user"
    )]
    NoUser,
    #[error("no bridge of this fleet is RabbitMQ user `{0}`")]
    UnknownUser(String),
    #[error("bridge `{bridge}` may not send source `{sent}`")]
    Source { bridge: String, sent: String },
    #[error("bridge `{bridge}` may not name reply queue `{queue}` (its queues: {allowed})")]
    ReplyTo { bridge: String, queue: String, allowed: String },
    #[error("bridge `{bridge}` may not send to target agent `{target}`")]
    Target { bridge: String, target: String },
}

impl Bridge {
    /// The reply queue a request goes to: the one it names, if the bridge
    /// may name it, else its first.
    pub fn reply_queue<'a>(&'a self, named: Option<&'a str>) -> Result<&'a str, Refusal> {
        match named {
            Some(queue) if self.reply_queues.iter().any(|q| q == queue) => Ok(queue),
            Some(queue) => Err(Refusal::ReplyTo {
                bridge: self.id.clone(),
                queue: queue.to_string(),
                allowed: self.reply_queues.join(", "),
            }),
            None => Ok(self.reply_queues.first().map(String::as_str).unwrap_or_default()),
        }
    }

    /// Whether this bridge may send `request` (its source and target).
    pub fn admits(&self, request: &HandoffRequest) -> Result<(), Refusal> {
        if !self.sources.contains(&request.source) {
            return Err(Refusal::Source { bridge: self.id.clone(), sent: request.source.as_str().to_string() });
        }
        if !self.routes.is_empty() && !self.routes.contains(&request.target_agent) {
            let target = request.target_agent.as_str().to_string();
            return Err(Refusal::Target { bridge: self.id.clone(), target });
        }
        Ok(())
    }

    /// The fleet's key for one of this bridge's ids.
    pub fn qualify(&self, id: &str) -> String {
        qualified(&self.id, id)
    }

    /// Its request with its ids in the fleet's namespace: the handoff id and
    /// the conversation (the bridge's `conversationKey`, else its chat).
    pub fn qualify_request(&self, mut request: HandoffRequest) -> HandoffRequest {
        let conversation = request.conversation_key().map(|key| self.qualify(key));
        request.id = self.qualify(&request.id);
        request.conversation_key = conversation;
        request
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = vec![];
        let id = &self.id;
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            problems.push(format!("bridge `{id}`: an id is letters, digits, `-` and `_`"));
        }
        if self.user.trim().is_empty() {
            problems.push(format!("bridge `{id}`: `user` names its RabbitMQ user"));
        }
        if self.sources.is_empty() {
            problems.push(format!("bridge `{id}`: `sources` lists the sources it may send"));
        }
        if self.reply_queues.is_empty() {
            problems.push(format!("bridge `{id}`: `reply_queues` lists its reply queues (the first is the default)"));
        }
        for queue in self.reply_queues.iter().filter(|q| q.trim().is_empty() || q.contains("baton.")) {
            problems.push(format!("bridge `{id}`: `{queue}` cannot be a reply queue (empty, or a fleet queue)"));
        }
        problems
    }
}

/// `<bridge>:<id>`.
pub fn qualified(bridge: &str, id: &str) -> String {
    format!("{bridge}{SEPARATOR}{id}")
}

/// A stored key as its bridge knows it: `<bridge>:<id>` without the bridge.
pub fn unqualified<'a>(bridge: Option<&str>, key: &'a str) -> &'a str {
    match bridge {
        Some(bridge) => key.strip_prefix(bridge).and_then(|rest| rest.strip_prefix(SEPARATOR)).unwrap_or(key),
        None => key,
    }
}

/// The bridge whose user sent a message. `replayed_by` is the user a
/// replayed dead letter names in [`REPLAY_USER_HEADER`]; it counts only
/// when the message comes from the fleet's own user.
pub fn identify<'a>(
    bridges: &'a [Bridge],
    user_id: Option<&str>,
    fleet_user: &str,
    replayed_by: Option<&str>,
) -> Result<&'a Bridge, Refusal> {
    let user = match (user_id, replayed_by) {
        (Some(user), Some(original)) if user == fleet_user => original,
        (Some(user), _) => user,
        (None, _) => return Err(Refusal::NoUser),
    };
    bridges.iter().find(|b| b.user == user).ok_or_else(|| Refusal::UnknownUser(user.to_string()))
}

/// Why a `[[bridges]]` list is unusable (empty when fine).
pub fn problems(bridges: &[Bridge]) -> Vec<String> {
    let mut problems: Vec<String> = bridges.iter().flat_map(Bridge::problems).collect();
    let mut ids = std::collections::BTreeSet::new();
    let mut users = std::collections::BTreeSet::new();
    for b in bridges {
        if !ids.insert(b.id.as_str()) {
            problems.push(format!("bridge `{}` is defined twice", b.id));
        }
        if !users.insert(b.user.as_str()) {
            problems.push(format!("RabbitMQ user `{}` is named by two bridges", b.user));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::request::sample_request_json;

    fn wechat() -> Bridge {
        Bridge {
            id: "wechat".into(),
            user: "wechat-bridge".into(),
            sources: vec![Source::Weixin],
            reply_queues: vec!["wechat.replies".into(), "wechat.replies.2".into()],
            routes: vec![TargetAgent::DocsAgent],
            callback_secret_env: None,
            callback_origins: vec![],
        }
    }

    fn request(target: &str) -> HandoffRequest {
        serde_json::from_value(sample_request_json("h_1", target, "en")).unwrap()
    }

    #[test]
    fn the_user_decides_the_bridge_and_a_replay_keeps_it_only_from_the_fleets_user() {
        let bridges = [wechat()];
        assert_eq!(identify(&bridges, Some("wechat-bridge"), "baton", None).unwrap().id, "wechat");
        assert_eq!(identify(&bridges, None, "baton", None), Err(Refusal::NoUser));
        assert!(matches!(identify(&bridges, Some("other"), "baton", None), Err(Refusal::UnknownUser(_))));
        assert_eq!(identify(&bridges, Some("baton"), "baton", Some("wechat-bridge")).unwrap().id, "wechat");
        // Another user naming a bridge in the header is still itself.
        assert!(identify(&bridges, Some("other"), "baton", Some("wechat-bridge")).is_err());
    }

    #[test]
    fn a_bridge_may_send_only_its_sources_targets_and_reply_queues() {
        let b = wechat();
        assert!(b.admits(&request("docs_agent")).is_ok());
        assert!(matches!(b.admits(&request("codex")), Err(Refusal::Target { .. })));
        assert_eq!(b.reply_queue(None).unwrap(), "wechat.replies");
        assert_eq!(b.reply_queue(Some("wechat.replies.2")).unwrap(), "wechat.replies.2");
        assert!(matches!(b.reply_queue(Some("victim.replies")), Err(Refusal::ReplyTo { .. })));
    }

    #[test]
    fn ids_and_chats_are_the_bridges_own() {
        let q = wechat().qualify_request(request("docs_agent"));
        assert_eq!(q.id, "wechat:h_1");
        assert_eq!(q.conversation_key.as_deref(), Some("wechat:wxid_demo_chat"));
        assert_eq!(unqualified(Some("wechat"), "wechat:h:1"), "h:1");
        assert_eq!(unqualified(None, "wechat:h_1"), "wechat:h_1");
    }

    #[test]
    fn a_bad_list_is_named() {
        let mut twice = wechat();
        twice.id = "bad id".into();
        twice.reply_queues = vec!["baton.bridge.requests".into()];
        let problems = problems(&[wechat(), twice]);
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}
