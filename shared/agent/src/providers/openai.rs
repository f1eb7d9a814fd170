//! Any OpenAI-compatible Chat Completions endpoint with tool calling
//! (OpenAI, DeepSeek, Qwen/DashScope compatible mode, vLLM, Ollama,
//! llama.cpp server). Retries 429 and 5xx with backoff and jitter,
//! honouring `Retry-After`, within a request timeout and an attempt budget.
//! Under a fleet-wide limit each attempt first waits its turn with the
//! [`Limiter`], and a 429 pauses every worker's calls under that limit.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::BackoffBuilder;
use baton_domain::policy::limits::estimate_tokens;
use baton_domain::profiles::ModelBinding;
use serde_json::{json, Value};

use super::{ModelRequest, ModelTurn, Provider, ProviderError, ToolCall};
use crate::limiter::{Caller, Limiter, Pass};

const DEFAULT_TIMEOUT_SECS: u64 = 120;
const DEFAULT_ATTEMPTS: u32 = 5;
/// The longest `Retry-After` honoured; a server asking for more is failed.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// The largest response read from a model server. A chat completion, tool
/// call arguments included, is far smaller; a server that sends more is
/// broken, and reading it all could exhaust the worker's memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

pub struct OpenAi {
    client: reqwest::Client,
    /// The shortest wait between attempts (tests make it small).
    pub min_backoff: Duration,
    /// The largest response body read (bytes).
    pub max_response_bytes: usize,
    /// Admits calls under fleet-wide limits; without one (a test's bare
    /// provider) limits are not enforced.
    pub limiter: Option<Arc<Limiter>>,
}

impl Default for OpenAi {
    fn default() -> Self {
        Self {
            client: reqwest::Client::new(),
            min_backoff: Duration::from_millis(500),
            max_response_bytes: MAX_RESPONSE_BYTES,
            limiter: None,
        }
    }
}

/// The endpoint and settings a profile binds to.
struct Endpoint<'a> {
    url: String,
    model: &'a str,
    key: Option<String>,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    timeout: Duration,
    attempts: u32,
}

fn endpoint(binding: &ModelBinding) -> Result<Endpoint<'_>, ProviderError> {
    let ModelBinding::Openai { base_url, model, api_key_env, temperature, max_tokens, timeout_secs, max_attempts } =
        binding
    else {
        return Err(ProviderError::Failed("not an openai binding".into()));
    };
    let (Some(base), Some(model)) = (base_url.as_deref(), model.as_deref()) else {
        return Err(ProviderError::Failed("the profile needs base_url and model".into()));
    };
    let key = match api_key_env.as_deref() {
        Some(name) => Some(
            std::env::var(name)
                .map_err(|_| ProviderError::Failed(format!("environment variable {name} is not set")))?,
        ),
        None => None,
    };
    Ok(Endpoint {
        url: format!("{}/chat/completions", base.trim_end_matches('/')),
        model,
        key,
        temperature: *temperature,
        max_tokens: *max_tokens,
        timeout: Duration::from_secs(timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
        attempts: max_attempts.unwrap_or(DEFAULT_ATTEMPTS).max(1),
    })
}

fn body(e: &Endpoint<'_>, request: &ModelRequest<'_>) -> Value {
    let mut body = json!({ "model": e.model, "messages": request.messages });
    if !request.tools.is_empty() {
        body["tools"] = Value::Array(request.tools.to_vec());
        body["tool_choice"] = "auto".into();
    }
    if let Some(t) = e.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(m) = e.max_tokens {
        body["max_tokens"] = json!(m);
    }
    body
}

/// What one attempt came to. A failure carries its metrics label: the
/// HTTP status code, or `timeout`, `unreachable`, `invalid`.
enum Attempt {
    Done(Value),
    /// Worth another try, after at least this long.
    Retry(String, Option<Duration>, String),
    Fatal(String, String),
}

