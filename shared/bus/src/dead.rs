//! What is in `baton.dead`, for an operator: list it, replay a dead letter
//! to the queue it came from, or discard it.
//!
//! Reading takes messages with `basic.get` on a channel of its own and
//! holds them unacked; closing that channel hands back the ones it did not
//! act on, which the broker puts back in the order it delivered them, ahead
//! of anything not read: nothing is lost or reordered (a test checks it).
//! While a reading holds them, another reader does not see them. Replaying publishes a copy with a confirm (mandatory: a queue
//! that no longer exists refuses it) and only then acks the dead copy;
//! discarding acks it.
//!
//! # Identity
//! A dead letter's [`DeadLetter::id`] is the first 16 hex digits of the
//! SHA-256 of its source queue, its reason, its `message_id`, the SHA-256
//! of the original body (header [`BODY_SHA256`], when the body kept is a
//! redacted or cut copy) and the body kept: stable while it waits (the
//! broker's own `x-delivery-count` is left out), the same in every listing.
//! Copies equal in all five share an id and are replayed or discarded
//! together; two originals that were cut to the same text do not.
//!
//! Baton's own dead letters keep the original's `message_id`,
//! `correlation_id`, `reply_to` and `timestamp` properties, its `user_id`
//! in [`ORIGINAL_USER_ID`], and the original body's digest and length in
//! [`BODY_SHA256`] and [`BODY_BYTES`] (see [`original_body`]).
//!
//! # What a listing shows
//! A listing is for an operator's eyes: the body preview, the reason and the
//! headers pass the strictest redaction first
//! ([`baton_domain::policy::disclosure::redact_strictly`]), so a password or an
//! API key in a dead-lettered copy is shown as a placeholder. A replay sends
//! the message as it was.
//!
//! # Where a replay goes
//! Baton's own dead letters name their queue in `x-baton-source-queue` (a
//! fleet queue's logical name such as `baton.runs.finished`, its prefixed
//! name, or a bridge's own reply queue); the broker's (a delivery limit
//! reached) in the first entry of `x-death`. Anyone who can publish to
//! `baton.dead` can write those headers, so a replay goes only to one of the
//! fleet's own queues (not a dead-letter queue) or to a queue the caller
//! knows a stored request named as its `reply_to`; any other letter stays
//! dead, with the reason.
//!
//! # What a replay takes
//! Only what a replay can help ([`replayable`], which is
//! [`baton_domain::console::dead::replay`]: not a body its consumer cannot
//! read, a request intake refused, a copy cut for display …), the rule the
//! console's page offers Replay by. The others stay dead, each with why
//! ([`Acted::withheld`]). [`Rule::Forced`] (`baton dead replay --force`)
//! keeps only where a replay may go.

use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation};
use sha2::{Digest, Sha256};

use baton_domain::console::dead::{self as rule, Cause, Destination, Replay};
use baton_domain::fleet::Queue;
use baton_domain::policy::disclosure::redact_strictly;

use crate::publish::header;
use crate::{Connection, Error, Queues, Result};

/// How much of a body a listing shows, in characters.
const PREVIEW_CHARS: usize = 2000;

/// How much of a body is redacted before the preview is cut from it: well
/// past the preview, so a secret that crosses the preview's end is found whole.
const REDACTED_BYTES: usize = 16 * 1024;

/// The hex SHA-256 of the body as it was delivered (or as it would have
/// been published), before it was redacted or cut for `baton.dead`.
pub const BODY_SHA256: &str = "x-baton-body-sha256";
/// The length in bytes of that body.
pub const BODY_BYTES: &str = "x-baton-body-bytes";
/// The original's `user_id` property. It travels as a header: the broker
/// refuses a `user_id` property that is not the publishing connection's
/// own user (it closes the channel with 406), and the fleet publishes the
/// dead letter as itself.
pub const ORIGINAL_USER_ID: &str = "x-baton-user-id";

