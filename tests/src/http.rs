//! HTTP peers started by tests on port 0: an OpenAI-compatible model
//! server that plays scripted replies and records what it was sent, and a
//! bridge's status-callback endpoint.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// What the model server answers next.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A chat completion calling one tool.
    Tool(&'static str, Value),
    /// A plain-text completion.
    Text(&'static str),
    /// An HTTP error, with an optional `Retry-After` in seconds.
    Status(u16, Option<u32>),
    /// No answer for this long (a client timeout).
    Hang(Duration),
}

#[derive(Default)]
struct ModelState {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<(HeaderMap, Value)>>,
}

/// An OpenAI-compatible Chat Completions server on 127.0.0.1.
pub struct ModelServer {
    pub base_url: String,
    state: Arc<ModelState>,
    task: tokio::task::JoinHandle<()>,
}

impl ModelServer {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let state = Arc::new(ModelState { replies: Mutex::new(replies.into()), ..Default::default() });
        let app = Router::new().route("/v1/chat/completions", post(complete)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base_url, state, task }
    }

    /// Every request body received, in order.
    pub fn bodies(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().iter().map(|(_, b)| b.clone()).collect()
    }

    /// A header of every request received, in order.
    pub fn header(&self, name: &str) -> Vec<String> {
        let requests = self.state.requests.lock().unwrap();
        requests.iter().map(|(h, _)| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string()).collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

static USAGE: (u64, u64) = (40, 10);

async fn complete(State(state): State<Arc<ModelState>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    state.requests.lock().unwrap().push((headers, body));
    let next = state.replies.lock().unwrap().pop_front().unwrap_or(Reply::Text("(no more replies)"));
    match next {
        Reply::Tool(name, args) => completion(json!({
            "role": "assistant", "content": null,
            "tool_calls": [{"id": format!("call_{}", uuid::Uuid::new_v4().simple()), "type": "function",
                            "function": {"name": name, "arguments": args.to_string()}}]
        })),
        Reply::Text(text) => completion(json!({"role": "assistant", "content": text})),
        Reply::Status(code, retry_after) => {
            let mut response = (StatusCode::from_u16(code).unwrap(), "try again").into_response();
            if let Some(secs) = retry_after {
                response.headers_mut().insert("retry-after", secs.to_string().parse().unwrap());
            }
            response
        }
        Reply::Hang(how_long) => {
            tokio::time::sleep(how_long).await;
            completion(json!({"role": "assistant", "content": "too late"}))
        }
    }
}

fn completion(message: Value) -> Response {
    let (prompt, completion) = USAGE;
    Json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    }))
    .into_response()
}

/// Tokens the model server reports per completion.
pub fn tokens_per_completion() -> i64 {
    (USAGE.0 + USAGE.1) as i64
}

#[derive(Default)]
struct CallbackState {
    /// How many of the first requests fail with HTTP 500.
    fail_first: Mutex<usize>,
    received: Mutex<Vec<Value>>,
    attempts: Mutex<usize>,
}

/// A bridge's status endpoint that fails its first `fail_first` requests.
pub struct CallbackServer {
    pub url: String,
    state: Arc<CallbackState>,
    task: tokio::task::JoinHandle<()>,
}

impl CallbackServer {
    pub async fn start(fail_first: usize) -> Self {
        let state = Arc::new(CallbackState { fail_first: Mutex::new(fail_first), ..Default::default() });
        let app = Router::new().route("/status", post(receive)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/status", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { url, state, task }
    }

    pub fn received(&self) -> Vec<Value> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn attempts(&self) -> usize {
        *self.state.attempts.lock().unwrap()
    }
}

impl Drop for CallbackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(State(state): State<Arc<CallbackState>>, Json(body): Json<Value>) -> StatusCode {
    *state.attempts.lock().unwrap() += 1;
    let mut fail = state.fail_first.lock().unwrap();
    if *fail > 0 {
        *fail -= 1;
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    state.received.lock().unwrap().push(body);
    StatusCode::OK
}

/// A peer that answers every POST, on any path, with `status` and a body of
/// `bytes` bytes, streamed in chunks (the test never holds it whole), and
/// counts the requests it got: a model server or a callback endpoint gone wrong.
pub struct HugeBodyServer {
    pub base_url: String,
    hits: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl HugeBodyServer {
    pub async fn start(status: u16, bytes: usize) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        let app = Router::new().fallback(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let chunk = axum::body::Bytes::from(vec![b'a'; 64 * 1024]);
            let chunks = bytes.div_ceil(chunk.len());
            let stream = futures_lite::stream::iter((0..chunks).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
            async move { (StatusCode::from_u16(status).unwrap(), axum::body::Body::from_stream(stream)).into_response() }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base_url, hits, task }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for HugeBodyServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The most memory this process has held at once (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    kib.unwrap_or(0) * 1024
}
