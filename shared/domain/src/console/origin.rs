//! Which requests the console answers, by the names they carry.
//!
//! **DNS rebinding.** A page on `attacker.example` whose name the attacker
//! then points at 127.0.0.1 is, to the browser, same-origin with itself: it
//! can read the console's pages (CSRF tokens included) and post its forms.
//! The browser still sends `Host: attacker.example…`, so the console answers
//! only to the names it is really served under ([`Hosts`]): the loopback
//! names on any port, the address it is bound to, and the public name of
//! `BATON_ADMIN_URL` ([`PublicUrl`]).
//!
//! **Forms of other sites.** Every POST must show it comes from the
//! console's own pages ([`check_post`]): an `Origin` naming the host the
//! request was sent to, or, without one, `Sec-Fetch-Site: same-origin` (or
//! `none`, a person's own action). A browser sends at least one of them on
//! every POST; a script adds `Origin` itself.

use std::fmt;
use std::net::SocketAddr;

/// The names the console answers to on any port: loopback ones, which no
/// other site's page can be served under.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// A host and port, as a `Host` header or an origin names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Lowercase; an IPv6 address keeps its brackets.
    pub host: String,
    pub port: Option<u16>,
}

impl Authority {
    /// `host`, `host:port`, `[v6]` or `[v6]:port`; `None` for anything else
    /// (a user part, a path, an empty or non-numeric port, a stray character).
    pub fn parse(text: &str) -> Option<Authority> {
        let (host, rest) = match text.strip_prefix('[') {
            Some(inner) => {
                let end = inner.find(']')?;
                let v6 = &inner[..end];
                let fine = !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
                (fine.then(|| format!("[{}]", v6.to_ascii_lowercase()))?, &inner[end + 1..])
            }
            None => {
                let end = text.find(':').unwrap_or(text.len());
                let name = &text[..end];
                let fine = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
                (fine.then(|| name.to_ascii_lowercase())?, &text[end..])
            }
        };
        let port = match rest {
            "" => None,
            _ => {
                let digits = rest.strip_prefix(':')?;
                let numeric = !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit());
                Some(numeric.then(|| digits.parse().ok())??)
            }
        };
        Some(Authority { host, port })
    }

    /// The authority of a socket address (`10.0.0.5:8080`, `[::1]:8080`).
    pub fn of(addr: SocketAddr) -> Authority {
        let host = match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        Authority { host, port: Some(addr.port()) }
    }

    /// The same host, and the same port once a missing one is read as a
    /// default (80 or 443): browsers leave default ports out of both
    /// `Host` and `Origin`.
    pub fn same_as(&self, other: &Authority) -> bool {
        let ports = match (self.port, other.port) {
            (a, b) if a == b => true,
            (None, Some(p)) | (Some(p), None) => p == 80 || p == 443,
            _ => false,
        };
        self.host == other.host && ports
    }
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// `BATON_ADMIN_URL`: the address people reach the console at when it is
/// not the one it binds (a name behind a reverse proxy, often over TLS).
/// Its host is answered to, and `https` makes the session cookie `Secure`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    pub https: bool,
    pub authority: Authority,
}

impl PublicUrl {
    /// `http://host[:port]` or `https://host[:port]`, with at most a `/` after it.
    pub fn parse(text: &str) -> Result<PublicUrl, String> {
        let text = text.trim();
        let lower = text.to_ascii_lowercase();
        let (https, rest) = match (lower.strip_prefix("https://"), lower.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            _ => return Err(format!("{text} is not an http:// or https:// URL")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let authority = Authority::parse(rest)
            .ok_or_else(|| format!("{text} is not a scheme and a host with an optional port (no path, no user)"))?;
        Ok(PublicUrl { https, authority })
    }
}

/// The names the console answers to: the loopback ones on any port, and
/// these exactly (its bound and configured addresses, its public name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hosts {
    exact: Vec<Authority>,
}

impl Hosts {
    pub fn new(exact: impl IntoIterator<Item = Authority>) -> Self {
        Self { exact: exact.into_iter().collect() }
    }

