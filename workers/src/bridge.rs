//! What the bridge hears: status changes and the final reply, always written
//! to the outbox in the same transaction as the change they report. Status
//! messages (and questions) are the store's (`baton_store::bridge_out`), so
//! the agent's tools write them too.

use baton_domain::bridge;
use baton_store::bridge_out::route;
use baton_store::outbox;
use baton_store::requests::{self, Request};
use baton_store::GenericClient;

pub use baton_store::bridge_out::{status, timestamp};

/// Queues the final `BridgeReply` (mandatory: if no queue takes it, it goes
/// to the dead-letter queue rather than vanishing) and records it as sent.
pub async fn reply(c: &impl GenericClient, request: &Request, input: &bridge::ReplyInput<'_>) -> baton_store::Result<()> {
    let body = bridge::reply(input);
    outbox::enqueue(c, &route(request, bridge::reply_message_id(&request.id), body)).await?;
    requests::mark_reply_sent(c, &request.id).await?;
    requests::add_event(c, &request.id, "reply_sent", Some(input.outcome.status()), None).await
}
