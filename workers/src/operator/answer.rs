//! An operator answers a question an agent asked its user (`ask_user`),
//! from the console: the answer is applied exactly as a bridge's
//! `BridgeAnswer` is ([`crate::answering`]: same checks, same disclosure
//! policy), under an id of its own (`console:<uuid>`), and in the same
//! transaction a handoff event records that an operator gave it.

use baton_domain::protocol::contract::AnswerType;
use baton_domain::protocol::conversation::answer::BridgeAnswer;
use baton_store::Pool;
use uuid::Uuid;

pub use crate::answering::Handled;
use crate::answering::{apply, Answerer};

/// Applies `text` as the answer to `question_id` of handoff `handoff_id`;
/// what became of it (an answer to a closed question changes nothing).
pub async fn answer_question(pool: &Pool, handoff_id: &str, question_id: &str, text: &str) -> anyhow::Result<Handled> {
    let answer = BridgeAnswer {
        kind: AnswerType::Answer,
        id: format!("console:{}", Uuid::now_v7()),
        handoff_id: handoff_id.to_string(),
        question_id: question_id.to_string(),
        text: text.to_string(),
        at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    };
    apply(pool, &answer, Answerer::Operator).await
}
