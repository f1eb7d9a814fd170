//! Baton's RabbitMQ side: the topology every role declares at start-up,
//! publishing with confirms, and the messages that travel between roles.
//!
//! # Layout
//! - [`topology`]: queue names (with a per-deployment prefix) and their declaration.
//! - [`publish`]: persistent publishes that wait for the broker's confirm.
//! - [`messages`]: the internal "look at this row now" messages.

pub mod messages;
pub mod publish;
pub mod topology;

pub use lapin;
pub use publish::{Outgoing, Publisher, Published, Settled};
pub use topology::Queues;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("broker error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("the broker refused the message (nack) for queue {0}")]
    Nacked(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens a connection named after the role, so an operator can tell them
/// apart in the management UI.
pub async fn connect(url: &str, name: &str) -> Result<lapin::Connection> {
    let props = lapin::ConnectionProperties::default().with_connection_name(name.into());
    Ok(lapin::Connection::connect(url, props).await?)
}
