//! Agent profiles: who an agent is, which tools it sees, which model drives
//! it, and whom it may hand work to. Operators own them in a TOML file; the
//! fleet loads them into Postgres so every worker sees the same set.
//!
//! - [`prompt`]: the default system prompt.
//! - [`brief`]: the markdown briefs agents read first.
//! - [`coding`]: the coding-agent CLIs (Codex, Claude Code, Qwen Code, Gemini CLI).

pub mod brief;
pub mod coding;
pub mod prompt;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool_name::ToolName;

/// The whole profiles file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilesFile {
    /// `HandoffRequest.targetAgent` → root profile id.
    #[serde(default)]
    pub routes: BTreeMap<String, String>,
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// Named instruction packs that profiles enable by id.
    #[serde(default)]
    pub skills: Vec<Skill>,
    /// What each target agent may see of a request's context.
    #[serde(default)]
    pub disclosure: crate::policy::disclosure::DisclosureConfig,
    /// Limits for whole runs, per route or by default.
    #[serde(default)]
    pub budgets: crate::policy::budget::BudgetsConfig,
    /// What a request does while its chat has a live run, per route.
    #[serde(default)]
    pub conversations: crate::protocol::conversation::strategy::ConversationsConfig,
    /// Where status callbacks may go and how they are signed, per source.
    #[serde(default)]
    pub callbacks: crate::protocol::callback::CallbacksConfig,
    /// Fleet-wide limits on model calls, per endpoint and key.
    #[serde(default)]
    pub limits: Vec<crate::policy::limits::ModelLimit>,
    /// The repositories coding agents work on, by `projectId`.
    #[serde(default)]
    pub projects: Vec<crate::projects::Project>,
    /// The bridges that may speak for requests, by their RabbitMQ users (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
    #[serde(default)]
    pub bridges: Vec<crate::protocol::bridges::Bridge>,
}

/// A named instruction pack, included in the prompt of every profile that
/// enables it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skill {
    pub id: String,
    #[serde(default)]
    pub description: String,
    pub instructions: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub id: String,
    pub name: String,
    /// What other agents see in `agent_list`.
    pub description: String,
    #[serde(default)]
    pub system_prompt: String,
    /// The model-visible tool surface.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Skills (by id) this profile's agent always has.
    #[serde(default)]
    pub skills: Vec<String>,
    pub model: ModelBinding,
    #[serde(default)]
    pub delegation: DelegationPolicy,
    /// Seconds a question asked with `ask_user` waits for the user's answer
    /// (default 86400: 24 hours).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask_timeout: Option<u64>,
    /// The fleet-wide limit this profile's model calls are under: resolved
    /// from the file's `[[limits]]` when it is applied and stored beside the
    /// profile, never written in a profile itself.
    #[serde(skip)]
    pub model_limit: Option<crate::policy::limits::ModelLimit>,
}

/// Which provider drives the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum ModelBinding {
    /// A deterministic list of model turns, for demos and tests.
    Scripted {
        #[serde(default)]
        script: Vec<ScriptedTurn>,
    },
    /// Any OpenAI-compatible Chat Completions endpoint.
    Openai {
        base_url: Option<String>,
        model: Option<String>,
        api_key_env: Option<String>,
        temperature: Option<f32>,
        max_tokens: Option<u32>,
        /// Seconds one HTTP request may take (default 120).
        timeout_secs: Option<u64>,
        /// Attempts before the call fails, retries included (default 5).
        max_attempts: Option<u32>,
    },
    /// An external coding agent run as a process, in a box (see [`crate::policy::sandbox`]).
    Command {
        #[serde(default)]
        command: Vec<String>,
        timeout_secs: Option<u64>,
        /// Names of the worker's environment variables the agent gets; it
        /// gets no others (PATH and HOME have safe defaults).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        env: Vec<String>,
        /// Variables set to fixed values for the agent.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env_values: BTreeMap<String, String>,
        /// Bytes of stdout, and of stderr, before the agent is stopped
        /// (default [`crate::policy::sandbox::DEFAULT_MAX_OUTPUT_BYTES`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_output_bytes: Option<u64>,
        /// What a deploy (or a dead worker) does to the agent while it runs.
        #[serde(default, skip_serializing_if = "crate::policy::sandbox::OnInterrupt::is_default")]
        on_interrupt: crate::policy::sandbox::OnInterrupt,
    },
    /// OpenAI's Codex CLI, on the request's project (docs/profiles.md#coding-agents).
    #[serde(rename = "codex")]
    Codex(coding::CodingBinding),
    /// Anthropic's Claude Code.
    #[serde(rename = "claude_code")]
    ClaudeCode(coding::CodingBinding),
    /// Qwen Code.
    #[serde(rename = "qwen_code")]
    QwenCode(coding::CodingBinding),
    /// Google's Gemini CLI.
    #[serde(rename = "gemini_cli")]
    GeminiCli(coding::CodingBinding),
}

