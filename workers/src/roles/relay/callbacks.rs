//! Status callbacks, delivered by the relay role beside the outbox: each
//! due update is POSTed to the bridge's `callback.statusUrl`, signed the
//! Standard Webhooks way with its source's secret; failures are retried with
//! exponential backoff, and given up on (with a handoff event) after a while.
//! Callbacks never block a run: they only read what the run already committed.
//!
//! Up to `IN_FLIGHT` callbacks are sent at once, so a slow endpoint holds
//! up only its own handoff's updates; one handoff's updates go one at a
//! time, in order (the store hands out only the oldest of each handoff).
//! A URL off the profiles file's allow-list, or a source with no secret,
//! is refused once with a `callback_failed` event and never POSTed. No URL
//! is logged or recorded with its query string ([`loggable_url`]).

use std::sync::Arc;
use std::time::Duration;

use baton_domain::protocol::callback::sign::{self, Secret};
use baton_domain::protocol::callback::{loggable_url, webhook_id, CallbacksConfig, Refusal};
use baton_store::requests::callbacks::{self, Callback};
use baton_store::Pool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Callbacks being sent at once (to as many different handoffs).
const IN_FLIGHT: usize = 16;
const MAX_ATTEMPTS: i32 = 8;
const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a taken callback is kept from others: longer than its POST.
const LEASE: Duration = Duration::from_secs(30);
/// On shutdown, how long callbacks already being sent may finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What became of one attempt.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Sent,
    /// It may work later (a refused connection, a 5xx, a timeout …).
    Retry(String),
    /// It will not work by trying again (a redirect, `410 Gone`).
    GiveUp(String),
    /// This handoff's callbacks may not be sent at all.
    Refused(Refusal),
}

/// Delivers due callbacks until shutdown.
pub async fn deliver(pool: Pool, poll: Duration, shutdown: CancellationToken) {
    let client = reqwest::Client::builder()
        .timeout(POST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client");
    let mut sending = JoinSet::new();
    let mut tick = tokio::time::interval(poll);
    loop {
        if let Err(e) = take_more(&pool, &client, &mut sending).await {
            tracing::warn!(error = %format!("{e:#}"), "status callbacks: will retry");
        }
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            Some(_) = sending.join_next(), if !sending.is_empty() => {}
            _ = tick.tick() => {}
        }
    }
    // What is still being sent when the grace ends is sent again after its
    // lease: at least once, and the `webhook-id` lets the bridge drop the repeat.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async { while sending.join_next().await.is_some() {} }).await;
    sending.shutdown().await;
}

/// Takes as many due callbacks as there is room for and starts sending each.
async fn take_more(pool: &Pool, client: &reqwest::Client, sending: &mut JoinSet<()>) -> anyhow::Result<()> {
    let room = IN_FLIGHT.saturating_sub(sending.len());
    if room == 0 {
        return Ok(());
    }
    let db = pool.get().await?;
    let due = callbacks::take_due(&db, room as i64, LEASE).await?;
    if due.is_empty() {
        return Ok(());
    }
    let config = Arc::new(baton_store::profiles::settings::callbacks(&db).await?);
    let bridges = Arc::new(baton_store::profiles::settings::bridges(&db).await?);
    drop(db);
    for cb in due {
        let (pool, client, config, bridges) = (pool.clone(), client.clone(), config.clone(), bridges.clone());
        sending.spawn(async move {
            // A bridge's request is signed with the bridge's own secret, to its own origins.
            let own = cb.bridge.as_deref().map(|id| match bridges.iter().find(|b| b.id == id) {
                Some(bridge) => CallbacksConfig::for_bridge(bridge),
                None => CallbacksConfig::default(),
            });
            let outcome = attempt(&client, own.as_ref().unwrap_or(&config), &cb).await;
            if let Err(e) = record(&pool, &cb, outcome).await {
                tracing::warn!(handoff = %cb.handoff_id, error = %format!("{e:#}"), "status callback outcome not recorded: it is sent again");
            }
        });
    }
    Ok(())
}

/// Checks, signs and POSTs one callback.
async fn attempt(client: &reqwest::Client, config: &CallbacksConfig, cb: &Callback) -> Outcome {
    let secret = match config.check(&cb.source, &cb.url).and_then(secret_in) {
        Ok(secret) => secret,
        Err(refusal) => return Outcome::Refused(refusal),
    };
    let body = serde_json::to_vec(&cb.body).expect("a JSON value serializes");
    let seq = cb.body["seq"].as_i64().unwrap_or(-cb.id);
    let id = webhook_id(cb.body["handoffId"].as_str().unwrap_or(&cb.handoff_id), seq);
    let headers = sign::headers(&secret, &id, chrono::Utc::now().timestamp(), &body);
    let mut request = client.post(&cb.url).header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    match request.body(body).send().await {
        Ok(response) => judge(response).await,
        Err(e) => Outcome::Retry(describe(e)),
    }
}

