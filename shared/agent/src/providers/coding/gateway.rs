//! A coding invocation's model gateway: an HTTP server on loopback that
//! only this invocation's CLI can use (its "API key" is a token made for
//! it), which forwards each call to the profile's real endpoint with the
//! real key and streams the answer back unchanged.
//!
//! On the way it makes a CLI's model calls like any other agent's: each
//! waits its turn under the fleet's `[[limits]]`, counts against the run's
//! budget (a call past it is refused and the agent is stopped), and is
//! recorded with its usage in the journal. The usage is read from the
//! answer as it streams by (the last figures of each kind an SSE stream or
//! JSON body carries), so it is counted once per call, whatever the CLI
//! itself reports.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use baton_domain::policy::limits::ModelLimit;
use baton_domain::profiles::coding::WireApi;
use baton_domain::run::journal::JournalEvent;
use futures_lite::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::limiter::{Caller, Limiter};
use crate::providers::coding::journal::Journal;

/// The most of a request body the gateway takes from the CLI.
const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;
/// Calls in a row that reach no endpoint before the agent is stopped: a CLI
/// retries what it sees as a server error for minutes (Qwen Code's backoff
/// reaches a minute), and none of that can succeed.
pub const UNREACHABLE_LIMIT: u32 = 3;

/// Where the calls go and what they may spend.
pub struct Upstream {
    pub wire: WireApi,
    /// The profile's `base_url`, as the CLI's convention has it.
    pub base_url: String,
    pub api_key: Option<String>,
    /// Per request (connect and whole answer).
    pub timeout: Duration,
    pub limit: Option<ModelLimit>,
    pub limiter: Option<Arc<Limiter>>,
    pub caller: Caller,
    /// What the run may still spend: model calls and tokens (`None`: unbounded).
    pub calls_left: Option<u64>,
    pub tokens_left: Option<i64>,
}

/// What the CLI spent through the gateway.
#[derive(Debug, Default)]
pub struct Spend {
    pub calls: AtomicU32,
    pub input_tokens: AtomicI64,
    pub output_tokens: AtomicI64,
    /// A call was refused because the run's budget was spent.
    pub over_budget: AtomicBool,
    /// The endpoint could not be reached [`UNREACHABLE_LIMIT`] times in a row.
    pub endpoint_dead: AtomicBool,
    consecutive_unreachable: AtomicU32,
    /// Calls the endpoint failed (a status of 400 or more, or no answer).
    pub failed_calls: AtomicU32,
    pub last_error: std::sync::Mutex<Option<String>>,
}

impl Spend {
    pub fn tokens(&self) -> i64 {
        self.input_tokens.load(Ordering::Relaxed) + self.output_tokens.load(Ordering::Relaxed)
    }
}

struct Shared {
    upstream: Upstream,
    token: String,
    client: reqwest::Client,
    spend: Arc<Spend>,
    journal: Journal,
    /// Fired when the agent must stop: the run's budget refused a call, or the endpoint is gone.
    stop_agent: CancellationToken,
}

/// A running gateway; it stops when dropped.
pub struct Gateway {
    pub addr: SocketAddr,
    pub token: String,
    pub spend: Arc<Spend>,
    /// Fired when the agent must stop (see [`Spend::over_budget`], [`Spend::endpoint_dead`]).
    pub stop_agent: CancellationToken,
    stop: CancellationToken,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Gateway {
    /// A token for one invocation's CLI (256 random bits).
    pub fn new_token() -> String {
        format!("baton-{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
    }

    /// Listens on 127.0.0.1, on a port of the system's choosing, for calls that present `token`.
    pub async fn start(upstream: Upstream, token: String, journal: Journal) -> std::io::Result<Gateway> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(std::io::Error::other)?;
        let (spend, stop_agent, stop) =
            (Arc::new(Spend::default()), CancellationToken::new(), CancellationToken::new());
        let shared = Arc::new(Shared {
            upstream,
            token: token.clone(),
            client,
            spend: spend.clone(),
            journal,
            stop_agent: stop_agent.clone(),
        });
        let app = axum::Router::new().fallback(forward).with_state(shared);
        let stopped = stop.clone();
        tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move { stopped.cancelled().await });
            if let Err(e) = serve.await {
                tracing::warn!(error = %e, "a coding agent's model gateway stopped");
            }
        });
        Ok(Gateway { addr, token, spend, stop_agent, stop })
    }

    /// The base URL the CLI is given, in its own convention.
    pub fn base_url(&self, wire: WireApi) -> String {
        match wire {
            WireApi::OpenAiResponses | WireApi::ChatCompletions => format!("http://{}/v1", self.addr),
            WireApi::AnthropicMessages | WireApi::Gemini => format!("http://{}", self.addr),
        }
    }
}

