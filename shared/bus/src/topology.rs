//! The fleet's queues under a deployment's prefix, and their declaration.
//! Every queue is a durable quorum queue with a delivery limit and a
//! dead-letter exchange, so a message that keeps failing lands in
//! `baton.dead` for an operator, never in a loop. The logical names are the
//! domain's ([`Queue`]).

use baton_domain::fleet::{Queue, BRIDGE_EXCHANGE, BRIDGE_ROUTING_KEY, DEAD_LETTER_EXCHANGE};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use crate::Result;

/// How many times a message may be delivered before it is dead-lettered.
pub const DELIVERY_LIMIT: i64 = 5;

/// How many messages `baton.dead` holds by default before it drops its oldest.
pub const DEAD_MAX_LENGTH: i64 = 10_000;

/// The fleet's queue names under one prefix (empty in production; one per
/// test, so tests run side by side on one broker), and how long `baton.dead`
/// may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queues {
    prefix: String,
    dead_max_length: i64,
}

impl Default for Queues {
    fn default() -> Self {
        Self::new("")
    }
}

impl Queues {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into(), dead_max_length: DEAD_MAX_LENGTH }
    }

    /// The most messages `baton.dead` holds (`x-max-length`, oldest dropped
    /// first). Set when the queue is created: see [`Queues::declare`].
    pub fn with_dead_max_length(mut self, max: i64) -> Self {
        self.dead_max_length = max;
        self
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The physical name of a fleet queue (`baton.dead` → `t42.baton.dead`).
    pub fn name(&self, queue: Queue) -> String {
        self.prefixed(queue.as_str())
    }

    /// Any other name under this prefix: a logical queue name read back from
    /// an outbox row, or a queue of the bench's own.
    pub fn prefixed(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// Whether `name` is, or could be, one of the fleet's own queues: any
    /// `baton.*` name under this prefix (or under none, which is another
    /// fleet's on a shared broker). A bridge may not name one as its
    /// `reply_to`: a reply published there would be read as work.
    pub fn is_fleet_queue(&self, name: &str) -> bool {
        let own = name.strip_prefix(self.prefix.as_str()).is_some_and(|rest| rest.starts_with("baton."));
        own || name.starts_with("baton.")
    }

    /// Declares the exchange and queues (idempotent: safe at every start-up).
    ///
    /// `baton.dead` gets its length limit (`x-max-length`, `x-overflow:
    /// drop-head`). A queue's arguments cannot change once it exists, so an
    /// existing `baton.dead` declared otherwise (a deployment from before
    /// the limit, or one created with another limit) is left as it is: its
    /// declaration, on a channel of its own, fails with PRECONDITION_FAILED
    /// and the rest goes on; a broker policy limits it instead (see
    /// docs/operating.md#dead-letters). It is declared, not probed first with a passive declare: a
    /// probe of a queue that does not exist yet closes its channel, which
    /// the AMQP library logs as an error at every first start.
    pub async fn declare(&self, conn: &lapin::Connection) -> Result<()> {
        self.declare_dead(conn).await?;
        let channel = conn.create_channel().await?;
        let dlx = self.prefixed(DEAD_LETTER_EXCHANGE);
        let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel.exchange_declare(dlx.as_str().into(), ExchangeKind::Fanout, durable, FieldTable::default()).await?;
        // Bridges may publish here (routing key `requests`), so a bridge's user
        // needs write access to this exchange alone (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
        let bridge_exchange = self.prefixed(BRIDGE_EXCHANGE);
        channel
            .exchange_declare(bridge_exchange.as_str().into(), ExchangeKind::Direct, durable, FieldTable::default())
            .await?;

        for queue in Queue::ALL {
            let name = self.name(queue);
            // The dead-letter queues themselves have no delivery limit and no
            // dead-letter exchange: what reaches them stays until read.
            if queue == Queue::Dead {
                continue;
            }
            let args = quorum_args(if queue.is_dead_letter() { None } else { Some(&dlx) });
            let opts = QueueDeclareOptions { durable: true, ..Default::default() };
            channel.queue_declare(name.as_str().into(), opts, args).await?;
        }
        for dead in Queue::ALL.into_iter().filter(|q| q.is_dead_letter()).map(|q| self.name(q)) {
            channel
                .queue_bind(
                    dead.as_str().into(),
                    dlx.as_str().into(),
                    "".into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        // After the queues: the binding needs the requests queue.
        channel
            .queue_bind(
                self.name(Queue::BridgeRequests).as_str().into(),
                bridge_exchange.as_str().into(),
                BRIDGE_ROUTING_KEY.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let _ = channel.close(200, "declared".into()).await;
        Ok(())
    }

    /// Declares `baton.dead` with its length limit on a channel of its own;
    /// one that exists with other arguments is left as it is.
    async fn declare_dead(&self, conn: &lapin::Connection) -> Result<()> {
        let channel = conn.create_channel().await?;
        let mut args = quorum_args(None);
        args.insert("x-max-length".into(), AMQPValue::LongLongInt(self.dead_max_length));
        args.insert("x-overflow".into(), AMQPValue::LongString("drop-head".into()));
        let opts = QueueDeclareOptions { durable: true, ..Default::default() };
        match channel.queue_declare(self.name(Queue::Dead).as_str().into(), opts, args).await {
            Ok(_) => {
                let _ = channel.close(200, "declared".into()).await;
                Ok(())
            }
            Err(e) if is_precondition_failed(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes every queue and the exchange (tests clean up after themselves).
    pub async fn delete(&self, channel: &Channel) -> Result<()> {
        for queue in Queue::ALL {
            channel.queue_delete(self.name(queue).as_str().into(), QueueDeleteOptions::default()).await?;
        }
        let dlx = self.prefixed(DEAD_LETTER_EXCHANGE);
        channel.exchange_delete(dlx.as_str().into(), Default::default()).await?;
        channel.exchange_delete(self.prefixed(BRIDGE_EXCHANGE).as_str().into(), Default::default()).await?;
        Ok(())
    }
}

fn is_precondition_failed(e: &lapin::Error) -> bool {
    use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
    matches!(e.kind(), lapin::ErrorKind::ProtocolError(p) if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED)))
}

fn quorum_args(dead_letter_exchange: Option<&str>) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    if let Some(dlx) = dead_letter_exchange {
        args.insert("x-delivery-limit".into(), AMQPValue::LongLongInt(DELIVERY_LIMIT));
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(dlx.into()));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_prefix() {
        let q = Queues::new("t1.");
        assert_eq!(q.name(Queue::Dead), "t1.baton.dead");
        assert_eq!(q.prefixed("bench.replies"), "t1.bench.replies");
        assert_eq!(Queues::default().name(Queue::BridgeRequests), "baton.bridge.requests");
    }

    #[test]
    fn every_baton_queue_is_the_fleets_and_a_bridges_own_queue_is_not() {
        let q = Queues::new("t1.");
        for queue in Queue::ALL {
            assert!(q.is_fleet_queue(&q.name(queue)), "{queue}");
            assert!(q.is_fleet_queue(queue.as_str()), "{queue} of an unprefixed fleet");
        }
        assert!(q.is_fleet_queue("t1.baton.anything"));
        for bridge in ["wechat.replies", "t1.bridge.test.replies", "my.baton.replies", "t2.batons"] {
            assert!(!q.is_fleet_queue(bridge), "{bridge}");
        }
    }
}
