//! A role's connection to the broker: it declares the topology, opens
//! publishers and consumers, and says whether it is still up.

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

use crate::consume::Subscription;
use crate::{Publisher, Queues, Result};

pub struct Connection {
    amqp: lapin::Connection,
    /// The RabbitMQ user it logged in as.
    user: String,
}

impl Connection {
    /// Connects to the first broker of `urls` that accepts, under a name an
    /// operator can read in the management UI: see [`crate::connect`].
    pub async fn open(urls: &str, name: &str) -> Result<Self> {
        Self::open_with_heartbeat(urls, name, None).await
    }

    /// [`Connection::open`] with an AMQP heartbeat of `heartbeat` seconds
    /// (see [`crate::connect_with_heartbeat`]): what a role's consumers use.
    pub async fn open_with_heartbeat(urls: &str, name: &str, heartbeat: Option<u16>) -> Result<Self> {
        let user = crate::broker_urls(urls).next().map_or_else(|| "guest".to_string(), user_of);
        Ok(Self { amqp: crate::connect_with_heartbeat(urls, name, heartbeat).await?, user })
    }

    /// The RabbitMQ user it logged in as (`guest` when its URL names none).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// lapin's connection, for setup code that declares queues of its own
    /// (the bench's raw baseline).
    pub fn amqp(&self) -> &lapin::Connection {
        &self.amqp
    }

    pub fn is_connected(&self) -> bool {
        self.amqp.status().connected()
    }

    /// A channel in confirm mode.
    pub async fn publisher(&self) -> Result<Publisher> {
        Publisher::open(&self.amqp).await
    }

    /// Declares the fleet's exchange and queues on channels of their own,
    /// closed afterwards (idempotent: safe at every start-up).
    pub async fn declare(&self, queues: &Queues) -> Result<()> {
        queues.declare(&self.amqp).await
    }

    /// Deletes the fleet's queues and exchange (a bench cleaning up).
    pub async fn delete(&self, queues: &Queues) -> Result<()> {
        let channel = self.amqp.create_channel().await?;
        let deleted = queues.delete(&channel).await;
        let _ = channel.close(200, "deleted".into()).await;
        deleted
    }

    /// Declares a durable queue outside the fleet's topology (a bridge's reply queue).
    pub async fn declare_queue(&self, name: &str) -> Result<()> {
        let channel = self.amqp.create_channel().await?;
        let options = QueueDeclareOptions { durable: true, ..Default::default() };
        channel.queue_declare(name.into(), options, FieldTable::default()).await?;
        let _ = channel.close(200, "declared".into()).await;
        Ok(())
    }

    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let channel = self.amqp.create_channel().await?;
        channel.queue_delete(name.into(), QueueDeleteOptions::default()).await?;
        let _ = channel.close(200, "deleted".into()).await;
        Ok(())
    }

    /// Consumes `queue`, at most `prefetch` unacked deliveries at a time (0:
    /// no limit), pulling one delivery at a time; [`crate::consume::consume`]
    /// is the loop roles use.
    pub async fn subscribe(&self, queue: &str, prefetch: u16) -> Result<Subscription> {
        Subscription::open(&self.amqp, queue, prefetch).await
    }

    /// Consumes a queue of this connection's own, named by the broker and
    /// deleted with the connection: where a bridge hears its replies.
    pub async fn subscribe_private(&self) -> Result<Subscription> {
        Subscription::open_private(&self.amqp).await
    }

    /// Closes the connection. Roles close their channels first (consumers
    /// and publishers), so no ack or confirm in flight is lost.
    pub async fn close(&self, why: &str) {
        let _ = self.amqp.close(200, why.into()).await;
    }
}

/// The user of an AMQP URL (`amqp://user:password@host…`), percent-decoded;
/// `guest`, the broker's default, when it names none.
pub fn user_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let Some((userinfo, _)) = authority.rsplit_once('@') else { return "guest".into() };
    let user = userinfo.split(':').next().unwrap_or("");
    if user.is_empty() {
        return "guest".into();
    }
    let mut out = Vec::new();
    let bytes = user.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_of_a_url_is_read_decoded_or_guest() {
        assert_eq!(super::user_of("amqp://baton:pw@h:5672/%2f"), "baton");
        assert_eq!(super::user_of("amqp://we%40chat:p@ss@h/%2f"), "we@chat");
        assert_eq!(super::user_of("amqp://127.0.0.1:5672/%2f"), "guest");
    }
}
