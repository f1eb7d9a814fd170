//! An OpenAI-compatible model server for fleets of runs: it answers by the
//! conversation (so any number of runs can call it at once, in any order),
//! enforces a provider's own limit (requests per second, answered 429
//! above it), and records what a provider would see: when each request
//! arrived and for which run, how many were in flight at once, the 429s it
//! sent, and the tokens it reported.
//!
//! Each run takes two calls: the first writes and commits (two tool calls
//! in one turn), the second finishes. A request whose text contains
//! `SLOWLY` is answered after [`Paced::slow`], others after [`Paced::delay`];
//! the first call of one whose text contains `HUGELY` reports
//! [`Paced::huge`] tokens.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// How the server behaves.
#[derive(Debug, Clone, Copy)]
pub struct Paced {
    /// Requests accepted in any one second; more get 429 with `Retry-After: 1`.
    pub per_second: Option<usize>,
    pub delay: Duration,
    pub slow: Duration,
    /// Total tokens reported per completion.
    pub tokens: u64,
    /// Total tokens reported by the first call of a `HUGELY` request.
    pub huge: u64,
    /// The first this many requests are answered 429 with `Retry-After`
    /// (whole seconds), whatever the rate: a provider asking for a pause.
    pub refuse_first: usize,
    pub retry_after_secs: u64,
}

impl Default for Paced {
    fn default() -> Self {
        Self {
            per_second: None,
            delay: Duration::from_millis(20),
            slow: Duration::from_secs(2),
            tokens: 50,
            huge: 50,
            refuse_first: 0,
            retry_after_secs: 1,
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Instant,
    /// The run id (from `X-Session-Id`: `runId:invocationId`).
    pub run: String,
    /// The call's place in its run: 1 or 2.
    pub turn: usize,
    pub refused: bool,
}

#[derive(Default)]
struct Seen {
    arrivals: Mutex<Vec<Arrival>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
}

struct Shared {
    paced: Paced,
    seen: Seen,
}

pub struct PacedModelServer {
    pub base_url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl PacedModelServer {
    pub async fn start(paced: Paced) -> Self {
        let shared = Arc::new(Shared { paced, seen: Seen::default() });
        let app = Router::new().route("/v1/chat/completions", post(complete)).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base_url, shared, task }
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.seen.arrivals.lock().unwrap().clone()
    }

    /// Requests answered 429.
    pub fn refused(&self) -> usize {
        self.arrivals().iter().filter(|a| a.refused).count()
    }

    /// The most requests it was answering at once.
    pub fn most_in_flight(&self) -> usize {
        self.shared.seen.most_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for PacedModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts one request in flight for as long as it lives.
struct InFlight<'a>(&'a Seen);

impl<'a> InFlight<'a> {
    fn enter(seen: &'a Seen) -> Self {
        let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(seen)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn complete(State(shared): State<Arc<Shared>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let _counted = InFlight::enter(&shared.seen);
    let now = Instant::now();
    let run = headers
        .get("x-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_string();
    let tool_results = body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    let turn = if tool_results == 0 { 1 } else { 2 };
    let refused = {
        let mut arrivals = shared.seen.arrivals.lock().unwrap();
        let last_second = arrivals.iter().filter(|a| !a.refused && now - a.at < Duration::from_secs(1)).count();
        let refused = arrivals.len() < shared.paced.refuse_first
            || shared.paced.per_second.is_some_and(|limit| last_second >= limit);
        arrivals.push(Arrival { at: now, run, turn, refused });
        refused
    };
    if refused {
        let mut response = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
        response.headers_mut().insert("retry-after", shared.paced.retry_after_secs.to_string().parse().unwrap());
        return response;
    }
    let text = body.to_string();
    let slow = text.contains("SLOWLY");
    tokio::time::sleep(if slow { shared.paced.slow } else { shared.paced.delay }).await;
    let message = if turn == 1 {
        json!({"role": "assistant", "content": null, "tool_calls": [
            call("workspace_write", json!({"path": "output/main.md", "content": "Done."})),
            call("workspace_commit", json!({})),
        ]})
    } else {
        json!({"role": "assistant", "content": null, "tool_calls": [call("workspace_finish", json!({}))]})
    };
    let tokens = if turn == 1 && text.contains("HUGELY") { shared.paced.huge } else { shared.paced.tokens };
    Json(json!({
        "id": "chatcmpl-paced", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": tokens - tokens / 5, "completion_tokens": tokens / 5, "total_tokens": tokens}
    }))
    .into_response()
}

fn call(name: &str, args: Value) -> Value {
    json!({"id": format!("call_{}", uuid::Uuid::new_v4().simple()), "type": "function",
           "function": {"name": name, "arguments": args.to_string()}})
}

/// A profiles file routing `docs_agent` to one OpenAI-compatible agent on
/// `server`, with `extra` appended (`[[limits]]`).
pub fn profiles(server: &PacedModelServer, extra: &str) -> String {
    format!(
        "[routes]\ndocs_agent = \"solo\"\n\n[[profiles]]\nid = \"solo\"\nname = \"solo\"\ndescription = \"The solo agent.\"\n\
         tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n[profiles.model]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"test-model\"\nmax_attempts = 1\n\n{extra}\n",
        server.base_url
    )
}

/// A sample request with its own conversation (so runs do not take turns)
/// and `priority`; `slow` makes its model calls take [`Paced::slow`]
/// (`HUGELY` in a test's own `userIntent` makes its first call huge).
pub fn request(id: &str, priority: &str, slow: bool) -> Value {
    let mut r = crate::sample_request_json(id, "docs_agent", "en");
    r["priority"] = priority.into();
    r["conversationKey"] = format!("chat-{id}").into();
    if slow {
        r["userIntent"] = "Write it SLOWLY, please.".into();
    }
    r
}
