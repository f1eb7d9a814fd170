//! `/waiting` and `/handoffs/ID`: handoffs waiting for a person (`manual`
//! ones, and runs blocked on an agent's question), worked in the browser as
//! on the command line: read the details, copy the prompt, paste the result
//! or answer the question, or cancel.

use std::sync::Arc;

use axum::extract::{Path, State as Shared};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::{age, at, clip};
use crate::console::state::State;
use crate::console::views::{Operator, PageError, PageResult};
use crate::operator::answer::Handled;
use crate::operator::{self, Settle};
use baton_domain::run::state::CancelledBy;

#[derive(Serialize)]
struct Row {
    id: String,
    waiting_for: String,
    /// The question and the agent that asked it, for a blocked run.
    question: Option<String>,
    agent: Option<String>,
    source: String,
    chat: Option<String>,
    status: String,
    intent: String,
    age: String,
    created: String,
}

pub async fn list(Shared(state): Shared<Arc<State>>, Extension(op): Extension<Operator>) -> PageResult {
    let c = state.db().await?;
    let mut rows = vec![];
    for w in baton_store::overview::waiting(&c).await? {
        let request = baton_store::requests::get(&c, &w.handoff_id).await?;
        let intent = request.map(|r| r.body["userIntent"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
        let since = w.since();
        rows.push(Row {
            waiting_for: serde_json::to_value(w.waiting_for)?.as_str().unwrap_or("manual").to_string(),
            question: w.question.as_ref().map(|q| clip(&q.text, 160)),
            agent: w.question.as_ref().map(|q| q.agent.clone()),
            source: w.source.as_str().into(),
            chat: w.chat,
            status: w.status.as_str().into(),
            intent: clip(&intent, 160),
            age: age(since),
            created: at(since),
            id: w.handoff_id,
        });
    }
    Ok(state.views.page(&op, "waiting.html", context! { nav => "waiting", rows }))
}

pub async fn show(
    Shared(state): Shared<Arc<State>>,
    Extension(op): Extension<Operator>,
    Path(id): Path<String>,
) -> PageResult {
    let c = state.db().await?;
    let request =
        baton_store::requests::get(&c, &id).await?.ok_or_else(|| PageError::not_found(format!("no handoff `{id}`")))?;
    let question =
        baton_store::overview::questions(&c, Some(&id)).await?.into_iter().find_map(|w| w.question).map(asked);
    drop(c);
    let details = operator::handoff_show(&state.pool, &id).await?;
    let prompt = operator::handoff_prompt(&state.pool, &id).await?;
    let open = request.reply_sent_at.is_none() && !request.status.is_terminal();
    Ok(state.views.page(
        &op,
        "handoff.html",
        context! {
            nav => "waiting",
            id, details, prompt, open, question,
            status => request.status.as_str(),
            target => request.target_agent.as_str(),
            run => request.run_id.map(|r| r.to_string()),
            by_hand => request.run_id.is_none(),
        },
    ))
}

/// An open question as the handoff page shows it.
#[derive(Serialize)]
struct Asked {
    id: String,
    agent: String,
    text: String,
    options: Vec<String>,
    asked: String,
    expires: String,
    run: String,
}

fn asked(q: baton_store::overview::OpenQuestion) -> Asked {
    Asked {
        id: q.question_id.to_string(),
        agent: q.agent,
        text: q.text,
        options: q.options,
        asked: at(q.asked_at),
        expires: at(q.expires_at),
        run: q.run_id.to_string(),
    }
}

#[derive(Deserialize)]
pub struct Answered {
    #[serde(default)]
    question: String,
    /// Typed by the operator.
    #[serde(default)]
    text: String,
    /// One of the question's options, from its button.
    #[serde(default)]
    choice: String,
}

/// `POST /handoffs/ID/answer`: the operator's answer to the open question,
/// applied as a bridge's answer is; the run resumes.
pub async fn answer(
    Shared(state): Shared<Arc<State>>,
    Path(id): Path<String>,
    Form(form): Form<Answered>,
) -> PageResult {
    let text = Some(form.choice.trim()).filter(|c| !c.is_empty()).unwrap_or(form.text.trim());
    if text.is_empty() {
        return Err(PageError::refused("The answer is empty: type what the user would say, or pick an option."));
    }
    let c = state.db().await?;
    let request =
        baton_store::requests::get(&c, &id).await?.ok_or_else(|| PageError::not_found(format!("no handoff `{id}`")))?;
    drop(c);
    match operator::answer_question(&state.pool, &id, form.question.trim(), text).await? {
        Handled::Applied => {
            let run = request.run_id.map_or_else(|| format!("/handoffs/{id}"), |run| format!("/runs/{run}"));
            Ok(Redirect::to(&run).into_response())
        }
        Handled::Ignored(why) => Err(PageError::refused(format!("The answer changed nothing: {why}."))),
        Handled::Duplicate => Err(PageError::refused("This answer was given before.")),
    }
}

#[derive(Deserialize)]
pub struct Pasted {
    #[serde(default)]
    result: String,
}

/// `POST /handoffs/ID/result`: the pasted result becomes the reply.
pub async fn paste_result(
    Shared(state): Shared<Arc<State>>,
    Path(id): Path<String>,
    Form(form): Form<Pasted>,
) -> PageResult {
    let text = form.result.trim();
    if text.is_empty() {
        return Err(PageError::refused("The result is empty: paste what the user should receive."));
    }
    let run = operator::settle_handoff(&state.pool, &id, Settle::Result, text)
        .await
        .map_err(|e| PageError::refused(format!("{e:#}")))?;
    Ok(Redirect::to(&format!("/runs/{run}")).into_response())
}

#[derive(Deserialize)]
pub struct Reason {
    #[serde(default)]
    reason: String,
}

/// `POST /handoffs/ID/cancel`: the handoff is dropped and the bridge is
/// told; recorded as cancelled by `console`.
pub async fn cancel(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, Form(form): Form<Reason>) -> PageResult {
    let reason =
        Some(form.reason.trim()).filter(|r| !r.is_empty()).unwrap_or("cancelled by an operator in the console");
    let run = operator::settle_handoff_by(&state.pool, &id, Settle::Cancel, reason, CancelledBy::Console)
        .await
        .map_err(|e| PageError::refused(format!("{e:#}")))?;
    Ok(Redirect::to(&format!("/runs/{run}")).into_response())
}
