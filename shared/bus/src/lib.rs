//! Baton's RabbitMQ side: the topology every role declares at start-up and
//! publishing with confirms. The queues and the messages that travel on
//! them are the domain's (`baton_domain::fleet`); this crate puts them on a broker.
//!
//! # Layout
//! - [`topology`]: the fleet's queues under a per-deployment prefix, and their declaration.
//! - [`publish`]: persistent publishes that wait for the broker's confirm.

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
    #[error("no broker URL given")]
    NoBrokerUrl,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The broker URLs of `AMQP_URL`: one, or several separated by commas (the
/// nodes of a cluster). A comma inside a password must be written `%2C`.
pub fn broker_urls(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|url| !url.is_empty())
}

/// Opens a connection named after the role (so an operator can tell them
/// apart in the management UI) to the first broker of `urls` that accepts
/// it, trying them in order: with a cluster, losing the node a role was
/// connected to sends its reconnect to the next node. The caller's backoff
/// spaces the rounds.
pub async fn connect(urls: &str, name: &str) -> Result<lapin::Connection> {
    let props = lapin::ConnectionProperties::default().with_connection_name(name.into());
    let mut failure = Error::NoBrokerUrl;
    for url in broker_urls(urls) {
        match lapin::Connection::connect(url, props.clone()).await {
            Ok(conn) => return Ok(conn),
            Err(e) => {
                tracing::warn!(broker = %host_of(url), error = %e, "broker unavailable");
                failure = Error::Amqp(e);
            }
        }
    }
    Err(failure)
}

/// `host:port` of a broker URL, for logs: never its credentials.
fn host_of(url: &str) -> String {
    match url.parse::<lapin::uri::AMQPUri>() {
        Ok(uri) => format!("{}:{}", uri.authority.host, uri.authority.port),
        Err(_) => "(an unreadable URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amqp_url_may_list_several_brokers() {
        let list = "amqp://u:p@n1:5682/%2f, amqp://u:p@n2:5683/%2f,,amqp://n3";
        let urls: Vec<_> = broker_urls(list).collect();
        assert_eq!(urls, ["amqp://u:p@n1:5682/%2f", "amqp://u:p@n2:5683/%2f", "amqp://n3"]);
        assert_eq!(broker_urls("amqp://guest:guest@127.0.0.1:5672/%2f").count(), 1);
        assert_eq!(broker_urls(" , ").count(), 0);
    }

    #[test]
    fn broker_hosts_are_logged_without_credentials() {
        assert_eq!(host_of("amqp://guest:secret@n1:5682/%2f"), "n1:5682");
        assert_eq!(host_of("amqp://n3"), "n3:5672");
    }
}
