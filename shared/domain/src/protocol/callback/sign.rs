//! The Standard Webhooks signature (symmetric, `v1`): HMAC-SHA256 of
//! `{webhook-id}.{webhook-timestamp}.{body}` with the secret's bytes, sent
//! base64-encoded as `v1,<signature>` in `webhook-signature`. The secret is
//! written `whsec_<base64>` and holds 24 to 64 random bytes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";

const PREFIX: &str = "whsec_";
const MIN_BYTES: usize = 24;
const MAX_BYTES: usize = 64;

/// A signing secret's key bytes. Its `Debug` prints nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Why a text is not a signing secret (the text itself is never repeated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("it does not start with `whsec_`")]
    NoPrefix,
    #[error("what follows `whsec_` is not base64")]
    NotBase64,
    #[error("it holds {0} bytes; a secret holds {MIN_BYTES} to {MAX_BYTES}")]
    Length(usize),
}

impl Secret {
    /// Reads `whsec_<base64>` (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let encoded = text.trim().strip_prefix(PREFIX).ok_or(SecretError::NoPrefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| SecretError::NotBase64)?;
        if !(MIN_BYTES..=MAX_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self(key))
    }

    /// A secret of these key bytes, written `whsec_<base64>`.
    #[must_use]
    pub fn encode(key: &[u8]) -> String {
        format!("{PREFIX}{}", STANDARD.encode(key))
    }
}

/// The `webhook-signature` value: `v1,<base64 HMAC-SHA256>`.
#[must_use]
pub fn signature(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.0).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The three headers of a signed POST of `body`, sent at `timestamp` (Unix seconds).
#[must_use]
pub fn headers(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> [(&'static str, String); 3] {
    [
        (HEADER_ID, id.to_string()),
        (HEADER_TIMESTAMP, timestamp.to_string()),
        (HEADER_SIGNATURE, signature(secret, id, timestamp, body)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_example_signs_to_its_published_signature() {
        // Two examples the Standard Webhooks libraries test against.
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signed = signature(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(signed, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        let secret = Secret::parse("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        assert_eq!(
            signature(&secret, "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553, body),
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
        );
    }

    #[test]
    fn any_change_to_id_timestamp_or_body_changes_the_signature() {
        let secret = Secret::parse(&Secret::encode(&[7; 32])).unwrap();
        let base = signature(&secret, "msg_1", 1700000000, b"{}");
        assert_ne!(base, signature(&secret, "msg_2", 1700000000, b"{}"));
        assert_ne!(base, signature(&secret, "msg_1", 1700000001, b"{}"));
        assert_ne!(base, signature(&secret, "msg_1", 1700000000, b"{ }"));
        assert_ne!(base, signature(&Secret::parse(&Secret::encode(&[8; 32])).unwrap(), "msg_1", 1700000000, b"{}"));
        let names: Vec<&str> = headers(&secret, "msg_1", 1700000000, b"{}").iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["webhook-id", "webhook-timestamp", "webhook-signature"]);
    }

    #[test]
    fn a_secret_must_be_whsec_base64_of_24_to_64_bytes_and_never_prints() {
        assert_eq!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Err(SecretError::NoPrefix));
        assert_eq!(Secret::parse("whsec_not base64!"), Err(SecretError::NotBase64));
        assert_eq!(Secret::parse(&Secret::encode(&[1; 16])), Err(SecretError::Length(16)));
        assert_eq!(Secret::parse(&Secret::encode(&[1; 65])), Err(SecretError::Length(65)));
        let secret = Secret::parse(&format!("  {}\n", Secret::encode(&[1; 64]))).unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(…)");
    }
}
