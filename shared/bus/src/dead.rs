//! What is in `baton.dead`, for an operator: list it, replay a dead letter
//! to the queue it came from, or discard it.
//!
//! Reading takes messages with `basic.get` on a channel of its own and
//! holds them unacked; the ones it does not act on are handed back
//! (`nack` with requeue, in the order they were read) before the channel
//! closes, so they stay in the queue, in their order, ahead of anything
//! not read. Replaying publishes a copy with a confirm (mandatory: a queue
//! that no longer exists refuses it) and only then acks the dead copy;
//! discarding acks it.
//!
//! # Identity
//! A dead letter's [`DeadLetter::id`] is the first 16 hex digits of the
//! SHA-256 of its source queue, its reason, its `message_id` and its body:
//! stable while it waits (the broker's own `x-delivery-count` is left out),
//! the same in every listing. Copies equal in all four share an id and are
//! replayed or discarded together.
//!
//! # Where a replay goes
//! Baton's own dead letters name their queue in `x-baton-source-queue` (a
//! fleet queue's logical name such as `baton.runs.finished`, its prefixed
//! name, or a bridge's own reply queue); the broker's (a delivery limit
//! reached) in the first entry of `x-death`.

use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation};
use sha2::{Digest, Sha256};

use baton_domain::fleet::Queue;

use crate::publish::header;
use crate::{Connection, Error, Queues, Result};

/// How much of a body a listing shows, in characters.
const PREVIEW_CHARS: usize = 2000;

/// Headers a replayed copy does not carry: they describe its death.
const DEATH_HEADERS: [&str; 4] = ["x-death", "x-delivery-count", "x-baton-error", "x-baton-source-queue"];

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
        let message_id = props.message_id().as_ref().map(|m| m.to_string()).or_else(|| header(props, "x-baton-message-id"));
        let text = String::from_utf8_lossy(body);
        let mut digest = Sha256::new();
        for part in [source_queue.as_deref().unwrap_or(""), &reason, message_id.as_deref().unwrap_or("")] {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        digest.update(body);
        let id: String = digest.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
        DeadLetter {
            id,
            reason,
            replay_queue: source_queue.as_deref().map(|q| physical(queues, q)),
            source_queue,
            correlation_id: props.correlation_id().as_ref().map(|c| c.to_string()),
            message_id,
            body_preview: text.chars().take(PREVIEW_CHARS).collect(),
            body_bytes: body.len(),
            headers: string_headers(props),
        }
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
    table.inner().keys().filter_map(|k| header(props, k.as_str()).map(|v| (k.to_string(), v))).collect()
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
    /// Ids left in `baton.dead`, with why (no source queue, refused by the broker).
    pub failed: Vec<(String, String)>,
}

/// Up to `limit` dead letters, oldest first; none is taken out.
pub async fn list(conn: &Connection, queues: &Queues, limit: usize) -> Result<Vec<DeadLetter>> {
    let scan = Scan::open(conn, queues, limit).await?;
    let letters = scan.held.iter().map(|(_, letter)| letter.clone()).collect();
    scan.hand_back(&[]).await?;
    Ok(letters)
}

/// Replays the selected dead letters (of `queue` only, if given) to their
/// source queues, each confirmed before its dead copy is acked.
pub async fn replay(conn: &Connection, queues: &Queues, select: Select<'_>, queue: Option<&str>) -> Result<Acted> {
    let publisher = conn.amqp().create_channel().await?;
    publisher.confirm_select(ConfirmSelectOptions::default()).await?;
    let scan = Scan::open(conn, queues, usize::MAX).await?;
    let mut acted = Acted::default();
    let mut settled = vec![false; scan.held.len()];
    for (i, (delivery, letter)) in scan.held.iter().enumerate() {
        if !scan.selected(letter, select, queue) {
            continue;
        }
        match republish(&publisher, delivery, letter).await {
            Ok(()) => {
                delivery.acker.ack(BasicAckOptions::default()).await?;
                settled[i] = true;
                acted.done.push(letter.id.clone());
            }
            Err(why) => acted.failed.push((letter.id.clone(), why)),
        }
    }
    scan.hand_back(&settled).await?;
    let _ = publisher.close(200, "replayed".into()).await;
    Ok(acted)
}

