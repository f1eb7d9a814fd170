//! Baton's RabbitMQ side: the topology every role declares at start-up,
//! publishing with confirms, consuming (a delivery handed to a handler,
//! which acks it or dead-letters it). The queues and the messages that
//! travel on them are the domain's (`baton_domain::fleet`); this crate puts
//! them on a broker. Roles name none of lapin's types: they hold a
//! [`Connection`] and read [`Delivery`]s.
//!
//! # Layout
//! - [`topology`]: the fleet's queues under a per-deployment prefix, and their declaration.
//! - [`publish`]: persistent publishes that wait for the broker's confirm.
//! - [`consume`]: the consume loop, deliveries, ack and dead-lettering.
//! - [`metrics`]: the dead-letter counter and its bounded labels.
//! - [`dead`]: what is in `baton.dead`: list, replay to the source queue, discard.
//! - [`failure`]: why a connection failed (down, login refused, unknown vhost), in an operator's words.
//! - `connection`: a role's connection: topology, publishers, consumers.

pub mod connection;
pub mod consume;
pub mod dead;
pub mod failure;
pub mod metrics;
pub mod publish;
pub mod topology;

pub use connection::Connection;
pub use consume::{DeadLetters, Delivery};
pub use failure::{check_url, ConnectFailure};
pub use lapin;
pub use publish::{Outgoing, Pending, Published, Publisher, Settled};
pub use topology::Queues;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("broker error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("the broker refused the message (nack) for queue {0}")]
    Nacked(String),
    #[error("no broker URL given")]
    NoBrokerUrl,
    /// `AMQP_URL` names something that is not an AMQP URL.
    #[error("{0}")]
    BadUrl(String),
    /// The broker at `broker` (`host:port`) could not be connected to, for `failure`.
    #[error("{}", failure.explain(broker))]
    Connect {
        broker: String,
        failure: ConnectFailure,
        #[source]
        source: lapin::Error,
    },
    #[error("the broker closed the consumer on {0}")]
    ConsumerClosed(String),
    /// Work a consumer handed to another task failed: see [`consume::Broken`].
    #[error("{0}")]
    Broken(String),
}

impl Error {
    /// Whether the failure will likely pass on its own, so the work is worth
    /// trying again on a new connection: a lost connection or channel, a
    /// message the broker refused for now. A missing broker URL will not
    /// pass, nor will a malformed one; a consumer the broker closed (its
    /// queue deleted, its node gone) and work that failed beside the
    /// consumer are reported as failures. A failed connect is worth trying
    /// again whatever its cause (a password rotated, a vhost being created),
    /// so a role keeps reconnecting; its log says why each try failed.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Amqp(_) | Error::Nacked(_) | Error::Connect { .. } => true,
            Error::NoBrokerUrl | Error::BadUrl(_) | Error::ConsumerClosed(_) | Error::Broken(_) => false,
        }
    }

    /// Why a connect failed, when this is a failed connect.
    pub fn connect_failure(&self) -> Option<&ConnectFailure> {
        match self {
            Error::Connect { failure, .. } => Some(failure),
            _ => None,
        }
    }

    /// The broker's reason when it closed the channel over a message it will
    /// never take (a channel-level error such as 406 PRECONDITION_FAILED for a
    /// body over `max_message_size`), as opposed to a lost connection.
    pub fn refusal(&self) -> Option<String> {
        let Error::Amqp(e) = self else {
            return None;
        };
        match e.kind() {
            lapin::ErrorKind::ProtocolError(e) if matches!(e.kind(), lapin::protocol::AMQPErrorKind::Soft(_)) => {
                Some(format!("the broker closed the channel: {} {}", e.get_id(), e.get_message()))
            }
            _ => None,
        }
    }
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
///
/// This is lapin's own connection, for code that declares queues of its own
/// (the tests, the bench's raw baseline); roles open a [`Connection`].
pub async fn connect(urls: &str, name: &str) -> Result<lapin::Connection> {
    connect_with_heartbeat(urls, name, None).await
}

/// [`connect`], proposing an AMQP heartbeat of `heartbeat` seconds unless a
/// URL names its own (`?heartbeat=N`; lapin takes the lower of its proposal
/// and the broker's, and sends a frame every half heartbeat when idle).
/// RabbitMQ checks what it received from a connection once per heartbeat and
/// closes it at the second check that found nothing new: two to three
/// heartbeats after a peer's last frame. That hands every delivery it held
/// unacked to another consumer: the bound on how long a frozen process
/// (`SIGSTOP`, a paused VM) keeps what it was given. `None` leaves the
/// negotiation to the broker (RabbitMQ proposes 60 s).
pub async fn connect_with_heartbeat(urls: &str, name: &str, heartbeat: Option<u16>) -> Result<lapin::Connection> {
    let props = lapin::ConnectionProperties::default().with_connection_name(name.into());
    let mut failure = Error::NoBrokerUrl;
    for url in broker_urls(urls) {
        let uri = with_frame_max(url).ok_or_else(|| Error::BadUrl(check_url(url).err().unwrap_or_default()))?;
        match lapin::Connection::connect_uri(with_heartbeat(uri, heartbeat), props.clone()).await {
            Ok(conn) => return Ok(conn),
            Err(e) => {
                let why = ConnectFailure::of(url, &e);
                tracing::warn!(broker = %host_of(url), error = %why.explain(&host_of(url)), "broker unavailable");
                failure = Error::Connect { broker: host_of(url), failure: why, source: e };
            }
        }
    }
    Err(failure)
}

