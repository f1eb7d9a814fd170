//! Status callbacks a bridge can trust: which URLs a callback may go to, how
//! its POST is signed, and what may be said about its URL.
//!
//! The `[callbacks]` section of the profiles file:
//!
//! ```toml
//! [callbacks]
//! allowed_origins = ["https://bridge.example.com", "http://127.0.0.1:8088"]
//!
//! [callbacks.sources.weixin]          # a HandoffRequest.source
//! secret_env = "BATON_CALLBACK_SECRET_WEIXIN"
//! ```
//!
//! The file names the *variable* holding each source's `whsec_…` secret, never
//! the secret: the file is stored in Postgres and shown to operators, the
//! secret stays in the relay's environment. With no allow-list, or no secret
//! for a request's source, its callbacks are refused ([`Refusal`]).
//!
//! # Layout
//! - this file: the section, the checks ([`CallbacksConfig::check`]), the
//!   stable `webhook-id` and the URL as it may be logged ([`loggable_url`]);
//! - [`sign`]: the Standard Webhooks secret and signature.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use url::Url;

use crate::protocol::request::Source;

pub mod sign;

/// The `[callbacks]` section of the profiles file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallbacksConfig {
    /// Origins (`scheme://host[:port]`) a `callback.statusUrl` may point at.
    pub allowed_origins: Vec<String>,
    /// Per request source (`weixin`, `admin`, `system`): how its callbacks are signed.
    pub sources: BTreeMap<String, SourceSigning>,
}

/// How one source's callbacks are signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSigning {
    /// The name of the environment variable (of the relay's process) holding
    /// the `whsec_<base64>` secret.
    pub secret_env: String,
}

/// Why a request's callbacks are not sent at all (they are not retried).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the profiles file allows no callback origin ([callbacks] allowed_origins is empty)")]
    NoAllowList,
    #[error("the callback URL is not an absolute http or https URL")]
    NotHttp,
    #[error("the callback URL's origin {0} is not in [callbacks] allowed_origins")]
    OriginNotAllowed(String),
    #[error("no signing secret is configured for source `{0}` ([callbacks.sources.{0}] secret_env)")]
    NoSecret(String),
    #[error("the signing secret's variable {0} is not set where the relay runs")]
    SecretUnset(String),
    #[error("the variable {0} does not hold a usable signing secret: {1}")]
    SecretInvalid(String, sign::SecretError),
}

impl CallbacksConfig {
    /// A bridge's own callbacks (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other): its origins, and its secret for
    /// each source it sends (none: every callback refused).
    #[must_use]
    pub fn for_bridge(bridge: &crate::protocol::bridges::Bridge) -> CallbacksConfig {
        let sources = match &bridge.callback_secret_env {
            Some(env) => bridge
                .sources
                .iter()
                .map(|s| (s.as_str().to_string(), SourceSigning { secret_env: env.clone() }))
                .collect(),
            None => BTreeMap::new(),
        };
        CallbacksConfig { allowed_origins: bridge.callback_origins.clone(), sources }
    }

    /// Whether a callback of a request from `source` may go to `url`, and if
    /// so, the variable holding the secret to sign it with.
    pub fn check(&self, source: &str, url: &str) -> Result<&str, Refusal> {
        if self.allowed_origins.is_empty() {
            return Err(Refusal::NoAllowList);
        }
        let url = http_url(url).ok_or(Refusal::NotHttp)?;
        let origin = url.origin();
        let allowed = self.allowed_origins.iter().filter_map(|o| Url::parse(o).ok()).any(|o| o.origin() == origin);
        if !allowed {
            return Err(Refusal::OriginNotAllowed(origin.ascii_serialization()));
        }
        match self.sources.get(source) {
            Some(signing) => Ok(&signing.secret_env),
            None => Err(Refusal::NoSecret(source.to_string())),
        }
    }

    /// What is wrong with the section.
    #[must_use]
    pub fn problems(&self) -> Vec<String> {
        let mut problems: Vec<String> = self.allowed_origins.iter().filter_map(|o| origin_problem(o)).collect();
        for (source, signing) in &self.sources {
            if Source::parse(source).is_none() {
                problems.push(format!(
                    "callbacks `sources.{source}` is not a request source ({})",
                    Source::ALL.map(Source::as_str).join(", ")
                ));
            }
            let name = &signing.secret_env;
            if name.is_empty() || name.contains(['=', '\0']) || name.starts_with("whsec_") {
                problems.push(format!(
                    "callbacks `sources.{source}.secret_env` must name an environment variable, not hold the secret"
                ));
            }
        }
        problems
    }
}

/// An allow-list entry is an origin: http(s), a host, maybe a port, nothing else.
fn origin_problem(entry: &str) -> Option<String> {
    let bare = |u: &Url| {
        u.path() == "/"
            && u.query().is_none()
            && u.fragment().is_none()
            && u.username().is_empty()
            && u.password().is_none()
    };
    match http_url(entry) {
        Some(u) if bare(&u) => None,
        _ => Some(format!("callbacks `allowed_origins` entry `{entry}` is not an origin like https://bridge.example.com or http://127.0.0.1:8088")),
    }
}

fn http_url(text: &str) -> Option<Url> {
    let url = Url::parse(text.trim()).ok()?;
    (matches!(url.scheme(), "http" | "https") && url.host_str().is_some()).then_some(url)
}

/// The URL as it may be logged, stored in an event or shown: scheme, host,
/// port and path; never the query string, the fragment or user info.
#[must_use]
pub fn loggable_url(url: &str) -> String {
    match http_url(url) {
        Some(u) => format!("{}{}", u.origin().ascii_serialization(), u.path()),
        None => "(not an http URL)".to_string(),
    }
}

/// The `webhook-id` of the callback for the status `seq` of a handoff: the
/// same for every retry (a receiver de-duplicates on it), different for
/// every status, and free of `.` whatever the bridge's handoff id holds (the
/// id is part of the signed `{id}.{timestamp}.{body}`).
#[must_use]
pub fn webhook_id(handoff_id: &str, seq: i64) -> String {
    let digest = Sha256::digest(format!("status:{handoff_id}:{seq}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("msg_{hex}")
}

#[cfg(test)]
mod tests;
