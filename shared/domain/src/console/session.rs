//! The console's sessions, as decisions: what the cookie says, when it is
//! `Secure`, how long a session lasts, and when a client must wait before
//! it may try another token.
//!
//! A session is a random id in an `HttpOnly; SameSite=Strict` cookie; the
//! server keeps only its SHA-256 (a copy of the table gives no one a live
//! cookie), with the CSRF token of its forms, its expiry and whether it was
//! revoked (by logging out). Every replica reads the same rows, so a session
//! opened on one is honoured by all.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub const COOKIE: &str = "baton_session";

/// How long a session lasts after its login (it is not extended by use).
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// How many wrong tokens a client may send in one [`LoginLimit::window`].
pub const LOGIN_LIMIT: LoginLimit = LoginLimit { failures: 10, window: Duration::from_secs(15 * 60) };

/// At most `failures` wrong tokens per client in a `window` that starts at
/// its first failure; past that every try is refused until the window ends,
/// the right token included (so a guess that happens to be right tells
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginLimit {
    pub failures: i32,
    pub window: Duration,
}

impl LoginLimit {
    /// How long a client that has `failures` in the window that began at
    /// `started` must still wait, or `None` if it may try now.
    pub fn wait(&self, failures: i32, started: DateTime<Utc>, now: DateTime<Utc>) -> Option<Duration> {
        let ends = started + chrono::TimeDelta::from_std(self.window).unwrap_or(chrono::TimeDelta::MAX);
        (failures > self.failures && ends > now).then(|| (ends - now).to_std().unwrap_or_default())
    }
}

/// The `Set-Cookie` of a new session (`id`), `Secure` when the console is
/// reached over TLS.
pub fn cookie(id: &str, secure: bool) -> String {
    let max_age = LIFETIME.as_secs();
    format!(
        "{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` that makes a browser forget its session.
pub fn cleared_cookie(secure: bool) -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}", if secure { "; Secure" } else { "" })
}

/// Whether the browser reached the console over TLS: `BATON_ADMIN_URL` is
/// `https://…`, or the proxy in front says so (`X-Forwarded-Proto: https`;
/// the first value, the client's hop, when several proxies added theirs).
pub fn secure(configured_https: bool, forwarded_proto: Option<&str>) -> bool {
    let forwarded =
        forwarded_proto.and_then(|v| v.split(',').next()).is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    configured_https || forwarded
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie_value<'a>(headers: impl IntoIterator<Item = &'a str>, name: &str) -> Option<&'a str> {
    headers
        .into_iter()
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// What the server keeps of a session id: its SHA-256.
pub fn id_hash(id: &str) -> Vec<u8> {
    Sha256::digest(id.as_bytes()).to_vec()
}

/// Which client a login attempt counts against: the peer's address, or,
/// when the peer is a proxy on this machine (loopback), the address that
/// proxy saw (the last `X-Forwarded-For` entry, the one it added). A client
/// connecting directly cannot choose its key by sending the header.
pub fn client(peer: IpAddr, forwarded_for: Option<&str>) -> String {
    let proxied = forwarded_for
        .filter(|_| peer.is_loopback())
        .and_then(|v| v.rsplit(',').next())
        .and_then(|last| last.trim().parse::<IpAddr>().ok());
    proxied.unwrap_or(peer).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_tls() {
        let plain = cookie("abc", false);
        assert_eq!(plain, "baton_session=abc; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200");
        assert!(cookie("abc", true).ends_with("; Secure"));
        assert!(cleared_cookie(false).contains("Max-Age=0") && cleared_cookie(true).ends_with("; Secure"));
        assert!(secure(true, None));
        assert!(secure(false, Some("HTTPS")));
        assert!(secure(false, Some("https, http")), "the client's hop comes first");
        assert!(!secure(false, Some("http")) && !secure(false, None) && !secure(false, Some("http, https")));
    }

    #[test]
    fn a_cookie_is_found_among_others() {
        assert_eq!(cookie_value(["theme=dark; baton_session=s1"], COOKIE), Some("s1"));
        assert_eq!(cookie_value(["a=1", "baton_session=s2"], COOKIE), Some("s2"));
        assert_eq!(cookie_value(["xbaton_session=s3"], COOKIE), None);
        assert_eq!(id_hash("s1").len(), 32);
        assert_ne!(id_hash("s1"), id_hash("s2"));
    }

    #[test]
    fn a_client_past_the_limit_waits_until_its_window_ends() {
        let limit = LoginLimit { failures: 3, window: Duration::from_secs(600) };
        let started = Utc::now();
        let now = started + chrono::TimeDelta::seconds(100);
        assert_eq!(limit.wait(3, started, now), None, "the third failure still leaves a try");
        assert_eq!(limit.wait(4, started, now), Some(Duration::from_secs(500)));
        assert_eq!(limit.wait(40, started, started + chrono::TimeDelta::seconds(600)), None, "the window is over");
    }

    #[test]
    fn only_a_local_proxy_names_the_client() {
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let remote: IpAddr = "198.51.100.7".parse().unwrap();
        assert_eq!(client(local, None), "127.0.0.1");
        assert_eq!(client(local, Some("203.0.113.1, 203.0.113.9")), "203.0.113.9", "the hop the proxy added");
        assert_eq!(client(local, Some("not an address")), "127.0.0.1");
        assert_eq!(client(remote, Some("203.0.113.9")), "198.51.100.7", "a direct client cannot pick its key");
    }
}
