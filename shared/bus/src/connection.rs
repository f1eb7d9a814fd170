//! A role's connection to the broker: it declares the topology, opens
//! publishers and consumers, and says whether it is still up.

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;

use crate::consume::Subscription;
use crate::{Publisher, Queues, Result};

pub struct Connection {
    amqp: lapin::Connection,
}

impl Connection {
    /// Connects to the first broker of `urls` that accepts, under a name an
    /// operator can read in the management UI: see [`crate::connect`].
    pub async fn open(urls: &str, name: &str) -> Result<Self> {
        Ok(Self { amqp: crate::connect(urls, name).await? })
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