    /// Whether a request naming `host` is answered.
    pub fn allows(&self, host: &Authority) -> bool {
        LOOPBACK_NAMES.contains(&host.host.as_str()) || self.exact.iter().any(|a| a.same_as(host))
    }

    /// `Ok` with the parsed `Host` (the header, or the authority of an
    /// HTTP/2 request), or why the request is refused.
    pub fn check(&self, host: Option<&str>) -> Result<Authority, Refused> {
        let Some(given) = host else { return Err(Refused::NoHost) };
        match Authority::parse(given) {
            Some(a) if self.allows(&a) => Ok(a),
            _ => Err(Refused::Host { given: given.to_string(), allowed: self.names() }),
        }
    }

    fn names(&self) -> String {
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(ToString::to_string).collect();
        names.extend(self.exact.iter().map(ToString::to_string));
        names.join(", ")
    }
}

/// Why a request was refused (a 403 whose page says this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    NoHost,
    /// The `Host` is none of the console's names.
    Host {
        given: String,
        allowed: String,
    },
    /// A POST whose `Origin` is another site (or unreadable, or `null`).
    Origin(String),
    /// A POST whose `Sec-Fetch-Site` says another site sent it.
    FetchSite(String),
    /// A POST that says neither where it comes from.
    Unsaid,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NoHost => f.write_str("This request names no host: the console answers only to its own names."),
            Refused::Host { given, allowed } => write!(
                f,
                "This console answers only to the names it is served under ({allowed}; BATON_ADMIN_URL adds a \
                 public one), not to `{given}`: a page of another site that points its name here may not read it."
            ),
            Refused::Origin(origin) => write!(
                f,
                "This form was sent from `{origin}`, not from the console's own pages: it was refused and changed nothing."
            ),
            Refused::FetchSite(site) => write!(
                f,
                "This form was sent from another site (Sec-Fetch-Site: {site}): it was refused and changed nothing."
            ),
            Refused::Unsaid => f.write_str(
                "A POST must say it comes from the console's own pages: browsers send `Origin` or \
                 `Sec-Fetch-Site`; a script adds `Origin: http://HOST:PORT` (the console's own address).",
            ),
        }
    }
}