/// One scripted model turn: one tool call, or plain text when `tool` is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    pub tool: Option<String>,
    #[serde(default = "empty_object")]
    pub args: Value,
    pub text: Option<String>,
    /// How long this turn "thinks" before answering (to show crashes mid-call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Several tool calls in this one turn (instead of `tool`/`args`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<ScriptedCall>,
}

/// One tool call of a scripted turn with several.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    pub tool: String,
    #[serde(default = "empty_object")]
    pub args: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelegationPolicy {
    pub can_handoff: bool,
    pub can_delegate: bool,
    pub callable: bool,
    pub allow_as_handoff_target: bool,
    pub allow_as_subagent: bool,
    pub allowed_callers: Vec<String>,
    pub max_handoff_depth: u32,
}

impl Default for DelegationPolicy {
    fn default() -> Self {
        Self {
            can_handoff: false,
            can_delegate: false,
            callable: true,
            allow_as_handoff_target: true,
            allow_as_subagent: false,
            allowed_callers: vec!["*".into()],
            max_handoff_depth: 8,
        }
    }
}

impl DelegationPolicy {
    pub fn accepts_caller(&self, caller_id: &str) -> bool {
        self.allowed_callers.iter().any(|c| c == "*" || c == caller_id)
    }
}

impl ModelBinding {
    /// What an operator still has to fill in; empty when the binding is usable.
    pub fn missing_configuration(&self) -> Vec<&'static str> {
        match self {
            ModelBinding::Scripted { script } if script.is_empty() => vec!["script"],
            ModelBinding::Scripted { .. } => vec![],
            ModelBinding::Openai { base_url, model, .. } => {
                let mut missing = vec![];
                if base_url.as_deref().unwrap_or("").is_empty() {
                    missing.push("base_url");
                }
                if model.as_deref().unwrap_or("").is_empty() {
                    missing.push("model");
                }
                missing
            }
            ModelBinding::Command { command, .. } if command.is_empty() => vec!["command"],
            ModelBinding::Command { .. } => vec![],
            _ => self.coding().map(|(_, b)| b.missing_configuration()).unwrap_or_default(),
        }
    }

    /// Why this fleet cannot run the binding even when it is complete.
    pub fn unavailable(&self) -> Option<String> {
        let name = self.provider_name();
        (!RUNNABLE_PROVIDERS.contains(&name)).then(|| format!("provider `{name}` is not available in this build yet"))
    }

    /// Where its model calls go, for matching `[[limits]]`: only an
    /// `openai` binding with an endpoint calls a provider's API.
    pub fn limit_target(&self) -> Option<crate::policy::limits::Target<'_>> {
        match self {
            ModelBinding::Openai { base_url: Some(base_url), api_key_env, .. } => {
                Some(crate::policy::limits::Target { base_url, api_key_env: api_key_env.as_deref() })
            }
            _ => match self.coding() {
                Some((_, coding::CodingBinding { base_url: Some(base_url), api_key_env, .. })) => {
                    Some(crate::policy::limits::Target { base_url, api_key_env: api_key_env.as_deref() })
                }
                _ => None,
            },
        }
    }

    /// Why its `timeout_secs` is refused: a model call may take at most
    /// [`MAX_CALL_TIMEOUT_SECS`], an external or coding agent at most
    /// [`MAX_AGENT_TIMEOUT_SECS`] (0 is refused as well).
    pub fn timeout_problem(&self) -> Option<String> {
        let (secs, most, what) = match self {
            ModelBinding::Openai { timeout_secs, .. } => (*timeout_secs, MAX_CALL_TIMEOUT_SECS, "a model call"),
            ModelBinding::Command { timeout_secs, .. } => (*timeout_secs, MAX_AGENT_TIMEOUT_SECS, "an external agent"),
            // A coding binding refuses 0 itself.
            _ => (self.coding()?.1.timeout_secs.filter(|s| *s > 0), MAX_AGENT_TIMEOUT_SECS, "a coding agent"),
        };
        match secs? {
            0 => Some("timeout_secs must be above 0".into()),
            secs if secs > most => Some(format!("timeout_secs = {secs} is over the {most} seconds {what} may take")),
            _ => None,
        }
    }

    pub fn provider_name(&self) -> &'static str {
        match self {
            ModelBinding::Scripted { .. } => "scripted",
            ModelBinding::Openai { .. } => "openai",
            ModelBinding::Command { .. } => "command",
            _ => self.coding().map_or("command", |(cli, _)| cli.as_str()),
        }
    }

    /// The CLI and its settings, when a coding agent drives the profile.
    pub fn coding(&self) -> Option<(coding::CodingCli, &coding::CodingBinding)> {
        use coding::CodingCli;
        match self {
            ModelBinding::Codex(b) => Some((CodingCli::Codex, b)),
            ModelBinding::ClaudeCode(b) => Some((CodingCli::ClaudeCode, b)),
            ModelBinding::QwenCode(b) => Some((CodingCli::QwenCode, b)),
            ModelBinding::GeminiCli(b) => Some((CodingCli::GeminiCli, b)),
            _ => None,
        }
    }

    /// What an interrupted run of an external agent (a command or a CLI) becomes.
    pub fn on_interrupt(&self) -> Option<crate::policy::sandbox::OnInterrupt> {
        match self {
            ModelBinding::Command { on_interrupt, .. } => Some(*on_interrupt),
            _ => self.coding().map(|(_, b)| b.on_interrupt),
        }
    }
}

