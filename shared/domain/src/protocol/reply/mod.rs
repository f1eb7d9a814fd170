//! What the chat user reads when a handoff ends (docs/bridge-protocol.md#statuses-and-replies, `BridgeReply`).
//!
//! Two jobs live here, both pure:
//! - [`humanize`] turns an [`Outcome`] into one friendly message in the
//!   reply's language. It never shows error codes or internal ids: those go in
//!   the reply's structured `error`/`result` fields, not in the chat.
//! - [`split_parts`] cuts that message into the `parts` a bridge sends as
//!   separate chat messages, within a channel's [`ChannelLimits`].
//!
//! Cutting prefers the most natural place that still fills a part well:
//! paragraph breaks, then line breaks, then sentence ends, then spaces, and
//! only as a last resort an arbitrary character boundary. Fenced code blocks
//! and URLs are kept whole whenever they fit in one part, because half a URL
//! is useless and half a code block is misleading.
//!
//! This file holds the humanizing; cutting into parts lives in `parts.rs`.

use crate::protocol::contract::ErrorCode;
use crate::protocol::language::Language;
use crate::protocol::request::HandoffStatus;
use crate::wire_enum;

mod parts;
#[cfg(test)]
mod tests;

pub(crate) use parts::natural_cut;
pub use parts::{split_parts, truncation_note, ChannelLimits};

/// How a handoff ended, as the collector sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Completed { final_text: String },
    Failed { code: ErrorCode, message: String },
    Blocked { message: String },
    Cancelled { reason: Option<String> },
}

impl Outcome {
    /// The `status` field of the bridge reply.
    pub fn status(&self) -> HandoffStatus {
        self.reply_status().into()
    }

    /// The `status` field of the bridge reply, as its own type.
    pub fn reply_status(&self) -> ReplyStatus {
        match self {
            Outcome::Completed { .. } => ReplyStatus::Completed,
            Outcome::Failed { .. } => ReplyStatus::Failed,
            Outcome::Blocked { .. } => ReplyStatus::Blocked,
            Outcome::Cancelled { .. } => ReplyStatus::Cancelled,
        }
    }
}

wire_enum! {
    /// How a handoff ended, as its reply says.
    pub enum ReplyStatus {
        Completed => "completed",
        Failed => "failed",
        Blocked => "blocked",
        Cancelled => "cancelled",
    }
}

impl From<ReplyStatus> for HandoffStatus {
    fn from(status: ReplyStatus) -> Self {
        match status {
            ReplyStatus::Completed => HandoffStatus::Completed,
            ReplyStatus::Failed => HandoffStatus::Failed,
            ReplyStatus::Blocked => HandoffStatus::Blocked,
            ReplyStatus::Cancelled => HandoffStatus::Cancelled,
        }
    }
}

/// A humanized chat message for the outcome, in the requested language.
///
/// A completed handoff's final text is passed through (trimmed): the agents
/// already wrote it for the user. The other outcomes get a short, friendly
/// sentence with the human-readable detail; the error code stays out of it.
pub fn humanize(outcome: &Outcome, language: Language) -> String {
    match outcome {
        Outcome::Completed { final_text } => completed_text(final_text, language),
        Outcome::Failed { message, .. } => with_detail(FAILED, message, language),
        Outcome::Blocked { message } => with_detail(BLOCKED, message, language),
        Outcome::Cancelled { reason } => with_detail(CANCELLED, reason.as_deref().unwrap_or_default(), language),
    }
}

/// A fixed phrase in both reply languages, without final punctuation.
#[derive(Clone, Copy)]
struct Phrase {
    en: &'static str,
    zh_cn: &'static str,
}

impl Phrase {
    fn pick(self, language: Language) -> &'static str {
        match language {
            Language::En => self.en,
            Language::ZhCn => self.zh_cn,
        }
    }
}

const FAILED: Phrase =
    Phrase { en: "Sorry, I couldn't finish this request", zh_cn: "抱歉，这次请求没有完成" };

const BLOCKED: Phrase = Phrase {
    en: "This request is paused and needs someone to step in",
    zh_cn: "这次请求暂停了，需要有人协助处理",
};

const CANCELLED: Phrase = Phrase { en: "This request was cancelled", zh_cn: "这次请求已取消" };

const NOTHING_TO_REPORT: Phrase =
    Phrase { en: "Done. There was nothing more to report", zh_cn: "已完成，没有需要补充的内容" };

fn completed_text(final_text: &str, language: Language) -> String {
    let text = final_text.trim();
    // A blank final text would otherwise reach the chat as an empty message.
    if text.is_empty() {
        return with_detail(NOTHING_TO_REPORT, "", language);
    }
    text.to_string()
}

/// `lead: detail`, or just `lead.` when there is no detail to give.
fn with_detail(lead: Phrase, detail: &str, language: Language) -> String {
    let lead = lead.pick(language);
    let detail = detail.trim();
    let (colon, stop) = match language {
        Language::En => (": ", "."),
        Language::ZhCn => ("：", "。"),
    };
    if detail.is_empty() {
        format!("{lead}{stop}")
    } else {
        format!("{lead}{colon}{detail}")
    }
}
