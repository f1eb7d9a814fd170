//! What the bridge hears: status changes and the final reply, written to the
//! outbox in the same transaction as the change they report. They live in
//! the store (`baton_store::bridge`), so the run lifecycle can start a chat's
//! next request; this is their short name for the roles.

pub use baton_store::bridge::{reply, reply_at, status, timestamp};
