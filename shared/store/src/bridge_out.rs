//! What a bridge hears about its request: status changes and questions,
//! written to the outbox in the transaction that makes the change they
//! report. The workers' final reply is built on the same route.

use baton_domain::bridge;
use baton_domain::conversation::question::{self, QuestionInput};
use baton_domain::fleet::Queue;
use baton_domain::request::HandoffStatus;
use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::outbox::{self, Message};
use crate::requests::{self, Request};
use crate::{callbacks, Result};

/// Now, as every bridge message writes its `at`.
pub fn timestamp() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The bridge's own queue when it set `reply_to`, else the shared replies
/// queue; published `mandatory`, so a message no queue takes goes to the
/// dead-letter queue rather than vanishing.
pub fn route(request: &Request, message_id: String, body: Value) -> Message {
    Message {
        queue: request.reply_to.clone().unwrap_or_else(|| Queue::BridgeReplies.as_str().to_string()),
        external: request.reply_to.is_some(),
        message_id: Some(message_id),
        correlation_id: Some(request.id.clone()),
        body,
        mandatory: true,
    }
}

/// Records a status change and queues the `BridgeStatus` message with the
/// request's next `seq` (and its HTTP callback, when the request has one).
pub async fn status(c: &impl GenericClient, request: &Request, status: HandoffStatus, note: Option<&str>) -> Result<()> {
    let seq = requests::set_status(c, &request.id, status).await?;
    requests::add_event(c, &request.id, "status_changed", Some(status), note).await?;
    let body = bridge::status(&request.id, status.as_str(), seq, request.reply_chat_id.as_deref(), timestamp());
    if let Some(url) = &request.status_url {
        callbacks::enqueue(c, &request.id, url, &body).await?;
    }
    outbox::enqueue(c, &route(request, bridge::status_message_id(&request.id, seq), body)).await
}

/// Queues a `BridgeQuestion` (CONTRACT §6) and records it as asked.
pub async fn question(c: &impl GenericClient, request: &Request, input: &QuestionInput<'_>) -> Result<()> {
    let body = question::message(input);
    let id = question::message_id(&request.id, input.question_id);
    outbox::enqueue(c, &route(request, id, body)).await?;
    requests::add_event(c, &request.id, "question_sent", Some(HandoffStatus::Blocked), Some(input.question_id)).await
}
