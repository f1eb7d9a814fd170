//! The bridge's `HandoffRequest`: the message a chat bridge publishes when a
//! user's request should be handed to an agent (see docs/bridge-protocol.md#requests).
//!
//! [`parse_request`] is the single gate between raw queue bytes and the typed
//! request. It refuses anything Baton should not act on and, when it refuses,
//! still hands back whatever identifies the sender (handoff id, chat id,
//! language) so a `failed` reply can reach the user instead of silence.
//!
//! The checks run cheapest and most dangerous first: size, UTF-8, nesting
//! depth, then JSON, then shape, then field values. The shape is the
//! contract's, as written: every field it marks required must be present
//! (lists included: a bridge with nothing to say sends `[]`), objects must be
//! objects and words must be strings (`strict.rs`); unknown fields are
//! ignored. A refusal names the field by its full path
//! (`context.userMemories[3].sensitivity`).
//!
//! This file holds the request types and the refusal; [`parse_request`] and its
//! checks live in `parse.rs`, the strict reader in `strict.rs`, the sample
//! request in `sample.rs`, and [`HandoffEvent`], the names of a stored
//! request's own log, in `event.rs`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::protocol::contract::TIMESTAMP_PATTERN;
use crate::protocol::language::Language;
use crate::wire_enum;

mod event;
mod parse;
mod sample;
mod strict;
#[cfg(test)]
mod tests;

pub use event::HandoffEvent;
pub use parse::{parse_request, refused_unread};
use parse::{salvage_chat_id, salvage_id, salvage_language};
pub use sample::sample_request_json;

/// Largest body Baton will look at (1 MiB); anything bigger is dead-lettered
/// unread so one oversized message cannot exhaust a worker's memory.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Deepest `[`/`{` nesting accepted, counting the top-level object as 1.
/// Kept well under `serde_json`'s own recursion limit (128) so a hostile body
/// gets our clear reason rather than a parser error.
pub const MAX_NESTING: usize = 64;

/// Longest accepted handoff id, in characters. The id is the idempotency key
/// and ends up in logs, queue headers and database keys.
const MAX_ID_CHARS: usize = 128;

wire_enum! {
    /// Where the request came from.
    pub enum Source { Weixin => "weixin", Admin => "admin", System => "system" }
}

wire_enum! {
    /// Which agent profile should take the handoff.
    pub enum TargetAgent {
        Codex => "codex",
        QwenCode => "qwen_code",
        ClaudeCode => "claude_code",
        DocsAgent => "docs_agent",
        /// No model runs; an operator pastes the result.
        Manual => "manual",
    }
}

