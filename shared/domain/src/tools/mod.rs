//! The model-visible tools: their names, their surfaces, and the function
//! specs a model receives. Every description is written from the calling
//! agent's point of view and names no runtime internals.
//!
//! - [`args`]: parsing a tool's arguments and deriving its schema from one type.
//! - [`handoff`]: `agent_handoff` argument parsing and the handoff policies.
//! - [`delegation`]: `agent_delegate`, `agent_await`, `task_return`: parsing, policies, rendering.
//! - [`workspace`]: logical paths, reads, patches, commit modes.
//! - [`error`]: recoverable tool errors.

pub mod args;
pub mod delegation;
pub mod error;
pub mod handoff;
pub mod workspace;

use serde_json::{json, Value};

use crate::run::state::InvocationKind;
pub use crate::tool_name::ToolName;
use crate::tools::args::{description_and_parameters, AgentListArgs, AskUserArgs, FinishArgs};
use crate::tools::delegation::{AwaitCall, Capsule, DelegateCall};
use crate::tools::handoff::HandoffCall;
use crate::tools::workspace::{CommitArgs, ListArgs, PatchArgs, ReadArgs, WriteArgs};

/// The tools an invocation actually sees: its profile's list, narrowed by its
/// role. Children lose commit, finish and the `agent_*` tools and gain
/// `task_return`; owners never see `task_return`.
pub fn surface(profile_tools: &[ToolName], kind: InvocationKind) -> Vec<ToolName> {
    let mut tools: Vec<ToolName> = profile_tools
        .iter()
        .copied()
        .filter(|t| match kind {
            InvocationKind::Child => !t.is_owner_only() && *t != ToolName::TaskReturn,
            _ => *t != ToolName::TaskReturn,
        })
        .collect();
    if kind == InvocationKind::Child {
        tools.push(ToolName::TaskReturn);
    }
    tools
}

/// The OpenAI function spec for a tool: its description and parameters both
/// come from the type its arguments are parsed into. Generated once per
/// process (every model turn sends them).
pub fn spec(tool: ToolName) -> Value {
    static SPECS: std::sync::OnceLock<Vec<(ToolName, Value)>> = std::sync::OnceLock::new();
    let specs = SPECS.get_or_init(|| ToolName::ALL.iter().map(|t| (*t, generate(*t))).collect());
    specs.iter().find(|(t, _)| *t == tool).map(|(_, spec)| spec.clone()).expect("every tool has a spec")
}

