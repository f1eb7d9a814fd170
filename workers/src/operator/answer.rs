//! An operator answers a question an agent asked its user (`ask_user`),
//! from the console: the answer is applied exactly as a bridge's
//! `BridgeAnswer` is (same function, same checks, same disclosure policy),
//! under an id of its own (`console:<uuid>`), and a handoff event records
//! that an operator gave it.

use baton_domain::conversation::answer::BridgeAnswer;
use baton_store::{requests, Pool};
use uuid::Uuid;

pub use crate::roles::answers::Handled;

/// The handoff event recording an operator's answer.
pub const OPERATOR_ANSWERED: &str = "operator_answered";

/// Applies `text` as the answer to `question_id` of handoff `handoff_id`;
/// what became of it (an answer to a closed question changes nothing).
pub async fn answer_question(pool: &Pool, handoff_id: &str, question_id: &str, text: &str) -> anyhow::Result<Handled> {
    let answer = BridgeAnswer {
        id: format!("console:{}", Uuid::now_v7()),
        handoff_id: handoff_id.to_string(),
        question_id: question_id.to_string(),
        text: text.to_string(),
        at: chrono::Utc::now().fixed_offset(),
    };
    let handled = crate::roles::answers::apply(pool, &answer).await?;
    let outcome = match &handled {
        Handled::Applied => "applied",
        Handled::Ignored("unknown handoff") => return Ok(handled),
        Handled::Ignored(why) => why,
        Handled::Duplicate => "duplicate",
    };
    let note = format!("an operator answered question {question_id} in the console (answer {}): {outcome}", answer.id);
    requests::add_event(&pool.get().await?, handoff_id, OPERATOR_ANSWERED, None, Some(&note)).await?;
    Ok(handled)
}
