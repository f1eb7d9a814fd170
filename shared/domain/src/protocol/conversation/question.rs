//! A question an agent asks its user (`ask_user`): its states, the
//! `BridgeQuestion` a bridge receives, and what the agent reads back.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use ts_rs::TS;

use crate::protocol::contract::QuestionType;
use crate::protocol::language::Language;
use crate::protocol::reply::{split_parts, ChannelLimits};
use crate::wire_enum;

/// How long a question waits for its answer unless the profile says otherwise.
pub const DEFAULT_ASK_TIMEOUT_SECS: u64 = 24 * 60 * 60;

wire_enum! {
    /// Where a question stands. Only an open question takes an answer.
    pub enum QuestionState {
        Open => "open",
        Answered => "answered",
        Expired => "expired",
    }
}

/// How long a question waits for its answer, given its profile's
/// `ask_timeout` (seconds), if it sets one.
pub fn timeout(ask_timeout: Option<u64>) -> std::time::Duration {
    std::time::Duration::from_secs(ask_timeout.unwrap_or(DEFAULT_ASK_TIMEOUT_SECS))
}

/// `question:<handoffId>:<questionId>` (docs/bridge-protocol.md#conversations).
pub fn message_id(handoff_id: &str, question_id: &str) -> String {
    format!("question:{handoff_id}:{question_id}")
}

/// What the fleet knows when it sends a question to the bridge.
#[derive(Debug, Clone)]
pub struct QuestionInput<'a> {
    pub handoff_id: &'a str,
    pub question_id: &'a str,
    pub chat_id: Option<&'a str>,
    pub source: &'a str,
    pub language: Language,
    pub question: &'a str,
    pub options: &'a [String],
    pub expires_at: String,
    pub at: String,
}

/// A question an agent asks its user (docs/bridge-protocol.md#conversations), fleet to bridge.
/// `message_id`: `question:<handoffId>:<questionId>`; `correlation_id`: the
/// handoff's id. The handoff's `blocked` status comes first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase")]
pub struct BridgeQuestion {
    #[serde(rename = "type")]
    pub kind: QuestionType,
    pub handoff_id: String,
    /// Opaque, unique within the handoff; a `BridgeAnswer` names it.
    pub question_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub reply_to_chat_id: Option<String>,
    pub language: Language,
    /// The question humanized for the chat (its options listed after it).
    pub text: String,
    /// `text` cut for the channel like a reply's parts.
    pub parts: Vec<String>,
    /// Short answers the bridge may offer as choices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(as = "Option<Vec<String>>", optional)]
    pub options: Vec<String>,
    /// After this the agent goes on without an answer (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub expires_at: String,
    #[schemars(extend("format" = "date-time"))]
    pub at: String,
}

/// The `BridgeQuestion` body: the question humanized for the chat (its
/// options listed after it) and cut into parts like a reply.
pub fn message(input: &QuestionInput<'_>) -> Value {
    let text = humanize(input.question, input.options, input.language);
    let parts = split_parts(&text, ChannelLimits::for_source(input.source), input.language);
    let message = BridgeQuestion {
        kind: QuestionType::Question,
        handoff_id: input.handoff_id.to_string(),
        question_id: input.question_id.to_string(),
        reply_to_chat_id: input.chat_id.map(str::to_string),
        language: input.language,
        text,
        parts,
        options: input.options.to_vec(),
        expires_at: input.expires_at.clone(),
        at: input.at.clone(),
    };
    serde_json::to_value(message).expect("a question always serializes")
}

/// The question as a chat message: the agent's words, then the choices.
pub fn humanize(question: &str, options: &[String], language: Language) -> String {
    if options.is_empty() {
        return question.trim().to_string();
    }
    let lead = match language {
        Language::En => "You can answer:",
        Language::ZhCn => "可以回复：",
    };
    let choices: Vec<String> = options.iter().map(|o| format!("- {o}")).collect();
    format!("{}\n\n{lead}\n{}", question.trim(), choices.join("\n"))
}

/// What the agent reads when the user answered: their words, quoted.
pub fn answered_text(answer: &str) -> String {
    let quoted: Vec<String> = answer.trim().lines().map(|l| format!("> {l}")).collect();
    format!("The user answered:\n{}", quoted.join("\n"))
}

/// What the agent reads when the user did not answer in time.
pub const TIMED_OUT_TEXT: &str = "The user did not answer in time. Decide how to go on: continue with a safe choice \
you can explain, or finish and say what you still need from the user.";

/// What the agent reads when nobody can answer (a run no user started).
pub const NO_USER_TEXT: &str =
    "There is no user to ask in this work. Decide on your own, and say in your reply what you assumed.";

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(options: &'a [String], source: &'a str) -> QuestionInput<'a> {
        QuestionInput {
            handoff_id: "h1",
            question_id: "q1",
            chat_id: Some("wx"),
            source,
            language: Language::En,
            question: "Publish the post now?",
            options,
            expires_at: "2026-12-01T00:00:00.000Z".into(),
            at: "2026-11-30T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn a_question_message_has_the_contract_shape() {
        let options = vec!["yes".to_string(), "no".to_string()];
        let m = message(&input(&options, "weixin"));
        assert_eq!(m["type"], "question");
        assert_eq!(m["handoffId"], "h1");
        assert_eq!(m["questionId"], "q1");
        assert_eq!(m["replyToChatId"], "wx");
        assert_eq!(m["language"], "en");
        assert_eq!(m["options"], serde_json::json!(["yes", "no"]));
        assert_eq!(m["expiresAt"], "2026-12-01T00:00:00.000Z");
        assert_eq!(m["text"], "Publish the post now?\n\nYou can answer:\n- yes\n- no");
        assert_eq!(m["parts"], serde_json::json!([m["text"]]));
        assert_eq!(message_id("h1", "q1"), "question:h1:q1");
    }

    #[test]
    fn a_question_without_options_has_no_options_field() {
        let m = message(&input(&[], "admin"));
        assert!(m.get("options").is_none());
        assert_eq!(m["text"], "Publish the post now?");
    }

    #[test]
    fn a_long_question_is_cut_for_wechat() {
        let long = "这是一个很长的问题。".repeat(400);
        let mut i = input(&[], "weixin");
        i.question = &long;
        let m = message(&i);
        let parts = m["parts"].as_array().unwrap();
        assert!(parts.len() > 1 && parts.len() <= 5);
        assert!(parts.iter().all(|p| p.as_str().unwrap().len() <= 2048));
    }

    #[test]
    fn the_answer_is_quoted_and_texts_name_no_runtime_terms() {
        assert_eq!(answered_text("yes\nplease"), "The user answered:\n> yes\n> please");
        for text in [TIMED_OUT_TEXT, NO_USER_TEXT, &answered_text("ok")] {
            for term in ["question id", "queue", "invocation", "state", "handoff"] {
                assert!(!text.to_lowercase().contains(term), "{text}");
            }
        }
    }
}
