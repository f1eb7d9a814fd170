//! Fleet-wide limits on model calls: `[[limits]]` in the profiles file.
//!
//! A limit belongs to a provider account, not to a process: it names an
//! endpoint (`base_url`) and, optionally, the key (`api_key_env`, the name
//! of the variable holding it), and caps requests and tokens per minute and
//! calls at once across every worker. Which limit a profile's model calls
//! are under is decided here, once, when the file is applied.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where a model call goes: its endpoint and the variable holding its key
/// (a profile's `openai` binding says, `ModelBinding::limit_target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub base_url: &'a str,
    pub api_key_env: Option<&'a str>,
}

/// Tokens a call's answer is assumed to take when its request sets no
/// `max_tokens` (a limit's `estimated_tokens` overrides it).
pub const DEFAULT_ESTIMATED_TOKENS: u64 = 1000;

/// Bytes of a serialized request per token, for the estimate: about four
/// for English text and JSON, fewer for other scripts (an overestimate for
/// those is paid back when the call reports its usage).
pub const BYTES_PER_TOKEN: usize = 4;

/// Tokens a model call counts for while it runs, estimated from the
/// request itself: its serialized size at [`BYTES_PER_TOKEN`], plus what
/// its answer may take (`max_output`, the request's own `max_tokens`; else
/// `output_estimate`, the limit's). Once the call ends, the usage the
/// provider reported replaces it. Never below 1.
pub fn estimate_tokens(request_bytes: usize, max_output: Option<u64>, output_estimate: i64) -> i64 {
    let prompt = i64::try_from(request_bytes.div_ceil(BYTES_PER_TOKEN)).unwrap_or(i64::MAX);
    let answer = max_output.map_or(output_estimate, |m| i64::try_from(m).unwrap_or(i64::MAX));
    prompt.saturating_add(answer.max(0)).max(1)
}

/// The most tokens a request lets its answer take, as the four wire APIs
/// a coding agent's gateway forwards spell it: Chat Completions'
/// `max_tokens` or `max_completion_tokens`, Responses' `max_output_tokens`,
/// Anthropic's `max_tokens`, Gemini's `generationConfig.maxOutputTokens`.
pub fn max_output_tokens(request: &serde_json::Value) -> Option<u64> {
    ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|key| request.get(key).and_then(serde_json::Value::as_u64))
        .or_else(|| request.get("generationConfig")?.get("maxOutputTokens")?.as_u64())
}

/// One limit, as the profiles file declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimit {
    /// What the journal, the console and metrics call it (never the key):
    /// letters, digits, `-`, `_` and `.`.
    pub name: String,
    /// The endpoint it holds for (compared without a trailing slash).
    pub base_url: String,
    /// The key it holds for, by the name of its environment variable;
    /// absent, every key of the endpoint (and none) shares it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_minute: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_calls: Option<u32>,
    /// The window the per-minute figures hold over, scaled to it (default
    /// 60). Providers that enforce "per minute" in slices (60 requests per
    /// minute as 1 per second) are matched with a shorter window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<u32>,
    /// Tokens a call's answer is assumed to take while it runs, when its
    /// request sets no `max_tokens` (default [`DEFAULT_ESTIMATED_TOKENS`]):
    /// see [`estimate_tokens`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_tokens: Option<u64>,
}

/// A limit's figures over its window, as the admission check uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub requests: Option<i32>,
    pub tokens: Option<i64>,
    pub concurrent: Option<i32>,
    pub window: Duration,
    pub estimated_tokens: i64,
}

crate::wire_enum! {
    /// Why a model call waited its turn.
    pub enum WaitReason {
        RequestsPerMinute => "requests_per_minute",
        TokensPerMinute => "tokens_per_minute",
        ConcurrentCalls => "concurrent_calls",
        RetryAfter => "retry_after",
    }
}

impl ModelLimit {
    /// Whether calls to `target` count against this limit.
    pub fn matches(&self, target: &Target<'_>) -> bool {
        let same_key = self.api_key_env.is_none() || self.api_key_env.as_deref() == target.api_key_env;
        same_key && trimmed(target.base_url) == trimmed(&self.base_url)
    }

