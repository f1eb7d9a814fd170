//! Why a connection to the broker failed, in words an operator can act on.
//!
//! A broker that is down, a login it refused, a virtual host it does not
//! have (or will not let the user in) and a URL that is not an AMQP URL
//! each need a different fix, so each is told apart from lapin's error
//! (RabbitMQ's `ACCESS_REFUSED` and `NOT_ALLOWED` replies to the handshake)
//! and said in its own words: only an unreachable broker is "start it".

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};

/// What went wrong when connecting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectFailure {
    /// Nothing answered at the address: the broker is down, or the host or port is wrong.
    Unreachable,
    /// The broker refused the user name and password.
    LoginRefused { user: String },
    /// The broker has no such virtual host.
    UnknownVhost { vhost: String },
    /// The virtual host exists but the user has no permission on it.
    VhostDenied { user: String, vhost: String },
    /// The broker closed the handshake for another reason (its own words).
    Refused { reason: String },
}

impl ConnectFailure {
    /// The failure of a connection to `url` that ended with `error`.
    pub fn of(url: &str, error: &lapin::Error) -> ConnectFailure {
        let (user, vhost) = match url.parse::<lapin::uri::AMQPUri>() {
            Ok(uri) => (uri.authority.userinfo.username, uri.vhost),
            Err(_) => (String::new(), String::new()),
        };
        let lapin::ErrorKind::ProtocolError(amqp) = error.kind() else {
            return ConnectFailure::Unreachable;
        };
        let reason = amqp.get_message().to_string();
        match amqp.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => ConnectFailure::LoginRefused { user },
            AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) if reason.contains("not found") => {
                ConnectFailure::UnknownVhost { vhost }
            }
            AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED) if reason.contains("refused for user") => {
                ConnectFailure::VhostDenied { user, vhost }
            }
            _ => ConnectFailure::Refused { reason },
        }
    }

    /// What is wrong and what to change, for the broker at `broker` (`host:port`).
    pub fn explain(&self, broker: &str) -> String {
        match self {
            ConnectFailure::Unreachable => format!(
                "RabbitMQ is not reachable at {broker}: it is not running, or the host or port in AMQP_URL is wrong"
            ),
            ConnectFailure::LoginRefused { user } => format!(
                "RabbitMQ at {broker} refused the login of user `{user}`: the user name or password in AMQP_URL is wrong"
            ),
            ConnectFailure::UnknownVhost { vhost } => format!(
                "RabbitMQ at {broker} has no virtual host `{vhost}`: fix the vhost at the end of AMQP_URL \
                 (`%2f` is the default, `/`), or create it (`rabbitmqctl add_vhost {vhost}`)"
            ),
            ConnectFailure::VhostDenied { user, vhost } => format!(
                "RabbitMQ at {broker} does not let user `{user}` use virtual host `{vhost}`: grant it \
                 (`rabbitmqctl set_permissions -p {vhost} {user} '.*' '.*' '.*'`) or use another user in AMQP_URL"
            ),
            ConnectFailure::Refused { reason } => format!("RabbitMQ at {broker} refused the connection: {reason}"),
        }
    }
}

/// Why `url` is not a broker URL lapin can connect to, if it is not one.
pub fn check_url(url: &str) -> Result<(), String> {
    match url.parse::<lapin::uri::AMQPUri>() {
        Ok(_) => Ok(()),
        Err(why) => {
            Err(format!("`{}` is not an AMQP URL ({why}); write amqp://user:password@host:5672/vhost", redact(url)))
        }
    }
}

/// A URL as it may be shown: anything between `://` and the last `@` hidden.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ if url.contains('@') => "***".into(),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::protocol::AMQPError;

    fn protocol(kind: AMQPErrorKind, message: &str) -> lapin::Error {
        lapin::ErrorKind::ProtocolError(AMQPError::new(kind, message.into())).into()
    }

    const URL: &str = "amqp://baton:pw@127.0.0.1:5672/prod";

    #[test]
    fn a_refused_login_an_unknown_vhost_and_a_denied_one_are_told_apart_from_a_broker_that_is_down() {
        let refused = protocol(AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED), "ACCESS_REFUSED - Login was refused");
        assert_eq!(ConnectFailure::of(URL, &refused), ConnectFailure::LoginRefused { user: "baton".into() });
        let vhost = protocol(AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED), "NOT_ALLOWED - vhost prod not found");
        assert_eq!(ConnectFailure::of(URL, &vhost), ConnectFailure::UnknownVhost { vhost: "prod".into() });
        let denied = protocol(
            AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED),
            "NOT_ALLOWED - access to vhost 'prod' refused for user 'baton'",
        );
        let expected = ConnectFailure::VhostDenied { user: "baton".into(), vhost: "prod".into() };
        assert_eq!(ConnectFailure::of(URL, &denied), expected);
        let down: lapin::Error = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert_eq!(ConnectFailure::of(URL, &down), ConnectFailure::Unreachable);
    }

    #[test]
    fn only_an_unreachable_broker_is_said_to_be_unreachable() {
        let login = ConnectFailure::LoginRefused { user: "baton".into() }.explain("h:5672");
        assert!(login.contains("refused the login of user `baton`") && !login.contains("not reachable"), "{login}");
        let vhost = ConnectFailure::UnknownVhost { vhost: "prod".into() }.explain("h:5672");
        assert!(vhost.contains("no virtual host `prod`") && !vhost.contains("not reachable"), "{vhost}");
        assert!(ConnectFailure::Unreachable.explain("h:5672").starts_with("RabbitMQ is not reachable at h:5672"));
    }

    #[test]
    fn a_malformed_url_is_named_without_its_password() {
        assert!(check_url("amqp://guest:guest@127.0.0.1:5672/%2f").is_ok());
        let bad = check_url("amqp//guest:secret@host").unwrap_err();
        assert!(bad.contains("is not an AMQP URL") && !bad.contains("secret"), "{bad}");
        assert!(check_url("http://host").is_err());
    }
}
