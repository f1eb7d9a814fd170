//! The public surface as types: the pieces of the bridge protocol that are
//! not a request, a status or a reply of their own (docs/bridge-protocol.md).
//!
//! Every message a bridge sends or receives is one Rust type with serde, and
//! Baton serializes and parses exactly that type. `baton contract` derives
//! the committed JSON Schemas (`schemars`) and TypeScript types (`ts-rs`) in
//! `contract/` from the same types, so what a bridge compiles against cannot
//! drift from what Baton does.
//!
//! # Layout
//! - the `type` tag of each message, one single-word enum per message, so a
//!   schema says `"const": "status"` and TypeScript `type: "status"`;
//! - [`ErrorCode`]: every `error.code` a `failed` reply can carry;
//! - [`TIMESTAMP_PATTERN`] and [`parse_timestamp`]: the one reading of an
//!   RFC 3339 time that the parser and the schemas share.
//!
//! The messages themselves live beside the code that builds or reads them:
//! `request::HandoffRequest`, `bridge::{BridgeStatus, BridgeReply,
//! StatusCallback}`, `conversation::question::BridgeQuestion`,
//! `conversation::answer::BridgeAnswer`, `conversation::cancel::BridgeCancel`.

use std::sync::LazyLock;

use chrono::{DateTime, FixedOffset};
use regex::Regex;

use crate::wire_enum;

/// RFC 3339's `date-time` (section 5.6) as a pattern, with its note's
/// lower-case letters but not its space separator (JSON Schema validators
/// refuse it): a numeric offset has its colon, its minutes and an ASCII sign. Written on every time a bridge sends (the
/// schemas say `"format": "date-time"` and this `pattern`), so a JSON Schema
/// validator's date-time (ajv's takes `+0800` and `+08`) and Baton's agree.
pub const TIMESTAMP_PATTERN: &str =
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$";

static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| Regex::new(TIMESTAMP_PATTERN).expect("a valid pattern"));

/// Reads an RFC 3339 time a bridge sent: [`TIMESTAMP_PATTERN`]'s shape, and
/// a real date and time (chrono).
///
/// # Errors
///
/// Why it is not one, in words.
pub fn parse_timestamp(raw: &str) -> Result<DateTime<FixedOffset>, String> {
    if !TIMESTAMP.is_match(raw) {
        return Err("not of the form 2025-06-06T09:30:00+08:00 (or Z)".to_string());
    }
    DateTime::parse_from_rfc3339(raw).map_err(|e| e.to_string())
}

wire_enum! {
    /// The `type` of a `BridgeStatus`.
    #[derive(Default)]
    pub enum StatusType { #[default] Status => "status" }
}

wire_enum! {
    /// The `type` of a `BridgeReply`.
    #[derive(Default)]
    pub enum ReplyType { #[default] Reply => "reply" }
}

wire_enum! {
    /// The `type` of a `BridgeQuestion`.
    #[derive(Default)]
    pub enum QuestionType { #[default] Question => "question" }
}

wire_enum! {
    /// The `type` of a `BridgeAnswer`.
    #[derive(Default)]
    pub enum AnswerType { #[default] Answer => "answer" }
}

wire_enum! {
    /// The `type` of a `BridgeCancel`.
    #[derive(Default)]
    pub enum CancelType { #[default] Cancel => "cancel" }
}

wire_enum! {
    /// Why a request failed: the `error.code` of a `failed` `BridgeReply`.
    /// The reply's `text` says it to the user in words; the code is for the
    /// bridge's own logic.
    pub enum ErrorCode {
        /// The request was refused at the door: its `message` names the field
        /// by its full path (`context.userMemories[3].sensitivity`).
        InvalidRequest => "invalid_request",
        /// No runnable agent profile is configured for the `targetAgent`.
        NoAgent => "no_agent",
        /// Its chat already has a live run and the route's strategy is `reject`.
        Busy => "busy",
        /// The run spent its budget (tokens, model calls, tool calls or wall clock).
        BudgetExhausted => "budget_exhausted",
        /// An agent used up its model rounds.
        RoundBudgetExhausted => "agent.round_budget_exhausted",
        /// An agent called a tool after it had finished the work.
        ToolAfterFinish => "agent.tool_after_finish",
        /// An agent stopped without finishing or handing off.
        NoClosingTool => "agent.no_closing_tool",
        /// An external agent ran past its time limit.
        AgentTimeout => "agent_timeout",
        /// An external agent wrote more output than it may.
        AgentOutputLimit => "agent_output_limit",
        /// An external agent exited with an error.
        AgentFailed => "agent_failed",
        /// An external agent was interrupted (its worker stopped) and its profile does not rerun it.
        AgentInterrupted => "agent_interrupted",
        /// An agent's model endpoint failed (an HTTP error, unreachable, timed
        /// out) after its retries; the run's `cause` has the endpoint's words.
        ModelUnavailable => "model_unavailable",
        /// Baton itself failed (database, broker, serialization); the journal has the detail.
        HostError => "host_error",
        /// An agent's profile could not be read (it changed to something this build cannot run).
        ProfileUnreadable => "host.profile_unreadable",
        /// An agent could not be started.
        ClaimFailed => "host.claim_failed",
        /// The agent's worker died too many times while running it.
        TooManyTakeovers => "host.too_many_takeovers",
        /// The run failed for a reason Baton did not name.
        Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_tag_is_one_word() {
        assert_eq!(serde_json::to_value(StatusType::default()).unwrap(), "status");
        assert_eq!(ReplyType::ALL.len() + QuestionType::ALL.len() + AnswerType::ALL.len() + CancelType::ALL.len(), 4);
        assert!(serde_json::from_value::<StatusType>(serde_json::json!("reply")).is_err());
    }

    #[test]
    fn the_codes_named_elsewhere_are_error_codes() {
        for code in [
            crate::policy::budget::BUDGET_EXHAUSTED,
            crate::protocol::conversation::strategy::BUSY,
            crate::policy::sandbox::codes::TIMEOUT,
        ] {
            assert!(ErrorCode::parse(code).is_some(), "{code}");
        }
        assert_eq!(ErrorCode::parse("something.new"), None);
    }

    #[test]
    fn a_timestamp_is_rfc_3339_with_a_full_offset() {
        for good in ["2025-06-06T09:30:00+08:00", "2025-06-06t01:30:00.123z", "2024-02-29T00:00:00-05:30"] {
            assert!(parse_timestamp(good).is_ok(), "{good}");
        }
        for bad in [
            "2025-06-06 01:30:00Z",
            "2025-06-06T09:30:00+0800",
            "2025-06-06T09:30:00+08",
            "2025-06-06T09:30:00\u{2212}08:00",
            "2025-06-06",
            "2025-02-30T00:00:00Z",
            "２０２５-06-06T09:30:00Z",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad}");
        }
    }
}
