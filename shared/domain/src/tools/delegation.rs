//! Return-mode delegation: `agent_delegate`, `agent_await` and `task_return`.
//! Parsing, policies, the wait decision and what each agent reads, all pure.

use std::fmt::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::profiles::Profile;
use crate::run::state::{InvocationKind, TaskStatus};
use crate::tool_name::ToolName;
use crate::tools::args;
use crate::tools::error::delegation_codes as codes;
use crate::tools::error::ToolError;
use crate::tools::handoff::MAX_TEXT_CHARS;

/// Delegated tasks one parent invocation may start, and have open at once.
pub const MAX_CHILDREN_PER_PARENT: usize = 8;
pub const MAX_CONCURRENT_CHILDREN: usize = 3;
pub const DEFAULT_AWAIT_MS: u64 = 120_000;
pub const MAX_AWAIT_MS: u64 = 300_000;
/// The longest wall-clock deadline a delegated task may be given (one day).
pub const MAX_DEADLINE_MS: u64 = 86_400_000;

/// Limits for the task; each can only narrow your own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_rounds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tool_calls: Option<u64>,
    /// Model tokens the other agent may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u64>,
    /// Milliseconds the other agent may take, counted from when you delegate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub deadline_ms: Option<u64>,
}

/// Ask another agent to do a task for you; its result comes back to you. You may carry on working and wait for it later with agent_await.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DelegateCall {
    pub agent_id: String,
    pub task: DelegatedTask,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
}

/// What the other agent reads. Fields beyond these are shown to it as additional instructions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DelegatedTask {
    pub objective: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DelegateArgs {
    pub agent_id: String,
    pub task: Map<String, Value>,
    pub budget: Budget,
}

pub fn parse_delegate(args: &Value) -> Result<DelegateArgs, ToolError> {
    let call: DelegateCall = args::parse(args)?;
    let agent_id = call.agent_id.trim().to_string();
    if agent_id.is_empty() {
        return Err(ToolError::invalid_arguments("`agentId` is required: name the agent from agent_list."));
    }
    if call.task.objective.trim().is_empty() {
        return Err(ToolError::invalid_arguments("`task.objective` is required: say what the other agent must do."));
    }
    for (field, text) in [("objective", Some(&call.task.objective)), ("title", call.task.title.as_ref())] {
        if text.is_some_and(|s| s.chars().count() > MAX_TEXT_CHARS) {
            return Err(ToolError::invalid_arguments(format!(
                "`task.{field}` is longer than {MAX_TEXT_CHARS} characters."
            )));
        }
    }
    let budget = check_budget(call.budget.unwrap_or_default())?;
    let task = match serde_json::to_value(&call.task) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a struct serializes to an object"),
    };
    Ok(DelegateArgs { agent_id, task, budget })
}

fn check_budget(budget: Budget) -> Result<Budget, ToolError> {
    let fields = [budget.max_rounds, budget.max_tool_calls, budget.max_tokens, budget.deadline_ms];
    if fields.contains(&Some(0)) {
        return Err(ToolError::invalid_arguments("Each budget limit must be at least 1."));
    }
    if budget.deadline_ms.is_some_and(|d| d > MAX_DEADLINE_MS) {
        return Err(ToolError::invalid_arguments(format!(
            "`budget.deadlineMs` is at most {MAX_DEADLINE_MS} (one day)."
        )));
    }
    Ok(budget)
}

/// May this agent delegate, and will the target take the task from it?
pub fn check_delegate(
    caller: &Profile,
    kind: InvocationKind,
    agent_id: &str,
    target: Option<&Profile>,
) -> Result<(), ToolError> {
    let denied = |m: String| ToolError::new(codes::DELEGATION_POLICY_DENIED, m);
    if !kind.is_foreground() || !caller.delegation.can_delegate || !caller.has_tool(ToolName::AgentDelegate) {
        return Err(denied("You cannot delegate work in this run. Do the task yourself.".into()));
    }
    let Some(target) = target else {
        return Err(ToolError::new(
            crate::tools::error::codes::TARGET_NOT_FOUND,
            format!("There is no agent `{agent_id}`. Use agent_list with purpose \"delegate\" to see who can help."),
        ));
    };
    let p = &target.delegation;
    if !p.callable || !p.allow_as_subagent {
        return Err(denied(format!("Agent `{agent_id}` does not take delegated tasks. Choose another agent.")));
    }
    if !p.accepts_caller(&caller.id) {
        return Err(denied(format!("Agent `{agent_id}` does not take tasks from you. Choose another agent.")));
    }
    if !target.is_configured() {
        return Err(ToolError::new(
            crate::tools::error::codes::TARGET_REQUIRES_CONFIGURATION,
            format!("Agent `{agent_id}` is not set up to run yet. Choose another agent."),
        ));
    }
    Ok(())
}

