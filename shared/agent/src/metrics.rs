//! The metrics the agent loop records, through the `metrics` facade (the
//! binary installs the exporter). Labels are bounded: profile ids come
//! from the operator's profiles file, tool names from [`ToolName`] (a name a
//! model made up counts as `unknown`), status codes from HTTP.

use std::time::Duration;

use baton_domain::tool_name::ToolName;

pub const MODEL_REQUEST_SECONDS: &str = "baton_model_request_duration_seconds";
pub const MODEL_REQUEST_ERRORS: &str = "baton_model_request_errors_total";
pub const MODEL_TOKENS: &str = "baton_model_tokens_total";
pub const TOOL_CALLS: &str = "baton_tool_calls_total";

/// One model call (retries included) and how it ended: `ok` or `error`.
pub fn model_request(profile: &str, took: Duration, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    ::metrics::histogram!(MODEL_REQUEST_SECONDS, "profile" => profile.to_owned(), "outcome" => outcome)
        .record(took.as_secs_f64());
}

/// One failed attempt at a model call: an HTTP status code, or `timeout`,
/// `unreachable`, `invalid` when no usable status came back.
pub fn model_error(profile: &str, status: &str) {
    ::metrics::counter!(MODEL_REQUEST_ERRORS, "profile" => profile.to_owned(), "status" => status.to_owned())
        .increment(1);
}

/// The tokens a turn used, by kind, as its provider reported them.
pub fn model_tokens(profile: &str, prompt: Option<i64>, completion: Option<i64>) {
    for (kind, n) in [("prompt", prompt), ("completion", completion)] {
        if let Some(n) = n.and_then(|n| u64::try_from(n).ok()) {
            ::metrics::counter!(MODEL_TOKENS, "profile" => profile.to_owned(), "kind" => kind).increment(n);
        }
    }
}

/// One tool call: `ok`, or `error` (a recoverable error the model reads).
pub fn tool_call(name: &str, is_error: bool) {
    let tool = ToolName::parse(name).map_or("unknown", ToolName::as_str);
    let outcome = if is_error { "error" } else { "ok" };
    ::metrics::counter!(TOOL_CALLS, "tool" => tool, "outcome" => outcome).increment(1);
}

pub const HELD_TURNS: &str = "baton_held_turns_total";

/// A finished turn that had to be held while the database was away, by how
/// it ended: `stored` (nothing asked again), `fenced` (taken over meanwhile,
/// discarded), `given_up` (past the patience: the model is asked again).
pub fn held_turn(outcome: &'static str) {
    ::metrics::counter!(HELD_TURNS, "outcome" => outcome).increment(1);
}

pub const MODEL_THROTTLED: &str = "baton_model_throttled_total";
pub const MODEL_THROTTLE_WAIT_SECONDS: &str = "baton_model_throttle_wait_seconds";

/// A model call had to wait under a fleet-wide limit, labelled by the
/// limit's name (from the profiles file, never the key) and why.
pub fn model_throttled(limit: &str, reason: &'static str) {
    ::metrics::counter!(MODEL_THROTTLED, "limit" => limit.to_owned(), "reason" => reason).increment(1);
}

/// How long a throttled model call waited before it could go.
pub fn model_throttle_wait(limit: &str, waited: Duration) {
    ::metrics::histogram!(MODEL_THROTTLE_WAIT_SECONDS, "limit" => limit.to_owned()).record(waited.as_secs_f64());
}

pub const BUDGET_EXHAUSTIONS: &str = "baton_budget_exhaustions_total";

/// A run stopped for spending its budget, by the limit it reached.
pub fn budget_exhausted(limit: &'static str) {
    ::metrics::counter!(BUDGET_EXHAUSTIONS, "limit" => limit).increment(1);
}