#[async_trait]
impl Provider for OpenAi {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
        let e = endpoint(&request.profile.model)?;
        let body = body(&e, request);
        // Sent as these bytes at each attempt; a call under a limit counts
        // for the tokens they and the answer's allowance come to.
        let payload = serde_json::to_vec(&body).map_err(|err| ProviderError::Failed(err.to_string()))?;
        let mut delays = backon::ExponentialBuilder::default()
            .with_min_delay(self.min_backoff)
            .with_max_delay(Duration::from_secs(20))
            .with_jitter()
            .without_max_times()
            .build();
        let mut last = String::new();
        let limited = request.profile.model_limit.as_ref().zip(self.limiter.as_deref());
        let caller =
            Caller { run_id: request.run_id, invocation_id: request.invocation_id, priority: request.priority };
        for attempt in 1..=e.attempts {
            let pass = match limited {
                Some((limit, limiter)) => {
                    let estimate =
                        estimate_tokens(payload.len(), e.max_tokens.map(u64::from), limit.quota().estimated_tokens);
                    let admitted = limiter.admit(limit, caller, estimate).await;
                    Some(admitted.map_err(|why| ProviderError::Failed(why.to_string()))?)
                }
                None => None,
            };
            let outcome = self.attempt(&e, &payload, &request.session_id).await;
            end_call(pass, &outcome).await;
            if let Attempt::Retry(.., status) | Attempt::Fatal(.., status) = &outcome {
                crate::metrics::model_error(&request.profile.id, status);
            }
            match outcome {
                Attempt::Done(response) => {
                    let mut turn = parse_response(&response)?;
                    turn.attempts = Some(attempt);
                    return Ok(turn);
                }
                Attempt::Fatal(why, _) => return Err(ProviderError::Failed(why)),
                Attempt::Retry(why, after, status) => {
                    let wait = delays.next().unwrap_or(MAX_RETRY_AFTER).max(after.unwrap_or_default());
                    // The limit belongs to the account: a 429 slows every worker, not only this one.
                    if let (Some((limit, limiter)), "429") = (limited, status.as_str()) {
                        limiter.pause(limit, after.unwrap_or(wait)).await;
                    }
                    tracing::warn!(attempt, why = %why, ?wait, "model call failed; retrying");
                    last = why;
                    if attempt < e.attempts {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
        Err(ProviderError::Failed(format!("model call failed after {} attempts: {last}", e.attempts)))
    }
}

impl OpenAi {
    async fn attempt(&self, e: &Endpoint<'_>, body: &[u8], session: &str) -> Attempt {
        let mut call = self
            .client
            .post(&e.url)
            .timeout(e.timeout)
            .header("X-Session-Id", session)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(key) = &e.key {
            call = call.bearer_auth(key);
        }
        let response = match call.send().await {
            Ok(r) => r,
            Err(err) if err.is_timeout() => {
                return Attempt::Retry(format!("no answer within {:?}", e.timeout), None, "timeout".into())
            }
            Err(err) if err.is_connect() || err.is_request() => {
                return Attempt::Retry(format!("could not reach {}: {err}", e.url), None, "unreachable".into())
            }
            Err(err) => return Attempt::Fatal(err.to_string(), "unreachable".into()),
        };
        let status = response.status();
        let code = status.as_u16().to_string();
        let retry_after = retry_after(response.headers());
        // Read up to the cap: an oversized answer is an error like a broken
        // connection (tried again while attempts remain), never held whole.
        let text = match crate::http::read_capped(response, self.max_response_bytes).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(err) if err.is_timeout() => {
                return Attempt::Retry(format!("no answer within {:?}", e.timeout), None, "timeout".into())
            }
            Err(err) => return Attempt::Retry(format!("HTTP {status}: {err}"), None, code),
        };
        let snippet: String = text.chars().take(300).collect();
        if status.as_u16() == 429 || status.is_server_error() {
            return match retry_after {
                Some(after) if after > MAX_RETRY_AFTER => {
                    Attempt::Fatal(format!("HTTP {status}; the server asks to wait {after:?}"), code)
                }
                after => Attempt::Retry(format!("HTTP {status}: {snippet}"), after, code),
            };
        }
        if !status.is_success() {
            return Attempt::Fatal(format!("HTTP {status}: {snippet}"), code);
        }
        serde_json::from_str(&text).map(Attempt::Done).unwrap_or_else(|err| {
            Attempt::Fatal(format!("the response is not JSON ({err}): {snippet}"), "invalid".into())
        })
    }
}

/// Ends a call admitted under a limit, with the tokens its answer reports.
async fn end_call(pass: Option<Pass>, outcome: &Attempt) {
    let Some(pass) = pass else { return };
    let tokens = match outcome {
        Attempt::Done(response) => response
            .get("usage")
            .and_then(|u| serde_json::from_value::<super::Usage>(u.clone()).ok())
            .map(|u| u.tokens()),
        _ => None,
    };
    pass.done(tokens).await;
}

/// `Retry-After` in seconds (the HTTP-date form is rare for these APIs).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// The first choice's message as a turn. Arguments that are not valid JSON
/// reach the tool as a string, which answers with a recoverable error.
pub fn parse_response(response: &Value) -> Result<ModelTurn, ProviderError> {
    let message = &response["choices"][0]["message"];
    if message.is_null() {
        return Err(ProviderError::Failed(format!("the response has no message: {}", truncate(response))));
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| calls.iter().enumerate().map(|(i, c)| tool_call(i, c)).collect())
        .unwrap_or_default();
    Ok(ModelTurn {
        content: message["content"].as_str().filter(|c| !c.is_empty()).map(str::to_string),
        tool_calls,
        // Figures a provider spells its own way count as none, as before.
        usage: response.get("usage").and_then(|u| serde_json::from_value(u.clone()).ok()),
        ..Default::default()
    })
}

fn tool_call(index: usize, call: &Value) -> ToolCall {
    let raw = call["function"]["arguments"].as_str().unwrap_or("{}");
    let arguments = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    ToolCall {
        id: call["id"].as_str().map(str::to_string).unwrap_or_else(|| format!("call_{index}")),
        name: call["function"]["name"].as_str().unwrap_or_default().to_string(),
        arguments,
    }
}

fn truncate(v: &Value) -> String {
    v.to_string().chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_and_usage_are_read_from_the_first_choice() {
        let response = json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "workspace_write", "arguments": "{\"path\":\"output/main.md\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "workspace_commit", "arguments": "not json"}}
            ]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        });
        let turn = parse_response(&response).unwrap();
        assert_eq!(turn.content, None);
        assert_eq!(turn.tool_calls[0].arguments["path"], "output/main.md");
        assert_eq!(turn.tool_calls[1].arguments, Value::String("not json".into()));
        assert_eq!(turn.usage.unwrap().tokens(), 15);
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_absurd_values_are_ignored() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        for bad in ["inf", "1e30", "-1", "soon"] {
            headers.insert(reqwest::header::RETRY_AFTER, bad.parse().unwrap());
            assert_eq!(retry_after(&headers), None, "{bad}");
        }
    }

    #[test]
    fn a_response_without_a_message_is_a_clear_failure() {
        assert!(parse_response(&json!({"error": "nope"})).unwrap_err().to_string().contains("no message"));
    }
}