/// The parent's delegation budget.
pub fn check_capacity(started: usize, open: usize) -> Result<(), ToolError> {
    let exhausted = |m: String| ToolError::new(codes::DELEGATION_BUDGET_EXHAUSTED, m);
    if started >= MAX_CHILDREN_PER_PARENT {
        return Err(exhausted(format!(
            "You have already delegated {started} tasks, the most allowed. Finish the work yourself."
        )));
    }
    if open >= MAX_CONCURRENT_CHILDREN {
        return Err(exhausted(format!(
            "{open} of your delegated tasks are still in progress, the most at once. Wait for one with agent_await."
        )));
    }
    Ok(())
}

/// The `# Delegated Task` brief a child reads.
pub fn render_task_brief(task: &Map<String, Value>, from: &str) -> String {
    let mut out = format!("# Delegated Task\n\nAgent {from} asked you to do this task and return the result.\n");
    for (key, heading) in
        [("title", "Title"), ("objective", "Objective"), ("context", "Context"), ("expectedOutput", "Expected Output")]
    {
        if let Some(text) = task.get(key).and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
            let _ = write!(out, "\n## {heading}\n{}\n", text.trim());
        }
    }
    let known = ["title", "objective", "context", "expectedOutput"];
    let extra: Vec<String> = task
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .map(|(k, v)| format!("- {k}: {}", v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())))
        .collect();
    if !extra.is_empty() {
        let _ = write!(out, "\n## Additional Instructions\n{}\n", extra.join("\n"));
    }
    out.push_str("\n## Working Notes\n- You share the workspace with the agent who asked; write notes under scratch/ if useful.\n- When you are done, call task_return with a clear summary, your findings and any warnings.\n");
    out
}

/// How long to wait and for what.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AwaitMode {
    #[default]
    NextCompleted,
    AllCompleted,
    StatusOnly,
}

/// Wait for tasks you delegated and read their results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AwaitCall {
    /// The handles you were given when you delegated; all of yours when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_ids: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<AwaitMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300_000))]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AwaitArgs {
    /// Workspace keys of the tasks to wait for; `None` means all of the caller's.
    pub keys: Option<Vec<String>>,
    pub mode: AwaitMode,
    pub timeout_ms: u64,
}

/// What a parked parent waits for, stored with it: the `agent_await` call
/// that parked it, which tasks and how, and a deadline that belongs to that
/// call, so it holds across wake-ups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AwaitSpec {
    pub tool_call_id: String,
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    pub mode: AwaitMode,
    pub deadline: chrono::DateTime<chrono::Utc>,
}

pub fn parse_await(args: &Value) -> Result<AwaitArgs, ToolError> {
    let call: AwaitCall = args::parse(args)?;
    let timeout_ms = call.timeout_ms.unwrap_or(DEFAULT_AWAIT_MS).clamp(1, MAX_AWAIT_MS);
    Ok(AwaitArgs { keys: call.task_ids, mode: call.mode.unwrap_or_default(), timeout_ms })
}

/// Is the wait over? Each selected task is (status, whether the parent has
/// already read its result). `nextCompleted` waits for a result not read
/// yet, unless every task is done (then there is nothing left to wait for).
pub fn await_ready(mode: AwaitMode, tasks: &[(TaskStatus, bool)]) -> bool {
    let all_done = tasks.iter().all(|(s, _)| s.is_terminal());
    match mode {
        AwaitMode::StatusOnly => true,
        AwaitMode::AllCompleted => all_done,
        AwaitMode::NextCompleted => all_done || tasks.iter().any(|(s, read)| s.is_terminal() && !read),
    }
}

/// One of a parked parent's delegated tasks, as its wait sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Awaited<'a> {
    /// The task's handle (`checker`, `checker-002`).
    pub key: &'a str,
    pub status: TaskStatus,
    /// Whether the parent has already read its result.
    pub read: bool,
}

