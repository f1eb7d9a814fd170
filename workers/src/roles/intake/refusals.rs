//! Refusing what reaches the requests queue and cannot be taken: a body
//! that is no request (or no valid cancel or answer) is answered with a
//! `failed` reply when its handoff id can be read, and dead-lettered,
//! redacted, for an operator. A bad body under the id of a stored request
//! changes nothing and is recorded as that request's `invalid_redelivery`.
//! Intake and its cancels refuse through here.

use baton_bus::{DeadLetters, Delivery, Outgoing, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::policy::disclosure;
use baton_domain::protocol::bridge::{self as wire, ReplyInput};
use baton_domain::protocol::bridges::Bridge;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::reply::Outcome;
use baton_domain::protocol::request::{bounded_reason, HandoffEvent, RequestError};
use baton_domain::Language;
use baton_store::requests;
use baton_store::{begin, client as db, commit, outbox, Pool};

use crate::config::Settings;
use baton_store::requests::bridge;

/// A body that cannot be a request. Its reason may quote the body, so it is
/// redacted like the body itself before it goes anywhere. Under the id of a
/// request already stored it is a bad re-delivery: that request stands and
/// its run goes on, so the body is acknowledged and recorded as a handoff
/// event, and no `failed` reply contradicts what the outbox tells the bridge.
pub(super) async fn reject(
    pool: &Pool,
    publisher: &Publisher,
    settings: &Settings,
    delivery: &Delivery,
    mut error: RequestError,
    bridge: Option<&Bridge>,
) -> anyhow::Result<()> {
    error.reason = bounded_reason(&disclosure::redact_strictly(&error.reason));
    if let Some(id) = &error.handoff_id {
        // The fleet's key for it: a bridge's id in the bridge's namespace.
        let stored_id = bridge.map_or_else(|| id.clone(), |b| b.qualify(id));
        match record_invalid_redelivery(pool, &stored_id, &error.reason).await {
            Ok(true) => {
                tracing::warn!(handoff = %id, reason = %error.reason, "invalid re-delivery of a stored request acknowledged");
                return Ok(delivery.ack().await?);
            }
            Ok(false) => {}
            Err(e) if crate::roles::is_transient(&e) => return Err(e),
            // An id the database cannot even look up (a NUL character) was
            // never stored: refuse the body like any other, rather than
            // failing on it at every delivery.
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "a refused request's id cannot be looked up; refusing it as new");
            }
        }
    }
    answer_and_dead_letter(pool, publisher, settings, delivery, &error, bridge).await
}

/// Records an invalid body under a stored request's id; false when no
/// request has that id.
async fn record_invalid_redelivery(pool: &Pool, id: &str, reason: &str) -> anyhow::Result<bool> {
    let mut client = db(pool).await?;
    let tx = begin(&mut client).await?;
    if requests::get(&tx, id).await?.is_none() {
        return Ok(false);
    }
    let note = format!("an invalid body with this id was ignored: {reason}");
    requests::add_event(&tx, id, HandoffEvent::InvalidRedelivery, None, Some(&note)).await?;
    commit(tx).await?;
    Ok(true)
}

/// Dead-letters a refused body (redacted and bounded: an operator needs to
/// see what was wrong, not the secrets in it), and tells the sender when its
/// handoff id can be read: with the chat id when that can be read too, and
/// without it when not (`callback: []`), since the bridge still knows the
/// handoff by its id (and by `correlation_id`).
pub(super) async fn answer_and_dead_letter(
    pool: &Pool,
    publisher: &Publisher,
    settings: &Settings,
    delivery: &Delivery,
    error: &RequestError,
    bridge: Option<&Bridge>,
) -> anyhow::Result<()> {
    let reason = bounded_reason(&disclosure::redact_strictly(&error.reason));
    if let Some(id) = &error.handoff_id {
        let language = error.language.unwrap_or(Language::En);
        let input = ReplyInput {
            handoff_id: id,
            chat_id: error.reply_to_chat_id.as_deref(),
            source: "other",
            language,
            outcome: Outcome::Failed { code: ErrorCode::InvalidRequest, message: reason.clone() },
            run_id: None,
            agents: vec![],
            changes: None,
            at: bridge::timestamp(),
        };
        let reply = wire::reply(&input);
        let body = serde_json::to_vec(&reply)?;
        let queue = reply_queue(settings, delivery, bridge);
        let message_id = wire::reply_message_id(id);
        let out = Outgoing {
            queue: &queue,
            body: &body,
            message_id: Some(&message_id),
            correlation_id: Some(id),
            mandatory: true,
            ..Default::default()
        };
        match publisher.publish(&out).await {
            Ok(baton_bus::Published::Confirmed) => {}
            Ok(baton_bus::Published::Returned(why)) => {
                tracing::warn!(handoff = %id, why, "the failed reply found no queue; it stays in baton.dead with the request");
            }
            Err(baton_bus::Error::Nacked(_)) => {
                leave_for_relay(pool, settings, delivery, id, message_id, reply, bridge).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let kept = disclosure::redact_refused_body(delivery.body(), disclosure::REFUSED_BODY_KEPT_BYTES);
    let dead = DeadLetters::new(publisher, &settings.queues());
    Ok(delivery.dead_letter_as(&dead, Queue::BridgeRequests.as_str(), &reason, &kept).await?)
}

/// A failed reply that the bridge's queue refused for now (full, with
/// `x-overflow: reject-publish`) is left to the relay, which retries it with
/// backoff: failing here would redeliver the request, again and again, ahead
/// of every other one. If even the outbox cannot take it, the reason stays
/// in `baton.dead` with the request.
async fn leave_for_relay(
    pool: &Pool,
    settings: &Settings,
    delivery: &Delivery,
    id: &str,
    message_id: String,
    body: serde_json::Value,
    bridge: Option<&Bridge>,
) -> anyhow::Result<()> {
    let queue = reply_queue(settings, delivery, bridge);
    let external = (queue != settings.queues().name(Queue::BridgeReplies)).then_some(queue);
    let message = outbox::Message {
        queue: external.clone().unwrap_or_else(|| Queue::BridgeReplies.as_str().to_string()),
        external: external.is_some(),
        message_id: Some(message_id),
        correlation_id: Some(id.to_string()),
        body,
        mandatory: true,
    };
    let stored: anyhow::Result<()> = async { Ok(outbox::enqueue(&db(pool).await?, &message).await?) }.await;
    match stored {
        Ok(()) => {
            tracing::warn!(handoff = %id, "the bridge's queue refused the failed reply for now; the relay retries it");
        }
        Err(e) if crate::roles::is_transient(&e) => return Err(e),
        Err(e) => {
            tracing::error!(handoff = %id, error = %format!("{e:#}"), "the failed reply could not be kept; it stays in baton.dead with the request");
        }
    }
    Ok(())
}

/// Where a reply about this delivery goes: the bridge's `reply_to`, unless
/// that names one of the fleet's queues, else `baton.bridge.replies`; with
/// `[[bridges]]`, one of the bridge's own reply queues.
fn reply_queue(settings: &Settings, delivery: &Delivery, bridge: Option<&Bridge>) -> String {
    if let Some(bridge) = bridge {
        let first = bridge.reply_queues.first().cloned().unwrap_or_default();
        return bridge.reply_queue(delivery.reply_to()).map_or(first, str::to_string);
    }
    let queues = settings.queues();
    match delivery.reply_to() {
        Some(queue) if !queues.is_fleet_queue(queue) => queue.to_string(),
        _ => queues.name(Queue::BridgeReplies),
    }
}
