//! `/dead`: what is in `baton.dead`, with its reason, its queue as the
//! fleet names it, its age, a readable body and the handoff or run it
//! names (see `dead_view`); Replay (to its queue, offered only where it can
//! help) and Discard, one or all of a kind.

use std::sync::Arc;

use axum::extract::{Path, Query, State as Shared};
use axum::response::{IntoResponse, Redirect};
use axum::Extension;
use axum::Form;
use baton_bus::dead::{self, Acted, Select};
use minijinja::context;
use serde::Deserialize;

use crate::console::state::State;
use crate::console::views::{Operator, PageResult};

/// How many dead letters a page reads (they are handed back unchanged).
const LIMIT: usize = 200;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Flash {
    done: Option<String>,
}

pub async fn list(
    Shared(state): Shared<Arc<State>>,
    Extension(op): Extension<Operator>,
    Query(flash): Query<Flash>,
) -> PageResult {
    let queues = state.queues();
    let listed = state.with_broker(async |conn| Ok(dead::list(conn, &queues, LIMIT + 1).await?)).await;
    let (letters, problem) = match listed {
        Ok(letters) => (letters, None),
        Err(e) => (vec![], Some(format!("RabbitMQ did not answer: {e:#}"))),
    };
    let more = letters.len() > LIMIT;
    let rows = super::dead_view::rows(&state, letters.into_iter().take(LIMIT).collect()).await?;
    let mut kinds: Vec<&str> = rows.iter().map(|r| r.queue.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let ctx = context! {
        nav => "dead", letters => &rows, queues => kinds, more, problem,
        flash => flash.done, dead_queue => queues.name(baton_domain::fleet::Queue::Dead),
    };
    Ok(state.views.page(&op, "dead.html", ctx))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct Kind {
    queue: String,
}

/// What happened, for the page the operator comes back to.
fn outcome(verb: &str, acted: &Acted) -> Redirect {
    let mut note = format!("{verb} {} message(s).", acted.done.len());
    for (id, why) in &acted.failed {
        note.push_str(&format!(" {id} stays: {why}."));
    }
    Redirect::to(&format!("/dead?{}", serde_urlencoded::to_string([("done", note)]).unwrap_or_default()))
}

async fn act(state: &State, replay: bool, select: Select<'_>, queue: Option<&str>) -> anyhow::Result<Acted> {
    let queues = state.queues();
    state
        .with_broker(async |conn| match replay {
            true => crate::operator::dead_letters::replay(conn, &state.pool, &queues, select, queue).await,
            false => Ok(dead::discard(conn, &queues, select, queue).await?),
        })
        .await
}

pub async fn replay_one(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> PageResult {
    Ok(outcome("Replayed", &act(&state, true, Select::Id(&id), None).await?).into_response())
}

pub async fn discard_one(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> PageResult {
    Ok(outcome("Discarded", &act(&state, false, Select::Id(&id), None).await?).into_response())
}

pub async fn replay_all(Shared(state): Shared<Arc<State>>, Form(kind): Form<Kind>) -> PageResult {
    let queue = Some(kind.queue.trim()).filter(|q| !q.is_empty());
    Ok(outcome("Replayed", &act(&state, true, Select::All, queue).await?).into_response())
}

pub async fn discard_all(Shared(state): Shared<Arc<State>>, Form(kind): Form<Kind>) -> PageResult {
    let queue = Some(kind.queue.trim()).filter(|q| !q.is_empty());
    Ok(outcome("Discarded", &act(&state, false, Select::All, queue).await?).into_response())
}
