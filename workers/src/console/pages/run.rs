//! `/runs/RUN`: one run's story across agents, with Cancel and Retry.

use std::sync::Arc;

use axum::extract::{Path, State as Shared};
use axum::response::{IntoResponse, Redirect};
use axum::{Extension, Form};
use baton_domain::run::state::CancelledBy;
use minijinja::context;
use serde::Deserialize;

use super::run_id;
use super::run_view;
use crate::console::state::State;
use crate::console::views::{Operator, PageError, PageResult};

pub async fn show(
    Shared(state): Shared<Arc<State>>,
    Extension(op): Extension<Operator>,
    Path(id): Path<String>,
) -> PageResult {
    let id = run_id(&id)?;
    let c = state.db().await?;
    let run = baton_store::runs::get(&c, id).await?.ok_or_else(|| PageError::not_found(format!("no run {id}")))?;
    let view = run_view::load(&c, run).await?;
    Ok(state.views.page(&op, "run.html", context! { run => view, nav => "runs" }))
}

#[derive(Deserialize)]
pub struct Reason {
    #[serde(default)]
    reason: String,
}

/// `POST /runs/RUN/cancel`: every live invocation stops and the bridge is told `cancelled`.
pub async fn cancel(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, Form(form): Form<Reason>) -> PageResult {
    let id = run_id(&id)?;
    let reason =
        Some(form.reason.trim()).filter(|r| !r.is_empty()).unwrap_or("cancelled by an operator in the console");
    if baton_store::runs::get(&state.db().await?, id).await?.is_none() {
        return Err(PageError::not_found(format!("no run {id}")));
    }
    if !crate::operator::cancel_run_by(&state.pool, id, reason, CancelledBy::Console).await? {
        return Err(PageError::refused(format!("run {id} had already ended")));
    }
    Ok(Redirect::to(&format!("/runs/{id}")).into_response())
}

/// `POST /runs/RUN/retry`: a failed run resumes from its last stored step.
pub async fn retry(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> PageResult {
    let id = run_id(&id)?;
    crate::operator::retry_run(&state.pool, id).await.map_err(|e| PageError::refused(format!("{e:#}")))?;
    Ok(Redirect::to(&format!("/runs/{id}")).into_response())
}
