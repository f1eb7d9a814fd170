//! `/overview`, the console's landing page: runs by status in the last hour
//! and day with the failure rate (a cancel is not a failure), what waits
//! for a person or an operator (manual handoffs, questions, dead letters),
//! the fleet's processes, and the latest failed runs.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::Extension;
use baton_domain::console::overview::Window;
use baton_domain::console::workers::Liveness;
use baton_domain::run::state::RunState;
use baton_store::overview::RunFilter;
use minijinja::context;
use serde::Serialize;

use super::{age, short_run_id};
use crate::console::badges::dead_count;
use crate::console::state::State;
use crate::console::views::{Operator, PageResult};

/// One status's counts in both windows.
#[derive(Serialize)]
struct StatusRow {
    status: &'static str,
    hour: i64,
    day: i64,
}

/// The two windows side by side, one row per status.
fn rows(hour: &Window, day: &Window) -> Vec<StatusRow> {
    hour.by_status
        .iter()
        .zip(&day.by_status)
        .map(|((status, h), (_, d))| StatusRow { status, hour: *h, day: *d })
        .collect()
}

#[derive(Serialize)]
struct Failed {
    id: String,
    short: String,
    handoff_id: Option<String>,
    chain: String,
    age: String,
}

/// How many processes are live, stopped and gone.
#[derive(Serialize, Default)]
struct Processes {
    live: usize,
    gone: usize,
}

pub async fn show(Shared(state): Shared<Arc<State>>, Extension(op): Extension<Operator>) -> PageResult {
    let c = state.db().await?;
    let counts = baton_store::overview::counts::runs_by_status(&c).await?;
    let (hour, day) = (Window::of(&counts.hour), Window::of(&counts.day));
    let waits = baton_store::overview::counts::waits(&c).await?;
    let failed = RunFilter { status: Some(RunState::Failed), limit: 5, ..Default::default() };
    let failed: Vec<Failed> = baton_store::overview::runs(&c, &failed)
        .await?
        .into_iter()
        .map(|r| Failed {
            id: r.run_id.to_string(),
            short: short_run_id(r.run_id),
            handoff_id: r.handoff_id,
            chain: r.agents.join(" → "),
            age: age(r.created_at),
        })
        .collect();
    let (workers, now) = baton_store::workers::list(&c).await?;
    drop(c);
    let mut processes = Processes::default();
    for w in &workers {
        match Liveness::of(w.stopped_at, w.heartbeat_at, w.beat_secs, now) {
            Liveness::Live => processes.live += 1,
            Liveness::Gone => processes.gone += 1,
            Liveness::Stopped => {}
        }
    }
    let dead = dead_count(&state).await;
    Ok(state.views.page(
        &op,
        "overview.html",
        context! {
            nav => "overview",
            statuses => rows(&hour, &day),
            hour, day, waits => context! { manual => waits.manual, questions => waits.questions },
            dead, failed, processes,
        },
    ))
}
