//! `/waiting` and `/handoffs/ID`: handoffs waiting for a person (`manual`
//! ones), worked in the browser as on the command line: read the details,
//! copy the prompt, paste the result, or cancel.

use std::sync::Arc;

use axum::extract::{Path, State as Shared};
use axum::response::{IntoResponse, Redirect};
use axum::Form;
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::{age, at, clip};
use crate::console::state::State;
use crate::console::views::{PageError, PageResult};
use crate::operator::{self, Settle};

#[derive(Serialize)]
struct Row {
    id: String,
    waiting_for: String,
    source: String,
    chat: Option<String>,
    status: String,
    intent: String,
    age: String,
    created: String,
}

pub async fn list(Shared(state): Shared<Arc<State>>) -> PageResult {
    let c = state.db().await?;
    let mut rows = vec![];
    for w in baton_store::overview::waiting(&c).await? {
        let request = baton_store::requests::get(&c, &w.handoff_id).await?;
        let intent = request.map(|r| r.body["userIntent"].as_str().unwrap_or_default().to_string()).unwrap_or_default();
        rows.push(Row {
            waiting_for: serde_json::to_value(w.waiting_for)?.as_str().unwrap_or("manual").to_string(),
            source: w.source.as_str().into(),
            chat: w.chat,
            status: w.status.as_str().into(),
            intent: clip(&intent, 160),
            age: age(w.created_at),
            created: at(w.created_at),
            id: w.handoff_id,
        });
    }
    Ok(state.views.page("waiting.html", context! { nav => "waiting", rows }))
}

pub async fn show(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> PageResult {
    let c = state.db().await?;
    let request = baton_store::requests::get(&c, &id).await?.ok_or_else(|| PageError::not_found(format!("no handoff `{id}`")))?;
    drop(c);
    let details = operator::handoff_show(&state.pool, &id).await?;
    let prompt = operator::handoff_prompt(&state.pool, &id).await?;
    let open = request.reply_sent_at.is_none() && !request.status.is_terminal();
    Ok(state.views.page(
        "handoff.html",
        context! {
            nav => "waiting",
            id, details, prompt, open,
            status => request.status.as_str(),
            target => request.target_agent.as_str(),
            run => request.run_id.map(|r| r.to_string()),
            by_hand => request.run_id.is_none(),
        },
    ))
}

#[derive(Deserialize)]
pub struct Pasted {
    #[serde(default)]
    result: String,
}

/// `POST /handoffs/ID/result`: the pasted result becomes the reply.
pub async fn paste_result(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, Form(form): Form<Pasted>) -> PageResult {
    let text = form.result.trim();
    if text.is_empty() {
        return Err(PageError::refused("The result is empty: paste what the user should receive."));
    }
    let run = operator::settle_handoff(&state.pool, &id, Settle::Result, text).await.map_err(|e| PageError::refused(format!("{e:#}")))?;
    Ok(Redirect::to(&format!("/runs/{run}")).into_response())
}

#[derive(Deserialize)]
pub struct Reason {
    #[serde(default)]
    reason: String,
}

/// `POST /handoffs/ID/cancel`: the handoff is dropped and the bridge is told.
pub async fn cancel(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, Form(form): Form<Reason>) -> PageResult {
    let reason = Some(form.reason.trim()).filter(|r| !r.is_empty()).unwrap_or("cancelled by an operator in the console");
    let run = operator::settle_handoff(&state.pool, &id, Settle::Cancel, reason).await.map_err(|e| PageError::refused(format!("{e:#}")))?;
    Ok(Redirect::to(&format!("/runs/{run}")).into_response())
}
