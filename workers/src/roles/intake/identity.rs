//! Which bridge speaks (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other). With `[[bridges]]` in the profiles
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
    let fleet_user = fleet_user(settings);
    let replayed = delivery.header(bridges::REPLAY_USER_HEADER);
    let decide = |known: &profiles::Snapshot| match known.bridges.is_empty() {
        true => Ok(None),
        false => bridges::identify(&known.bridges, delivery.user_id(), &fleet_user, replayed.as_deref())
            .map(|bridge| Some(bridge.clone())),
    };
    // The profiles as this process last read them decide, unless they refuse:
    // then the file applied last does (a bridge added a moment ago is known).
    if let Some(held) = cache.held() {
        if let Ok(speaker) = decide(&held) {
            return Ok(Ok(speaker));
        }
    }
    let client = baton_store::client(pool).await?;
    let version = profiles::version(&client).await?;
    let known = cache.at(&client, version).await?;
    Ok(decide(&known))
}

/// The fleet's own RabbitMQ user (the one its replays come from).
pub(super) fn fleet_user(settings: &Settings) -> String {
    baton_bus::broker_urls(&settings.amqp_url).next().map_or_else(|| "guest".into(), baton_bus::connection::user_of)
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
