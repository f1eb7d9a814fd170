//! Conversations (CONTRACT §6): the control messages a bridge sends about a
//! handoff it started, and how one chat's requests take turns.

pub mod cancel;
pub mod strategy;
