//! The disclosure policy: what a target agent may see of a handoff
//! (docs/bridge-protocol.md#the-bridge-protocol-completed, "Disclosure policy").
//!
//! The bridge already filters on its side, but Baton hands the context to
//! agents and their tools, so it filters again rather than trust that. Two
//! things happen:
//!
//! - memories labelled more sensitive than [`DisclosurePolicy::max_sensitivity`]
//!   are dropped whole;
//! - every free-text field an agent is shown (the user intent, the context's
//!   texts, the constraints' lists and expected output) is scanned for
//!   secrets (API keys, tokens, passwords, private keys, under any key name
//!   including camel case) and personal identifiers (mobile and landline
//!   numbers, ID and bank card numbers, however grouped; e-mail addresses),
//!   and each one is replaced by a placeholder that says what was there, so
//!   the agent still understands the sentence.
//!
//! Every removal is recorded as a [`Redaction`], both in the result and in the
//! request's own `context.redactions`, so the agent knows something is missing
//! and an operator can see why.
//!
//! Detection errs on the side of removing: a false positive costs the agent a
//! word, a false negative leaks a credential. The exceptions are shapes that
//! are everyday in engineering chats and never secret on their own (version
//! strings, dates, timestamps, UUIDs, commit hashes, longer digit runs such as
//! order numbers); the tests pin each of those down.
//!
//! This file holds the policy, the findings and [`apply`]; the detectors live
//! in `detect.rs` (the engine and boundaries), `secrets.rs` and `personal.rs`;
//! refused bodies in `refused.rs`; the test corpus in `corpus.rs`.

mod detect;
mod personal;
mod refused;
mod secrets;

#[cfg(test)]
mod corpus;
#[cfg(test)]
mod tests;

pub use refused::{redact_refused_body, redact_strictly, REFUSED_BODY_KEPT_BYTES};

use serde::{Deserialize, Serialize};

use crate::protocol::request::{Constraints, ContextMemoryRef, ContextPackage, HandoffRequest, Redaction, Sensitivity};
use detect::{find_hits, splice};

// ---------------------------------------------------------------------------
// Policy and findings
// ---------------------------------------------------------------------------

/// What a target agent may see. Read from TOML with snake_case keys; every
/// field may be omitted and takes its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DisclosurePolicy {
    /// Memories labelled above this are dropped. Default: `medium`.
    pub max_sensitivity: Sensitivity,
    /// Remove API keys, tokens and passwords. Default: `true`.
    pub redact_secrets: bool,
    /// Remove phone, ID and bank card numbers and e-mail addresses. Default: `true`.
    pub redact_personal: bool,
}

impl Default for DisclosurePolicy {
    fn default() -> Self {
        Self { max_sensitivity: Sensitivity::Medium, redact_secrets: true, redact_personal: true }
    }
}

/// One kind of thing that was removed from a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finding {
    ApiKey,
    Token,
    UrlPassword,
    Password,
    PrivateKey,
    Phone,
    ChineseId,
    BankCard,
    Email,
}

impl Finding {
    /// Every kind, secrets first.
    pub const ALL: [Self; 9] = [
        Self::ApiKey,
        Self::Token,
        Self::UrlPassword,
        Self::Password,
        Self::PrivateKey,
        Self::Phone,
        Self::ChineseId,
        Self::BankCard,
        Self::Email,
    ];

    /// What was removed, in words; used as the redaction's `reason`.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::ApiKey => "API key",
            Self::Token => "access token",
            Self::UrlPassword => "password in URL",
            Self::Password => "password",
            Self::PrivateKey => "private key",
            Self::Phone => "phone number",
            Self::ChineseId => "mainland China ID number",
            Self::BankCard => "bank card number",
            Self::Email => "e-mail address",
        }
    }

    /// The text that takes the removed value's place: `[redacted <reason>]`.
    #[must_use]
    pub fn placeholder(self) -> &'static str {
        match self {
            Self::ApiKey => "[redacted API key]",
            Self::Token => "[redacted access token]",
            Self::UrlPassword => "[redacted password in URL]",
            Self::Password => "[redacted password]",
            Self::PrivateKey => "[redacted private key]",
            Self::Phone => "[redacted phone number]",
            Self::ChineseId => "[redacted mainland China ID number]",
            Self::BankCard => "[redacted bank card number]",
            Self::Email => "[redacted e-mail address]",
        }
    }

    /// Personal identifiers are governed by `redact_personal`, the rest by
    /// `redact_secrets`.
    #[must_use]
    pub fn is_personal(self) -> bool {
        matches!(self, Self::Phone | Self::ChineseId | Self::BankCard | Self::Email)
    }
}

// ---------------------------------------------------------------------------
// Filtering a request
// ---------------------------------------------------------------------------

/// The request as the target may see it, with every removal recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    pub request: HandoffRequest,
    /// This filter's removals only (the bridge's own stay in the request).
    pub removed: Vec<Redaction>,
}

