//! `/fleet`: each queue's depth and consumers (from the broker), the outbox
//! backlog, invocations by state, takeovers, the profiles' readiness, and
//! the fleet-wide model limits in use (calls in flight, in the last minute,
//! paused by a provider).

use std::sync::Arc;

use axum::extract::State as Shared;
use axum::Extension;
use baton_domain::fleet::Queue;
use baton_domain::profiles::{ModelBinding, Profile};
use minijinja::context;
use serde::Serialize;

use super::span;
use crate::console::state::State;
use crate::console::views::{Operator, PageResult};

#[derive(Serialize)]
struct QueueRow {
    logical: &'static str,
    name: String,
    depth: Option<u32>,
    consumers: Option<u32>,
}

#[derive(Serialize)]
struct ProfileRow {
    id: String,
    name: String,
    provider: &'static str,
    ready: bool,
    readiness: String,
    /// The fleet-wide limit its model calls are under.
    limit: Option<String>,
}

#[derive(Serialize)]
struct LimitRow {
    name: String,
    in_flight: i64,
    calls_last_minute: i64,
    tokens_last_minute: i64,
    paused_for: Option<String>,
}

fn limit_row(u: baton_store::profiles::limits::Usage) -> LimitRow {
    let left = u.paused_until.map(|t| (t - chrono::Utc::now()).num_milliseconds()).filter(|ms| *ms > 0);
    LimitRow {
        name: u.name,
        in_flight: u.in_flight,
        calls_last_minute: u.calls_last_minute,
        tokens_last_minute: u.tokens_last_minute,
        paused_for: left.map(span),
    }
}

/// Depth and consumers of every fleet queue; `None` where the broker did not say.
async fn queues(state: &State) -> (Vec<QueueRow>, Option<String>) {
    let names = state.queues();
    let counted = state
        .with_broker(async |conn| {
            let publisher = conn.publisher().await?;
            let mut rows = vec![];
            for q in Queue::ALL {
                let name = names.name(q);
                let depth = publisher.ready_count(&name).await?;
                let consumers = publisher.consumer_count(&name).await?;
                rows.push(QueueRow { logical: q.as_str(), name, depth: Some(depth), consumers: Some(consumers) });
            }
            Ok(rows)
        })
        .await;
    match counted {
        Ok(rows) => (rows, None),
        Err(e) => {
            let rows = Queue::ALL
                .iter()
                .map(|q| QueueRow { logical: q.as_str(), name: names.name(*q), depth: None, consumers: None })
                .collect();
            (rows, Some(format!("RabbitMQ did not answer: {e:#}")))
        }
    }
}

/// What `baton profiles check` says of a profile: ready, or what it still needs.
pub fn readiness(p: &Profile) -> (bool, String) {
    let mut missing: Vec<String> = p.model.missing_configuration().iter().map(ToString::to_string).collect();
    if let ModelBinding::Openai { api_key_env: Some(var), .. } = &p.model {
        if std::env::var(var).is_err() {
            missing.push(format!("environment variable {var}"));
        }
    }
    match (missing.is_empty(), p.model.unavailable()) {
        (false, _) => (false, format!("requires configuration: {}", missing.join(", "))),
        (true, Some(why)) => (false, format!("not runnable: {why}")),
        (true, None) => (true, "ready".to_string()),
    }
}

pub async fn show(Shared(state): Shared<Arc<State>>, Extension(op): Extension<Operator>) -> PageResult {
    let c = state.db().await?;
    let counts = baton_store::overview::fleet(&c).await?;
    let profiles: Vec<ProfileRow> = baton_store::profiles::all(&c)
        .await?
        .iter()
        .map(|p| {
            let (ready, readiness) = readiness(p);
            let limit = p.model_limit.as_ref().map(|l| l.name.clone());
            ProfileRow {
                id: p.id.clone(),
                name: p.name.clone(),
                provider: p.model.provider_name(),
                ready,
                readiness,
                limit,
            }
        })
        .collect();
    let limits: Vec<LimitRow> = baton_store::profiles::limits::usage(&c).await?.into_iter().map(limit_row).collect();
    let (queues, broker_problem) = queues(&state).await;
    let oldest = counts.outbox_oldest_secs.map(|s| span((s * 1000.0) as i64));
    Ok(state.views.page(
        &op,
        "fleet.html",
        context! { nav => "fleet", counts, oldest, queues, broker_problem, profiles, limits },
    ))
}