    pub fn quota(&self) -> Quota {
        let window = self.window_secs.unwrap_or(60).max(1);
        let scale = |per_minute: u64| (per_minute * u64::from(window)).div_ceil(60).max(1);
        Quota {
            requests: self.requests_per_minute.map(|r| scale(u64::from(r)).min(i32::MAX as u64) as i32),
            tokens: self.tokens_per_minute.map(|t| scale(t).min(i64::MAX as u64) as i64),
            concurrent: self.concurrent_calls.map(|c| c.min(i32::MAX as u32) as i32),
            window: Duration::from_secs(u64::from(window)),
            estimated_tokens: self.estimated_tokens.unwrap_or(DEFAULT_ESTIMATED_TOKENS).min(i64::MAX as u64) as i64,
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = vec![];
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !name_ok {
            problems.push(format!("limit `{}`: a name is 1 to 64 letters, digits, `-`, `_` or `.`", self.name));
        }
        if trimmed(&self.base_url).is_empty() {
            problems.push(format!("limit `{}` needs a base_url", self.name));
        }
        let figures =
            [self.requests_per_minute.map(u64::from), self.tokens_per_minute, self.concurrent_calls.map(u64::from)];
        if figures.iter().all(Option::is_none) {
            problems.push(format!(
                "limit `{}` sets none of requests_per_minute, tokens_per_minute, concurrent_calls",
                self.name
            ));
        }
        if figures.contains(&Some(0)) || self.window_secs == Some(0) || self.estimated_tokens == Some(0) {
            problems
                .push(format!("limit `{}`: a figure set to 0 would stop every call; leave it out instead", self.name));
        }
        problems
    }
}

fn trimmed(url: &str) -> &str {
    url.trim().trim_end_matches('/')
}

/// The limit calls to `target` are under: one naming its key before one
/// for the whole endpoint; `None` when no limit matches.
pub fn limit_for<'a>(limits: &'a [ModelLimit], target: &Target<'_>) -> Option<&'a ModelLimit> {
    let matching = || limits.iter().filter(|l| l.matches(target));
    matching().find(|l| l.api_key_env.is_some()).or_else(|| matching().next())
}

/// What is wrong with a file's limits: each limit's own figures, names
/// used twice, and two limits for the same endpoint and key.
pub fn problems(limits: &[ModelLimit]) -> Vec<String> {
    let mut problems: Vec<String> = limits.iter().flat_map(ModelLimit::problems).collect();
    let (mut names, mut targets) = (BTreeSet::new(), BTreeSet::new());
    for l in limits {
        if !names.insert(l.name.as_str()) {
            problems.push(format!("limit `{}` is defined twice", l.name));
        }
        if !targets.insert((trimmed(&l.base_url), l.api_key_env.as_deref())) {
            problems.push(format!("limit `{}` holds for the same endpoint and key as another", l.name));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn openai<'a>(base_url: &'a str, api_key_env: Option<&'a str>) -> Target<'a> {
        Target { base_url, api_key_env }
    }

    fn limit(name: &str, url: &str, key: Option<&str>) -> ModelLimit {
        ModelLimit {
            name: name.into(),
            base_url: url.into(),
            api_key_env: key.map(str::to_string),
            requests_per_minute: Some(600),
            tokens_per_minute: None,
            concurrent_calls: None,
            window_secs: None,
            estimated_tokens: None,
        }
    }

    #[test]
    fn a_key_specific_limit_wins_over_the_endpoints_and_other_endpoints_match_none() {
        let limits = [limit("all", "https://api.x/v1/", None), limit("team", "https://api.x/v1", Some("TEAM_KEY"))];
        assert_eq!(limit_for(&limits, &openai("https://api.x/v1", Some("TEAM_KEY"))).unwrap().name, "team");
        assert_eq!(limit_for(&limits, &openai("https://api.x/v1/", Some("OTHER"))).unwrap().name, "all");
        assert_eq!(limit_for(&limits, &openai("https://api.x/v1", None)).unwrap().name, "all");
        assert!(limit_for(&limits, &openai("https://api.y/v1", Some("TEAM_KEY"))).is_none());
        assert!(limit_for(&[], &openai("https://api.x/v1", None)).is_none());
    }

    #[test]
    fn per_minute_figures_are_scaled_to_the_window() {
        let mut l = limit("x", "u", None);
        l.requests_per_minute = Some(540);
        l.tokens_per_minute = Some(18_000);
        l.concurrent_calls = Some(2);
        l.window_secs = Some(1);
        let q = l.quota();
        assert_eq!(
            (q.requests, q.tokens, q.concurrent, q.window),
            (Some(9), Some(300), Some(2), Duration::from_secs(1))
        );
        l.window_secs = None;
        l.requests_per_minute = Some(1);
        assert_eq!(
            (l.quota().requests, l.quota().window, l.quota().estimated_tokens),
            (Some(1), Duration::from_secs(60), 1000)
        );
    }

    #[test]
    fn a_calls_estimate_is_its_requests_size_in_tokens_and_what_its_answer_may_take() {
        assert_eq!(estimate_tokens(4000, Some(500), 1000), 1500);
        assert_eq!(estimate_tokens(4001, None, 1000), 2001, "a started token counts whole");
        assert_eq!(estimate_tokens(0, Some(0), 0), 1, "never free");
        assert_eq!(estimate_tokens(usize::MAX, Some(u64::MAX), 1), i64::MAX, "saturates");
        // One huge request counts for itself only: the next small one is small.
        let huge = estimate_tokens(4_000_000, Some(100), 1000);
        let small = estimate_tokens(2_000, Some(100), 1000);
        assert_eq!((huge, small), (1_000_100, 600));
    }

    #[test]
    fn the_answers_allowance_is_read_as_each_wire_api_spells_it() {
        use serde_json::json;
        assert_eq!(max_output_tokens(&json!({"model": "m", "max_tokens": 256})), Some(256));
        assert_eq!(max_output_tokens(&json!({"max_completion_tokens": 64})), Some(64));
        assert_eq!(max_output_tokens(&json!({"max_output_tokens": 32})), Some(32));
        assert_eq!(max_output_tokens(&json!({"generationConfig": {"maxOutputTokens": 16}})), Some(16));
        assert_eq!(max_output_tokens(&json!({"messages": []})), None);
        assert_eq!(max_output_tokens(&json!({"max_tokens": "lots"})), None);
    }

    #[test]
    fn bad_limits_are_refused_with_their_name() {
        let mut empty = limit("empty", "u", None);
        empty.requests_per_minute = None;
        let mut zero = limit("zero", "v", None);
        zero.concurrent_calls = Some(0);
        let text = problems(&[empty, zero, limit("bad name!", "w", None), limit("twin", "w/", None)]).join("; ");
        assert!(text.contains("limit `empty` sets none"), "{text}");
        assert!(text.contains("limit `zero`: a figure set to 0"), "{text}");
        assert!(text.contains("limit `bad name!`: a name is"), "{text}");
        assert!(text.contains("limit `twin` holds for the same endpoint"), "{text}");
        assert!(problems(&[limit("a", "u", None), limit("b", "u", Some("K"))]).is_empty());
    }
}