/// The headers that identify an original body in `baton.dead`: its hex
/// SHA-256 ([`BODY_SHA256`]) and length ([`BODY_BYTES`]).
pub fn original_body(body: &[u8]) -> [(&'static str, String); 2] {
    let digest: String = Sha256::digest(body).iter().map(|b| format!("{b:02x}")).collect();
    [(BODY_SHA256, digest), (BODY_BYTES, body.len().to_string())]
}

/// When the fleet dead-lettered a message, in milliseconds since the epoch
/// (the broker's own dead letters say it in `x-death`).
pub const DEAD_AT: &str = "x-baton-dead-at";

/// The [`DEAD_AT`] header of a message dead-lettered now.
pub fn dead_at_now() -> (&'static str, String) {
    let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    (DEAD_AT, ms.to_string())
}

/// Set by the relay on a dead letter whose body it cut, or whose body it
/// dropped: the copy kept is not the message that was sent.
const CUT_HEADERS: [&str; 2] = ["x-baton-truncated", "x-baton-body-dropped"];

/// Headers a replayed copy does not carry: they describe its death.
const DEATH_HEADERS: [&str; 5] = ["x-death", "x-delivery-count", "x-baton-error", "x-baton-source-queue", DEAD_AT];

/// One message in `baton.dead`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// See the module doc, [Identity](self#identity).
    pub id: String,
    /// `x-baton-error`, or the broker's `x-death` reason (`delivery_limit` …).
    pub reason: String,
    /// The queue it came from, as recorded (`None`: neither header says).
    pub source_queue: Option<String>,
    /// The queue a replay publishes to (the recorded one under this fleet's prefix).
    pub replay_queue: Option<String>,
    pub message_id: Option<String>,
    pub correlation_id: Option<String>,
    /// The body as text, cut to a preview.
    pub body_preview: String,
    pub body_bytes: usize,
    /// String headers, the death headers included.
    pub headers: Vec<(String, String)>,
    /// When it was dead-lettered, in milliseconds since the epoch: the
    /// fleet's [`DEAD_AT`], the broker's `x-death` time, or else the
    /// message's own `timestamp` (when it was sent); `None` if none says.
    pub dead_at_ms: Option<i64>,
}

