//! Status callbacks, delivered by the relay role beside the outbox: each
//! due update is POSTed to the bridge's `callback.statusUrl`; failures are
//! retried with exponential backoff, and given up on (with a handoff event)
//! after a while. Callbacks never block a run: they only read what the run
//! already committed.

use std::time::Duration;

use baton_store::{callbacks, requests, Pool};
use tokio_util::sync::CancellationToken;

const BATCH: i64 = 32;
const MAX_ATTEMPTS: i32 = 8;
const POST_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers due callbacks until shutdown.
pub async fn deliver(pool: Pool, poll: Duration, shutdown: CancellationToken) {
    let client = reqwest::Client::builder().timeout(POST_TIMEOUT).build().expect("an HTTP client");
    let mut tick = tokio::time::interval(poll);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = deliver_due(&pool, &client).await {
            tracing::warn!(error = %format!("{e:#}"), "status callbacks: will retry");
        }
    }
}

/// Leases the due callbacks in a short transaction, POSTs them with no
/// transaction open, then records each outcome. A crash between the POST and
/// the record sends that update again after the lease: at least once, and
/// `seq` lets the bridge drop the repeat.
async fn deliver_due(pool: &Pool, client: &reqwest::Client) -> anyhow::Result<()> {
    let due = {
        let mut db = pool.get().await?;
        let tx = db.transaction().await?;
        let due = callbacks::take_due(&tx, BATCH).await?;
        for cb in &due {
            callbacks::lease(&tx, cb.id, POST_TIMEOUT * 2).await?;
        }
        tx.commit().await?;
        due
    };
    for cb in due {
        let outcome = post(client, &cb.url, &cb.body).await;
        crate::metrics::callback(outcome.is_ok());
        let db = pool.get().await?;
        match outcome {
            Ok(()) => callbacks::delete(&db, cb.id).await?,
            Err(why) if cb.attempts + 1 >= MAX_ATTEMPTS => {
                tracing::warn!(handoff = %cb.handoff_id, url = %cb.url, why, "status callback given up");
                let note = format!("status callback to {} given up after {MAX_ATTEMPTS} attempts: {why}", cb.url);
                requests::add_event(&db, &cb.handoff_id, "callback_failed", None, Some(&note)).await?;
                callbacks::delete(&db, cb.id).await?;
            }
            Err(why) => callbacks::retry_later(&db, cb.id, backoff(cb.attempts), &why).await?,
        }
    }
    Ok(())
}

/// How much of a failed callback's answer is kept as its reason; the rest
/// is never read, however large the endpoint makes it.
const ERROR_SNIPPET_BYTES: usize = 512;

async fn post(client: &reqwest::Client, url: &str, body: &serde_json::Value) -> Result<(), String> {
    let response = client.post(url).json(body).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    if status.is_success() {
        // The status is the answer; the body is not read (dropping it unread
        // costs nothing, whatever its size).
        return Ok(());
    }
    let said = baton_agent::http::snippet(response, ERROR_SNIPPET_BYTES).await;
    let said: String = said.chars().filter(|c| !c.is_control()).take(200).collect();
    Err(if said.trim().is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {}", said.trim()) })
}

/// 250 ms, 500 ms, 1 s … capped at five minutes.
fn backoff(attempts: i32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempts.clamp(0, 16))).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(super::backoff(0).as_millis(), 250);
        assert_eq!(super::backoff(2).as_millis(), 1000);
        assert_eq!(super::backoff(40).as_secs(), 300);
    }
}