/// The path the CLI called, as a path under the real endpoint.
fn upstream_path(wire: WireApi, path: &str) -> &str {
    match wire {
        WireApi::OpenAiResponses | WireApi::ChatCompletions => path.strip_prefix("/v1").unwrap_or(path),
        WireApi::AnthropicMessages | WireApi::Gemini => path,
    }
}

/// Whether the call asks the model for an answer (what budgets and limits count).
pub fn is_model_call(wire: WireApi, path: &str) -> bool {
    match wire {
        WireApi::AnthropicMessages => path.ends_with("/messages"),
        WireApi::OpenAiResponses => path.ends_with("/responses"),
        WireApi::ChatCompletions => path.ends_with("/chat/completions"),
        WireApi::Gemini => path.ends_with(":streamGenerateContent") || path.ends_with(":generateContent"),
    }
}

/// The token the CLI presented, in whichever header its API uses.
fn presented(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    header("x-api-key")
        .or_else(|| header("x-goog-api-key"))
        .or_else(|| header("authorization").map(|v| v.trim_start_matches("Bearer ").trim().to_string()))
        .or_else(|| query?.split('&').find_map(|kv| kv.strip_prefix("key=").map(str::to_string)))
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"type": "baton_gateway", "message": message}});
    (status, axum::Json(body)).into_response()
}

async fn forward(State(s): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query = parts.uri.query().map(str::to_string);
    let matches = presented(&parts.headers, query.as_deref())
        .is_some_and(|t| subtle::ConstantTimeEq::ct_eq(t.as_bytes(), s.token.as_bytes()).into());
    if !matches {
        return refuse(StatusCode::UNAUTHORIZED, "this gateway serves one coding invocation only");
    }
    let path = parts.uri.path().to_string();
    let wire = s.upstream.wire;
    let counted = parts.method == axum::http::Method::POST && is_model_call(wire, &path);
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return refuse(StatusCode::PAYLOAD_TOO_LARGE, "the request is too large");
    };
    if counted {
        if let Some(refusal) = check_budget(&s) {
            return refusal;
        }
    }
    let pass = match (counted, &s.upstream.limit, &s.upstream.limiter) {
        (true, Some(limit), Some(limiter)) => {
            match limiter.admit(limit, s.upstream.caller, estimate(limit, &bytes)).await {
                Ok(pass) => Some(pass),
                Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
            }
        }
        _ => None,
    };
    let bytes = if counted && wire == WireApi::ChatCompletions { with_usage_requested(bytes) } else { bytes };
    let call = upstream_call(&s, &parts, &path, query.as_deref(), bytes);
    let started = Instant::now();
    let answer = match call.send().await {
        Ok(answer) => answer,
        Err(e) => {
            let why = format!("the model endpoint could not be reached: {}", without_url(&e));
            if counted {
                s.spend.failed_calls.fetch_add(1, Ordering::Relaxed);
                *s.spend.last_error.lock().expect("not poisoned") = Some(why.clone());
                if s.spend.consecutive_unreachable.fetch_add(1, Ordering::Relaxed) + 1 >= UNREACHABLE_LIMIT {
                    s.spend.endpoint_dead.store(true, Ordering::Relaxed);
                    s.stop_agent.cancel();
                }
            }
            drop(pass);
            return refuse(StatusCode::BAD_GATEWAY, &why);
        }
    };
    let status = answer.status();
    if counted {
        s.spend.consecutive_unreachable.store(0, Ordering::Relaxed);
        s.spend.calls.fetch_add(1, Ordering::Relaxed);
        if status.as_u16() >= 400 {
            s.spend.failed_calls.fetch_add(1, Ordering::Relaxed);
            *s.spend.last_error.lock().expect("not poisoned") = Some(format!("the model endpoint answered {status}"));
        }
        if let (429, Some(limit), Some(limiter)) = (status.as_u16(), &s.upstream.limit, &s.upstream.limiter) {
            limiter.pause(limit, Duration::from_secs(5)).await;
        }
    }
    let mut headers = HeaderMap::new();
    for (name, value) in answer.headers() {
        if !["content-length", "transfer-encoding", "connection"].contains(&name.as_str()) {
            headers.append(name, value.clone());
        }
    }
    if !counted {
        let stream = answer.bytes_stream();
        let mut response = Response::new(Body::from_stream(stream));
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        return response;
    }
    let rx = metered(s.clone(), answer, status, pass, path, started);
    let stream = futures_lite::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    if !response.headers().contains_key("content-type") {
        response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    }
    response
}

