//! Which bridge speaks (CONTRACT §8). With `[[bridges]]` in the profiles
//! file, a message on the requests queue is its bridge's only if the
//! broker-checked AMQP `user_id` is the bridge's user; a message from
//! nobody known, or asking for what its bridge may not use, is
//! dead-lettered with the reason and never run, and nothing is sent to the
//! queue it names. Without `[[bridges]]` every publisher is trusted, as
//! before (and the fleet says so at start).

use baton_bus::{DeadLetters, Delivery, Publisher};
use baton_domain::fleet::Queue;
use baton_domain::protocol::bridges::{self, Bridge, Refusal};
use baton_store::profiles;
use baton_store::Pool;

use crate::config::Settings;

/// Who sent a message: a bridge of `[[bridges]]`, or (without any) the one trusted bridge.
pub(super) type Speaker = Option<Bridge>;

/// The bridge a delivery speaks for, or why it speaks for none.
pub(super) async fn speaker(
    pool: &Pool,
    cache: &profiles::Cache,
    settings: &Settings,
    delivery: &Delivery,
) -> anyhow::Result<Result<Speaker, Refusal>> {
    let known = match cache.held() {
        Some(known) => known,
        None => {
            let client = baton_store::client(pool).await?;
            let version = profiles::version(&client).await?;
            cache.at(&client, version).await?
        }
    };
    if known.bridges.is_empty() {
        return Ok(Ok(None));
    }
    let fleet_user = fleet_user(settings);
    let replayed = delivery.header(bridges::REPLAY_USER_HEADER);
    let found = bridges::identify(&known.bridges, delivery.user_id(), &fleet_user, replayed.as_deref());
    Ok(found.map(|bridge| Some(bridge.clone())))
}

/// The fleet's own RabbitMQ user (the one its replays come from).
pub(super) fn fleet_user(settings: &Settings) -> String {
    let first = baton_bus::broker_urls(&settings.amqp_url).next().unwrap_or_default();
    url::Url::parse(first).ok().map(|u| u.username().to_string()).filter(|u| !u.is_empty()).unwrap_or("guest".into())
}

/// Dead-letters a message that speaks for no bridge it may: the reason in
/// `x-baton-error`, nothing sent anywhere else.
pub(super) async fn refuse(
    publisher: &Publisher,
    settings: &Settings,
    delivery: &Delivery,
    refusal: &Refusal,
) -> anyhow::Result<()> {
    let reason = format!("not accepted from this publisher: {refusal}");
    tracing::warn!(user = ?delivery.user_id(), message_id = ?delivery.message_id(), %reason, "a message for no bridge it may speak for");
    let kept = baton_domain::policy::disclosure::redact_refused_body(
        delivery.body(),
        baton_domain::policy::disclosure::REFUSED_BODY_KEPT_BYTES,
    );
    let dead = DeadLetters::new(publisher, &settings.queues());
    Ok(delivery.dead_letter_as(&dead, Queue::BridgeRequests.as_str(), &reason, &kept).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleets_user_is_the_first_broker_urls() {
        let mut settings = Settings::from_env().unwrap();
        settings.amqp_url = "amqp://baton:pw@n1:5672/%2f,amqp://baton:pw@n2:5672/%2f".into();
        assert_eq!(fleet_user(&settings), "baton");
    }
}
