//! Consuming. [`consume`] hands each delivery of a queue to a handler until
//! shutdown; the handler decides what the message means and settles it: it
//! acks it once its work is committed, or dead-letters it with a reason. A
//! delivery left unsettled goes back to the queue when the channel closes.

use std::future::Future;
use std::sync::{Arc, Mutex};

use futures_lite::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::Channel;
use tokio_util::sync::CancellationToken;

use crate::publish::header;
use crate::{Connection, Error, Outgoing, Publisher, Queues, Result};
use baton_domain::fleet::Queue;

/// One message as a handler sees it: its body, the properties and headers
/// roles read, and the ways to settle it.
pub struct Delivery {
    amqp: lapin::message::Delivery,
}

impl Delivery {
    pub fn body(&self) -> &[u8] {
        &self.amqp.data
    }

    pub fn message_id(&self) -> Option<&str> {
        self.amqp.properties.message_id().as_ref().map(lapin::types::ShortString::as_str)
    }

    pub fn reply_to(&self) -> Option<&str> {
        self.amqp.properties.reply_to().as_ref().map(lapin::types::ShortString::as_str)
    }

    /// The RabbitMQ user that published it, as the broker checked it (a
    /// publisher cannot set another user's name without the `impersonator` tag).
    pub fn user_id(&self) -> Option<&str> {
        self.amqp.properties.user_id().as_ref().map(lapin::types::ShortString::as_str)
    }

    /// A string header (`x-first-death-queue` on what the broker dead-lettered).
    pub fn header(&self, name: &str) -> Option<String> {
        header(&self.amqp.properties, name)
    }

    /// Whether the broker delivered this message before (to this consumer or another).
    pub fn redelivered(&self) -> bool {
        self.amqp.redelivered
    }

    /// The message is done with: the broker forgets it.
    pub async fn ack(&self) -> Result<()> {
        self.amqp.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    /// Sends the message to `baton.dead` with the reason in `x-baton-error`
    /// and `source_queue` in `x-baton-source-queue`, then acks it: nothing is
    /// dropped silently.
    pub async fn dead_letter(&self, to: &DeadLetters, source_queue: &str, reason: &str) -> Result<()> {
        self.dead_letter_as(to, source_queue, reason, self.body()).await
    }

    /// [`Delivery::dead_letter`] with the body an operator may see in place
    /// of the one delivered (intake keeps refused requests redacted and cut).
    /// The dead letter keeps what identifies the original: its
    /// `message_id`, `correlation_id`, `reply_to` and `timestamp`
    /// properties, its `user_id` in a header (see
    /// [`ORIGINAL_USER_ID`](crate::dead::ORIGINAL_USER_ID)), and the SHA-256
    /// and length of the body delivered (see [`crate::dead::original_body`]).
    pub async fn dead_letter_as(&self, to: &DeadLetters, source_queue: &str, reason: &str, body: &[u8]) -> Result<()> {
        let props = &self.amqp.properties;
        let mut headers =
            vec![("x-baton-error", reason.to_string()), ("x-baton-source-queue", source_queue.to_string())];
        headers.extend(crate::dead::original_body(self.body()));
        headers.push(crate::dead::dead_at_now());
        if let Some(user) = short(props.user_id()) {
            headers.push((crate::dead::ORIGINAL_USER_ID, user.to_string()));
        }
        let out = Outgoing {
            queue: &to.queue,
            body,
            message_id: self.message_id(),
            correlation_id: short(props.correlation_id()),
            reply_to: self.reply_to(),
            timestamp: *props.timestamp(),
            headers,
            ..Default::default()
        };
        to.publisher.publish(&out).await?;
        crate::metrics::dead_lettered(source_queue, crate::metrics::reason_code(source_queue, reason));
        tracing::warn!(queue = source_queue, reason, "message dead-lettered");
        self.ack().await
    }
}

/// A short-string property as text.
fn short(value: &Option<lapin::types::ShortString>) -> Option<&str> {
    value.as_ref().map(lapin::types::ShortString::as_str)
}

/// Where refused messages go: the fleet's `baton.dead`, through a confirm channel.
#[derive(Clone)]
pub struct DeadLetters {
    publisher: Publisher,
    queue: String,
}

impl DeadLetters {
    pub fn new(publisher: &Publisher, queues: &Queues) -> Self {
        Self { publisher: publisher.clone(), queue: queues.name(Queue::Dead) }
    }
}

/// Consumes `queue`, handing each delivery to `handle`, until shutdown or a
/// handler error. The handler settles each delivery; on shutdown the channel
/// closes before the connection, so no ack in flight is lost, and unsettled
/// deliveries go back to the queue.
pub async fn consume<F, Fut, E>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
    handle: F,
) -> Result<(), E>
where
    F: Fn(Delivery) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<Error>,
{
    consume_until(conn, queue, prefetch, shutdown, &Broken::default(), |d, _| handle(d)).await
}

