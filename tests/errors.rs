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

/// An agent's own write is its read of the version it wrote: it may write
/// the file again without reading it, and no read mark is stored for that.
/// Once another agent replaces the file, the first one's next write is
/// refused as stale (it knew an older version), not as unread; after a read
/// it goes through.
#[tokio::test]
async fn an_agent_s_own_write_counts_as_its_read_until_another_agent_replaces_the_file() {
    let write = |content: &str| {
        format!(r#"{{ tool = "workspace_write", args = {{ path = "scratch/notes.md", content = "{content}" }} }}"#)
    };
    let read = r#"{ tool = "workspace_read", args = { path = "scratch/notes.md" } }"#;
    let delegate =
        r#"{ tool = "agent_delegate", args = { agentId = "helper", task = { objective = "Edit the notes." } } }"#;
    let (first, second, third, fourth) = (write("v1"), write("v2"), write("v3"), write("v4"));
    let lead = baton_tests::profile(
        "lead",
        &["agent_delegate", "agent_await", "workspace_read", "workspace_write", "workspace_commit", "workspace_finish"],
        "can_delegate = true",
        &[
            &first,
            &second,
            delegate,
            r#"{ tool = "agent_await", args = { mode = "allCompleted" } }"#,
            &third,
            read,
            &fourth,
            r#"{ tool = "workspace_write", args = { path = "output/main.md", content = "Done." } }"#,
            r#"{ tool = "workspace_commit" }"#,
            r#"{ tool = "workspace_finish" }"#,
        ],
    );
    let child_write = write("child");
    let helper = baton_tests::profile(
        "helper",
        &["workspace_read", "workspace_write"],
        "allow_as_subagent = true",
        &[read, &child_write, r#"{ tool = "task_return", args = { summary = "Edited." } }"#],
    );
    let env = TestEnv::new().await;
    env.apply_profiles(&format!("[routes]\ndocs_agent = \"lead\"\n\n{lead}\n{helper}")).await;
    let messages = env.run_request("own-write").await;
    assert_eq!(messages.last().unwrap()["status"], "completed", "{messages:?}");
    let run = env.run_of("own-write").await;
    let lead = &env.invocations_of(run, "lead").await[0];
    let results = env.tool_results(lead.id).await;
    let error = |r: &Value| r["structured"]["error"]["code"].as_str().map(str::to_string);
    assert_eq!(error(&results[0]), None, "{}", results[0]);
    assert_eq!(error(&results[1]), None, "its own write is its read: {}", results[1]);
    assert_eq!(error(&results[4]).as_deref(), Some("workspace.write_stale_file"), "{}", results[4]);
    assert_eq!(error(&results[6]), None, "after a read: {}", results[6]);
    let c = env.db().await;
    let file = baton_store::runs::workspace::read(&c, run, "scratch/notes.md").await.unwrap().unwrap();
    assert_eq!((file.content.as_str(), file.written_by), ("v4", Some(lead.id)));
    // A file only its writer wrote has no read mark: the write is the mark.
    let marks = env.scalar_i64("SELECT count(*) FROM workspace_reads WHERE path = 'output/main.md'", &[]).await;
    assert_eq!(marks, 0, "a write stores no read mark of its own");
}
