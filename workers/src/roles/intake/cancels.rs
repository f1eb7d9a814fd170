//! A bridge's cancel (docs/bridge-protocol.md#conversations), taken from the requests queue by intake.
//! It is kept once by its own id, then applied to its handoff in the same
//! transaction: a run is cancelled as `baton runs cancel` does (every live
//! invocation stops at its next step, parked ones at once, children too, and
//! the collector sends `cancelled` with a reply); a request that has no run
//! (it waits for its chat's turn, or for an operator) is answered
//! `cancelled` at once. A cancel whose request has not arrived stays kept,
//! and intake cancels the request when it comes ([`CANCEL_RETENTION`]).
//!
//! [`CANCEL_RETENTION`]: baton_store::requests::conversations::CANCEL_RETENTION

use baton_bus::{Delivery, Publisher};
use baton_domain::protocol::conversation::cancel::{parse_cancel, BridgeCancel};
use baton_domain::protocol::request::{HandoffEvent, RequestError};
use baton_domain::run::state::CancelledBy;
use baton_store::requests::{self, Request};
use baton_store::{begin, client as db, commit, requests::conversations, runs::ending, GenericClient, Pool};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::roles::{is_transient, retry_transient};

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The handoff's run was cancelled, or its request answered `cancelled`.
    Cancelled,
    /// The request has not arrived: the cancel waits for it.
    Kept,
    /// The same cancel again, or the handoff had already ended: recorded only.
    Ignored,
}

pub(super) async fn handle(
    pool: &Pool,
    publisher: &Publisher,
    settings: &Settings,
    shutdown: &CancellationToken,
    delivery: Delivery,
    bridge: Option<&baton_domain::protocol::bridges::Bridge>,
) -> anyhow::Result<()> {
    let cancel = match parse_cancel(delivery.body()) {
        // A bridge's cancel names its own handoff, in its own namespace.
        Ok(cancel) => match bridge {
            Some(b) => BridgeCancel { id: b.qualify(&cancel.id), handoff_id: b.qualify(&cancel.handoff_id), ..cancel },
            None => cancel,
        },
        Err(error) => {
            return crate::roles::intake::refusals::reject(pool, publisher, settings, &delivery, error, bridge).await
        }
    };
    let span = tracing::info_span!("cancel", handoff_id = %cancel.handoff_id);
    crate::telemetry::continue_request(&span, pool, &cancel.handoff_id, &delivery).await;
    let applied = retry_transient("applying a cancel", settings.transient_patience, shutdown, || apply(pool, &cancel));
    match tracing::Instrument::instrument(applied, span).await {
        Ok(applied) => {
            tracing::info!(handoff = %cancel.handoff_id, cancel = %cancel.id, ?applied, "cancel handled");
            Ok(delivery.ack().await?)
        }
        Err(e) if is_transient(&e) => Err(e),
        Err(e) => {
            tracing::error!(handoff = %cancel.handoff_id, error = %format!("{e:#}"), "a cancel could not be applied");
            let reason = format!("the cancel could not be applied: {e:#}");
            let error = RequestError { reason, handoff_id: None, reply_to_chat_id: None, language: None };
            crate::roles::intake::refusals::reject(pool, publisher, settings, &delivery, error, bridge).await
        }
    }
}

/// Keeps the cancel and applies it, in one transaction.
#[tracing::instrument(skip_all, fields(handoff = %cancel.handoff_id, cancel = %cancel.id))]
pub async fn apply(pool: &Pool, cancel: &BridgeCancel) -> anyhow::Result<Applied> {
    let mut client = db(pool).await?;
    let tx = begin(&mut client).await?;
    // Taken by intake too: the request is either stored already, or it
    // will find this cancel when it is.
    conversations::lock_handoff(&tx, &cancel.handoff_id).await?;
    let fresh = conversations::keep_cancel(&tx, cancel).await?;
    conversations::prune_cancels(&tx).await?;
    let applied = match requests::get(&tx, &cancel.handoff_id).await? {
        None => Applied::Kept,
        Some(_) if !fresh => {
            record(&tx, cancel, HandoffEvent::CancelDuplicate, "the same cancel again; nothing changed").await?;
            Applied::Ignored
        }
        Some(_) => cancel_handoff(&tx, cancel).await?,
    };
    commit(tx).await?;
    Ok(applied)
}

/// Cancels a stored handoff: its run, or the request itself when it has none.
async fn cancel_handoff(c: &impl GenericClient, cancel: &BridgeCancel) -> anyhow::Result<Applied> {
    let id = &cancel.handoff_id;
    // The conversation's lock before the request's, as when a run ends.
    if let Some(key) = conversations::queued_in(c, id).await? {
        conversations::lock(c, &key).await?;
    }
    let stored = requests::lock(c, id).await?.expect("read in this transaction");
    conversations::mark_applied(c, id).await?;
    // The reason reaches the user's chat: what the disclosure policy removes never does.
    let filtered = cancel.reason.as_deref().map(baton_domain::policy::disclosure::redact_strictly);
    let reason = filtered.as_deref().unwrap_or("the user cancelled the request");
    if stored.status.is_terminal() || stored.reply_sent_at.is_some() {
        record(c, cancel, HandoffEvent::CancelIgnored, "the handoff had already ended; nothing changed").await?;
        return Ok(Applied::Ignored);
    }
    let Some(run) = stored.run_id else {
        return cancel_request(c, cancel, &stored, reason).await;
    };
    let events = ending::cancel_run(c, run, reason, CancelledBy::Bridge).await?;
    if events.len() <= 1 {
        record(c, cancel, HandoffEvent::CancelIgnored, "the run had already ended; its reply is on its way").await?;
        return Ok(Applied::Ignored);
    }
    baton_store::journal::append(c, run, &events).await?;
    record(c, cancel, HandoffEvent::CancelReceived, "the run was cancelled").await?;
    Ok(Applied::Cancelled)
}

/// A request with no run (waiting for its turn, or for an operator) ends
/// here: it leaves its conversation's queue and is answered `cancelled`.
async fn cancel_request(
    c: &impl GenericClient,
    cancel: &BridgeCancel,
    stored: &Request,
    reason: &str,
) -> anyhow::Result<Applied> {
    conversations::leave_queue(c, &stored.id).await?;
    record(c, cancel, HandoffEvent::CancelReceived, "the request was cancelled before it ran").await?;
    baton_store::runs::start::cancel(c, stored, Some(reason)).await?;
    Ok(Applied::Cancelled)
}

/// A handoff event naming the cancel.
async fn record(c: &impl GenericClient, cancel: &BridgeCancel, kind: HandoffEvent, what: &str) -> anyhow::Result<()> {
    let note = format!("cancel {}: {what}", cancel.id);
    Ok(requests::add_event(c, &cancel.handoff_id, kind, None, Some(&note)).await?)
}