/// The largest frame a connection proposes when its URL names none
/// (`?frame_max=N` in `AMQP_URL` overrides it; the broker may lower it).
/// lapin keeps two ring buffers of 32 frames per connection: proposed up
/// front, they are allocated once and fill only as traffic passes (1 MiB
/// each at most), where the broker's default of 128 KiB, learnt after the
/// handshake, grew them to 4 MiB each and wrote every byte: 16 MiB resident
/// in an idle worker with its two connections (see the memory notes in
/// docs/benchmark.md#why-and-what-would-move-it). A bigger message travels in several frames.
pub const FRAME_MAX: u32 = 32 * 1024;

/// A broker URL with [`FRAME_MAX`] unless it names a frame size of its own;
/// `None` when it is not a URL lapin reads.
fn with_frame_max(url: &str) -> Option<lapin::uri::AMQPUri> {
    let mut uri: lapin::uri::AMQPUri = url.parse().ok()?;
    uri.query.frame_max.get_or_insert(FRAME_MAX);
    Some(uri)
}

/// A broker URI with `heartbeat` (seconds) unless it names one of its own.
fn with_heartbeat(mut uri: lapin::uri::AMQPUri, heartbeat: Option<u16>) -> lapin::uri::AMQPUri {
    if let Some(secs) = heartbeat {
        uri.query.heartbeat.get_or_insert(secs);
    }
    uri
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
    fn broker_errors_say_whether_they_pass() {
        let lost = Error::Amqp(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into());
        assert!(lost.is_transient() && lost.refusal().is_none());
        assert!(Error::Nacked("q".into()).is_transient());
        assert!(!Error::NoBrokerUrl.is_transient());
        assert!(!Error::ConsumerClosed("q".into()).is_transient());
    }

    #[test]
    fn connections_propose_a_frame_size_unless_the_url_names_one() {
        let frame = |url: &str| with_frame_max(url).map(|uri| uri.query.frame_max);
        assert_eq!(frame("amqp://guest:guest@127.0.0.1:5672/%2f"), Some(Some(FRAME_MAX)));
        assert_eq!(frame("amqp://n1:5682/%2f?frame_max=131072&heartbeat=10"), Some(Some(131072)));
        let uri = with_frame_max("amqp://u:p@n1:5682/vh?heartbeat=10").unwrap();
        assert_eq!((uri.vhost.as_str(), uri.query.heartbeat), ("vh", Some(10)));
        assert_eq!(frame("not a url"), None);
    }

    #[test]
    fn connections_propose_the_heartbeat_unless_the_url_names_one() {
        let beat = |url: &str, secs| with_heartbeat(with_frame_max(url).unwrap(), secs).query.heartbeat;
        assert_eq!(beat("amqp://n1:5682/%2f", Some(10)), Some(10));
        assert_eq!(beat("amqp://n1:5682/%2f?heartbeat=4", Some(10)), Some(4));
        assert_eq!(beat("amqp://n1:5682/%2f", None), None);
    }

    #[test]
    fn broker_hosts_are_logged_without_credentials() {
        assert_eq!(host_of("amqp://guest:secret@n1:5682/%2f"), "n1:5682");
        assert_eq!(host_of("amqp://n3"), "n3:5672");
    }
}

/// Whether a log event of the AMQP library carries a message's bytes:
/// lapin logs every message the broker returns (a reply to a deleted queue)
/// whole at `warn`, its body as decimal bytes, and its frames at `trace`.
/// The binary's and the tests' log filters drop these, whatever `RUST_LOG` says.
pub fn carries_message_bytes(target: &str, level: tracing::Level, event: bool) -> bool {
    let lapin = target == "lapin" || target.starts_with("lapin::");
    event && lapin && (target == "lapin::returned_messages" || level == tracing::Level::TRACE)
}

#[cfg(test)]
mod log_tests {
    use super::carries_message_bytes;
    use tracing::Level;

    #[test]
    fn lapins_returned_messages_and_frames_are_never_logged_and_its_other_events_are() {
        assert!(carries_message_bytes("lapin::returned_messages", Level::WARN, true));
        assert!(carries_message_bytes("lapin::channels", Level::TRACE, true));
        assert!(!carries_message_bytes("lapin::channels", Level::ERROR, true));
        assert!(!carries_message_bytes("lapin::returned_messages", Level::WARN, false), "a span, not an event");
        assert!(!carries_message_bytes("baton::roles::relay", Level::TRACE, true));
        assert!(!carries_message_bytes("lapinou", Level::TRACE, true));
    }
}
