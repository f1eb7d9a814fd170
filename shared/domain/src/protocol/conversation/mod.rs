//! Conversations (docs/bridge-protocol.md#conversations): a run that asks its user and waits, the
//! control messages a bridge sends about a handoff it started (answers,
//! cancels), and how one chat's requests take turns.

pub mod answer;
pub mod cancel;
pub mod question;
pub mod strategy;