impl DeadLetter {
    fn read(queues: &Queues, props: &BasicProperties, body: &[u8]) -> Self {
        let (source_queue, reason) = match header(props, "x-baton-source-queue") {
            Some(queue) => (Some(queue), header(props, "x-baton-error").unwrap_or_default()),
            None => match first_death(props) {
                Some((queue, reason)) => (Some(queue), reason),
                None => (None, header(props, "x-baton-error").unwrap_or_else(|| "(no reason recorded)".into())),
            },
        };
        let message_id =
            props.message_id().as_ref().map(ToString::to_string).or_else(|| header(props, "x-baton-message-id"));
        let text = redact_strictly(&String::from_utf8_lossy(&body[..body.len().min(REDACTED_BYTES)]));
        let mut digest = Sha256::new();
        for part in [source_queue.as_deref().unwrap_or(""), &reason, message_id.as_deref().unwrap_or("")] {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        // Only when it is there, so letters from before it keep their ids.
        if let Some(original) = header(props, BODY_SHA256) {
            digest.update(original.as_bytes());
            digest.update([0]);
        }
        digest.update(body);
        let id: String = digest.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
        DeadLetter {
            id,
            reason: redact_strictly(&reason),
            replay_queue: source_queue.as_deref().map(|q| physical(queues, q)),
            source_queue,
            correlation_id: props.correlation_id().as_ref().map(ToString::to_string),
            message_id,
            body_preview: text.chars().take(PREVIEW_CHARS).collect(),
            body_bytes: body.len(),
            headers: string_headers(props),
            dead_at_ms: dead_at(props),
        }
    }

    /// Whether the copy kept is not the whole message (the relay cut its
    /// body, or dropped it).
    pub fn is_cut(&self) -> bool {
        self.headers.iter().any(|(k, _)| CUT_HEADERS.contains(&k.as_str()))
    }

    /// The fleet queue (a dead-letter queue included) a replay would go to,
    /// if it is one.
    pub fn fleet_queue(&self, queues: &Queues) -> Option<Queue> {
        let target = self.replay_queue.as_deref()?;
        Queue::ALL.into_iter().find(|q| queues.name(*q) == target)
    }

    /// Whether `queue` names this dead letter's source queue (its logical
    /// name, or its name under the prefix).
    pub fn came_from(&self, queues: &Queues, queue: &str) -> bool {
        let Some(source) = &self.source_queue else { return false };
        source == queue || physical(queues, source) == physical(queues, queue)
    }
}

/// A fleet queue's logical name under this fleet's prefix; a prefixed name
/// or a bridge's own queue as it is.
fn physical(queues: &Queues, name: &str) -> String {
    let prefixed = !queues.prefix().is_empty() && name.starts_with(queues.prefix());
    if !prefixed && name.starts_with("baton.") {
        queues.prefixed(name)
    } else {
        name.to_string()
    }
}

/// When it died: see [`DeadLetter::dead_at_ms`].
fn dead_at(props: &BasicProperties) -> Option<i64> {
    // The broker's record first: a message the broker dead-lettered keeps
    // the headers its sender gave it, so a `DEAD_AT` there is the sender's
    // word. The fleet's own dead letters carry only the headers it set.
    let death = match props.headers().as_ref()?.inner().get("x-death") {
        Some(AMQPValue::FieldArray(deaths)) => deaths.as_slice().first().cloned(),
        _ => None,
    };
    let broker = match death {
        Some(AMQPValue::FieldTable(death)) => match death.inner().get("time") {
            Some(AMQPValue::Timestamp(secs)) => i64::try_from(*secs).ok().map(|s| s * 1000),
            _ => None,
        },
        _ => None,
    };
    let fleet = || header(props, DEAD_AT).and_then(|v| v.parse().ok());
    broker.or_else(fleet).or_else(|| props.timestamp().and_then(|secs| i64::try_from(secs).ok()).map(|s| s * 1000))
}

/// The queue and reason of the broker's latest dead-lettering (`x-death`).
fn first_death(props: &BasicProperties) -> Option<(String, String)> {
    let AMQPValue::FieldArray(deaths) = props.headers().as_ref()?.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(death) = deaths.as_slice().first()? else {
        return None;
    };
    let text = |key: &str| match death.inner().get(key) {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        Some(AMQPValue::ShortString(s)) => Some(s.as_str().to_string()),
        _ => None,
    };
    let queue = text("queue")?;
    Some((queue, format!("dead-lettered by the broker: {}", text("reason").unwrap_or_else(|| "unknown".into()))))
}

fn string_headers(props: &BasicProperties) -> Vec<(String, String)> {
    let Some(table) = props.headers().as_ref() else { return vec![] };
    let shown = |k: &str| header(props, k).map(|v| (k.to_string(), redact_strictly(&v)));
    table.inner().keys().filter_map(|k| shown(k.as_str())).collect()
}

/// Which dead letters an action takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select<'a> {
    /// Those with this id.
    Id(&'a str),
    /// All of them (of one source queue, with a queue filter).
    All,
}

/// What a replay or a discard did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Acted {
    /// Ids replayed (or discarded), in queue order.
    pub done: Vec<String>,
    /// Ids left in `baton.dead` that a replay cannot help, with why
    /// ([`replayable`]): nothing was sent.
    pub withheld: Vec<(String, String)>,
    /// Ids left in `baton.dead` that a replay was tried for, with why (the
    /// broker refused it, whether a queue is a reply queue could not be told).
    pub failed: Vec<(String, String)>,
}

/// Which dead letters a replay takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Only those a replay can help ([`replayable`]): the console's Replay
    /// and Replay all, and `baton dead replay`.
    Replayable,
    /// Any that may go where it names (`baton dead replay --force`): a
    /// request intake refused, once what refused it is fixed (its bridge
    /// added, say). Never to a queue a replay may not reach.
    Forced,
}

/// Up to `limit` dead letters, oldest first; none is taken out.
pub async fn list(conn: &Connection, queues: &Queues, limit: usize) -> Result<Vec<DeadLetter>> {
    let mut reader = Reader::open(conn, queues).await?;
    let mut letters = vec![];
    while letters.len() < limit {
        let Some((_, letter)) = reader.next().await? else { break };
        letters.push(letter);
    }
    reader.hand_back().await?;
    Ok(letters)
}

