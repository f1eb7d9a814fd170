//! What the bridge hears: status changes and the final reply, always written
//! to the outbox in the same transaction as the change they report.

use baton_domain::bridge;
use baton_domain::fleet::Queue;
use baton_domain::request::HandoffStatus;
use baton_store::outbox::{self, Message};
use baton_store::requests::{self, Request};
use baton_store::GenericClient;
use serde_json::Value;

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The bridge's own queue when it set `reply_to`, else the shared replies queue.
fn route(request: &Request, message_id: String, body: Value, mandatory: bool) -> Message {
    Message {
        queue: request.reply_to.clone().unwrap_or_else(|| Queue::BridgeReplies.as_str().to_string()),
        external: request.reply_to.is_some(),
        message_id: Some(message_id),
        correlation_id: Some(request.id.clone()),
        body,
        mandatory,
    }
}

/// Records a status change and queues the `BridgeStatus` message (mandatory,
/// like the reply: one that no queue takes goes to the dead-letter queue).
pub async fn status(c: &impl GenericClient, request: &Request, status: HandoffStatus, note: Option<&str>) -> baton_store::Result<()> {
    let seq = requests::set_status(c, &request.id, status).await?;
    requests::add_event(c, &request.id, "status_changed", Some(status), note).await?;
    let body = bridge::status(&request.id, status.as_str(), seq, request.reply_chat_id.as_deref(), now());
    if let Some(url) = &request.status_url {
        baton_store::callbacks::enqueue(c, &request.id, url, &body).await?;
    }
    outbox::enqueue(c, &route(request, bridge::status_message_id(&request.id, seq), body, true)).await
}

/// Queues the final `BridgeReply` (mandatory: if no queue takes it, it goes
/// to the dead-letter queue rather than vanishing) and records it as sent.
pub async fn reply(c: &impl GenericClient, request: &Request, input: &bridge::ReplyInput<'_>) -> baton_store::Result<()> {
    reply_attempt(c, request, input, 1).await
}

/// [`reply`] for a run's `attempt`: a retried run's reply has its own message id.
pub async fn reply_attempt(c: &impl GenericClient, request: &Request, input: &bridge::ReplyInput<'_>, attempt: i32) -> baton_store::Result<()> {
    let body = bridge::reply(input);
    let message_id = bridge::attempt_reply_message_id(&request.id, attempt);
    outbox::enqueue(c, &route(request, message_id, body, true)).await?;
    requests::mark_reply_sent(c, &request.id).await?;
    requests::add_event(c, &request.id, "reply_sent", Some(input.outcome.status()), None).await
}

pub fn timestamp() -> String {
    now()
}