/// Discards the selected dead letters (of `queue` only, if given).
pub async fn discard(conn: &Connection, queues: &Queues, select: Select<'_>, queue: Option<&str>) -> Result<Acted> {
    let scan = Scan::open(conn, queues, usize::MAX).await?;
    let mut acted = Acted::default();
    let mut settled = vec![false; scan.held.len()];
    for (i, (delivery, letter)) in scan.held.iter().enumerate() {
        if scan.selected(letter, select, queue) {
            delivery.acker.ack(BasicAckOptions::default()).await?;
            settled[i] = true;
            acted.done.push(letter.id.clone());
        }
    }
    scan.hand_back(&settled).await?;
    Ok(acted)
}

/// Publishes a copy of a dead letter to its source queue and waits for the
/// broker's confirm; `Err` says why it stays dead.
async fn republish(channel: &Channel, delivery: &lapin::message::Delivery, letter: &DeadLetter) -> std::result::Result<(), String> {
    let Some(queue) = &letter.replay_queue else {
        return Err("no source queue recorded".into());
    };
    let mut props = delivery.properties.clone();
    if let Some(headers) = props.headers().as_ref() {
        let kept = headers.inner().iter().filter(|(k, _)| !DEATH_HEADERS.contains(&k.as_str()));
        let mut table: FieldTable = kept.map(|(k, v)| (k.clone(), v.clone())).collect::<std::collections::BTreeMap<_, _>>().into();
        table.insert("x-baton-replayed".into(), AMQPValue::LongString(letter.id.as_str().into()));
        props = props.with_headers(table);
    }
    let options = BasicPublishOptions { mandatory: true, ..Default::default() };
    let published = async {
        let confirm = channel.basic_publish("".into(), queue.as_str().into(), options, &delivery.data, props).await?;
        confirm.await
    };
    match published.await {
        Ok(Confirmation::Ack(None)) | Ok(Confirmation::NotRequested) => Ok(()),
        Ok(Confirmation::Ack(Some(returned))) => Err(format!("no queue `{queue}` took it ({} {})", returned.reply_code, returned.reply_text)),
        Ok(Confirmation::Nack(_)) => Err(format!("the broker refused it for `{queue}`")),
        Err(e) => Err(Error::Amqp(e).to_string()),
    }
}

/// Dead letters taken with `basic.get` and held unacked on their own channel.
struct Scan<'q> {
    channel: Channel,
    queues: &'q Queues,
    held: Vec<(lapin::message::Delivery, DeadLetter)>,
}

impl<'q> Scan<'q> {
    /// Takes up to `limit` messages from the head of `baton.dead`.
    async fn open(conn: &Connection, queues: &'q Queues, limit: usize) -> Result<Scan<'q>> {
        let channel = conn.amqp().create_channel().await?;
        let name = queues.name(Queue::Dead);
        let mut held = vec![];
        while held.len() < limit {
            let Some(got) = channel.basic_get(name.as_str().into(), BasicGetOptions { no_ack: false }).await? else {
                break;
            };
            let letter = DeadLetter::read(queues, &got.delivery.properties, &got.delivery.data);
            held.push((got.delivery, letter));
        }
        Ok(Scan { channel, queues, held })
    }

    fn selected(&self, letter: &DeadLetter, select: Select<'_>, queue: Option<&str>) -> bool {
        let of_queue = queue.is_none_or(|q| letter.came_from(self.queues, q));
        of_queue && (select == Select::All || select == Select::Id(&letter.id))
    }

    /// Hands back every held message but the `settled` ones (`settled[i]`
    /// for `held[i]`), in the order they were read, then closes the channel.
    async fn hand_back(self, settled: &[bool]) -> Result<()> {
        for (i, (delivery, _)) in self.held.iter().enumerate() {
            if !settled.get(i).copied().unwrap_or(false) {
                delivery.acker.nack(BasicNackOptions { multiple: false, requeue: true }).await?;
            }
        }
        let _ = self.channel.close(200, "read".into()).await;
        Ok(())
    }
}