/// Which bridge queues stored requests named as their `reply_to` (the
/// store knows; the bus does not).
pub trait ReplyQueues: Sync {
    /// Whether one did name `queue`; `Err` says why that could not be told.
    fn named(&self, queue: &str) -> impl std::future::Future<Output = std::result::Result<bool, String>> + Send;
}

/// No bridge queue at all: a replay goes only to the fleet's own queues.
pub struct FleetQueuesOnly;

impl ReplyQueues for FleetQueuesOnly {
    async fn named(&self, _queue: &str) -> std::result::Result<bool, String> {
        Ok(false)
    }
}

/// Whether a replay can help `letter` under `rule`, and if not, why;
/// `named` says whether a stored request named its queue as its `reply_to`
/// (asked only of a queue that is not the fleet's). The console's page
/// offers Replay by this, and [`replay`] takes only what it offers.
pub fn replayable(queues: &Queues, letter: &DeadLetter, named: bool, rule: Rule) -> std::result::Result<(), String> {
    let from = letter.fleet_queue(queues);
    let to = match (&letter.replay_queue, from) {
        (None, _) => Destination::Unknown,
        (Some(_), Some(q)) => Destination::Fleet(q),
        (Some(_), None) => Destination::Other { named },
    };
    if let (Destination::Other { named: false }, Some(target)) = (to, &letter.replay_queue) {
        return Err(format!(
            "`{target}` is neither one of the fleet's queues nor a reply queue a stored request named, \
             so it is not replayed there"
        ));
    }
    let decided = match rule {
        Rule::Replayable => rule::replay(to, Cause::of(from, &letter.reason), letter.is_cut()),
        Rule::Forced => rule::reachable(to),
    };
    match decided {
        Replay::Offered => Ok(()),
        Replay::Withheld(why) => Err(why.to_string()),
    }
}

/// Replays the selected dead letters (of `queue` only, if given) to their
/// source queues, each confirmed before its dead copy is acked. Only those
/// [`replayable`] under `rule` go: a letter whose queue is not one of the
/// fleet's goes only where `reply_queues` says a stored request named it as
/// its `reply_to` (asked once per queue); the others stay dead, untouched,
/// in [`Acted::withheld`].
pub async fn replay(
    conn: &Connection,
    queues: &Queues,
    select: Select<'_>,
    queue: Option<&str>,
    reply_queues: &impl ReplyQueues,
    rule: Rule,
) -> Result<Acted> {
    let publisher = conn.amqp().create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    let mut reader = Reader::open(conn, queues).await?;
    let mut acted = Acted::default();
    let mut known = std::collections::BTreeMap::new();
    while let Some((delivery, letter)) = reader.next().await? {
        if !reader.selected(&letter, select, queue) {
            continue;
        }
        let named = match (&letter.replay_queue, letter.fleet_queue(queues)) {
            (Some(target), None) => {
                if !known.contains_key(target) {
                    known.insert(target.clone(), reply_queues.named(target).await);
                }
                match &known[target] {
                    Ok(named) => *named,
                    Err(why) => {
                        let why = format!("whether `{target}` is a request's reply queue could not be told: {why}");
                        acted.failed.push((letter.id, why));
                        continue;
                    }
                }
            }
            _ => false,
        };
        if let Err(why) = replayable(queues, &letter, named, rule) {
            acted.withheld.push((letter.id, why));
            continue;
        }
        match republish(&publisher, &delivery, &letter, conn.user()).await {
            Ok(()) => {
                delivery.acker.ack(BasicAckOptions::default()).await?;
                acted.done.push(letter.id);
            }
            Err(why) => acted.failed.push((letter.id, why)),
        }
    }
    reader.hand_back().await?;
    let _ = publisher.close(200, "replayed".into()).await;
    Ok(acted)
}

