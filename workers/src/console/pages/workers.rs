//! `/workers`: every process of the fleet from its registry row (V29):
//! its roles, worker id, version, host and pid, when it started, its last
//! heartbeat, and whether it is live, stopped, or gone (silent for three of
//! its beats: killed, or cut off from the database); the invocations it is
//! running and the runs they belong to, read from the claims themselves.

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::Extension;
use baton_domain::console::workers::{Liveness, MISSED_BEATS};
use baton_store::workers::Listed;
use chrono::{DateTime, Utc};
use minijinja::context;
use serde::Serialize;

use super::{at, short_run_id, span};
use crate::console::state::State;
use crate::console::views::{Operator, PageResult};

/// How many held runs a row links to (the count says the rest).
const RUNS_SHOWN: usize = 12;

#[derive(Serialize)]
struct Row {
    id: String,
    worker_id: String,
    roles: Vec<String>,
    version: String,
    host: String,
    pid: i32,
    liveness: &'static str,
    started: String,
    up_for: String,
    heartbeat: String,
    heartbeat_ago: String,
    beat: String,
    in_flight: i64,
    runs: Vec<Held>,
    more_runs: usize,
}

#[derive(Serialize)]
struct Held {
    id: String,
    short: String,
}

fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    span((now - t).num_milliseconds().max(0))
}

fn row(w: Listed, now: DateTime<Utc>) -> Row {
    let liveness = Liveness::of(w.stopped_at, w.heartbeat_at, w.beat_secs, now);
    let until = w.stopped_at.unwrap_or(if liveness == Liveness::Gone { w.heartbeat_at } else { now });
    let more_runs = w.runs.len().saturating_sub(RUNS_SHOWN);
    Row {
        id: w.id.to_string(),
        liveness: liveness.as_str(),
        started: at(w.started_at),
        up_for: span((until - w.started_at).num_milliseconds().max(0)),
        heartbeat: at(w.heartbeat_at),
        heartbeat_ago: ago(w.heartbeat_at, now),
        beat: span((w.beat_secs * 1000.0) as i64),
        in_flight: w.in_flight,
        runs: w.runs.iter().take(RUNS_SHOWN).map(|r| Held { id: r.to_string(), short: short_run_id(*r) }).collect(),
        more_runs,
        worker_id: w.worker_id,
        roles: w.roles,
        version: w.version,
        host: w.host,
        pid: w.pid,
    }
}

pub async fn show(Shared(state): Shared<Arc<State>>, Extension(op): Extension<Operator>) -> PageResult {
    let (listed, now) = baton_store::workers::list(&state.db().await?).await?;
    let rows: Vec<Row> = listed.into_iter().map(|w| row(w, now)).collect();
    let live = rows.iter().filter(|r| r.liveness == "live").count();
    let gone = rows.iter().filter(|r| r.liveness == "gone").count();
    let in_flight: i64 = rows.iter().filter(|r| r.liveness == "live").map(|r| r.in_flight).sum();
    Ok(state.views.page(
        &op,
        "workers.html",
        context! { nav => "workers", rows, live, gone, in_flight, missed => MISSED_BEATS as i64 },
    ))
}