/// The tokens a CLI's model call counts for while it runs under a limit:
/// from the request itself (its size, and the answer's allowance it asks for).
fn estimate(limit: &ModelLimit, body: &[u8]) -> i64 {
    use baton_domain::policy::limits::{estimate_tokens, max_output_tokens};
    let asked = serde_json::from_slice::<Value>(body).ok().as_ref().and_then(max_output_tokens);
    estimate_tokens(body.len(), asked, limit.quota().estimated_tokens)
}

/// The call to the real endpoint: the same path and query (without a
/// `key`), the CLI's headers but its credentials, the real key in the
/// header the endpoint's API reads it from.
fn upstream_call(
    s: &Shared,
    parts: &axum::http::request::Parts,
    path: &str,
    query: Option<&str>,
    bytes: axum::body::Bytes,
) -> reqwest::RequestBuilder {
    let wire = s.upstream.wire;
    let mut url = format!("{}{}", s.upstream.base_url.trim_end_matches('/'), upstream_path(wire, path));
    if let Some(q) = query.map(without_key).filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(&q);
    }
    let mut call = s.client.request(parts.method.clone(), &url).timeout(s.upstream.timeout).body(bytes);
    for (name, value) in &parts.headers {
        let skip =
            ["host", "content-length", "authorization", "x-api-key", "x-goog-api-key", "connection", "accept-encoding"];
        if !skip.contains(&name.as_str()) {
            call = call.header(name, value);
        }
    }
    if let Some(key) = &s.upstream.api_key {
        call = match wire {
            WireApi::AnthropicMessages => call.header("x-api-key", key),
            WireApi::Gemini => call.header("x-goog-api-key", key),
            WireApi::OpenAiResponses | WireApi::ChatCompletions => call.bearer_auth(key),
        };
    }
    call
}

/// Tees a model call's answer: the CLI gets every byte as it comes, the
/// meter reads its usage; when it ends, the call is counted and journaled.
fn metered(
    shared: Arc<Shared>,
    answer: reqwest::Response,
    status: StatusCode,
    pass: Option<crate::limiter::Pass>,
    path: String,
    started: Instant,
) -> tokio::sync::mpsc::Receiver<Result<axum::body::Bytes, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        let mut meter = Meter::default();
        let mut stream = answer.bytes_stream();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    meter.feed(&chunk);
                    if tx.send(Ok(chunk)).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(std::io::Error::other(without_url(&e)))).await;
                    break;
                }
            }
        }
        let (input, output) = meter.finish();
        shared.spend.input_tokens.fetch_add(input, Ordering::Relaxed);
        shared.spend.output_tokens.fetch_add(output, Ordering::Relaxed);
        if let Some(pass) = pass {
            pass.done(Some(input + output)).await;
        }
        let payload = json!({
            "path": path,
            "status": status.as_u16(),
            "inputTokens": input,
            "outputTokens": output,
            "ms": started.elapsed().as_millis() as u64,
        });
        shared.journal.note(JournalEvent::CodingModelCall, payload);
    });
    rx
}

/// Refuses a call the run can no longer pay for, and stops the agent.
fn check_budget(s: &Shared) -> Option<Response> {
    let calls = u64::from(s.spend.calls.load(Ordering::Relaxed));
    let over_calls = s.upstream.calls_left.is_some_and(|left| calls >= left);
    let over_tokens = s.upstream.tokens_left.is_some_and(|left| s.spend.tokens() >= left);
    if !(over_calls || over_tokens) {
        return None;
    }
    s.spend.over_budget.store(true, Ordering::Relaxed);
    s.stop_agent.cancel();
    Some(refuse(StatusCode::FORBIDDEN, "the run's budget is spent; the agent is being stopped"))
}

/// A Chat Completions stream reports usage only when asked to.
fn with_usage_requested(bytes: axum::body::Bytes) -> axum::body::Bytes {
    let Ok(mut body) = serde_json::from_slice::<Value>(&bytes) else { return bytes };
    if body["stream"] != Value::Bool(true) {
        return bytes;
    }
    body["stream_options"]["include_usage"] = Value::Bool(true);
    serde_json::to_vec(&body).map(Into::into).unwrap_or(bytes)
}

/// The query without a `key=` (the token never travels further).
fn without_key(query: &str) -> String {
    query.split('&').filter(|kv| !kv.starts_with("key=")).collect::<Vec<_>>().join("&")
}

/// An HTTP client error without its URL (which may carry a key).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "the endpoint");
    }
    text
}