/// Discards the selected dead letters (of `queue` only, if given).
pub async fn discard(conn: &Connection, queues: &Queues, select: Select<'_>, queue: Option<&str>) -> Result<Acted> {
    let mut reader = Reader::open(conn, queues).await?;
    let mut acted = Acted::default();
    while let Some((delivery, letter)) = reader.next().await? {
        if reader.selected(&letter, select, queue) {
            delivery.acker.ack(BasicAckOptions::default()).await?;
            acted.done.push(letter.id);
        }
    }
    reader.hand_back().await?;
    Ok(acted)
}

/// Publishes a copy of a dead letter to its source queue and waits for the
/// broker's confirm; `Err` says why it stays dead.
async fn republish(
    channel: &Channel,
    delivery: &lapin::message::Delivery,
    letter: &DeadLetter,
    fleet_user: &str,
) -> std::result::Result<(), String> {
    let Some(queue) = &letter.replay_queue else {
        return Err("no source queue recorded".into());
    };
    let mut props = delivery.properties.clone();
    let mut table: FieldTable = match props.headers().as_ref() {
        Some(headers) => {
            let kept = headers.inner().iter().filter(|(k, _)| !DEATH_HEADERS.contains(&k.as_str()));
            kept.map(|(k, v)| (k.clone(), v.clone())).collect::<std::collections::BTreeMap<_, _>>().into()
        }
        None => FieldTable::default(),
    };
    table.insert("x-baton-replayed".into(), AMQPValue::LongString(letter.id.as_str().into()));
    // The fleet's user cannot publish as another (the broker checks user_id):
    // the sender's user travels in the header dead letters keep it in, which
    // intake trusts only from the fleet's own user (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
    if let Some(user) = props.user_id().clone() {
        let header = ORIGINAL_USER_ID;
        if !table.inner().contains_key(header) {
            table.insert(header.into(), AMQPValue::LongString(user.as_str().into()));
        }
        props = lapin_without_user_id(props);
    }
    // Published as the fleet's own user, which the broker checks: intake
    // trusts the sender header only from it.
    props = props.with_headers(table).with_user_id(fleet_user.into());
    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
    let published = async {
        let confirm = channel.basic_publish("".into(), queue.as_str().into(), options, &delivery.data, props).await?;
        confirm.await
    };
    match published.await {
        Ok(Confirmation::Ack(None) | Confirmation::NotRequested) => Ok(()),
        Ok(Confirmation::Ack(Some(returned))) => {
            Err(format!("no queue `{queue}` took it ({} {})", returned.reply_code, returned.reply_text))
        }
        Ok(Confirmation::Nack(_)) => Err(format!("the broker refused it for `{queue}`")),
        Err(e) => Err(Error::Amqp(e).to_string()),
    }
}

/// The same properties without `user_id` (lapin offers no setter to clear one).
fn lapin_without_user_id(p: BasicProperties) -> BasicProperties {
    let mut out = BasicProperties::default();
    if let Some(v) = p.content_type().clone() {
        out = out.with_content_type(v);
    }
    if let Some(v) = p.content_encoding().clone() {
        out = out.with_content_encoding(v);
    }
    if let Some(v) = p.headers().clone() {
        out = out.with_headers(v);
    }
    if let Some(v) = *p.delivery_mode() {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = *p.priority() {
        out = out.with_priority(v);
    }
    if let Some(v) = p.correlation_id().clone() {
        out = out.with_correlation_id(v);
    }
    if let Some(v) = p.reply_to().clone() {
        out = out.with_reply_to(v);
    }
    if let Some(v) = p.expiration().clone() {
        out = out.with_expiration(v);
    }
    if let Some(v) = p.message_id().clone() {
        out = out.with_message_id(v);
    }
    if let Some(v) = *p.timestamp() {
        out = out.with_timestamp(v);
    }
    if let Some(v) = p.kind().clone() {
        out = out.with_type(v);
    }
    if let Some(v) = p.app_id().clone() {
        out = out.with_app_id(v);
    }
    out
}

/// Reads `baton.dead` with `basic.get` on a channel of its own; what it
/// does not ack stays unacked (held by the broker, not in memory here)
/// until [`Reader::hand_back`].
struct Reader<'q> {
    channel: Channel,
    queues: &'q Queues,
    name: String,
}

