//! The four coding-agent CLIs a profile can bind to (docs/profiles.md#coding-agents): which
//! one, where its model is, and how long it may work. The process side
//! (command lines, the box, the gateway) lives in the agent crate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::sandbox::OnInterrupt;

/// Seconds a coding agent may work unless its profile says otherwise.
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;

/// Bytes of machine-readable output a coding agent may print (its events
/// carry command output), unless its profile says otherwise.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

crate::wire_enum! {
    /// A coding-agent CLI, by the provider name a profile gives it.
    pub enum CodingCli {
        Codex => "codex",
        ClaudeCode => "claude_code",
        QwenCode => "qwen_code",
        GeminiCli => "gemini_cli",
    }
}

/// The wire API a CLI speaks to its model, so the gateway knows how to read usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireApi {
    /// Anthropic Messages (`POST /v1/messages`, SSE).
    AnthropicMessages,
    /// OpenAI Responses (`POST /responses`, SSE).
    OpenAiResponses,
    /// OpenAI Chat Completions (`POST /chat/completions`, streamed).
    ChatCompletions,
    /// Gemini `streamGenerateContent` (SSE).
    Gemini,
}

impl CodingCli {
    /// The program's usual name on a PATH.
    pub fn default_bin(self) -> &'static str {
        match self {
            CodingCli::Codex => "codex",
            CodingCli::ClaudeCode => "claude",
            CodingCli::QwenCode => "qwen",
            CodingCli::GeminiCli => "gemini",
        }
    }

    pub fn wire_api(self) -> WireApi {
        match self {
            CodingCli::Codex => WireApi::OpenAiResponses,
            CodingCli::ClaudeCode => WireApi::AnthropicMessages,
            CodingCli::QwenCode => WireApi::ChatCompletions,
            CodingCli::GeminiCli => WireApi::Gemini,
        }
    }

    /// How people call it.
    pub fn display_name(self) -> &'static str {
        match self {
            CodingCli::Codex => "Codex",
            CodingCli::ClaudeCode => "Claude Code",
            CodingCli::QwenCode => "Qwen Code",
            CodingCli::GeminiCli => "Gemini CLI",
        }
    }
}

/// `[profiles.model]` of a coding agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodingBinding {
    /// The model the CLI asks for.
    pub model: Option<String>,
    /// The real model endpoint, in the CLI's own convention (Anthropic's
    /// without `/v1`, OpenAI-style ones with it). The CLI itself only ever
    /// sees its invocation's loopback gateway.
    pub base_url: Option<String>,
    /// The NAME of the worker's variable holding the key.
    pub api_key_env: Option<String>,
    /// Seconds the agent may work (default [`DEFAULT_TIMEOUT_SECS`]).
    pub timeout_secs: Option<u64>,
    /// The program (default: [`CodingCli::default_bin`] on the worker's PATH).
    pub bin: Option<String>,
    /// The project a request naming none works on.
    pub project: Option<String>,
    /// More of the worker's variables the agent gets, by name (a proxy, a locale).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Variables set to fixed values for the agent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_values: BTreeMap<String, String>,
    /// Bytes of output before the agent is stopped (default [`DEFAULT_MAX_OUTPUT_BYTES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
    /// What a deploy (or a dead worker) does to the agent while it runs.
    #[serde(default, skip_serializing_if = "OnInterrupt::is_default")]
    pub on_interrupt: OnInterrupt,
}

impl CodingBinding {
    /// What an operator still has to fill in.
    pub fn missing_configuration(&self) -> Vec<&'static str> {
        let mut missing = vec![];
        if self.model.as_deref().unwrap_or("").is_empty() {
            missing.push("model");
        }
        if self.base_url.as_deref().unwrap_or("").is_empty() {
            missing.push("base_url");
        }
        if self.api_key_env.as_deref().unwrap_or("").is_empty() {
            missing.push("api_key_env");
        }
        missing
    }

    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS))
    }

    pub fn max_output_bytes(&self) -> u64 {
        self.max_output_bytes.unwrap_or(DEFAULT_MAX_OUTPUT_BYTES)
    }

    /// Why these settings are unusable (empty when fine).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = crate::policy::sandbox::environment_problems(&self.env, &self.env_values);
        if self.max_output_bytes == Some(0) {
            problems.push("max_output_bytes must be above 0".into());
        }
        if self.timeout_secs == Some(0) {
            problems.push("timeout_secs must be above 0".into());
        }
        if let Some(url) = self.base_url.as_deref().filter(|u| !u.is_empty()) {
            if url::Url::parse(url).map_or(true, |u| !matches!(u.scheme(), "http" | "https")) {
                problems.push(format!("base_url `{url}` is not an http(s) URL"));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiles::ModelBinding;

    #[test]
    fn each_cli_is_a_provider_of_its_own_name() {
        for cli in CodingCli::ALL {
            let text = format!(
                "provider = \"{}\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:1\"\napi_key_env = \"K\"",
                cli.as_str()
            );
            let binding: ModelBinding = toml::from_str(&text).unwrap();
            assert_eq!(binding.coding().map(|(c, _)| c), Some(cli), "{text}");
            assert!(binding.missing_configuration().is_empty());
            assert_eq!(binding.provider_name(), cli.as_str());
        }
    }

    #[test]
    fn an_unknown_key_and_a_missing_endpoint_are_named() {
        let err = toml::from_str::<ModelBinding>("provider = \"codex\"\nmodle = \"m\"").unwrap_err().to_string();
        assert!(err.contains("modle"), "{err}");
        let binding: ModelBinding = toml::from_str("provider = \"claude_code\"\nmodel = \"m\"").unwrap();
        assert_eq!(binding.missing_configuration(), vec!["base_url", "api_key_env"]);
    }

    #[test]
    fn a_base_url_that_is_no_url_is_a_problem() {
        let binding = CodingBinding { base_url: Some("127.0.0.1:80".into()), ..Default::default() };
        assert_eq!(binding.problems().len(), 1, "{:?}", binding.problems());
    }
}
