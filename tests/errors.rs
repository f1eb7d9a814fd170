//! Each recoverable handoff error reaches the agent as a tool error it can
//! act on, and the run goes on to finish.

use std::time::Duration;

use baton_domain::run::journal::JournalEvent;
use baton_tests::{sample_request_json, until_reply, TestEnv};
use serde_json::Value;

/// A profiles file where `solo` first makes `bad_call`, then writes, commits
/// and finishes; `extra` adds target profiles.
fn profiles(bad_call: &str, max_depth: u32, extra: &str) -> String {
    format!(
        r#"
[routes]
docs_agent = "solo"

[[profiles]]
id = "solo"
name = "Solo"
description = "Works alone when it must."
tools = ["agent_list", "agent_handoff", "workspace_write", "workspace_commit", "workspace_finish"]
[profiles.model]
provider = "scripted"
script = [
  {bad_call},
  {{ tool = "workspace_write", args = {{ path = "output/main.md", content = "Done alone." }} }},
  {{ tool = "workspace_commit" }},
  {{ tool = "workspace_finish" }},
]
[profiles.delegation]
can_handoff = true
max_handoff_depth = {max_depth}
{extra}
"#
    )
}

const HELPER: &str = r#"
[[profiles]]
id = "helper"
name = "Helper"
description = "Takes over."
tools = ["workspace_finish"]
[profiles.model]
provider = "scripted"
script = [{ tool = "workspace_finish" }]
"#;

/// Runs the scenario and returns the first tool result the agent read.
async fn first_tool_result(profiles_text: &str) -> Value {
    let env = TestEnv::new().await;
    env.apply_profiles(profiles_text).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("err-1", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, Duration::from_secs(30)).await;
    fleet.stop().await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "the run goes on after a recoverable error");
    assert_eq!(messages.last().unwrap()["text"], "Done alone.");
    let run = env.run_of("err-1").await;
    let c = env.db().await;
    let root = &baton_store::invocations::for_run(&c, run).await.unwrap()[0];
    let steps = baton_store::invocations::steps::load(&c, root.id).await.unwrap();
    let result = steps.iter().find(|s| s.kind == "tool_result").unwrap().payload.clone();
    let journal = env.journal(run).await;
    assert!(journal.contains(&JournalEvent::ToolCallFailed), "{journal:?}");
    assert!(!journal.contains(&JournalEvent::HandoffAccepted), "{journal:?}");
    result
}

async fn assert_refused(bad_call: &str, max_depth: u32, extra: &str, code: &str, says: &str) {
    let result = first_tool_result(&profiles(bad_call, max_depth, extra)).await;
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structured"]["error"]["code"], code, "{result}");
    let content = result["content"].as_str().unwrap();
    assert!(content.contains(says), "`{content}` should say `{says}`");
    for leak in ["invocation", "task_", "queue"] {
        assert!(!content.to_lowercase().contains(leak), "`{content}` leaks `{leak}`");
    }
}

#[tokio::test]
async fn a_handoff_without_an_objective_is_a_recoverable_error() {
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { title = "No objective" } } }"#;
    assert_refused(call, 4, HELPER, "tool.invalid_arguments", "handoff.objective").await;
}

#[tokio::test]
async fn a_handoff_to_an_unknown_agent_is_a_recoverable_error() {
    let call = r#"{ tool = "agent_handoff", args = { agentId = "ghost", handoff = { objective = "Haunt." } } }"#;
    assert_refused(call, 4, HELPER, "agent.target_profile_not_found", "agent_list").await;
}

#[tokio::test]
async fn a_handoff_to_an_agent_that_does_not_accept_this_caller_is_refused() {
    let picky = HELPER.to_string() + "[profiles.delegation]\nallowed_callers = [\"someone-else\"]\n";
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { objective = "Take over." } } }"#;
    assert_refused(call, 4, &picky, "agent.handoff_policy_denied", "from you").await;
}

#[tokio::test]
async fn a_handoff_to_an_agent_that_is_not_callable_is_refused() {
    let closed = HELPER.to_string() + "[profiles.delegation]\ncallable = false\n";
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { objective = "Take over." } } }"#;
    assert_refused(call, 4, &closed, "agent.handoff_policy_denied", "does not take over").await;
}

#[tokio::test]
async fn a_handoff_to_an_unconfigured_agent_is_refused() {
    let bare = r#"
[[profiles]]
id = "helper"
name = "Helper"
description = "Not set up yet."
[profiles.model]
provider = "openai"
base_url = "http://127.0.0.1:9/v1"
"#;
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { objective = "Take over." } } }"#;
    assert_refused(call, 4, bare, "agent.target_requires_configuration", "not set up").await;
}

#[tokio::test]
async fn a_handoff_past_the_depth_limit_is_refused() {
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { objective = "Take over." } } }"#;
    assert_refused(call, 0, HELPER, "agent.handoff_depth_exhausted", "Finish it yourself").await;
}

#[tokio::test]
async fn an_unsupported_pending_task_policy_is_a_recoverable_error() {
    let call = r#"{ tool = "agent_handoff", args = { agentId = "helper", handoff = { objective = "x" }, pendingTaskPolicy = "transferPending" } }"#;
    assert_refused(call, 4, HELPER, "tool.invalid_arguments", "denyIfPending").await;
}

#[tokio::test]
async fn finishing_before_any_commit_is_a_recoverable_error() {
    let call = r#"{ tool = "workspace_finish" }"#;
    assert_refused(call, 4, HELPER, "agent.foreground_commit_required", "workspace_commit").await;
}

#[tokio::test]
async fn a_tool_the_model_made_up_is_a_recoverable_error() {
    let call = r#"{ tool = "agent_teleport", args = { to = "mars" } }"#;
    assert_refused(call, 4, HELPER, "agent.tool_policy_denied", "There is no tool `agent_teleport`").await;
}
