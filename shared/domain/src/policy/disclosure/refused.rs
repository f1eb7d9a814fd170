//! Redacting what intake refuses: a refused body kept for an operator, and the reason
//! text that travels with it, both under the strictest policy.

use super::{redact_text, DisclosurePolicy};

// ---------------------------------------------------------------------------
// Refused bodies
//
// A body intake refuses never reaches an agent, but it is kept for an
// operator (in `baton.dead`) and its refusal reason travels in a header and a
// reply. Neither may carry what the policy would have removed from a valid
// request. No target was chosen for a refused body, so the strictest policy
// applies: secrets and personal identifiers alike.
// ---------------------------------------------------------------------------

/// How much of a refused body is kept for an operator: enough to see what
/// was wrong, bounded so a huge body does not become a huge dead letter.
pub const REFUSED_BODY_KEPT_BYTES: usize = 64 * 1024;

/// How much of a refused body is scanned: the largest body a valid request
/// may have, so every secret a valid body could hold is found before the
/// text is cut.
const REFUSED_BODY_SCANNED_BYTES: usize = crate::protocol::request::MAX_BODY_BYTES;

/// Text about a refused message (its reason, say) with every secret and
/// personal identifier replaced.
#[must_use]
pub fn redact_strictly(text: &str) -> String {
    redact_text(text, &DisclosurePolicy::default()).0
}

/// A refused body as it may be kept: read as UTF-8 (invalid bytes become
/// U+FFFD), redacted strictly, and cut to `keep` bytes with a note saying how
/// large the body was. A clean body under `keep` comes back unchanged.
#[must_use]
pub fn redact_refused_body(body: &[u8], keep: usize) -> Vec<u8> {
    let scanned = &body[..body.len().min(REFUSED_BODY_SCANNED_BYTES)];
    let text = redact_strictly(&String::from_utf8_lossy(scanned));
    if text.len() <= keep && scanned.len() == body.len() {
        return text.into_bytes();
    }
    let mut cut = keep.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n[cut: the body had {} bytes]", &text[..cut], body.len()).into_bytes()
}