impl<'q> Reader<'q> {
    async fn open(conn: &Connection, queues: &'q Queues) -> Result<Reader<'q>> {
        let channel = conn.amqp().create_channel().await?;
        Ok(Reader { channel, queues, name: queues.name(Queue::Dead) })
    }

    /// The next dead letter, or `None` once the queue has none left to give.
    async fn next(&mut self) -> Result<Option<(lapin::message::Delivery, DeadLetter)>> {
        let got = self.channel.basic_get(self.name.as_str().into(), BasicGetOptions { no_ack: false }).await?;
        Ok(got.map(|got| {
            let letter = DeadLetter::read(self.queues, &got.delivery.properties, &got.delivery.data);
            (got.delivery, letter)
        }))
    }

    fn selected(&self, letter: &DeadLetter, select: Select<'_>, queue: Option<&str>) -> bool {
        let of_queue = queue.is_none_or(|q| letter.came_from(self.queues, q));
        of_queue && (select == Select::All || select == Select::Id(&letter.id))
    }

    /// Hands back every message read and not acked, by closing the channel:
    /// the broker returns a closed channel's unacked messages in the order
    /// it delivered them, ahead of the rest of the queue. (Closing rather
    /// than `nack`ing keeps them from counting as failed deliveries.)
    async fn hand_back(self) -> Result<()> {
        self.channel.close(200, "read".into()).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(headers: &[(&str, &str)]) -> BasicProperties {
        let mut table = FieldTable::default();
        for (k, v) in headers {
            table.insert((*k).into(), AMQPValue::LongString((*v).into()));
        }
        BasicProperties::default().with_message_id("m1".into()).with_headers(table)
    }

    #[test]
    fn a_dead_letter_replays_to_its_queue_under_the_fleets_prefix() {
        let q = Queues::new("t1.");
        assert_eq!(physical(&q, "baton.runs.finished"), "t1.baton.runs.finished");
        assert_eq!(physical(&q, "t1.baton.invocations.handoff"), "t1.baton.invocations.handoff");
        assert_eq!(physical(&q, "wechat.replies"), "wechat.replies", "a bridge's own queue as it is");
        assert_eq!(physical(&Queues::default(), "baton.runs.finished"), "baton.runs.finished");
    }

    #[test]
    fn the_id_is_stable_while_the_letter_waits_and_differs_between_letters() {
        let q = Queues::new("t1.");
        let base = [("x-baton-error", "bad"), ("x-baton-source-queue", "baton.runs.finished")];
        let a = DeadLetter::read(&q, &props(&base), b"body");
        let again = DeadLetter::read(&q, &props(&[base[0], base[1], ("x-delivery-count", "3")]), b"body");
        assert_eq!(a.id, again.id);
        assert_eq!(a.id.len(), 16);
        assert_ne!(a.id, DeadLetter::read(&q, &props(&base), b"other body").id);
        assert_eq!(a.replay_queue.as_deref(), Some("t1.baton.runs.finished"));
        assert!(a.came_from(&q, "baton.runs.finished") && a.came_from(&q, "t1.baton.runs.finished"));
        assert!(!a.came_from(&q, "baton.invocations.handoff"));
    }

    #[test]
    fn a_listing_shows_secrets_as_placeholders_and_keeps_the_id_of_the_raw_body() {
        let q = Queues::new("t1.");
        let body = br#"{"userIntent": "log in with password: hunter2 and key sk-abcdefghijklmnopqrstuvwxyz012345"}"#;
        let headers =
            [("x-baton-error", "refused: password=hunter2"), ("x-baton-source-queue", "baton.bridge.requests")];
        let letter = DeadLetter::read(&q, &props(&headers), body);
        for shown in [&letter.body_preview, &letter.reason] {
            assert!(!shown.contains("hunter2") && !shown.contains("sk-abcdef"), "{shown}");
        }
        assert!(letter.body_preview.contains("[redacted"), "{}", letter.body_preview);
        assert!(letter.headers.iter().all(|(_, v)| !v.contains("hunter2")), "{:?}", letter.headers);
        assert_eq!(letter.body_bytes, body.len());
        let clean = DeadLetter::read(&q, &props(&headers), br#"{"userIntent": "nothing secret"}"#);
        assert_ne!(letter.id, clean.id);
    }

    #[test]
    fn a_replay_takes_what_the_consoles_rule_offers_and_a_forced_one_only_where_it_may_go() {
        let q = Queues::new("t1.");
        let letter = |source: &str, reason: &str, extra: Option<(&str, &str)>| {
            let mut headers = vec![("x-baton-error", reason), ("x-baton-source-queue", source)];
            headers.extend(extra);
            DeadLetter::read(&q, &props(&headers), b"body")
        };
        let (replayable_, forced) = (
            |l: &DeadLetter, named| replayable(&q, l, named, Rule::Replayable),
            |l: &DeadLetter, named| replayable(&q, l, named, Rule::Forced),
        );
        let fixed = letter("baton.runs.finished", "could not collect the run: a corrupt row", None);
        assert_eq!(fixed.fleet_queue(&q), Some(Queue::RunsFinished));
        assert_eq!(replayable_(&fixed, false), Ok(()));
        let malformed = letter("t1.baton.runs.finished", "not a run-finished message: eof", None);
        assert!(replayable_(&malformed, false).unwrap_err().contains("refused again"));
        assert_eq!(forced(&malformed, false), Ok(()), "forced, it goes");
        let refused = letter("baton.bridge.requests", "not accepted from this publisher: no bridge", None);
        assert!(replayable_(&refused, false).unwrap_err().contains("intake refused it"));
        assert_eq!(forced(&refused, false), Ok(()), "once its bridge is added, say");
        let cut = letter("baton.runs.finished", "could not collect the run", Some(("x-baton-truncated", "true")));
        assert!(cut.is_cut() && replayable_(&cut, false).unwrap_err().contains("cut"));
        for never in ["baton.dead", "t1.baton.dead.requests"] {
            let dead = letter(never, "could not collect the run", None);
            assert!(replayable_(&dead, false).is_err() && forced(&dead, true).is_err(), "{never}");
        }
        for other in ["t1.baton.evil", "bridge.replies"] {
            let l = letter(other, "no queue took the message for it (312 NO_ROUTE)", None);
            assert_eq!(l.fleet_queue(&q), None);
            let why = forced(&l, false).unwrap_err();
            assert!(why.contains(&format!("`{other}` is neither one of the fleet's queues")), "{why}");
            assert_eq!(replayable_(&l, true), Ok(()), "a stored request named {other}");
        }
        let nowhere = DeadLetter::read(&q, &props(&[("x-baton-error", "could not collect the run")]), b"body");
        assert!(forced(&nowhere, false).unwrap_err().contains("nowhere to replay it"));
    }

    #[test]
    fn intake_reads_a_replays_sender_where_dead_letters_keep_it() {
        assert_eq!(ORIGINAL_USER_ID, baton_domain::protocol::bridges::REPLAY_USER_HEADER);
    }

    #[test]
    fn two_originals_cut_to_the_same_body_are_told_apart_by_their_digest() {
        let q = Queues::new("t1.");
        let [(sha_name, sha_a), (bytes_name, bytes_a)] = original_body(b"original a");
        let [(_, sha_b), _] = original_body(b"original b");
        assert_eq!((sha_name, bytes_name, bytes_a.as_str()), (BODY_SHA256, BODY_BYTES, "10"));
        // `printf 'original a' | sha256sum`
        assert_eq!(sha_a, "99124f806bc3b419d37ac573192acec5823aaa1c508f7eea1a6aec21d8cc291a");
        let base = [("x-baton-error", "bad"), ("x-baton-source-queue", "baton.bridge.requests")];
        let a = DeadLetter::read(&q, &props(&[base[0], base[1], (BODY_SHA256, &sha_a)]), b"cut");
        let b = DeadLetter::read(&q, &props(&[base[0], base[1], (BODY_SHA256, &sha_b)]), b"cut");
        assert_ne!(a.id, b.id);
        let old = DeadLetter::read(&q, &props(&base), b"cut");
        assert_ne!(old.id, a.id, "a letter without the header keeps the id it always had");
    }
}
