//! Consuming with bounded concurrency, in arrival order per key. Intake and
//! the collector hand each delivery to a task of its own, so unrelated
//! requests are stored side by side, while deliveries that share a key (a
//! handoff id, a conversation, a run) are handled one after the other, in
//! the order the broker delivered them: each waits until every earlier
//! delivery sharing one of its keys is done.
//!
//! Settling is the handler's, as with [`baton_bus::consume::consume`]: it
//! acks once its work is committed. A handler error ends the consumer (the
//! role reconnects): no delivery starts after it, the ones in flight finish,
//! and then the channel closes, so every unsettled delivery goes back to the
//! queue, in order. Shutdown ends it the same way, without the error.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use baton_bus::{Connection, Delivery};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Consumes `queue` with up to `concurrency` handlers at once (the broker's
/// `prefetch` is raised to it when lower), in arrival order among deliveries
/// that share one of the keys `keys` reads. The handler gets the delivery
/// and a token that fires on shutdown or once the consumer is ending (its
/// retries stop there, and it leaves the delivery unsettled).
pub async fn consume_keyed<K, F, Fut>(
    conn: &Connection,
    queue: &str,
    prefetch: u16,
    concurrency: usize,
    shutdown: &CancellationToken,
    keys: K,
    handle: F,
) -> anyhow::Result<()>
where
    K: Fn(&Delivery) -> Vec<String>,
    F: Fn(Delivery, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let concurrency = concurrency.max(1);
    let prefetch = prefetch.max(u16::try_from(concurrency).unwrap_or(u16::MAX));
    let mut deliveries = conn.subscribe(queue, prefetch).await?;
    let permits = Arc::new(Semaphore::new(concurrency));
    let tasks = TaskTracker::new();
    // Fires on shutdown, a handler's failure, a broken channel, or this
    // future dropped half way (its spawned tasks then stop too).
    let stop = shutdown.child_token();
    let _stop_when_dropped = stop.clone().drop_guard();
    let failure: Arc<Mutex<Option<anyhow::Error>>> = Arc::default();
    // For each key, the last delivery that holds it: cancelled once it is done.
    let mut last: HashMap<String, CancellationToken> = HashMap::new();
    let result = loop {
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break Ok(()),
            next = deliveries.next() => next,
        };
        let delivery = match next {
            Ok(delivery) => delivery,
            Err(e) => break Err(anyhow::Error::from(e)),
        };
        last.retain(|_, done| !done.is_cancelled());
        let done = CancellationToken::new();
        let mut before: Vec<CancellationToken> = vec![];
        for key in keys(&delivery) {
            if let Some(earlier) = last.insert(key, done.clone()) {
                before.push(earlier);
            }
        }
        // Boxed: the task then holds a pointer, not the handler's whole
        // state machine, which spawning would copy several times over.
        let work = Box::pin(handle(delivery, stop.clone()));
        let (permits, stop, failure) = (permits.clone(), stop.clone(), failure.clone());
        tasks.spawn(async move {
            // Whatever happens below, the deliveries behind this one may go on
            // (they see `stop` too, so none starts after a failure).
            let _done = done.drop_guard();
            for earlier in before {
                earlier.cancelled().await;
            }
            let _permit = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                permit = permits.acquire_owned() => permit.expect("never closed"),
            };
            if stop.is_cancelled() {
                return; // unsettled: it goes back to the queue
            }
            if let Err(e) = work.await {
                failure.lock().expect("not poisoned").get_or_insert(e);
                stop.cancel();
            }
        });
    };
    // No delivery starts from here on; the ones in flight finish (and ack)
    // before the channel closes and hands the rest back.
    stop.cancel();
    tasks.close();
    tasks.wait().await;
    deliveries.close().await;
    let failed = failure.lock().expect("not poisoned").take();
    match (result, failed) {
        (Err(e), _) => Err(e),
        (Ok(()), Some(e)) if !shutdown.is_cancelled() => Err(e),
        (Ok(()), _) => Ok(()),
    }
}

/// The keys of a message on the requests queue that its order matters
/// within: its handoff (a request's `id`, a cancel's or an answer's
/// `handoffId`) and, for a request, its conversation (`conversationKey`,
/// else `callback.replyToChatId`). Read without parsing the whole message;
/// a body that cannot be read has none (it is refused on its own).
pub fn request_keys(body: &[u8]) -> Vec<String> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Peek {
        #[serde(rename = "type")]
        kind: Option<Value>,
        id: Option<Value>,
        handoff_id: Option<Value>,
        conversation_key: Option<Value>,
        callback: Option<Value>,
    }
    // A body too large or too deep is refused unread: its lane is its own.
    if baton_domain::protocol::request::refused_unread(body).is_some() {
        return vec![];
    }
    let Ok(peek) = serde_json::from_slice::<Peek>(body) else {
        return vec![];
    };
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
    let mut keys = vec![];
    let handoff = if peek.kind.is_some() { peek.handoff_id } else { peek.id };
    if let Some(id) = handoff.as_ref().filter(|v| !v.is_null()) {
        keys.push(format!("h:{}", text(id)));
    }
    if peek.kind.is_none() {
        let chat = peek.callback.as_ref().and_then(|c| c.get("replyToChatId")).cloned();
        if let Some(key) = peek.conversation_key.or(chat).filter(|v| !v.is_null()) {
            keys.push(format!("c:{}", text(&key)));
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_keyed_by_its_handoff_and_its_conversation() {
        let body = br#"{"id":"h1","conversationKey":"t7","callback":{"replyToChatId":"chat"}}"#;
        assert_eq!(request_keys(body), ["h:h1", "c:t7"]);
        let body = br#"{"id":"h1","callback":{"replyToChatId":"chat"}}"#;
        assert_eq!(request_keys(body), ["h:h1", "c:chat"]);
        assert_eq!(request_keys(br#"{"id":"h1"}"#), ["h:h1"]);
    }

    #[test]
    fn a_cancel_or_an_answer_is_keyed_by_its_handoff_only() {
        let body = br#"{"type":"cancel","id":"c1","handoffId":"h1","conversationKey":"t7"}"#;
        assert_eq!(request_keys(body), ["h:h1"]);
        assert_eq!(request_keys(br#"{"type":"answer","id":"a1","handoffId":"h1"}"#), ["h:h1"]);
    }

    #[test]
    fn an_unreadable_body_has_no_key() {
        assert!(request_keys(b"not json").is_empty());
        assert!(request_keys(b"[1,2]").is_empty());
        assert!(request_keys(br#"{"callback":"x","id":null}"#).is_empty());
    }
}