/// Whether a parked parent's wait is over (asked when a child ends): the
/// tasks it waits for (`keys`, or all of its own) are ready for `mode`. A
/// wait naming a task the parent does not have is over: the call that
/// parked it runs again and says so.
pub fn wait_is_over(mode: AwaitMode, keys: Option<&[String]>, children: &[Awaited<'_>]) -> bool {
    let progress = |t: &Awaited<'_>| (t.status, t.read);
    let Some(keys) = keys else {
        return await_ready(mode, &children.iter().map(progress).collect::<Vec<_>>());
    };
    let selected: Option<Vec<_>> = keys.iter().map(|k| children.iter().find(|t| t.key == k).map(progress)).collect();
    selected.is_none_or(|tasks| await_ready(mode, &tasks))
}

/// Return your result to the agent who asked for it. This ends your task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capsule {
    pub summary: String,
    #[serde(default)]
    pub status: ReturnStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggested_next_actions: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questions_for_caller: Vec<String>,
    /// Anything else the asking agent should receive with your result, such as workspace paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Value>,
}

/// Whether the task was done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReturnStatus {
    #[default]
    Completed,
    Failed,
}

impl ReturnStatus {
    pub fn task_status(self) -> TaskStatus {
        match self {
            ReturnStatus::Completed => TaskStatus::Completed,
            ReturnStatus::Failed => TaskStatus::Failed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

impl Confidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

pub fn parse_return(args: &Value) -> Result<Capsule, ToolError> {
    // Nulls mean "left out", as they did before the arguments were typed.
    let given = match args {
        Value::Object(map) => {
            Value::Object(map.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        other => other.clone(),
    };
    let mut capsule: Capsule = args::parse(&given)?;
    if capsule.summary.trim().is_empty() {
        return Err(ToolError::invalid_arguments("`summary` is required: say what you found or did."));
    }
    capsule.summary = capsule.summary.trim().to_string();
    Ok(capsule)
}

/// One task as the waiting parent reads it.
pub struct TaskView<'a> {
    pub key: &'a str,
    pub agent: &'a str,
    pub status: TaskStatus,
    pub capsule: Option<Capsule>,
    pub error: Option<&'a str>,
}

/// The markdown capsules `agent_await` returns.
pub fn render_results(tasks: &[TaskView<'_>], timed_out: bool) -> String {
    let mut out = String::new();
    if timed_out {
        out.push_str("The wait timed out; these tasks are not all done yet.\n\n");
    }
    for t in tasks {
        let _ = writeln!(out, "## Task {} (Agent {}): {}", t.key, t.agent, t.status);
        if let Some(e) = t.error {
            let _ = writeln!(out, "Error: {e}");
        }
        if let Some(c) = &t.capsule {
            let _ = writeln!(out, "Summary: {}", c.summary);
            for (label, items) in [
                ("Findings", &c.findings),
                ("Warnings", &c.warnings),
                ("Suggested next actions", &c.suggested_next_actions),
                ("Questions for you", &c.questions_for_caller),
            ] {
                if !items.is_empty() {
                    let _ = writeln!(
                        out,
                        "{label}:\n{}",
                        items.iter().map(|i| format!("- {i}")).collect::<Vec<_>>().join("\n")
                    );
                }
            }
            if let Some(conf) = &c.confidence {
                let _ = writeln!(out, "Confidence: {}", conf.as_str());
            }
        }
        out.push('\n');
    }
    out.push_str("Use these results in your work; commit and finish when the reply is ready.");
    out
}

/// The result file kept in the workspace for people and later agents.
pub fn render_result_file(key: &str, agent: &str, capsule: &Capsule) -> String {
    let view =
        TaskView { key, agent, status: capsule.status.task_status(), capsule: Some(capsule.clone()), error: None };
    let text = render_results(&[view], false);
    text.trim_end_matches("Use these results in your work; commit and finish when the reply is ready.")
        .trim_end()
        .to_string()
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delegate_needs_an_objective_and_sane_budgets() {
        assert!(parse_delegate(&json!({"agentId": "c", "task": {}})).is_err());
        let err = parse_delegate(&json!({"agentId": "c", "task": {"objective": "x"}, "budget": {"maxRounds": 0}}))
            .unwrap_err();
        assert!(err.message.contains("at least 1"));
        let ok = parse_delegate(
            &json!({"agentId": "c", "task": {"objective": "x"}, "budget": {"maxRounds": 2, "deadlineMs": 500}}),
        )
        .unwrap();
        assert_eq!(ok.budget.max_rounds, Some(2));
        assert_eq!(ok.budget.deadline_ms, Some(500));
    }

    #[test]
    fn a_wait_is_over_when_its_mode_says_so() {
        use TaskStatus::*;
        assert!(await_ready(AwaitMode::NextCompleted, &[(Running, false), (Completed, false)]));
        assert!(!await_ready(AwaitMode::NextCompleted, &[(Running, false), (Queued, false)]));
        assert!(!await_ready(AwaitMode::AllCompleted, &[(Failed, false), (Running, false)]));
        assert!(await_ready(AwaitMode::AllCompleted, &[(Failed, true), (Cancelled, false), (Completed, false)]));
        assert!(await_ready(AwaitMode::StatusOnly, &[(Running, false)]));
    }

    #[test]
    fn next_completed_does_not_return_a_result_already_read() {
        use TaskStatus::*;
        assert!(!await_ready(AwaitMode::NextCompleted, &[(Completed, true), (Running, false)]));
        assert!(await_ready(AwaitMode::NextCompleted, &[(Completed, true), (Failed, false)]));
        assert!(
            await_ready(AwaitMode::NextCompleted, &[(Completed, true), (Completed, true)]),
            "nothing left to wait for"
        );
    }

    #[test]
    fn a_parked_wait_is_over_for_the_tasks_it_names() {
        use TaskStatus::*;
        let children = [
            Awaited { key: "checker", status: Completed, read: false },
            Awaited { key: "checker-002", status: Running, read: false },
        ];
        assert!(wait_is_over(AwaitMode::NextCompleted, None, &children));
        assert!(!wait_is_over(AwaitMode::AllCompleted, None, &children));
        assert!(wait_is_over(AwaitMode::AllCompleted, Some(&["checker".into()]), &children));
        assert!(!wait_is_over(AwaitMode::NextCompleted, Some(&["checker-002".into()]), &children));
        assert!(
            wait_is_over(AwaitMode::AllCompleted, Some(&["checker-002".into(), "nobody".into()]), &children),
            "an unknown handle ends the wait"
        );
    }

    #[test]
    fn await_arguments_default_and_clamp() {
        let a = parse_await(&json!({})).unwrap();
        assert_eq!((a.keys, a.mode, a.timeout_ms), (None, AwaitMode::NextCompleted, DEFAULT_AWAIT_MS));
        let a = parse_await(&json!({"taskIds": ["checker"], "mode": "allCompleted", "timeoutMs": 9_999_999})).unwrap();
        assert_eq!(a.timeout_ms, MAX_AWAIT_MS);
        assert!(parse_await(&json!({"mode": "soon"})).is_err());
    }

    #[test]
    fn task_return_needs_a_summary_and_known_values() {
        assert!(parse_return(&json!({})).is_err());
        assert!(parse_return(&json!({"summary": "x", "status": "meh"})).is_err());
        let c = parse_return(&json!({"summary": " Checked. ", "findings": ["ok"], "confidence": "high"})).unwrap();
        assert_eq!(c.summary, "Checked.");
        assert_eq!(c.status, ReturnStatus::Completed);
    }

    #[test]
    fn results_read_as_markdown_capsules_with_handles_not_ids() {
        let capsule = parse_return(
            &json!({"summary": "Dates are right.", "findings": ["Friday is correct"], "confidence": "high"}),
        )
        .unwrap();
        let views = [TaskView {
            key: "checker",
            agent: "checker",
            status: TaskStatus::Completed,
            capsule: Some(capsule),
            error: None,
        }];
        let text = render_results(&views, false);
        assert!(text.starts_with(
            "## Task checker (Agent checker): completed\nSummary: Dates are right.\nFindings:\n- Friday is correct"
        ));
        assert!(text.contains("Confidence: high"));
    }

    #[test]
    fn the_child_brief_is_markdown_from_the_childs_view() {
        let task = json!({"objective": "Check the dates.", "context": "A school notice.", "tone": "brief"});
        let text = render_task_brief(task.as_object().unwrap(), "editor");
        assert!(text.starts_with("# Delegated Task\n\nAgent editor asked you"));
        assert!(text.contains("## Objective\nCheck the dates."));
        assert!(text.contains("## Additional Instructions\n- tone: brief"));
        assert!(text.contains("call task_return"));
    }
}
