//! A bridge's signed status-callback endpoint, started on port 0: it keeps
//! every POST exactly as received (headers and raw body) and checks its
//! signature with the Standard Webhooks reference library
//! (`standardwebhooks`), an implementation independent of Baton's.
//!
//! Paths: `/hook/ok` answers 200; `/hook/flaky` answers 500 to its first
//! two requests; `/hook/slow` holds each request until [`Receiver::release`];
//! `/moved` answers `302 Found` pointing at `/hook/ok`.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use tokio::sync::watch;

/// One POST as it arrived.
#[derive(Debug, Clone)]
pub struct Arrival {
    /// `ok`, `flaky`, `slow` or `moved`.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Arrival {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    pub fn seq(&self) -> i64 {
        self.json()["seq"].as_i64().expect("a seq")
    }

    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
    }

    /// The reference library's verdict on this POST with `secret`.
    pub fn verify(&self, secret: &str) -> Result<(), String> {
        verify(secret, &self.headers, &self.body)
    }
}

/// The reference library's verdict on a body and its headers.
pub fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), String> {
    let webhook = standardwebhooks::Webhook::new(secret).map_err(|e| format!("{e:?}"))?;
    webhook.verify(body, headers).map_err(|e| format!("{e:?}"))
}

struct ReceiverState {
    arrivals: Mutex<Vec<Arrival>>,
    flaky_failures: Mutex<usize>,
    gate: watch::Receiver<bool>,
}

/// The endpoint; dropped, it stops.
pub struct Receiver {
    /// `http://127.0.0.1:<port>`: the origin to allow.
    pub origin: String,
    state: Arc<ReceiverState>,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let (open, gate) = watch::channel(false);
        let state = Arc::new(ReceiverState { arrivals: Mutex::default(), flaky_failures: Mutex::new(2), gate });
        let app =
            Router::new().route("/hook/{name}", post(hook)).route("/moved", post(moved)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { origin, state, open, task }
    }

    /// Every POST so far, in arrival order.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.state.arrivals.lock().unwrap().clone()
    }

    /// The POSTs to one path.
    pub fn arrivals_at(&self, path: &str) -> Vec<Arrival> {
        self.arrivals().into_iter().filter(|a| a.path == path).collect()
    }

    /// Lets `/hook/slow` answer, now and from now on.
    pub fn release(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn hook(
    State(state): State<Arc<ReceiverState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    state.arrivals.lock().unwrap().push(Arrival { path: name.clone(), headers, body, at: std::time::Instant::now() });
    match name.as_str() {
        "slow" => {
            let mut gate = state.gate.clone();
            let _ = gate.wait_for(|open| *open).await;
            StatusCode::OK.into_response()
        }
        "flaky" => {
            let mut left = state.flaky_failures.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return (StatusCode::INTERNAL_SERVER_ERROR, "not now").into_response();
            }
            StatusCode::OK.into_response()
        }
        _ => StatusCode::OK.into_response(),
    }
}

async fn moved(State(state): State<Arc<ReceiverState>>, headers: HeaderMap, body: Bytes) -> Response {
    state.arrivals.lock().unwrap().push(Arrival { path: "moved".into(), headers, body, at: std::time::Instant::now() });
    (StatusCode::FOUND, [(header::LOCATION, "/hook/ok?followed=1")]).into_response()
}