fn generate(tool: ToolName) -> Value {
    let (description, parameters) = match tool {
        ToolName::AgentList => description_and_parameters::<AgentListArgs>(),
        ToolName::AgentHandoff => description_and_parameters::<HandoffCall>(),
        ToolName::AgentDelegate => description_and_parameters::<DelegateCall>(),
        ToolName::AgentAwait => description_and_parameters::<AwaitCall>(),
        ToolName::TaskReturn => description_and_parameters::<Capsule>(),
        ToolName::WorkspaceList => description_and_parameters::<ListArgs>(),
        ToolName::WorkspaceRead => description_and_parameters::<ReadArgs>(),
        ToolName::WorkspaceWrite => description_and_parameters::<WriteArgs>(),
        ToolName::WorkspacePatch => description_and_parameters::<PatchArgs>(),
        ToolName::WorkspaceCommit => description_and_parameters::<CommitArgs>(),
        ToolName::WorkspaceFinish => description_and_parameters::<FinishArgs>(),
        ToolName::AskUser => description_and_parameters::<AskUserArgs>(),
    };
    json!({
        "type": "function",
        "function": { "name": tool.as_str(), "description": description, "parameters": parameters }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that would leak the runtime into what a model reads.
    const RUNTIME_TERMS: [&str; 9] =
        ["invocation", "task_id", "task id", "queue", "provider", "session", "runid", "uuid", "/tmp"];

    #[test]
    fn agent_tool_specs_keep_runtime_terms_out_of_model_descriptions() {
        for tool in ToolName::ALL {
            let text = spec(tool).to_string().to_lowercase();
            for term in RUNTIME_TERMS {
                assert!(!text.contains(term), "{} mentions {term}", tool.as_str());
            }
        }
    }

    #[test]
    fn tool_names_have_no_dots_and_round_trip() {
        for tool in ToolName::ALL {
            assert!(!tool.as_str().contains('.'));
            assert_eq!(ToolName::parse(tool.as_str()), Some(tool));
        }
    }

    #[test]
    fn children_lose_owner_tools_and_gain_task_return() {
        let all = ToolName::ALL.to_vec();
        let child = surface(&all, InvocationKind::Child);
        assert!(child.contains(&ToolName::TaskReturn));
        assert!(!child.contains(&ToolName::WorkspaceCommit));
        assert!(!child.contains(&ToolName::AgentHandoff));
        let owner = surface(&all, InvocationKind::Handoff);
        assert!(!owner.contains(&ToolName::TaskReturn));
        assert!(owner.contains(&ToolName::WorkspaceFinish));
    }

    #[test]
    fn schemas_are_inline_and_plain() {
        for tool in ToolName::ALL {
            let parameters = spec(tool)["function"]["parameters"].to_string();
            for word in ["$ref", "$schema", "definitions", "$defs", "null", "format", "uint"] {
                assert!(!parameters.contains(word), "{} has `{word}`: {parameters}", tool.as_str());
            }
            assert_eq!(spec(tool)["function"]["parameters"]["type"], "object");
            assert!(!spec(tool)["function"]["description"].as_str().unwrap().is_empty());
        }
    }

    #[test]
    fn agent_delegate_schema_includes_the_budget_fields() {
        let budget = &spec(ToolName::AgentDelegate)["function"]["parameters"]["properties"]["budget"]["properties"];
        for field in ["maxRounds", "maxToolCalls", "maxTokens", "deadlineMs"] {
            assert_eq!(budget[field]["type"], "integer", "{field} in {budget}");
            assert_eq!(budget[field]["minimum"], 1, "{field} in {budget}");
        }
        assert_eq!(budget["deadlineMs"]["maximum"], delegation::MAX_DEADLINE_MS);
    }

    /// Every property each tool's parser accepts is in its schema, and every
    /// property in its schema is accepted: a full example parses, comes back
    /// unchanged (so nothing was ignored), and names exactly the schema's properties.
    #[test]
    fn every_property_the_parser_accepts_is_in_the_schema_and_back() {
        for tool in ToolName::ALL {
            let (example, round_trip) = full_example(tool);
            let schema = &spec(tool)["function"]["parameters"];
            same_properties(tool, schema, &example, "");
            assert_eq!(round_trip, example, "{} drops or changes a property", tool.as_str());
        }
    }

    /// Each tool's parser takes its full example: the one the tool really calls.
    #[test]
    fn the_tools_own_parsers_accept_the_full_examples() {
        let example = |tool| full_example(tool).0;
        let handoff = handoff::parse_args(&example(ToolName::AgentHandoff)).unwrap();
        assert_eq!(handoff.brief["tone"], "warm");
        let delegate = delegation::parse_delegate(&example(ToolName::AgentDelegate)).unwrap();
        assert_eq!(delegate.budget.max_tokens, Some(5000));
        assert_eq!(delegate.budget.deadline_ms, Some(60_000));
        assert!(delegation::parse_await(&example(ToolName::AgentAwait)).is_ok());
        assert!(delegation::parse_return(&example(ToolName::TaskReturn)).is_ok());
        assert!(CommitArgs::parse(&example(ToolName::WorkspaceCommit)).is_ok());
        assert_eq!(AskUserArgs::parse(&example(ToolName::AskUser)).unwrap().options, ["yes", "no"]);
    }

    #[test]
    fn ask_user_refuses_an_empty_question_and_too_many_options() {
        let empty = AskUserArgs::parse(&json!({"question": "  "})).unwrap_err();
        assert_eq!(empty.message, "`question` must not be empty.");
        let options =
            AskUserArgs::parse(&json!({"question": "Which?", "options": ["a", "b", "c", "d", "e", "f", "g"]}))
                .unwrap_err();
        assert_eq!(options.code, error::codes::INVALID_ARGUMENTS);
        let long = AskUserArgs::parse(&json!({"question": "x".repeat(2001)})).unwrap_err();
        assert!(long.message.contains("too long"), "{}", long.message);
        let spec = spec(ToolName::AskUser)["function"]["parameters"].clone();
        assert_eq!(spec["required"], json!(["question"]));
        assert_eq!(spec["properties"]["options"]["maxItems"], 6);
    }

    #[test]
    fn ask_user_belongs_to_owners_only() {
        let all = ToolName::ALL.to_vec();
        assert!(!surface(&all, InvocationKind::Child).contains(&ToolName::AskUser));
        assert!(surface(&all, InvocationKind::Root).contains(&ToolName::AskUser));
        assert!(surface(&all, InvocationKind::Handoff).contains(&ToolName::AskUser));
    }

    #[test]
    fn a_missing_required_property_is_named() {
        for tool in ToolName::ALL {
            let (example, _) = full_example(tool);
            let schema = &spec(tool)["function"]["parameters"];
            for required in schema["required"].as_array().into_iter().flatten() {
                let mut args = example.clone();
                args.as_object_mut().unwrap().remove(required.as_str().unwrap());
                let error = parse_as(tool, &args).unwrap_err();
                assert_eq!(error.code, error::codes::INVALID_ARGUMENTS);
                assert_eq!(
                    error.message,
                    format!("`{}` is required.", required.as_str().unwrap()),
                    "{}",
                    tool.as_str()
                );
            }
        }
    }

    #[test]
    fn a_wrong_type_is_a_recoverable_error_naming_the_field() {
        let error = parse_as(
            ToolName::AgentDelegate,
            &json!({"agentId": "c", "task": {"objective": "x"}, "budget": {"maxTokens": -1}}),
        );
        let error = error.unwrap_err();
        assert_eq!(error.code, error::codes::INVALID_ARGUMENTS);
        assert!(error.message.starts_with("`budget.maxTokens` is not valid"), "{}", error.message);
        assert!(!error.message.contains("u64"), "{}", error.message);
        let error = parse_as(ToolName::WorkspaceRead, &json!("output/main.md")).unwrap_err();
        assert_eq!(error.message, "Your arguments must be an object with this tool's properties.");
    }

    /// A call's arguments with every property the schema names, and what the
    /// tool's argument type gives back after parsing them.
    fn full_example(tool: ToolName) -> (Value, Value) {
        let example = match tool {
            ToolName::AgentList => json!({"purpose": "handoff", "query": "edit", "limit": 5}),
            ToolName::AgentHandoff => json!({"agentId": "editor", "pendingTaskPolicy": "denyIfPending", "handoff": {
                "objective": "Edit", "title": "T", "reason": "R", "contextSummary": "C", "workspaceRefs": ["output/a.md"],
                "mustPreserve": ["tone"], "completionCriteria": ["done"], "tone": "warm"}}),
            ToolName::AgentDelegate => json!({"agentId": "checker", "task": {
                "objective": "Check", "title": "T", "context": "C", "expectedOutput": "E", "tone": "brief"},
                "budget": {"maxRounds": 3, "maxToolCalls": 9, "maxTokens": 5000, "deadlineMs": 60_000}}),
            ToolName::AgentAwait => json!({"taskIds": ["checker"], "mode": "allCompleted", "timeoutMs": 1000}),
            ToolName::TaskReturn => {
                json!({"summary": "Done.", "status": "failed", "confidence": "low", "findings": ["f"],
                "warnings": ["w"], "suggestedNextActions": ["s"], "questionsForCaller": ["q"], "artifacts": ["output/x.md"]})
            }
            ToolName::WorkspaceList => json!({"path": "output/", "depth": 3}),
            ToolName::WorkspaceRead => {
                json!({"path": "output/a.md", "start_line": 1, "line_count": 2, "start_char": 0, "max_chars": 5})
            }
            ToolName::WorkspaceWrite => json!({"path": "output/a.md", "content": "x", "mode": "append"}),
            ToolName::WorkspacePatch => {
                json!({"path": "output/a.md", "old_string": "a", "new_string": "b", "replace_all": true})
            }
            ToolName::WorkspaceCommit => json!({"path": "output/a.md", "mode": "append", "reason": "r"}),
            ToolName::WorkspaceFinish => json!({"reason": "r"}),
            ToolName::AskUser => json!({"question": "Publish now?", "options": ["yes", "no"]}),
        };
        let back = parse_as(tool, &example).unwrap_or_else(|e| panic!("{}: {}", tool.as_str(), e.message));
        (example, back)
    }

    /// Parses with the argument type `spec` takes the tool's schema from, and serializes the result back.
    fn parse_as(tool: ToolName, args: &Value) -> Result<Value, crate::ToolError> {
        fn back<T: serde::de::DeserializeOwned + serde::Serialize>(args: &Value) -> Result<Value, crate::ToolError> {
            args::parse::<T>(args).map(|t| serde_json::to_value(t).unwrap())
        }
        match tool {
            ToolName::AgentList => back::<AgentListArgs>(args),
            ToolName::AgentHandoff => back::<HandoffCall>(args),
            ToolName::AgentDelegate => back::<DelegateCall>(args),
            ToolName::AgentAwait => back::<AwaitCall>(args),
            ToolName::TaskReturn => back::<Capsule>(args),
            ToolName::WorkspaceList => back::<ListArgs>(args),
            ToolName::WorkspaceRead => back::<ReadArgs>(args),
            ToolName::WorkspaceWrite => back::<WriteArgs>(args),
            ToolName::WorkspacePatch => back::<PatchArgs>(args),
            ToolName::WorkspaceCommit => back::<CommitArgs>(args),
            ToolName::WorkspaceFinish => back::<FinishArgs>(args),
            ToolName::AskUser => back::<AskUserArgs>(args),
        }
    }

    /// The example's keys are the schema's properties, at every level; an
    /// object that keeps extra fields says so with `additionalProperties`.
    fn same_properties(tool: ToolName, schema: &Value, example: &Value, at: &str) {
        let properties =
            schema["properties"].as_object().unwrap_or_else(|| panic!("{} {at}: no properties", tool.as_str()));
        let open = schema["additionalProperties"] == true;
        let given = example.as_object().unwrap();
        for key in properties.keys() {
            assert!(given.contains_key(key), "{} {at}: the example lacks schema property `{key}`", tool.as_str());
        }
        for (key, value) in given {
            match properties.get(key) {
                Some(sub) if sub["type"] == "object" => same_properties(tool, sub, value, &format!("{at}.{key}")),
                Some(_) => {}
                None => assert!(open, "{} {at}: `{key}` is accepted but not in the schema", tool.as_str()),
            }
        }
    }
}
