//! The bridge protocol (docs/bridge-protocol.md): what a bridge sends and what it hears.
//!
//! - [`request`]: the bridge's `HandoffRequest`, parsed and validated at the edge.
//! - [`bridge`]: the status and reply messages a bridge receives.
//! - [`bridges`]: `[[bridges]]`: which bridge a message is from, what it may send, its own ids (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
//! - [`reply`]: humanized bridge replies and cutting them into chat-sized parts.
//! - [`conversation`]: questions agents ask their users and the bridge's answers, a bridge's cancel,
//!   and one chat's requests taking turns (docs/bridge-protocol.md#conversations).
//! - [`callback`]: status callbacks: the origin allow-list, Standard Webhooks signing, URLs safe to log.
//! - [`contract`]: the public surface's own words: each message's `type`, the error codes.
//! - [`language`]: the reply languages.
//! - [`outgoing`]: the size bound of outgoing bodies, cutting them, retry backoff.

pub mod bridge;
pub mod bridges;
pub mod callback;
pub mod contract;
pub mod conversation;
pub mod language;
pub mod outgoing;
pub mod reply;
pub mod request;