/// Providers this build of the fleet can run.
pub const RUNNABLE_PROVIDERS: &[&str] =
    &["scripted", "openai", "command", "codex", "claude_code", "qwen_code", "gemini_cli"];

impl Profile {
    /// Complete and runnable here: only such a profile can receive work.
    pub fn is_configured(&self) -> bool {
        self.model.missing_configuration().is_empty() && self.model.unavailable().is_none()
    }

    /// The tools this profile lists that Baton knows; unknown names are
    /// rejected when the file is loaded, so nothing is silently dropped.
    pub fn tool_names(&self) -> Vec<ToolName> {
        self.tools.iter().filter_map(|t| ToolName::parse(t)).collect()
    }

    pub fn has_tool(&self, tool: ToolName) -> bool {
        self.tools.iter().any(|t| t == tool.as_str())
    }
}

/// The longest one model call may take (an `openai` profile's
/// `timeout_secs`): a call under a fleet-wide limit counts as in flight no
/// longer than this, whatever its worker does.
pub const MAX_CALL_TIMEOUT_SECS: u64 = 3600;
/// The longest an external agent or a coding agent may run (`timeout_secs`).
pub const MAX_AGENT_TIMEOUT_SECS: u64 = 24 * 3600;

/// Why a profiles file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProfilesError {
    #[error("profiles file is not valid TOML: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("profiles file is invalid: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