/// [`consume`], also ended by `broken`; the handler is also given [`More`],
/// to take more of the queue's messages while it has work for them.
pub async fn consume_until<F, Fut, E>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    shutdown: &CancellationToken,
    broken: &Broken,
    handle: F,
) -> Result<(), E>
where
    F: Fn(Delivery, More) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: From<Error>,
{
    let mut deliveries = conn.subscribe(queue, prefetch).await?;
    let more = deliveries.more();
    let result = loop {
        let next = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break Ok(()),
            _ = broken.token.cancelled() => break Err(broken.error().into()),
            next = deliveries.next() => next,
        };
        match next {
            Ok(delivery) => {
                if let Err(e) = handle(delivery, more.clone()).await {
                    break Err(e);
                }
            }
            Err(e) => break Err(e.into()),
        }
    };
    deliveries.close().await;
    result
}

/// The rest of a consumed queue, taken one message at a time with
/// `basic.get` on the consumer's channel: a message is taken only when the
/// handler has work for it, where a prefetched delivery would wait in this
/// process for whatever it needs (a free slot), out of other consumers'
/// reach. Settled like any delivery; unsettled, it goes back to the queue
/// when the channel closes.
#[derive(Clone)]
pub struct More {
    channel: Channel,
    queue: String,
}

impl More {
    /// The queue's next ready message, or `None` when it has none.
    pub async fn take(&self) -> Result<Option<Delivery>> {
        let got = self.channel.basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: false }).await?;
        Ok(got.map(|got| Delivery { amqp: got.delivery }))
    }
}

/// A failure seen by work the consumer handed off to another task: it ends
/// the consumer (the role then reconnects), and unacked deliveries return
/// to the queue when the channel closes.
#[derive(Clone, Default)]
pub struct Broken {
    token: CancellationToken,
    why: Arc<Mutex<Option<String>>>,
}

impl Broken {
    /// Ends the consumer with `why` (the first reason given is kept).
    pub fn fail(&self, why: String) {
        self.why.lock().expect("not poisoned").get_or_insert(why);
        self.token.cancel();
    }

    fn error(&self) -> Error {
        Error::Broken(self.why.lock().expect("not poisoned").clone().unwrap_or_default())
    }
}

/// The deliveries of one queue, pulled one at a time.
pub struct Subscription {
    channel: Channel,
    consumer: lapin::Consumer,
    queue: String,
}

impl Subscription {
    pub(crate) async fn open(conn: &lapin::Connection, queue: &str, prefetch: u16) -> Result<Self> {
        let channel = conn.create_channel().await?;
        if prefetch > 0 {
            channel.basic_qos(prefetch, BasicQosOptions::default()).await?;
        }
        Self::start(channel, queue).await
    }

    pub(crate) async fn open_private(conn: &lapin::Connection) -> Result<Self> {
        let channel = conn.create_channel().await?;
        let private = QueueDeclareOptions { exclusive: true, auto_delete: true, ..Default::default() };
        let queue = channel.queue_declare("".into(), private, FieldTable::default()).await?;
        let name = queue.name().as_str().to_string();
        Self::start(channel, &name).await
    }

    async fn start(channel: Channel, queue: &str) -> Result<Self> {
        let consumer = channel
            .basic_consume(queue.into(), "".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await?;
        Ok(Self { channel, consumer, queue: queue.to_string() })
    }

    /// Takes more of this queue's messages on the subscription's channel.
    pub fn more(&self) -> More {
        More { channel: self.channel.clone(), queue: self.queue.clone() }
    }

    /// The queue's name (the broker's, for a private queue).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The next delivery; an error once the broker closed the consumer or the channel.
    pub async fn next(&mut self) -> Result<Delivery> {
        match self.consumer.next().await {
            Some(Ok(amqp)) => Ok(Delivery { amqp }),
            Some(Err(e)) => Err(e.into()),
            None => Err(Error::ConsumerClosed(self.queue.clone())),
        }
    }

    /// Closes the channel: unsettled deliveries go back to the queue.
    pub async fn close(&self) {
        let _ = self.channel.close(200, "shutting down".into()).await;
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::{AMQPValue, FieldTable};
    use lapin::BasicProperties;

    use super::*;

    fn delivery(properties: BasicProperties) -> Delivery {
        let mut amqp = lapin::message::Delivery::mock(1, "".into(), "q".into(), true, b"{}".to_vec());
        amqp.properties = properties;
        Delivery { amqp }
    }

    #[test]
    fn a_delivery_reads_its_properties_and_string_headers() {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), AMQPValue::LongString("baton.bridge.requests".into()));
        headers.insert("x-count".into(), AMQPValue::LongLongInt(2));
        let props = BasicProperties::default()
            .with_message_id("h1".into())
            .with_reply_to("wechat.replies".into())
            .with_headers(headers);
        let d = delivery(props);
        assert_eq!((d.body(), d.message_id(), d.reply_to()), (&b"{}"[..], Some("h1"), Some("wechat.replies")));
        assert_eq!(d.header("x-first-death-queue").as_deref(), Some("baton.bridge.requests"));
        assert_eq!(d.header("x-count"), None, "not a string");
        assert!(d.redelivered());
        let bare = delivery(BasicProperties::default());
        assert_eq!((bare.message_id(), bare.reply_to(), bare.header("x-first-death-queue")), (None, None, None));
    }

    #[test]
    fn a_broken_consumer_keeps_the_first_reason_and_is_no_passing_failure() {
        let broken = Broken::default();
        broken.fail("the claim failed".into());
        broken.fail("something later".into());
        assert!(broken.token.is_cancelled());
        let e = broken.error();
        assert_eq!(e.to_string(), "the claim failed");
        assert!(!e.is_transient());
    }
}
