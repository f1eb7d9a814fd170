//! The bench's agents, generated: chains of scripted stages (and the same
//! chains with a model behind HTTP), each stage handing off to the next and
//! the last one writing, committing and finishing.

use std::fmt::Write;

/// What a chain runs on, and which route (`targetAgent`) starts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Chain {
    /// 3 scripted stages through intake, the agents, the collector and the reply.
    EndToEnd,
    /// Long scripted chains, so most hops are handoffs between stages.
    Steady,
    /// The same long chains, each stage asking a model over HTTP.
    SteadyHttp,
}

/// Stages of a steady-state chain.
pub const STEADY_STAGES: i32 = 32;
/// Stages of an end-to-end chain.
pub const E2E_STAGES: i32 = 3;
/// The environment variable holding the (dummy) key of the bench's model server.
pub const MODEL_KEY_ENV: &str = "BATON_BENCH_MODEL_KEY";

impl Chain {
    pub fn stages(self) -> i32 {
        match self {
            Chain::EndToEnd => E2E_STAGES,
            Chain::Steady | Chain::SteadyHttp => STEADY_STAGES,
        }
    }

    /// The request's `targetAgent`, routed to the chain's first stage.
    pub fn target(self) -> &'static str {
        match self {
            Chain::EndToEnd => "docs_agent",
            Chain::Steady => "codex",
            Chain::SteadyHttp => "qwen_code",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Chain::EndToEnd => "e",
            Chain::Steady => "s",
            Chain::SteadyHttp => "h",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Chain::EndToEnd => "3-stage end to end",
            Chain::Steady => "steady state (32-stage chains)",
            Chain::SteadyHttp => "steady state, model over HTTP",
        }
    }
}

/// The whole profiles file: every chain, and the parker for the memory reading.
pub fn file(model_url: &str) -> String {
    let mut out = String::from("[routes]\n");
    for chain in [Chain::EndToEnd, Chain::Steady, Chain::SteadyHttp] {
        let _ = writeln!(out, "{} = \"{}1\"", chain.target(), chain.prefix());
    }
    out.push_str("claude_code = \"parker\"\n");
    for chain in [Chain::EndToEnd, Chain::Steady, Chain::SteadyHttp] {
        for stage in 1..=chain.stages() {
            out.push_str(&stage_profile(chain, stage, model_url));
        }
    }
    out.push_str(PARKER);
    out
}

fn stage_profile(chain: Chain, stage: i32, model_url: &str) -> String {
    let (p, last) = (chain.prefix(), stage == chain.stages());
    let mut out = format!(
        "\n[[profiles]]\nid = \"{p}{stage}\"\nname = \"Stage {stage}\"\ndescription = \"Stage {stage} of a bench chain.\"\n\
         system_prompt = \"You are bench stage {stage} of {n}.\"\n",
        n = chain.stages()
    );
    out.push_str(if last {
        "tools = [\"workspace_write\", \"workspace_commit\", \"workspace_finish\"]\n"
    } else {
        "tools = [\"agent_handoff\"]\n"
    });
    if chain == Chain::SteadyHttp {
        let _ = write!(out, "[profiles.model]\nprovider = \"openai\"\nbase_url = \"{model_url}\"\nmodel = \"bench\"\napi_key_env = \"{MODEL_KEY_ENV}\"\n");
    } else if last {
        out.push_str(
            "[profiles.model]\nprovider = \"scripted\"\nscript = [{ calls = [\n  { tool = \"workspace_write\", args = { path = \"output/main.md\", content = \"done\" } },\n  \
             { tool = \"workspace_commit\" },\n  { tool = \"workspace_finish\" },\n] }]\n",
        );
    } else {
        let _ = write!(
            out,
            "[profiles.model]\nprovider = \"scripted\"\nscript = [{{ tool = \"agent_handoff\", args = {{ agentId = \"{p}{next}\", handoff = {{ objective = \"Stage {next}.\" }} }} }}]\n",
            next = stage + 1
        );
    }
    out.push_str("[profiles.delegation]\ncan_handoff = true\nmax_handoff_depth = 64\n");
    out
}

const PARKER: &str = r#"
[[profiles]]
id = "parker"
name = "Parker"
description = "Delegates and waits."
tools = ["agent_delegate", "agent_await"]
[profiles.model]
provider = "scripted"
script = [
  { tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Take your time." } } },
  { tool = "agent_await", args = { timeoutMs = 300000 } },
]
[profiles.delegation]
can_delegate = true

[[profiles]]
id = "helper"
name = "Helper"
description = "Never gets to run in the bench."
[profiles.model]
provider = "scripted"
script = [{ tool = "task_return", args = { summary = "done" } }]
[profiles.delegation]
allow_as_subagent = true
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_chain_is_a_valid_profiles_file() {
        let file = baton_domain::profiles::ProfilesFile::parse(&file("http://127.0.0.1:1/v1")).expect("valid profiles");
        assert_eq!(file.profiles.len(), (E2E_STAGES + 2 * STEADY_STAGES + 2) as usize);
    }
}