impl ProfilesFile {
    /// Parses and validates a profiles file.
    pub fn parse(text: &str) -> Result<Self, ProfilesError> {
        let file: ProfilesFile = toml::from_str(text)?;
        let problems = file.problems();
        if problems.is_empty() {
            Ok(file)
        } else {
            Err(ProfilesError::Invalid(problems))
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = vec![];
        let mut seen = BTreeSet::new();
        for p in &self.profiles {
            if p.id.trim().is_empty() {
                problems.push("a profile has an empty id".to_string());
            }
            if !seen.insert(p.id.as_str()) {
                problems.push(format!("profile `{}` is defined twice", p.id));
            }
            if let Some(why) = p.model.timeout_problem() {
                problems.push(format!("profile `{}`: {why}", p.id));
            }
            if let ModelBinding::Command { env, env_values, max_output_bytes, .. } = &p.model {
                let env_problems = crate::policy::sandbox::environment_problems(env, env_values);
                problems.extend(env_problems.into_iter().map(|e| format!("profile `{}`: {e}", p.id)));
                if *max_output_bytes == Some(0) {
                    problems.push(format!("profile `{}`: max_output_bytes must be above 0", p.id));
                }
            }
            if let Some((_, coding)) = p.model.coding() {
                problems.extend(coding.problems().into_iter().map(|e| format!("profile `{}`: {e}", p.id)));
                if let Some(project) = coding.project.as_deref().filter(|id| !self.projects.iter().any(|p| p.id == *id))
                {
                    problems.push(format!("profile `{}` names unknown project `{project}`", p.id));
                }
            }
            for t in &p.tools {
                if ToolName::parse(t).is_none() {
                    problems.push(format!("profile `{}` lists unknown tool `{t}`", p.id));
                }
            }
        }
        let skills: BTreeSet<&str> = self.skills.iter().map(|s| s.id.as_str()).collect();
        if skills.len() != self.skills.len() {
            problems.push("a skill id is defined twice".to_string());
        }
        for p in &self.profiles {
            for skill in p.skills.iter().filter(|s| !skills.contains(s.as_str())) {
                problems.push(format!("profile `{}` enables unknown skill `{skill}`", p.id));
            }
        }
        for (target, profile) in &self.routes {
            if !seen.contains(profile.as_str()) {
                problems.push(format!("route `{target}` names unknown profile `{profile}`"));
            }
        }
        problems.extend(crate::protocol::bridges::problems(&self.bridges));
        let mut projects = BTreeSet::new();
        for project in &self.projects {
            problems.extend(project.problems());
            if !projects.insert(project.id.as_str()) {
                problems.push(format!("project `{}` is defined twice", project.id));
            }
        }
        problems.extend(self.budgets.problems(&self.routes));
        problems.extend(self.conversations.problems(&self.routes));
        problems.extend(self.callbacks.problems());
        problems.extend(crate::policy::limits::problems(&self.limits));
        problems
    }

    /// The limit a profile's model calls are under, if any matches.
    pub fn limit_for(&self, profile: &Profile) -> Option<&crate::policy::limits::ModelLimit> {
        crate::policy::limits::limit_for(&self.limits, &profile.model.limit_target()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
[routes]
docs_agent = "writer"

[[profiles]]
id = "writer"
name = "Writer"
description = "Drafts text."
tools = ["workspace_write", "agent_handoff"]
[profiles.model]
provider = "scripted"
script = [{ tool = "workspace_write", args = { path = "output/main.md", content = "hi" } }]
[profiles.delegation]
can_handoff = true

[[profiles]]
id = "editor"
name = "Editor"
description = "Edits text."
[profiles.model]
provider = "openai"
base_url = "http://localhost:1/v1"
"#;

    #[test]
    fn a_valid_file_parses_with_defaults() {
        let file = ProfilesFile::parse(SAMPLE).unwrap();
        assert_eq!(file.routes["docs_agent"], "writer");
        let writer = &file.profiles[0];
        assert!(writer.delegation.can_handoff);
        assert!(writer.delegation.accepts_caller("anyone"));
        assert_eq!(writer.delegation.max_handoff_depth, 8);
        assert!(writer.is_configured());
        assert_eq!(writer.tool_names(), vec![ToolName::WorkspaceWrite, ToolName::AgentHandoff]);
    }

    #[test]
    fn an_openai_binding_without_a_model_requires_configuration() {
        let file = ProfilesFile::parse(SAMPLE).unwrap();
        assert_eq!(file.profiles[1].model.missing_configuration(), vec!["model"]);
        assert!(!file.profiles[1].is_configured());
    }

    #[test]
    fn unknown_tools_and_dangling_routes_are_refused() {
        let text = SAMPLE
            .replace("\"agent_handoff\"]", "\"agent_teleport\"]")
            .replace("docs_agent = \"writer\"", "docs_agent = \"ghost\"");
        let err = ProfilesFile::parse(&text).unwrap_err().to_string();
        assert!(err.contains("unknown tool `agent_teleport`"), "{err}");
        assert!(err.contains("unknown profile `ghost`"), "{err}");
    }

    #[test]
    fn run_budgets_are_read_per_route_and_checked() {
        let text = format!(
            "{SAMPLE}\n[budgets.default]\nmax_model_calls = 40\n[budgets.routes.docs_agent]\nmax_tokens = 9000\n"
        );
        let file = ProfilesFile::parse(&text).unwrap();
        let docs = file.budgets.for_target("docs_agent");
        assert_eq!((docs.max_model_calls, docs.max_tokens), (40, 9000));
        assert_eq!(
            ProfilesFile::parse(SAMPLE).unwrap().budgets.for_target("docs_agent"),
            crate::policy::budget::RunBudget::default()
        );
        let err = ProfilesFile::parse(&format!("{SAMPLE}\n[budgets.routes.codex]\nmax_tokens = 0\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("to 0") && err.contains("`routes.codex` names a target"), "{err}");
    }

    #[test]
    fn conversation_strategies_are_read_per_route_and_checked() {
        use crate::protocol::conversation::strategy::Strategy;
        let text = format!(
            "{SAMPLE}\n[conversations]\ndefault = \"interrupt\"\n[conversations.routes]\ndocs_agent = \"reject\"\n"
        );
        let file = ProfilesFile::parse(&text).unwrap();
        assert_eq!(
            (file.conversations.for_target("docs_agent"), file.conversations.for_target("codex")),
            (Strategy::Reject, Strategy::Interrupt)
        );
        assert_eq!(ProfilesFile::parse(SAMPLE).unwrap().conversations.for_target("docs_agent"), Strategy::Enqueue);
        let err = ProfilesFile::parse(&text.replace("\"reject\"", "\"queue\"")).unwrap_err().to_string();
        assert!(err.contains("queue"), "{err}");
        let err = ProfilesFile::parse(&format!("{SAMPLE}\n[conversations.routes]\ncodex = \"reject\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`routes.codex` names a target"), "{err}");
    }

    #[test]
    fn a_command_binding_keeps_its_box_settings_and_stores_none_it_does_not_use() {
        let boxed = r#"
[[profiles]]
id = "coder"
name = "Coder"
description = "Codes."
[profiles.model]
provider = "command"
command = ["codex", "exec", "-"]
env = ["OPENAI_API_KEY"]
env_values = { LANG = "C.UTF-8" }
max_output_bytes = 4096
on_interrupt = "rerun"
"#;
        let file = ProfilesFile::parse(boxed).unwrap();
        let stored = serde_json::to_value(&file.profiles[0].model).unwrap();
        let back: ModelBinding = serde_json::from_value(stored).unwrap();
        assert_eq!(back, file.profiles[0].model);
        let ModelBinding::Command { env, on_interrupt, .. } = &back else { panic!("{back:?}") };
        assert_eq!(
            (env.as_slice(), *on_interrupt),
            (&["OPENAI_API_KEY".to_string()][..], crate::policy::sandbox::OnInterrupt::Rerun)
        );
        // A plain binding is stored as before, so older workers still read it.
        let plain = ModelBinding::Command {
            command: vec!["sh".into()],
            timeout_secs: None,
            env: vec![],
            env_values: Default::default(),
            max_output_bytes: None,
            on_interrupt: Default::default(),
        };
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"provider": "command", "command": ["sh"], "timeout_secs": null})
        );
        let bad =
            boxed.replace("max_output_bytes = 4096", "max_output_bytes = 0").replace("\"OPENAI_API_KEY\"", "\"A=B\"");
        let err = ProfilesFile::parse(&bad).unwrap_err().to_string();
        assert!(err.contains("`A=B` is not an environment variable name") && err.contains("max_output_bytes"), "{err}");
    }

    #[test]
    fn limits_are_read_and_resolved_per_profile() {
        let text = format!(
            "{SAMPLE}\n[[limits]]\nname = \"local\"\nbase_url = \"http://localhost:1/v1/\"\nconcurrent_calls = 2\n"
        );
        let file = ProfilesFile::parse(&text).unwrap();
        assert_eq!(file.limit_for(&file.profiles[1]).map(|l| l.name.as_str()), Some("local"));
        assert_eq!(file.limit_for(&file.profiles[0]), None, "a scripted profile is under no limit");
        let err = ProfilesFile::parse(&text.replace("concurrent_calls = 2", "")).unwrap_err().to_string();
        assert!(err.contains("limit `local` sets none"), "{err}");
        // Set only by [[limits]]: a profile that names one is refused.
        assert!(ProfilesFile::parse(
            &SAMPLE.replace("description = \"Drafts text.\"", "description = \"Drafts text.\"\nmodel_limit = 1")
        )
        .is_err());
    }

    #[test]
    fn a_timeout_beyond_what_a_call_or_an_agent_may_take_is_refused_naming_the_profile() {
        let with = |secs: &str| {
            SAMPLE.replace(
                "base_url = \"http://localhost:1/v1\"",
                &format!("base_url = \"http://localhost:1/v1\"\ntimeout_secs = {secs}"),
            )
        };
        assert!(ProfilesFile::parse(&with("3600")).is_ok());
        let err = ProfilesFile::parse(&with("1000000000000")).unwrap_err().to_string();
        assert!(
            err.contains(
                "profile `editor`: timeout_secs = 1000000000000 is over the 3600 seconds a model call may take"
            ),
            "{err}"
        );
        let err = ProfilesFile::parse(&with("0")).unwrap_err().to_string();
        assert!(err.contains("profile `editor`: timeout_secs must be above 0"), "{err}");
        let agent = ModelBinding::Command {
            command: vec!["sh".into()],
            timeout_secs: Some(90_000),
            env: vec![],
            env_values: BTreeMap::new(),
            max_output_bytes: None,
            on_interrupt: Default::default(),
        };
        assert_eq!(
            agent.timeout_problem().unwrap(),
            "timeout_secs = 90000 is over the 86400 seconds an external agent may take"
        );
    }

    #[test]
    fn allowed_callers_can_name_specific_profiles() {
        let policy = DelegationPolicy { allowed_callers: vec!["writer".into()], ..Default::default() };
        assert!(policy.accepts_caller("writer"));
        assert!(!policy.accepts_caller("editor"));
    }
}
