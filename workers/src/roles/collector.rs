//! The result collector: turns a finished run into one humanized reply for
//! the bridge. Idempotent: the request row is locked and a reply already
//! sent is never sent again.

use std::sync::Arc;

use baton_bus::{DeadLetters, Delivery};
use baton_domain::fleet::{Queue, RunFinished};
use baton_store::after_commit::scope;
use baton_store::{begin, client as db, commit, Pool};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::roles::keyed_consumer::consume_keyed;
use crate::roles::publish_after_commit::PublishAfterCommit;
use crate::roles::{connect, retry_transient, Role};

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Collector).await?;
    let publisher = conn.publisher().await?;
    let dead = DeadLetters::new(&publisher, &settings.queues());
    let queue = settings.queues().name(Queue::RunsFinished);
    tracing::info!(%queue, concurrency = settings.intake_lanes(), "collector consuming");
    let (publishing, publisher_after_commit) = PublishAfterCommit::start(&conn, &pool, settings).await?;
    let role = Arc::new((pool.clone(), dead, settings.clone(), publishing));
    // Runs are collected side by side, one message of a run after the other.
    let keys = |d: &Delivery| {
        serde_json::from_slice::<RunFinished>(d.body()).map(|m| vec![m.run_id.to_string()]).unwrap_or_default()
    };
    let result = consume_keyed(&conn, &queue, settings.prefetch, settings.intake_lanes(), shutdown, keys, |d, stop| {
        let role = role.clone();
        async move {
            let (pool, dead, settings, publishing) = &*role;
            scope(publishing.clone(), handle(pool, dead, settings, &stop, d)).await
        }
    })
    .await;
    publisher_after_commit.stop().await;
    publisher.close().await;
    // Closed, not only dropped: a consumer whose task ended with the
    // attempt's error (another consumer of this role failed) is cancelled
    // with it, and what it held goes back to its queue. Left open, it kept
    // a dead-lettered request unacked, out of every live consumer's reach.
    conn.close("the role's attempt ended").await;
    result
}

async fn handle(
    pool: &Pool,
    dead: &DeadLetters,
    settings: &Settings,
    shutdown: &CancellationToken,
    d: Delivery,
) -> anyhow::Result<()> {
    let hop = tracing::info_span!("collector");
    crate::telemetry::continue_from(&hop, &d);
    match serde_json::from_slice::<RunFinished>(d.body()) {
        Ok(message) => {
            match retry_transient("collecting a run", settings.transient_patience, shutdown, || collect(pool, message))
                .instrument(hop)
                .await
            {
                Ok(()) => Ok(d.ack().await?),
                Err(e) if crate::roles::is_transient(&e) => Err(e),
                Err(e) => Ok(d
                    .dead_letter(dead, Queue::RunsFinished.as_str(), &format!("could not collect the run: {e:#}"))
                    .await?),
            }
        }
        Err(e) => {
            Ok(d.dead_letter(dead, Queue::RunsFinished.as_str(), &format!("not a run-finished message: {e}")).await?)
        }
    }
}

/// Writes the final status and reply of a run's request to the outbox, in
/// a transaction of its own ([`baton_store::runs::answer::collect`]). A run
/// a role ends is answered in the transaction that ends it; this serves
/// what `baton.runs.finished` carries: a run an operator's command ended,
/// an operator's `runs answer`, the relay's sweep of unanswered runs.
#[tracing::instrument(name = "run", skip_all, fields(run = %message.run_id, run_id = %message.run_id))]
pub async fn collect(pool: &Pool, message: RunFinished) -> anyhow::Result<()> {
    let mut client = db(pool).await?;
    let tx = begin(&mut client).await?;
    baton_store::runs::answer::collect(&tx, message.run_id).await?;
    commit(tx).await?;
    Ok(())
}