/// Whether a POST to `host` comes from the console's own pages: its
/// `Origin`, when it names one, is `http(s)://` that same host, and its
/// `Sec-Fetch-Site`, when it has one, is `same-origin` or `none`; one of the
/// two must be there.
pub fn check_post(host: &Authority, origin: Option<&str>, fetch_site: Option<&str>) -> Result<(), Refused> {
    if let Some(site) = fetch_site {
        let site = site.trim().to_ascii_lowercase();
        if site != "same-origin" && site != "none" {
            return Err(Refused::FetchSite(site));
        }
    }
    // `Origin: null` names no origin: browsers send it for a page whose
    // referrer policy is `no-referrer`, for their own pages as for others'
    // (a sandboxed frame, a `data:` URL); `Sec-Fetch-Site` tells them apart.
    match origin.filter(|o| o.trim() != "null") {
        Some(origin) => {
            let lower = origin.trim().to_ascii_lowercase();
            let authority = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
            match authority.and_then(Authority::parse) {
                Some(a) if a.same_as(host) => Ok(()),
                _ => Err(Refused::Origin(origin.to_string())),
            }
        }
        None if fetch_site.is_some() => Ok(()),
        None => Err(Refused::Unsaid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(text: &str) -> Authority {
        Authority::parse(text).unwrap_or_else(|| panic!("{text} parses"))
    }

    #[test]
    fn authorities_read_as_browsers_send_them_and_nothing_else_does() {
        assert_eq!(a("LocalHost:8080"), Authority { host: "localhost".into(), port: Some(8080) });
        assert_eq!(a("[::1]"), Authority { host: "[::1]".into(), port: None });
        assert_eq!(a("[::1]:9"), Authority { host: "[::1]".into(), port: Some(9) });
        assert_eq!(a("10.0.0.5:80").to_string(), "10.0.0.5:80");
        for bad in ["", ":80", "h:", "h:+80", "h:99999", "u@h", "h/x", "h:80:81", "[::1", "[]:1", "h :80", "h\t"] {
            assert_eq!(Authority::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Authority::of("[::1]:8080".parse().unwrap()), a("[::1]:8080"));
        assert_eq!(Authority::of("127.0.0.1:0".parse().unwrap()), a("127.0.0.1:0"));
    }

    #[test]
    fn loopback_names_pass_on_any_port_and_configured_ones_exactly() {
        let hosts = Hosts::new([a("10.0.0.5:8080"), a("console.example.org")]);
        for ok in ["localhost", "localhost:1", "127.0.0.1:8080", "[::1]:80", "LOCALHOST:8080", "10.0.0.5:8080"] {
            assert!(hosts.check(Some(ok)).is_ok(), "{ok}");
        }
        for ok in ["console.example.org", "console.example.org:443", "Console.Example.Org:80"] {
            assert!(hosts.check(Some(ok)).is_ok(), "a public name without a port: {ok}");
        }
        for bad in [
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.attacker.example:8080",
            "10.0.0.5:8081",
            "10.0.0.5",
            "console.example.org:8443",
            "127.0.0.2:8080",
            "localhost:8080@attacker.example",
        ] {
            let refused = hosts.check(Some(bad)).unwrap_err();
            assert!(matches!(&refused, Refused::Host { given, .. } if given == bad), "{bad}: {refused:?}");
            assert!(refused.to_string().contains(&format!("`{bad}`")), "{refused}");
        }
        assert_eq!(hosts.check(None), Err(Refused::NoHost));
    }

    #[test]
    fn a_post_comes_from_the_same_host_or_says_it_is_same_origin() {
        let host = a("127.0.0.1:8080");
        assert_eq!(check_post(&host, Some("http://127.0.0.1:8080"), None), Ok(()));
        assert_eq!(check_post(&host, Some("http://127.0.0.1:8080"), Some("same-origin")), Ok(()));
        assert_eq!(check_post(&host, None, Some("same-origin")), Ok(()));
        assert_eq!(check_post(&host, None, Some("none")), Ok(()), "typed or bookmarked by the person");
        assert_eq!(check_post(&a("console.example.org"), Some("https://console.example.org"), None), Ok(()));
        for origin in ["http://attacker.example:8080", "http://localhost:8080", "http://127.0.0.1:8081", "file://"] {
            assert_eq!(check_post(&host, Some(origin), None), Err(Refused::Origin(origin.into())), "{origin}");
        }
        assert_eq!(check_post(&host, Some("null"), Some("same-origin")), Ok(()), "a no-referrer page of its own");
        assert_eq!(check_post(&host, Some("null"), Some("cross-site")), Err(Refused::FetchSite("cross-site".into())));
        assert_eq!(check_post(&host, Some("null"), None), Err(Refused::Unsaid), "null names no origin");
        for site in ["cross-site", "same-site"] {
            assert_eq!(check_post(&host, None, Some(site)), Err(Refused::FetchSite(site.into())));
            let refused = check_post(&host, Some("http://127.0.0.1:8080"), Some(site));
            assert_eq!(refused, Err(Refused::FetchSite(site.into())), "both must agree");
        }
        assert_eq!(check_post(&host, None, None), Err(Refused::Unsaid));
        assert!(Refused::Unsaid.to_string().contains("Origin"));
    }

    #[test]
    fn the_public_url_is_a_scheme_and_an_authority() {
        let url = PublicUrl::parse("https://Console.Example.org/").unwrap();
        assert_eq!(url, PublicUrl { https: true, authority: a("console.example.org") });
        assert_eq!(PublicUrl::parse("http://10.0.0.5:8080").unwrap().authority, a("10.0.0.5:8080"));
        for bad in ["console.example.org", "ftp://h", "https://h/console", "https://u@h", "https://", "https://h:x"] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
