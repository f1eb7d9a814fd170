//! A scripted, stateless model server (OpenAI Chat Completions on port 0)
//! that counts what it is asked: the turn of each request is read from the
//! request itself (the assistant messages it already carries), and each
//! answer is given after a delay, so a fault can strike while turns are
//! being answered. "No model turn asked again" is then a fact the server
//! saw: every (invocation, turn) asked exactly once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// A tool call the model makes at one turn: its name and arguments.
pub type Call = (&'static str, Value);

#[derive(Default)]
struct Asked {
    /// How many times each (session, turn) was asked, and when last.
    counts: HashMap<(String, usize), usize>,
    total: usize,
}

struct Turns {
    /// Each profile's script (the request's model names it).
    scripts: HashMap<String, Vec<Call>>,
    delay: Duration,
    asked: Mutex<Asked>,
    notify: tokio::sync::Notify,
}

/// The server; stopped when dropped.
pub struct TurnServer {
    pub base_url: String,
    state: Arc<Turns>,
    task: tokio::task::JoinHandle<()>,
}

impl TurnServer {
    /// Answers the model named `model` with its script's call at each turn,
    /// `delay` after each request.
    pub async fn start(scripts: Vec<(&str, Vec<Call>)>, delay: Duration) -> Self {
        Self::start_on("127.0.0.1:0", scripts, delay).await
    }

    /// [`TurnServer::start`] on an address of the caller's.
    pub async fn start_on(addr: &str, scripts: Vec<(&str, Vec<Call>)>, delay: Duration) -> Self {
        let scripts = scripts.into_iter().map(|(m, s)| (m.to_string(), s)).collect();
        let state = Arc::new(Turns { scripts, delay, asked: Mutex::default(), notify: Default::default() });
        let app = Router::new().route("/v1/chat/completions", post(complete)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { base_url, state, task }
    }

    /// Requests answered or being answered so far.
    pub fn total(&self) -> usize {
        self.state.asked.lock().unwrap().total
    }

    /// Waits until at least `n` requests came in.
    pub async fn until_asked(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.total() < n {
            let notified = self.state.notify.notified();
            if self.total() >= n {
                break;
            }
            assert!(
                tokio::time::timeout_at(deadline, notified).await.is_ok(),
                "{} of {n} model requests after {within:?}",
                self.total()
            );
        }
    }

    /// Every (session, turn) asked more than once, with how often.
    pub fn repeated(&self) -> Vec<((String, usize), usize)> {
        let asked = self.state.asked.lock().unwrap();
        let mut repeated: Vec<_> = asked.counts.iter().filter(|(_, n)| **n > 1).map(|(k, n)| (k.clone(), *n)).collect();
        repeated.sort();
        repeated
    }

    /// How many model requests each session (an invocation) made.
    pub fn asked_by_session(&self) -> std::collections::BTreeMap<String, usize> {
        let asked = self.state.asked.lock().unwrap();
        let mut by = std::collections::BTreeMap::new();
        for ((session, _), n) in &asked.counts {
            *by.entry(session.clone()).or_default() += n;
        }
        by
    }

    /// Distinct (session, turn) asked.
    pub fn distinct(&self) -> usize {
        self.state.asked.lock().unwrap().counts.len()
    }
}

impl Drop for TurnServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn complete(State(state): State<Arc<Turns>>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let session = headers.get("x-session-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let turn = messages.iter().filter(|m| m["role"] == "assistant").count();
    {
        let mut asked = state.asked.lock().unwrap();
        *asked.counts.entry((session, turn)).or_default() += 1;
        asked.total += 1;
    }
    state.notify.notify_waiters();
    tokio::time::sleep(state.delay).await;
    let model = body["model"].as_str().unwrap_or("");
    let Some((name, args)) = state.scripts.get(model).and_then(|s| s.get(turn)) else {
        return completion(json!({"role": "assistant", "content": "(no more turns)"}));
    };
    completion(json!({
        "role": "assistant", "content": null,
        "tool_calls": [{"id": format!("call_{}", uuid::Uuid::new_v4().simple()), "type": "function",
                        "function": {"name": name, "arguments": args.to_string()}}]
    }))
}

fn completion(message: Value) -> Response {
    Json(json!({
        "id": "chatcmpl-turns", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
    }))
    .into_response()
}

/// A profile whose model is the server at `base_url` under the name `id`
/// (the server picks the script by it), in the profiles file's TOML.
pub fn profile(id: &str, tools: &[&str], delegation: &str, base_url: &str) -> String {
    let tools: Vec<String> = tools.iter().map(|t| format!("\"{t}\"")).collect();
    format!(
        "[[profiles]]\nid = \"{id}\"\nname = \"{id}\"\ndescription = \"The {id} agent.\"\ntools = [{}]\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"{id}\"\n[profiles.delegation]\n{delegation}\n",
        tools.join(", ")
    )
}
