//! Model providers. The loop sees one trait; each binding in a profile
//! resolves to an implementation. Providers never see the database; the
//! OpenAI-compatible one is given the [`Limiter`](crate::limiter::Limiter),
//! which admits calls under fleet-wide limits.
//!
//! - [`scripted`](Scripted): a deterministic list of turns, for demos and tests.
//! - [`openai`]: any OpenAI-compatible Chat Completions endpoint.
//! - [`command`]: an external agent run as a process.
//! - [`coding`]: Codex, Claude Code, Qwen Code and Gemini CLI on the request's project.

pub mod coding;
pub mod command;
pub mod openai;

pub use coding::CodingAgent;

use async_trait::async_trait;
use baton_domain::profiles::{ModelBinding, Profile};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// One model turn: optional text and any tool calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelTurn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Calls it took to get this turn (retries included), for the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Model calls the run's budget counts for this turn: a coding agent's
    /// through its gateway (any number, 0 included); one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u32>,
    /// What a coding agent changed and the session it leaves, stored in the
    /// turn's transaction (never in the transcript).
    #[serde(skip)]
    pub coding: Option<Box<coding::CodingOutcome>>,
    /// How long the call took, as the runner measured it (retries and a
    /// wait under a fleet-wide limit included), for the journal.
    #[serde(skip)]
    pub latency_ms: Option<u64>,
}

/// Tokens a model turn used, as its provider reported them: OpenAI's names
/// (camelCase read too); any other figures are kept as they came.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, alias = "promptTokens", skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<i64>,
    #[serde(default, alias = "completionTokens", skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<i64>,
    #[serde(flatten)]
    pub other: serde_json::Map<String, Value>,
}

impl Usage {
    /// The turn's tokens: the total when the provider gave one, else prompt plus completion.
    pub fn tokens(&self) -> i64 {
        match self.total_tokens.unwrap_or(0) {
            0 => self.prompt_tokens.unwrap_or(0) + self.completion_tokens.unwrap_or(0),
            total => total,
        }
    }
}

/// What a provider is asked: the conversation so far (OpenAI chat shape) and
/// the tools the agent may call.
pub struct ModelRequest<'a> {
    pub profile: &'a Profile,
    pub messages: &'a [Value],
    pub tools: &'a [Value],
    /// `runId:invocationId`, for the provider's own correlation; never shown to the model.
    pub session_id: String,
    /// How many model turns this invocation already had.
    pub turn_index: usize,
    /// Whose call it is (the journal records a throttled wait); never sent.
    pub run_id: uuid::Uuid,
    pub invocation_id: uuid::Uuid,
    /// The run's priority: a call waiting under a fleet-wide limit takes its turn by it.
    pub priority: baton_domain::protocol::request::Priority,
    /// What the run may still spend (a coding agent's gateway enforces it).
    pub allowance: Allowance,
}

