//! Intake's side of `ask_user`: a bridge's `BridgeAnswer` (docs/bridge-protocol.md#conversations),
//! parsed at the edge and applied by [`crate::answering`]; it is
//! acknowledged whatever became of it, and a body that is not a valid
//! answer is dead-lettered with the reason.

use baton_bus::{DeadLetters, Delivery, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::policy::disclosure;
use baton_domain::protocol::conversation::answer;
use baton_domain::protocol::request::bounded_reason;
use baton_store::Pool;
use tokio_util::sync::CancellationToken;

use crate::answering::{apply, Answerer};
use crate::config::Settings;
use crate::roles::retry_transient;

/// Handles one `BridgeAnswer` delivery: applied or recorded, then
/// acknowledged; a body that is not a valid answer is dead-lettered with the reason.
pub async fn handle(
    pool: &Pool,
    publisher: &Publisher,
    settings: &Settings,
    shutdown: &CancellationToken,
    delivery: Delivery,
    bridge: Option<&baton_domain::protocol::bridges::Bridge>,
) -> anyhow::Result<()> {
    let answer = match answer::parse(delivery.body()) {
        // A bridge answers only its own handoffs' questions.
        Ok(answer) => match bridge {
            Some(b) => {
                answer::BridgeAnswer { id: b.qualify(&answer.id), handoff_id: b.qualify(&answer.handoff_id), ..answer }
            }
            None => answer,
        },
        Err(reason) => {
            return dead_letter(publisher, settings, &delivery, &format!("not a valid answer: {reason}")).await
        }
    };
    let span = tracing::info_span!("answer", handoff = %answer.handoff_id, answer = %answer.id);
    crate::telemetry::continue_request(&span, pool, &answer.handoff_id, &delivery).await;
    let stored = retry_transient("storing an answer", settings.transient_patience, shutdown, || {
        apply(pool, &answer, Answerer::Bridge)
    });
    let stored = tracing::Instrument::instrument(stored, span.clone()).await;
    let _entered = span.enter();
    match stored {
        Ok(handled) => {
            tracing::info!(?handled, "answer handled");
            Ok(delivery.ack().await?)
        }
        Err(e) if crate::roles::is_transient(&e) => Err(e),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "answer could not be stored");
            dead_letter(
                publisher,
                settings,
                &delivery,
                "the answer could not be stored; an operator can see why in the logs",
            )
            .await
        }
    }
}

async fn dead_letter(
    publisher: &Publisher,
    settings: &Settings,
    delivery: &Delivery,
    reason: &str,
) -> anyhow::Result<()> {
    let reason = bounded_reason(&disclosure::redact_strictly(reason));
    tracing::warn!(%reason, "answer refused");
    let kept = disclosure::redact_refused_body(delivery.body(), disclosure::REFUSED_BODY_KEPT_BYTES);
    let dead = DeadLetters::new(publisher, &settings.queues());
    Ok(delivery.dead_letter_as(&dead, Queue::BridgeRequests.as_str(), &reason, &kept).await?)
}