/// The secret in the variable the profiles file names.
fn secret_in(variable: &str) -> Result<Secret, Refusal> {
    let text = std::env::var(variable)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| Refusal::SecretUnset(variable.to_string()))?;
    Secret::parse(&text).map_err(|e| Refusal::SecretInvalid(variable.to_string(), e))
}

/// How much of a failed callback's answer is kept as its reason; the rest
/// is never read, however large the endpoint makes it.
const ERROR_SNIPPET_BYTES: usize = 512;

/// A 2xx is sent; a redirect is not followed and `410 Gone` means stop
/// (the Standard Webhooks advice); anything else is tried again.
async fn judge(response: reqwest::Response) -> Outcome {
    let status = response.status();
    if let Some(outcome) = settled_by(status) {
        // The status is the answer; the body is not read (dropping it unread
        // costs nothing, whatever its size).
        return outcome;
    }
    let said = baton_agent::http::snippet(response, ERROR_SNIPPET_BYTES).await;
    let said: String = said.chars().filter(|c| !c.is_control()).take(200).collect();
    Outcome::Retry(if said.trim().is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {}", said.trim())
    })
}

/// What an answer's status alone settles: sent, or given up for good.
fn settled_by(status: reqwest::StatusCode) -> Option<Outcome> {
    if status.is_success() {
        Some(Outcome::Sent)
    } else if status.is_redirection() {
        Some(Outcome::GiveUp(format!("HTTP {status}: a redirect, which is not followed")))
    } else if status == reqwest::StatusCode::GONE {
        Some(Outcome::GiveUp(format!("HTTP {status}: the endpoint wants no more callbacks")))
    } else {
        None
    }
}

/// A transport error and its causes, without the URL reqwest would print.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Records an attempt's outcome: sent callbacks are removed, failed ones
/// retried later or given up with a `callback_failed` event.
async fn record(pool: &Pool, cb: &Callback, outcome: Outcome) -> anyhow::Result<()> {
    let url = loggable_url(&cb.url);
    let mut db = pool.get().await?;
    match outcome {
        Outcome::Sent => {
            crate::metrics::callback("sent");
            callbacks::delete(&db, cb.id).await?;
        }
        Outcome::Retry(why) if cb.attempts + 1 < MAX_ATTEMPTS => {
            callbacks::retry_later(&db, cb.id, backoff(cb.attempts), &why).await?;
        }
        Outcome::Retry(why) => {
            crate::metrics::callback("failed");
            tracing::warn!(handoff = %cb.handoff_id, url, why, "status callback given up");
            let note = format!("status callback to {url} given up after {MAX_ATTEMPTS} attempts: {why}");
            callbacks::give_up(&db, cb, &note).await?;
        }
        Outcome::GiveUp(why) => {
            crate::metrics::callback("failed");
            tracing::warn!(handoff = %cb.handoff_id, url, why, "status callback given up");
            callbacks::give_up(&db, cb, &format!("status callback to {url} given up: {why}")).await?;
        }
        Outcome::Refused(why) => {
            crate::metrics::callback("refused");
            tracing::warn!(handoff = %cb.handoff_id, url, why = %why, "status callbacks refused");
            let tx = db.transaction().await?;
            callbacks::refuse(&tx, &cb.handoff_id, &format!("status callbacks to {url} refused: {why}")).await?;
            tx.commit().await?;
        }
    }
    Ok(())
}

/// 250 ms, 500 ms, 1 s … capped at five minutes.
fn backoff(attempts: i32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempts.clamp(0, 16))).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::{settled_by, Outcome};
    use reqwest::StatusCode;

    #[test]
    fn a_2xx_is_sent_a_redirect_or_gone_is_given_up_and_anything_else_is_tried_again() {
        assert_eq!(settled_by(StatusCode::OK), Some(Outcome::Sent));
        assert_eq!(settled_by(StatusCode::NO_CONTENT), Some(Outcome::Sent));
        for status in [
            StatusCode::MOVED_PERMANENTLY,
            StatusCode::FOUND,
            StatusCode::TEMPORARY_REDIRECT,
            StatusCode::PERMANENT_REDIRECT,
        ] {
            assert!(
                matches!(settled_by(status), Some(Outcome::GiveUp(why)) if why.contains("not followed")),
                "{status}"
            );
        }
        assert!(matches!(settled_by(StatusCode::GONE), Some(Outcome::GiveUp(_))));
        for status in [
            StatusCode::NOT_FOUND,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
        ] {
            assert_eq!(settled_by(status), None, "{status} is tried again");
        }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(super::backoff(0).as_millis(), 250);
        assert_eq!(super::backoff(2).as_millis(), 1000);
        assert_eq!(super::backoff(40).as_secs(), 300);
    }
}