/// Applies `policy` to every free-text field an agent is shown (the user
/// intent, every text of the context, and every constraint: allowed and
/// forbidden actions, what needs confirmation, the expected output), and
/// drops memories above `max_sensitivity`.
///
/// Each removal becomes one [`Redaction`], appended to `removed` and to the
/// returned request's `context.redactions` after those the bridge recorded.
/// Field paths follow the wire names: `userIntent`,
/// `context.recentConversation[2].content`, `context.userMemories[m-7]` (a
/// dropped memory) or `context.userMemories[m-7].content`,
/// `context.sessionSummary`, `context.agentRuntimeSummary`,
/// `constraints.allowedActions[0]`, `constraints.requireConfirmationFor[1]`,
/// `constraints.expectedOutput`. Memories are named by id, not index, because
/// dropping earlier ones shifts the indexes of the rest.
#[must_use]
pub fn apply(policy: &DisclosurePolicy, request: &HandoffRequest) -> Filtered {
    let mut filter = Filter { policy, removed: Vec::new() };
    let mut request = request.clone();
    filter.scrub("userIntent", &mut request.user_intent);
    filter.context(&mut request.context);
    filter.constraints(&mut request.constraints);
    request.context.redactions.extend(filter.removed.iter().cloned());
    Filtered { request, removed: filter.removed }
}

/// One pass of [`apply`]: the policy plus the removals recorded so far.
struct Filter<'a> {
    policy: &'a DisclosurePolicy,
    removed: Vec<Redaction>,
}

impl Filter<'_> {
    fn context(&mut self, context: &mut ContextPackage) {
        for (index, turn) in context.recent_conversation.iter_mut().enumerate() {
            self.scrub(&format!("context.recentConversation[{index}].content"), &mut turn.content);
        }
        self.memories("context.userMemories", &mut context.user_memories);
        self.memories("context.projectMemories", &mut context.project_memories);
        if let Some(summary) = &mut context.session_summary {
            self.scrub("context.sessionSummary", summary);
        }
        if let Some(summary) = &mut context.agent_runtime_summary {
            self.scrub("context.agentRuntimeSummary", summary);
        }
    }

    fn constraints(&mut self, constraints: &mut Constraints) {
        self.list("constraints.allowedActions", &mut constraints.allowed_actions);
        self.list("constraints.forbiddenActions", &mut constraints.forbidden_actions);
        self.list("constraints.requireConfirmationFor", &mut constraints.require_confirmation_for);
        if let Some(expected) = &mut constraints.expected_output {
            self.scrub("constraints.expectedOutput", expected);
        }
    }

    fn list(&mut self, list: &str, items: &mut [String]) {
        for (index, item) in items.iter_mut().enumerate() {
            self.scrub(&format!("{list}[{index}]"), item);
        }
    }

    /// Drops memories above the policy's sensitivity and scrubs the rest.
    fn memories(&mut self, list: &str, memories: &mut Vec<ContextMemoryRef>) {
        memories.retain_mut(|memory| {
            let field = format!("{list}[{}]", memory.id);
            if let Some(reason) = self.too_sensitive(memory.sensitivity) {
                self.record(field, reason);
                return false;
            }
            self.scrub(&format!("{field}.content"), &mut memory.content);
            true
        });
    }

    /// Why a memory of this sensitivity may not leave, if it may not.
    fn too_sensitive(&self, sensitivity: Sensitivity) -> Option<String> {
        let limit = self.policy.max_sensitivity;
        (rank(sensitivity) > rank(limit)).then(|| format!("sensitivity {sensitivity} is above {limit}"))
    }

    /// Redacts `text` in place and records one redaction per finding.
    fn scrub(&mut self, field: &str, text: &mut String) {
        let (redacted, findings) = redact_text(text, self.policy);
        if findings.is_empty() {
            return;
        }
        *text = redacted;
        for finding in findings {
            self.record(field.to_owned(), finding.reason().to_owned());
        }
    }

    fn record(&mut self, field: String, reason: String) {
        self.removed.push(Redaction { field, reason });
    }
}

/// `Sensitivity` carries no order of its own (it is a wire enum), so the
/// policy ranks it here.
fn rank(sensitivity: Sensitivity) -> u8 {
    match sensitivity {
        Sensitivity::Low => 0,
        Sensitivity::Medium => 1,
        Sensitivity::High => 2,
    }
}

// ---------------------------------------------------------------------------
// Redacting one text
// ---------------------------------------------------------------------------

/// Redacts one text; returns the new text and what was found, in order of
/// appearance (one entry per removed value).
///
/// Only the secret itself is replaced: `api_key=sk-…` keeps `api_key=`, and
/// `https://user:pw@host` keeps scheme, user and host, so the agent can still
/// tell what the text is about. Running it again on its own output finds
/// nothing more.
#[must_use]
pub fn redact_text(text: &str, policy: &DisclosurePolicy) -> (String, Vec<Finding>) {
    let hits = find_hits(text, policy);
    let findings = hits.iter().map(|hit| hit.finding).collect();
    (splice(text, &hits), findings)
}

/// The disclosure section of the profiles file: a default policy and one
/// per `targetAgent` that needs another.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DisclosureConfig {
    pub default: DisclosurePolicy,
    pub targets: std::collections::BTreeMap<String, DisclosurePolicy>,
}

impl DisclosureConfig {
    /// The policy for a request's target agent.
    pub fn for_target(&self, target: &str) -> &DisclosurePolicy {
        self.targets.get(target).unwrap_or(&self.default)
    }
}
