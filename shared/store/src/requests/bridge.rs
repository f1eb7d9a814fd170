//! What the bridge hears: status changes, questions and the final reply, always written
//! to the outbox in the same transaction as the change they report.

use baton_domain::fleet::Queue;
use baton_domain::protocol::bridge;
use baton_domain::protocol::conversation::question::{self, QuestionInput};
use baton_domain::protocol::request::{HandoffEvent, HandoffStatus};
use deadpool_postgres::GenericClient;
use serde_json::Value;

use crate::outbox::{self, Message};
use crate::requests::{self, Request};

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The bridge's own queue when it set `reply_to`, else the shared replies
/// queue. The row's correlation id is the fleet's key for the handoff (the
/// relay notes what became of it there); the message names the bridge's own id.
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
pub async fn status(
    c: &impl GenericClient,
    request: &Request,
    status: HandoffStatus,
    note: Option<&str>,
) -> crate::Result<()> {
    let seq = requests::set_status(c, &request.id, status).await?;
    let body = bridge::status(request.wire_id(), status, seq, request.reply_chat_id.as_deref(), now());
    let message = route(request, bridge::status_message_id(request.wire_id(), seq), body, true);
    let callback = async {
        match &request.status_url {
            Some(url) => requests::callbacks::enqueue(c, &request.id, url, &message.body).await,
            None => Ok(()),
        }
    };
    // Pipelined: three rows of different tables, none waiting for another.
    tokio::try_join!(
        requests::add_event(c, &request.id, HandoffEvent::StatusChanged, Some(status), note),
        callback,
        outbox::enqueue(c, &message)
    )?;
    Ok(())
}

/// Queues the final `BridgeReply` (mandatory: if no queue takes it, it goes
/// to the dead-letter queue rather than vanishing) and records it as sent.
/// A retried run's reply has its own message id (`reply:<handoffId>:<attempt>`).
pub async fn reply(c: &impl GenericClient, request: &Request, input: &bridge::ReplyInput<'_>) -> crate::Result<()> {
    let attempt = match request.run_id {
        Some(run) => attempt(c, run).await?,
        None => 1,
    };
    reply_at(c, request, input, attempt).await
}

/// [`reply`] for the run's `attempt`, read by the caller
/// ([`attempt`]), in one round trip.
pub async fn reply_at(
    c: &impl GenericClient,
    request: &Request,
    input: &bridge::ReplyInput<'_>,
    attempt: i32,
) -> crate::Result<()> {
    let body = bridge::reply(input);
    let message_id = bridge::attempt_reply_message_id(request.wire_id(), attempt);
    let message = route(request, message_id, body, true);
    // Pipelined: rows of different tables, none waiting for another.
    tokio::try_join!(
        outbox::enqueue(c, &message),
        requests::mark_reply_sent(c, &request.id),
        requests::add_event(c, &request.id, HandoffEvent::ReplySent, Some(input.outcome.status()), None),
    )?;
    Ok(())
}

pub fn timestamp() -> String {
    now()
}

/// Queues a `BridgeQuestion` (CONTRACT §6), routed like a status, and
/// records it as asked.
pub async fn question(c: &impl GenericClient, request: &Request, input: &QuestionInput<'_>) -> crate::Result<()> {
    let body = question::message(input);
    let id = question::message_id(request.wire_id(), input.question_id);
    outbox::enqueue(c, &route(request, id, body, true)).await?;
    requests::add_event(
        c,
        &request.id,
        HandoffEvent::QuestionSent,
        Some(HandoffStatus::Blocked),
        Some(input.question_id),
    )
    .await
}

/// Which attempt a run is on: 1, and one more for each `baton runs retry`
/// (a retried run's reply has its own message id).
pub async fn attempt(c: &impl GenericClient, run_id: uuid::Uuid) -> crate::Result<i32> {
    Ok(crate::sql::query_one(c, "SELECT coalesce((SELECT attempt FROM runs WHERE id = $1), 1)", &[&run_id])
        .await?
        .get(0))
}
