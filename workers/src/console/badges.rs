//! The navigation's badges on every page: what waits for a person (one
//! statement over two small partial indexes) and how many dead letters
//! there are (a passive declare of `baton.dead`, remembered for a few
//! seconds so a busy console asks the broker at most that often). A count
//! that cannot be read shows as `?`, and never holds a page up for long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State as Shared};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use baton_domain::console::overview::badge;
use baton_domain::fleet::Queue;
use serde::Serialize;

use super::state::State;
use super::views::Operator;

/// How long a dead-letter count is reused.
const DEAD_COUNT_FOR: Duration = Duration::from_secs(5);
/// How long a page waits for either count.
const PATIENCE: Duration = Duration::from_millis(800);

/// The badges' texts; `None` shows no badge.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Badges {
    pub waiting: Option<String>,
    pub dead: Option<String>,
}

/// Middleware (after the operator is known): the badges of a page.
pub async fn attach(Shared(state): Shared<Arc<State>>, mut request: Request, next: Next) -> Response {
    if request.method() == Method::GET {
        let badges = read(&state).await;
        if let Some(op) = request.extensions_mut().get_mut::<Operator>() {
            op.badges = badges;
        }
    }
    next.run(request).await
}

async fn read(state: &State) -> Badges {
    let waiting = async {
        let c = state.db().await.ok()?;
        baton_store::overview::counts::waits(&c).await.ok().map(|w| w.total())
    };
    let (waiting, dead) = tokio::join!(tokio::time::timeout(PATIENCE, waiting), dead_count(state));
    Badges { waiting: badge(waiting.ok().flatten()), dead: badge(dead.map(i64::from)) }
}

/// Dead letters waiting, from the broker or from the last few seconds.
pub async fn dead_count(state: &State) -> Option<u32> {
    if let Some((at, n)) = *state.dead_count.lock().await {
        if at.elapsed() < DEAD_COUNT_FOR {
            return Some(n);
        }
    }
    let queue = state.queues().name(Queue::Dead);
    let counted = state.with_broker(async |conn| {
        let publisher = conn.publisher().await?;
        let n = publisher.ready_count(&queue).await;
        publisher.close().await;
        Ok(n?)
    });
    let n = tokio::time::timeout(PATIENCE, counted).await.ok()?.ok()?;
    *state.dead_count.lock().await = Some((Instant::now(), n));
    Some(n)
}
