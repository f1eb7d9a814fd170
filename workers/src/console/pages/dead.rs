//! `/dead`: what is in `baton.dead`, with its reason, its queue as the
//! fleet names it, its age, a readable body and the handoff or run it
//! names (see `dead_view`); Replay (to its queue, offered only where it can
//! help) and Discard, one or all of a kind. Replay all takes only the
//! letters a replay can help and says how many it left, and why; a Replay
//! posted for one it cannot help is refused (409) and changes nothing.

use std::sync::Arc;

use axum::extract::{Path, Query, State as Shared};
use axum::response::{IntoResponse, Redirect};
use axum::Extension;
use axum::Form;
use baton_bus::dead::{self, Acted, Rule, Select};
use minijinja::context;
use serde::Deserialize;

use crate::console::state::State;
use crate::console::views::{Operator, PageError, PageResult};

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

/// What happened, for the page the operator comes back to: how many were
/// acted on, how many a replay left because it cannot help them (grouped by
/// why), and each one a replay was tried for and failed.
fn outcome(verb: &str, acted: &Acted) -> Redirect {
    Redirect::to(&format!("/dead?{}", serde_urlencoded::to_string([("done", note(verb, acted))]).unwrap_or_default()))
}

fn note(verb: &str, acted: &Acted) -> String {
    let mut note = format!("{verb} {} message(s).", acted.done.len());
    if !acted.withheld.is_empty() {
        let mut why: Vec<(&str, usize)> = vec![];
        for (_, reason) in &acted.withheld {
            match why.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => why.push((reason, 1)),
            }
        }
        note.push_str(&format!(" Left {} that a replay cannot help:", acted.withheld.len()));
        let parts: Vec<String> = why.iter().map(|(reason, n)| format!(" {n} because {reason}")).collect();
        note.push_str(&parts.join(";"));
        note.push('.');
    }
    for (id, why) in &acted.failed {
        note.push_str(&format!(" {id} stays: {why}."));
    }
    note
}

async fn act(state: &State, replay: bool, select: Select<'_>, queue: Option<&str>) -> anyhow::Result<Acted> {
    let queues = state.queues();
    let rule = Rule::Replayable;
    state
        .with_broker(async |conn| match replay {
            true => crate::operator::dead_letters::replay(conn, &state.pool, &queues, select, queue, rule).await,
            false => Ok(dead::discard(conn, &queues, select, queue).await?),
        })
        .await
}

/// `POST /dead/ID/replay`: the letter goes back to its queue, or, if a
/// replay cannot help it (the page offers no Replay then), a 409 says why
/// and it stays as it was.
pub async fn replay_one(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> PageResult {
    let acted = act(&state, true, Select::Id(&id), None).await?;
    if let (true, Some((_, why))) = (acted.done.is_empty(), acted.withheld.first()) {
        return Err(PageError::refused(format!(
            "Dead letter {id} is not replayed: {why}. Nothing changed: it stays in the dead-letter queue \
             (Discard removes it)."
        )));
    }
    Ok(outcome("Replayed", &acted).into_response())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_counts_what_a_replay_left_by_why() {
        let acted = Acted {
            done: vec!["a".into()],
            withheld: vec![("b".into(), "x".into()), ("c".into(), "y".into()), ("d".into(), "x".into())],
            failed: vec![("e".into(), "the broker refused it".into())],
        };
        assert_eq!(
            note("Replayed", &acted),
            "Replayed 1 message(s). Left 3 that a replay cannot help: 2 because x; 1 because y. \
             e stays: the broker refused it."
        );
        assert_eq!(note("Discarded", &Acted::default()), "Discarded 0 message(s).");
    }
}