/// The run's budget left, as of the invocation's last step (`None`: no figure).
#[derive(Debug, Clone, Copy, Default)]
pub struct Allowance {
    pub calls_left: Option<u64>,
    pub tokens_left: Option<i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("provider `{0}` is not available in this fleet yet")]
    Unavailable(&'static str),
    #[error("model call failed: {0}")]
    Failed(String),
    /// An external agent was stopped (it timed out, flooded its output,
    /// failed): `message` is for people, `detail` for the journal.
    #[error("{detail}")]
    Stopped { code: &'static str, message: String, detail: String },
}

#[async_trait]
pub trait Provider: Send + Sync {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError>;

    /// The turn, when it takes no I/O and no waiting (a script's turn), so
    /// it can be taken inside an open transaction; `None` when it must be
    /// asked for with [`Provider::complete`].
    fn instant(&self, _request: &ModelRequest<'_>) -> Option<Result<ModelTurn, ProviderError>> {
        None
    }
}

/// Picks the provider for a profile's binding.
pub trait Providers: Send + Sync {
    fn for_binding(&self, binding: &ModelBinding) -> Result<&dyn Provider, ProviderError>;
}

/// The providers built into the fleet.
pub struct BuiltinProviders {
    scripted: Scripted,
    openai: openai::OpenAi,
    command: command::CommandAgent,
    coding: CodingAgent,
}

impl Default for BuiltinProviders {
    fn default() -> Self {
        Self::with_work_root(std::env::temp_dir().join("baton-agents"))
    }
}

impl BuiltinProviders {
    /// External agents get their working directories under `work_root`.
    pub fn with_work_root(work_root: std::path::PathBuf) -> Self {
        Self {
            scripted: Scripted,
            openai: openai::OpenAi::default(),
            command: command::CommandAgent::new(work_root.clone()),
            coding: CodingAgent::new(work_root),
        }
    }

    /// Model calls under a fleet-wide limit wait their turn with `limiter`
    /// (a coding agent's too, at its gateway).
    pub fn with_limiter(mut self, limiter: std::sync::Arc<crate::limiter::Limiter>) -> Self {
        self.openai.limiter = Some(limiter.clone());
        self.coding.limiter = Some(limiter);
        self
    }

    /// Coding agents read their request, project and session, and write their progress, here.
    pub fn with_pool(mut self, pool: baton_store::Pool) -> Self {
        self.coding.pool = Some(pool);
        self
    }

    /// External agents run in `jail` (another user, bubblewrap).
    pub fn with_jail(mut self, jail: crate::jail::Jail) -> Self {
        self.command.jail = jail.clone();
        self.coding.jail = jail;
        self
    }
}

impl Providers for BuiltinProviders {
    fn for_binding(&self, binding: &ModelBinding) -> Result<&dyn Provider, ProviderError> {
        Ok(match binding {
            ModelBinding::Scripted { .. } => &self.scripted,
            ModelBinding::Openai { .. } => &self.openai,
            ModelBinding::Command { .. } => &self.command,
            ModelBinding::Codex(_)
            | ModelBinding::ClaudeCode(_)
            | ModelBinding::QwenCode(_)
            | ModelBinding::GeminiCli(_) => &self.coding,
        })
    }
}

/// Plays back the profile's script: turn N is script entry N. Deterministic,
/// so a resumed invocation continues exactly where it stopped.
#[derive(Default)]
pub struct Scripted;

#[async_trait]
impl Provider for Scripted {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
        let delay = match &request.profile.model {
            ModelBinding::Scripted { script } => script.get(request.turn_index).and_then(|t| t.delay_ms),
            _ => None,
        };
        if let Some(ms) = delay {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        play(request)
    }

    fn instant(&self, request: &ModelRequest<'_>) -> Option<Result<ModelTurn, ProviderError>> {
        match &request.profile.model {
            ModelBinding::Scripted { script }
                if script.get(request.turn_index).is_none_or(|t| t.delay_ms.is_none()) =>
            {
                Some(play(request))
            }
            _ => None,
        }
    }
}

/// Turn N of the profile's script, as the model would have answered it.
fn play(request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
    let ModelBinding::Scripted { script } = &request.profile.model else {
        return Err(ProviderError::Failed("the scripted provider needs a script".into()));
    };
    let Some(turn) = script.get(request.turn_index) else {
        return Ok(ModelTurn { content: Some("(the script has ended)".into()), ..Default::default() });
    };
    let turn_no = request.turn_index + 1;
    let tool_calls = match &turn.tool {
        Some(name) => {
            vec![ToolCall { id: format!("call_{turn_no}"), name: name.clone(), arguments: turn.args.clone() }]
        }
        None => turn
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: format!("call_{turn_no}_{}", i + 1),
                name: c.tool.clone(),
                arguments: c.args.clone(),
            })
            .collect(),
    };
    // A script reports no usage: it spent no tokens, and says nothing.
    Ok(ModelTurn { content: turn.text.clone(), tool_calls, ..Default::default() })
}