wire_enum! {
    /// Lifecycle of a handoff, shared by requests, events and replies.
    pub enum HandoffStatus {
        /// Stored for review, never run.
        Draft => "draft",
        Requested => "requested",
        Accepted => "accepted",
        Running => "running",
        Blocked => "blocked",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

wire_enum! {
    /// The statuses a bridge may send: it only ever creates handoffs, so any
    /// later status would mean driving Baton's state machine from outside.
    pub enum RequestStatus {
        Requested => "requested",
        /// Stored for review, never run.
        Draft => "draft",
    }
}

impl From<RequestStatus> for HandoffStatus {
    fn from(status: RequestStatus) -> Self {
        match status {
            RequestStatus::Requested => HandoffStatus::Requested,
            RequestStatus::Draft => HandoffStatus::Draft,
        }
    }
}

impl HandoffStatus {
    /// True once nothing more will happen to the handoff.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

wire_enum! {
    /// What kind of work the user asked for.
    pub enum TaskType {
        CodeTask => "code_task",
        DocsTask => "docs_task",
        ResearchTask => "research_task",
        DebugTask => "debug_task",
        PlanningTask => "planning_task",
        Other => "other",
    }
}

wire_enum! {
    /// How urgently the user wants the result.
    pub enum Priority { Low => "low", Normal => "normal", High => "high" }
}

wire_enum! {
    /// Who said a conversation turn.
    pub enum Role { User => "user", Assistant => "assistant", System => "system" }
}

wire_enum! {
    /// Which memory store a context memory came from.
    pub enum MemoryScope {
        User => "user",
        Project => "project",
        Session => "session",
        AgentRuntime => "agent_runtime",
    }
}

wire_enum! {
    /// How careful Baton must be before letting a memory leave.
    pub enum Sensitivity { Low => "low", Medium => "medium", High => "high" }
}

/// One handoff as the bridge sent it (docs/bridge-protocol.md#requests), on
/// `baton.bridge.requests`, with `message_id` = its `id`. Unknown fields are
/// ignored, and `null` stands for an absent optional field.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct HandoffRequest {
    /// The idempotency key: at most one run per id.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    pub source: Source,
    pub target_agent: TargetAgent,
    pub status: RequestStatus,
    /// What the user asked for; not blank.
    #[schemars(regex(pattern = r"\S"))]
    pub user_intent: String,
    pub task_type: TaskType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub project_id: Option<String>,
    pub priority: Priority,
    pub context: ContextPackage,
    pub constraints: Constraints,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub callback: Option<Callback>,
    /// The conversation this request takes turns in, when the bridge names
    /// one; otherwise its chat (`callback.replyToChatId`). See docs/bridge-protocol.md#conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    #[schemars(length(min = 1, max = 128))]
    pub conversation_key: Option<String>,
    /// RFC 3339.
    #[schemars(extend("format" = "date-time"), regex(pattern = TIMESTAMP_PATTERN))]
    pub created_at: String,
    /// RFC 3339.
    #[schemars(extend("format" = "date-time"), regex(pattern = TIMESTAMP_PATTERN))]
    pub updated_at: String,
}

impl HandoffRequest {
    /// The chat a reply should go to, if the bridge asked for one.
    #[must_use]
    pub fn reply_to_chat_id(&self) -> Option<&str> {
        self.callback.as_ref()?.reply_to_chat_id.as_deref()
    }

    /// The conversation whose runs this request's run takes turns with:
    /// `conversationKey` when the bridge sent one, else the chat.
    #[must_use]
    pub fn conversation_key(&self) -> Option<&str> {
        self.conversation_key.as_deref().or_else(|| self.reply_to_chat_id())
    }

    /// The language every user-facing word about this handoff must use.
    #[must_use]
    pub fn language(&self) -> Language {
        self.constraints.language
    }

    /// Whether a worker should start a run. Drafts are stored but not run.
    #[must_use]
    pub fn is_runnable(&self) -> bool {
        self.status == RequestStatus::Requested
    }
}

/// The context the bridge gathered (already filtered on its side).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ContextPackage {
    pub id: String,
    pub user_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub project_id: Option<String>,
    // The lists are required (docs/bridge-protocol.md#requests): a bridge with nothing to say
    // sends `[]`, and a missing list means a bridge that does not follow it.
    pub recent_conversation: Vec<ConversationTurn>,
    pub user_memories: Vec<ContextMemoryRef>,
    pub project_memories: Vec<ContextMemoryRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub session_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub agent_runtime_summary: Option<String>,
    pub redactions: Vec<Redaction>,
}

/// One message of the recent chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ConversationTurn {
    pub role: Role,
    pub content: String,
    pub created_at: String,
}

/// A memory the bridge chose to share, with its sensitivity label.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct ContextMemoryRef {
    pub id: String,
    pub scope: MemoryScope,
    #[serde(rename = "type")]
    pub r#type: String,
    pub content: String,
    pub sensitivity: Sensitivity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub source: Option<String>,
}

/// A record that something was removed from the context, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct Redaction {
    pub field: String,
    pub reason: String,
}

/// What the agent may and may not do, and how to answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct Constraints {
    pub language: Language,
    pub allowed_actions: Vec<String>,
    pub forbidden_actions: Vec<String>,
    pub require_confirmation_for: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub expected_output: Option<String>,
}

/// Where progress and the final reply should go.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct Callback {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub status_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional = nullable)]
    pub reply_to_chat_id: Option<String>,
}

/// Why a body was refused, plus what could still be read from it so the
/// sender can be told (a failed reply needs handoffId and replyToChatId).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct RequestError {
    pub reason: String,
    pub handoff_id: Option<String>,
    pub reply_to_chat_id: Option<String>,
    pub language: Option<Language>,
}

/// The longest refusal reason kept, in bytes. A reason may quote a field of
/// any size (serde names an unknown variant in full), and it travels in a
/// message header, which must fit in one AMQP frame, and in a chat message.
pub const MAX_REASON_BYTES: usize = 1024;

/// `reason` cut to [`MAX_REASON_BYTES`] on a character boundary, ending with
/// an ellipsis when cut.
#[must_use]
pub fn bounded_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_BYTES {
        return reason.to_string();
    }
    let mut cut = MAX_REASON_BYTES - '…'.len_utf8();
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &reason[..cut])
}

impl RequestError {
    /// A refusal with nothing salvaged: the body was not readable JSON.
    fn bare(reason: String) -> Self {
        Self { reason, handoff_id: None, reply_to_chat_id: None, language: None }
    }

    /// A refusal of a JSON body, keeping whatever identifies the sender.
    fn salvaged(reason: String, body: &Value) -> Self {
        Self {
            reason,
            handoff_id: salvage_id(body),
            reply_to_chat_id: salvage_chat_id(body),
            language: salvage_language(body),
        }
    }
}
