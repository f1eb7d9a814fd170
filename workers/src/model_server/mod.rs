//! A scripted model server that speaks each coding CLI's wire API, for
//! `baton demo --target codex` (and the others) and the tests: a real CLI
//! runs against it exactly as against its provider, offline.
//!
//! It answers statelessly from the request: the tool results that follow
//! the current prompt say which step of the script comes next, so the extra
//! calls a CLI makes (titles, summaries, token counts) never shift it. A
//! request that carries an earlier exchange before its prompt (a resumed
//! session) plays the `resumed` steps instead. Every request is kept
//! ([`ModelServer::requests`]), so a test can read what the model was sent.
//!
//! `wire` encodes the four APIs: Anthropic Messages, OpenAI Responses, Chat
//! Completions (each SSE) and Gemini `streamGenerateContent`.

mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use wire::Api;

/// One step of what the model does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Writes a file (a path relative to the agent's checkout) with the CLI's own tool.
    Write { path: String, content: String },
    /// Runs a shell command with the CLI's own tool.
    Shell { command: String },
    /// Answers in words; the last step.
    Say { text: String },
}

/// What the model does in a first session and in a resumed one.
#[derive(Debug, Clone)]
pub struct Script {
    pub first: Vec<Step>,
    pub resumed: Vec<Step>,
    /// Never finishes: after the script, it runs `echo again` for ever (a runaway agent).
    pub endless: bool,
}

impl Script {
    /// Edit `path`, run a command, say so; a resumed session appends a line to it.
    pub fn edit(path: &str, content: &str) -> Script {
        Script {
            first: vec![
                Step::Write { path: path.into(), content: content.into() },
                Step::Shell { command: "echo hi".into() },
                Step::Say { text: format!("Done: wrote {path}.") },
            ],
            resumed: vec![
                Step::Write { path: "FOLLOWUP.md".into(), content: "a follow-up change\n".into() },
                Step::Say { text: "Done: the follow-up is in FOLLOWUP.md.".into() },
            ],
            endless: false,
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// Whether it asked the model for an answer (not a count or a listing).
    pub model_call: bool,
    /// Tool results of an earlier exchange before its prompt (a resumed session's).
    pub earlier_results: usize,
}

struct Shared {
    api: Api,
    script: Mutex<Script>,
    seen: Mutex<Vec<Seen>>,
}

/// A running server; it stops when dropped.
pub struct ModelServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ModelServer {
    /// Listens on 127.0.0.1, on a port of the system's choosing.
    pub async fn start(api: Api, script: Script) -> std::io::Result<ModelServer> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { api, script: Mutex::new(script), seen: Mutex::default() });
        let stop = CancellationToken::new();
        let app = axum::Router::new().fallback(answer).with_state(shared.clone());
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await }).await;
        });
        Ok(ModelServer { addr, shared, stop })
    }

    /// The base URL a profile gives, in the API's convention.
    pub fn base_url(&self) -> String {
        match self.shared.api {
            Api::OpenAiResponses | Api::ChatCompletions => format!("http://{}/v1", self.addr),
            Api::AnthropicMessages | Api::Gemini => format!("http://{}", self.addr),
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("not poisoned").clone()
    }

    /// The model calls (answers asked for) so far.
    pub fn model_calls(&self) -> Vec<Seen> {
        self.requests().into_iter().filter(|s| s.model_call).collect()
    }
}

async fn answer(State(s): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024).await.unwrap_or_default();
    // None of the four CLIs compresses its requests.
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let headers = parts.headers.iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string())).collect();
    let script = s.script.lock().expect("not poisoned").clone();
    let (response, model_call, earlier) = wire::respond(s.api, &parts.method, &path, &body, &script);
    s.seen.lock().expect("not poisoned").push(Seen { path, headers, body, model_call, earlier_results: earlier });
    response
}
