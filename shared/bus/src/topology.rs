//! Queue names and their declaration. Every queue is a durable quorum queue
//! with a delivery limit and a dead-letter exchange, so a message that keeps
//! failing lands in `baton.dead` for an operator, never in a loop.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

use crate::Result;

pub const BRIDGE_REQUESTS: &str = "baton.bridge.requests";
pub const BRIDGE_REPLIES: &str = "baton.bridge.replies";
pub const INVOCATIONS_HANDOFF: &str = "baton.invocations.handoff";
pub const INVOCATIONS_DELEGATE: &str = "baton.invocations.delegate";
pub const RUNS_FINISHED: &str = "baton.runs.finished";
pub const DEAD: &str = "baton.dead";
/// A second copy of everything the broker itself dead-letters (through
/// `baton.dlx`: a delivery limit reached), which intake reads to answer
/// bridge requests that met it. Operators keep reading `baton.dead`.
pub const DEAD_REQUESTS: &str = "baton.dead.requests";
pub const DEAD_LETTER_EXCHANGE: &str = "baton.dlx";

/// How many times a message may be delivered before it is dead-lettered.
pub const DELIVERY_LIMIT: i64 = 5;

/// The fleet's queue names under one prefix (empty in production; one per
/// test, so tests run side by side on one broker).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queues {
    prefix: String,
}

impl Queues {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The physical name of a logical queue (`baton.dead` → `t42.baton.dead`).
    pub fn name(&self, logical: &str) -> String {
        format!("{}{logical}", self.prefix)
    }

    /// Whether `name` is, or could be, one of the fleet's own queues: any
    /// `baton.*` name under this prefix (or under none, which is another
    /// fleet's on a shared broker). A bridge may not name one as its
    /// `reply_to`: a reply published there would be read as work.
    pub fn is_fleet_queue(&self, name: &str) -> bool {
        let own = name.strip_prefix(self.prefix.as_str()).is_some_and(|rest| rest.starts_with("baton."));
        own || name.starts_with("baton.")
    }

    /// Every queue the fleet reads or writes.
    pub fn all_logical() -> [&'static str; 7] {
        [BRIDGE_REQUESTS, BRIDGE_REPLIES, INVOCATIONS_HANDOFF, INVOCATIONS_DELEGATE, RUNS_FINISHED, DEAD, DEAD_REQUESTS]
    }

    /// Declares the exchange and queues (idempotent: safe at every start-up).
    pub async fn declare(&self, channel: &Channel) -> Result<()> {
        let dlx = self.name(DEAD_LETTER_EXCHANGE);
        let durable = ExchangeDeclareOptions { durable: true, ..Default::default() };
        channel.exchange_declare(dlx.as_str().into(), ExchangeKind::Fanout, durable, FieldTable::default()).await?;
        for logical in Self::all_logical() {
            let name = self.name(logical);
            // The dead-letter queues themselves have no limit and no
            // dead-letter exchange: what reaches them stays until read.
            let is_dead = logical == DEAD || logical == DEAD_REQUESTS;
            let args = quorum_args(if is_dead { None } else { Some(&dlx) });
            let opts = QueueDeclareOptions { durable: true, ..Default::default() };
            channel.queue_declare(name.as_str().into(), opts, args).await?;
        }
        for dead in [DEAD, DEAD_REQUESTS].map(|logical| self.name(logical)) {
            channel
                .queue_bind(dead.as_str().into(), dlx.as_str().into(), "".into(), QueueBindOptions::default(), FieldTable::default())
                .await?;
        }
        Ok(())
    }

    /// Deletes every queue and the exchange (tests clean up after themselves).
    pub async fn delete(&self, channel: &Channel) -> Result<()> {
        for logical in Self::all_logical() {
            channel.queue_delete(self.name(logical).as_str().into(), QueueDeleteOptions::default()).await?;
        }
        let dlx = self.name(DEAD_LETTER_EXCHANGE);
        channel.exchange_delete(dlx.as_str().into(), Default::default()).await?;
        Ok(())
    }
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
        assert_eq!(q.name(DEAD), "t1.baton.dead");
        assert_eq!(Queues::default().name(BRIDGE_REQUESTS), "baton.bridge.requests");
    }

    #[test]
    fn every_baton_queue_is_the_fleets_and_a_bridges_own_queue_is_not() {
        let q = Queues::new("t1.");
        for logical in Queues::all_logical() {
            assert!(q.is_fleet_queue(&q.name(logical)), "{logical}");
            assert!(q.is_fleet_queue(logical), "{logical} of an unprefixed fleet");
        }
        assert!(q.is_fleet_queue("t1.baton.anything"));
        for bridge in ["wechat.replies", "t1.bridge.test.replies", "my.baton.replies", "t2.batons"] {
            assert!(!q.is_fleet_queue(bridge), "{bridge}");
        }
    }
}
