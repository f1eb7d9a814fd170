//! Publishing with confirms. A publish resolves only when the broker has
//! taken responsibility for the message; a `mandatory` message that no queue
//! took comes back as [`Published::Returned`].

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

use crate::{Error, Result};

/// One message to publish to a queue through the default exchange.
#[derive(Debug, Clone, Default)]
pub struct Outgoing<'a> {
    pub queue: &'a str,
    pub body: &'a [u8],
    pub message_id: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    /// The AMQP `timestamp` property (seconds since the epoch).
    pub timestamp: Option<u64>,
    pub headers: Vec<(&'a str, String)>,
    pub mandatory: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Confirmed,
    /// No queue took a mandatory message; the text says why.
    Returned(String),
}

/// A channel in confirm mode.
#[derive(Clone)]
pub struct Publisher {
    channel: Channel,
}

impl Publisher {
    /// Opens a confirm channel on lapin's connection; a role asks its
    /// [`Connection`](crate::Connection) for one instead.
    pub async fn open(connection: &Connection) -> Result<Self> {
        let channel = connection.create_channel().await?;
        channel.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Self { channel })
    }

    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// Closes the channel: before its connection, so no confirm in flight is lost.
    pub async fn close(&self) {
        let _ = self.channel.close(200, "shutting down".into()).await;
    }

    /// Sends the message and returns the pending confirm, so a caller can
    /// send a batch before waiting on any of it.
    pub async fn send<'a>(&self, m: &Outgoing<'a>) -> Result<Pending<'a>> {
        let options = BasicPublishOptions { mandatory: m.mandatory, ..Default::default() };
        let confirm = self.channel.basic_publish("".into(), m.queue.into(), options, m.body, properties(m)).await?;
        Ok(Pending { confirm, queue: m.queue })
    }

    /// Messages ready for consumers in a queue (unacked deliveries not
    /// counted), by a passive declare.
    pub async fn ready_count(&self, queue: &str) -> Result<u32> {
        Ok(self.passive_declare(queue).await?.message_count())
    }

    /// Consumers of a queue, by a passive declare.
    pub async fn consumer_count(&self, queue: &str) -> Result<u32> {
        Ok(self.passive_declare(queue).await?.consumer_count())
    }

    async fn passive_declare(&self, queue: &str) -> Result<lapin::Queue> {
        let options = lapin::options::QueueDeclareOptions { passive: true, ..Default::default() };
        Ok(self.channel.queue_declare(queue.into(), options, FieldTable::default()).await?)
    }

    pub async fn publish(&self, m: &Outgoing<'_>) -> Result<Published> {
        match self.send(m).await?.settled().await? {
            Settled::Confirmed => Ok(Published::Confirmed),
            Settled::Returned(reason) => Ok(Published::Returned(reason)),
            Settled::Nacked => Err(Error::Nacked(m.queue.to_string())),
        }
    }
}

/// A message sent and not yet confirmed.
pub struct Pending<'a> {
    confirm: PublisherConfirm,
    queue: &'a str,
}

impl Pending<'_> {
    /// Waits for the broker's confirm and says what it means for the message.
    pub async fn settled(self) -> Result<Settled> {
        Ok(classify(self.confirm.await?, self.queue))
    }
}

/// A confirm, for a caller that treats a nack as "not now" rather than an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    Confirmed,
    /// No queue took a mandatory message; the text says why.
    Returned(String),
    /// The broker refused the message for now (a full queue with
    /// `x-overflow: reject-publish`, a queue without a leader).
    Nacked,
}

fn classify(confirmation: Confirmation, queue: &str) -> Settled {
    match confirmation {
        Confirmation::Ack(Some(returned)) => Settled::Returned(format!(
            "no queue took the message for `{queue}` ({} {})",
            returned.reply_code, returned.reply_text
        )),
        Confirmation::Ack(None) | Confirmation::NotRequested => Settled::Confirmed,
        Confirmation::Nack(_) => Settled::Nacked,
    }
}

/// The longest AMQP short string, in bytes: `message_id`, `correlation_id`
/// and `reply_to` are short strings.
const SHORT_STRING_MAX: usize = 255;

fn properties(m: &Outgoing<'_>) -> BasicProperties {
    let mut props = BasicProperties::default().with_content_type("application/json".into()).with_delivery_mode(2);
    // A handoff id may have 128 characters of up to 4 bytes each. An id over
    // a short string's length cannot be a property (sent anyway, it makes
    // a frame the broker closes the connection over, at every try): it
    // travels in a header, whole, and the property is left out rather than
    // cut (two cut ids could be equal, and a bridge would drop one message
    // as the other's duplicate).
    let mut headers = m.headers.clone();
    if let Some(id) = m.message_id {
        if id.len() <= SHORT_STRING_MAX {
            props = props.with_message_id(id.into());
        } else {
            headers.push(("x-baton-message-id", id.to_string()));
        }
    }
    if let Some(id) = m.correlation_id {
        if id.len() <= SHORT_STRING_MAX {
            props = props.with_correlation_id(id.into());
        } else {
            headers.push(("x-baton-correlation-id", id.to_string()));
        }
    }
    if let Some(reply_to) = m.reply_to {
        props = props.with_reply_to(reply_to.into());
    }
    if let Some(at) = m.timestamp {
        props = props.with_timestamp(at);
    }
    if !headers.is_empty() {
        let mut table = FieldTable::default();
        for (k, v) in &headers {
            table.insert((*k).into(), AMQPValue::LongString(v.as_str().into()));
        }
        props = props.with_headers(table);
    }
    props
}

/// Reads a string header from a delivery's properties (see [`Delivery::header`](crate::Delivery::header)).
pub fn header(props: &BasicProperties, name: &str) -> Option<String> {
    let headers = props.headers().as_ref()?;
    match headers.inner().get(name)? {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_over_a_short_string_travels_whole_in_a_header_and_not_as_a_property() {
        let long = "界".repeat(128);
        let message_id = format!("reply:{long}");
        let out = Outgoing { message_id: Some(&message_id), correlation_id: Some(&long), ..Default::default() };
        let props = properties(&out);
        assert!(props.message_id().is_none() && props.correlation_id().is_none());
        assert_eq!(header(&props, "x-baton-message-id"), Some(message_id));
        assert_eq!(header(&props, "x-baton-correlation-id"), Some(long));
        let short = Outgoing { message_id: Some("reply:h1"), correlation_id: Some("h1"), ..Default::default() };
        let props = properties(&short);
        assert_eq!(props.correlation_id().as_ref().map(lapin::types::ShortString::as_str), Some("h1"));
        assert!(props.headers().is_none());
    }
}