/// Reads usage out of an answer as it streams by: every JSON document in
/// it (the whole body, or each SSE `data:` line), keeping the largest input
/// and output figures seen (streams report them cumulatively).
#[derive(Default)]
pub struct Meter {
    line: Vec<u8>,
    body: Vec<u8>,
    input: i64,
    output: i64,
    saw_data: bool,
}

/// The most of a non-SSE answer the meter keeps to read usage from.
const METER_BODY_CAP: usize = 4 * 1024 * 1024;

impl Meter {
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.body.len() < METER_BODY_CAP {
            self.body.extend_from_slice(&chunk[..chunk.len().min(METER_BODY_CAP - self.body.len())]);
        }
        for &b in chunk {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
            } else if self.line.len() < METER_BODY_CAP {
                self.line.push(b);
            }
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else { return };
        self.saw_data = true;
        if let Ok(value) = serde_json::from_slice::<Value>(data.trim_ascii()) {
            self.read(&value);
        }
    }

    fn read(&mut self, value: &Value) {
        let (input, output) = usage_of(value);
        self.input = self.input.max(input);
        self.output = self.output.max(output);
    }

    /// Input and output tokens of the call.
    pub fn finish(mut self) -> (i64, i64) {
        let rest = std::mem::take(&mut self.line);
        self.line_done(&rest);
        if !self.saw_data {
            if let Ok(value) = serde_json::from_slice::<Value>(&self.body) {
                self.read(&value);
            }
        }
        (self.input, self.output)
    }
}

/// The usage figures one JSON document of any of the four wire APIs carries.
fn usage_of(value: &Value) -> (i64, i64) {
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    // Anthropic (`message_start` nests it in `message`), OpenAI Responses
    // (`response.completed` nests it in `response`), Chat Completions.
    for usage in [&value["usage"], &value["message"]["usage"], &value["response"]["usage"]] {
        if usage.is_object() {
            let input = n(&usage["input_tokens"])
                + n(&usage["prompt_tokens"])
                + n(&usage["cache_creation_input_tokens"])
                + n(&usage["cache_read_input_tokens"]);
            let output = n(&usage["output_tokens"]) + n(&usage["completion_tokens"]);
            return (input, output);
        }
    }
    // Gemini.
    let meta = &value["usageMetadata"];
    if meta.is_object() {
        let output = n(&meta["candidatesTokenCount"]) + n(&meta["thoughtsTokenCount"]);
        return (n(&meta["promptTokenCount"]), output);
    }
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(text: &str) -> (i64, i64) {
        let mut meter = Meter::default();
        // Cut anywhere: lines and documents span chunks.
        for chunk in text.as_bytes().chunks(7) {
            meter.feed(chunk);
        }
        meter.finish()
    }

    #[test]
    fn usage_is_read_from_each_wire_api_once() {
        let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n\
                         event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":10}}\n\n";
        assert_eq!(metered(anthropic), (100, 10));
        let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
                         event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":50,\"output_tokens\":5,\"total_tokens\":55}}}\n\n";
        assert_eq!(metered(responses), (50, 5));
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";
        assert_eq!(metered(chat), (7, 3));
        let gemini = "data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":9}}\r\n\r\ndata: {\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":4}}\r\n\r\n";
        assert_eq!(metered(gemini), (9, 4));
        let plain = "{\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}";
        assert_eq!(metered(plain), (3, 2));
    }

    #[test]
    fn the_token_is_found_in_each_apis_header_and_never_forwarded_in_the_query() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer t1"));
        assert_eq!(presented(&headers, None).as_deref(), Some("t1"));
        headers.insert("x-api-key", HeaderValue::from_static("t2"));
        assert_eq!(presented(&headers, None).as_deref(), Some("t2"));
        assert_eq!(presented(&HeaderMap::new(), Some("alt=sse&key=t3")).as_deref(), Some("t3"));
        assert_eq!(without_key("alt=sse&key=t3"), "alt=sse");
    }

    #[test]
    fn only_answers_of_the_model_count_as_calls() {
        assert!(is_model_call(WireApi::AnthropicMessages, "/v1/messages"));
        assert!(!is_model_call(WireApi::AnthropicMessages, "/v1/messages/count_tokens"));
        assert!(is_model_call(WireApi::Gemini, "/v1beta/models/g:streamGenerateContent"));
        assert!(!is_model_call(WireApi::Gemini, "/v1beta/models/g:countTokens"));
        assert_eq!(upstream_path(WireApi::OpenAiResponses, "/v1/responses"), "/responses");
    }
}
