//! `agent_delegate`, `agent_await` and `task_return`: return-mode delegation
//! across the fleet. Children run on any worker; a waiting parent is parked
//! in Postgres and woken through the outbox.

use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{Continuation, InvocationKind, TaskStatus};
use baton_domain::tools::delegation::{self as dg, AwaitArgs, AwaitMode, AwaitSpec, TaskView};
use baton_domain::tools::error::delegation_codes as codes;
use baton_domain::ToolError;
use baton_store::invocations::tasks::{self, NewTask, Task};
use baton_store::invocations::{self, NewBrief, NewInvocation};
use baton_store::journal::Event;
use baton_store::{invocations::spawn, profiles, runs::ending, runs::workspace, GenericClient};
use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{tool_event, Effect, ToolCtx, ToolOutcome, ToolResult};

pub async fn delegate(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = dg::parse_delegate(args)?;
    let inv = ctx.invocation;
    let target = profiles::get(c, &args.agent_id).await?;
    dg::check_delegate(ctx.profile, inv.kind, &args.agent_id, target.as_ref())?;
    let children = tasks::children_of(c, inv.id).await?;
    let open = children.iter().filter(|t| !t.is_terminal()).count();
    dg::check_capacity(children.len(), open)?;
    let target = target.expect("checked above");
    let (child, task_id) = (Uuid::now_v7(), Uuid::now_v7());
    let key = super::agents::workspace_key(c, inv.run_id, &target.id).await?;
    let brief = dg::render_task_brief(&args.task, &ctx.profile.id);
    let deadline =
        args.budget.deadline_ms.map(|ms| Utc::now() + Duration::milliseconds(ms.min(dg::MAX_DEADLINE_MS) as i64));
    let new = NewInvocation {
        id: child,
        run_id: inv.run_id,
        parent_invocation_id: Some(inv.id),
        incoming_task_id: Some(task_id),
        profile_id: &target.id,
        kind: InvocationKind::Child,
        brief: NewBrief::Text(&brief),
        budget: Some(&args.budget),
        deadline_at: deadline,
        handoffs: 0,
        run_spent: Default::default(),
    };
    let body = Value::Object(args.task.clone());
    let task = NewTask {
        id: task_id,
        run_id: inv.run_id,
        parent_invocation_id: inv.id,
        child_invocation_id: child,
        target_profile_id: &target.id,
        workspace_key: &key,
        continuation: Continuation::ReturnToParent,
        task: &body,
        budget: Some(&args.budget),
        created_by_tool_call_id: &ctx.call.id,
    };
    let spawned = spawn::invocation(c, &new, Some(&task)).await?;
    let text = format!(
        "Started task {key} with Agent {}. Carry on with your own work; call agent_await when you need its result.",
        target.id
    );
    let outcome = ToolOutcome::ok(ctx, text, json!({"task": key, "status": TaskStatus::Queued, "agentId": target.id}));
    let started = tool_event(ctx, JournalEvent::DelegateStarted, json!({"agentId": target.id, "taskId": task_id}));
    Ok(spawned.into_iter().rev().fold(outcome, ToolOutcome::with_event).with_event(started))
}

/// The tasks a wait is about: the named handles, or all of the parent's.
pub(crate) fn select<'a>(children: &'a [Task], keys: Option<&[String]>) -> Result<Vec<&'a Task>, ToolError> {
    let Some(keys) = keys else {
        return Ok(children.iter().collect());
    };
    keys.iter()
        .map(|k| {
            children.iter().find(|t| &t.workspace_key == k).ok_or_else(|| {
                ToolError::new(
                    codes::AWAIT_TASK_NOT_FOUND,
                    format!("You have no delegated task `{k}`. Use the handle agent_delegate gave you."),
                )
            })
        })
        .collect()
}

fn progress(selected: &[&Task]) -> Vec<(TaskStatus, bool)> {
    selected.iter().map(|t| (t.status, t.delivered)).collect()
}

pub async fn await_tasks(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let parsed = dg::parse_await(args)?;
    let inv = ctx.invocation;
    let children = tasks::children_of(c, inv.id).await?;
    if children.is_empty() {
        return Err(ToolError::new(
            codes::NO_CHILD_TASKS,
            "You have not delegated any task; there is nothing to wait for.",
        )
        .into());
    }
    let selected = select(&children, parsed.keys.as_deref())?;
    let deadline = deadline_of(inv.await_spec.as_ref(), &ctx.call.id, parsed.timeout_ms);
    let ready = dg::await_ready(parsed.mode, &progress(&selected));
    if ready || Utc::now() >= deadline {
        invocations::clear_await(c, inv.id).await?;
        if parsed.mode != AwaitMode::StatusOnly {
            let read: Vec<Uuid> = selected.iter().filter(|t| t.is_terminal()).map(|t| t.id).collect();
            tasks::mark_delivered(c, &read).await?;
        }
        let views: Vec<TaskView<'_>> = selected.iter().map(|t| view(t)).collect();
        let text = dg::render_results(&views, !ready);
        let event = tool_event(ctx, JournalEvent::AwaitCompleted, json!({"timedOut": !ready}));
        let structured = json!({"timedOut": !ready, "tasks": selected.iter().map(|t| json!({"task": t.workspace_key, "status": t.status})).collect::<Vec<_>>()});
        return Ok(ToolOutcome::ok(ctx, text, structured).with_event(event));
    }
    park(c, ctx, &parsed, deadline).await
}

/// A wait keeps its deadline across wake-ups: it belongs to the tool call.
fn deadline_of(spec: Option<&AwaitSpec>, call_id: &str, timeout_ms: u64) -> DateTime<Utc> {
    spec.filter(|s| s.tool_call_id == call_id)
        .map(|s| s.deadline)
        .unwrap_or_else(|| Utc::now() + Duration::milliseconds(timeout_ms as i64))
}

/// Parks the parent under its row lock (held since the fence): a child that
/// finishes meanwhile waits for this lock, then sees the parent parked and wakes it.
async fn park(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &AwaitArgs, deadline: DateTime<Utc>) -> ToolResult {
    let spec = AwaitSpec { tool_call_id: ctx.call.id.clone(), keys: args.keys.clone(), mode: args.mode, deadline };
    invocations::park(c, ctx.invocation.id, &spec, deadline).await?;
    let events = vec![
        tool_event(ctx, JournalEvent::AwaitStarted, json!({"mode": args.mode, "keys": args.keys})),
        Event::new(JournalEvent::InvocationParked, Some(ctx.invocation.id), json!({"until": deadline.to_rfc3339()})),
    ];
    Ok(ToolOutcome { content: String::new(), is_error: false, structured: Value::Null, effect: Effect::Parked, events })
}

fn view(t: &Task) -> TaskView<'_> {
    TaskView {
        key: &t.workspace_key,
        agent: &t.target_profile_id,
        status: t.status,
        capsule: t.result.clone(),
        error: t.error.as_ref().map(|e| e.message.as_str()),
    }
}

pub async fn task_return(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let capsule = dg::parse_return(args)?;
    let inv = ctx.invocation;
    ending::lock_parent(c, inv).await?;
    let Some(task) = tasks::of_child(c, inv.id).await? else {
        return Err(ToolError::new(codes::TASK_RETURN_DENIED, "Nobody is waiting for a result from you.").into());
    };
    let result = serde_json::to_value(&capsule).map_err(|e| crate::Error::Contract(e.to_string()))?;
    let result_ref = format!("agent-results/{}.json", inv.id);
    let record = json!({"schemaVersion": 1, "status": capsule.status, "summary": capsule.summary, "result": result});
    write_file(c, inv.run_id, &result_ref, &record.to_string()).await?;
    let summary_path = format!("summaries/{}-result.md", task.workspace_key);
    write_file(
        c,
        inv.run_id,
        &summary_path,
        &dg::render_result_file(&task.workspace_key, &task.target_profile_id, &capsule),
    )
    .await?;
    tasks::set_result(c, task.id, &capsule, &result_ref).await?;
    let mut events = vec![
        tool_event(ctx, JournalEvent::TaskReturnRecorded, json!({"status": capsule.status})),
        tool_event(ctx, JournalEvent::ToolCallCompleted, json!({})),
    ];
    let status = capsule.status.task_status();
    let error =
        (status == TaskStatus::Failed).then(|| json!({"code": "agent.task_failed", "message": capsule.summary}));
    events.extend(ending::end_child(c, inv, status, error.as_ref()).await?);
    Ok(ToolOutcome {
        content: "Your result was returned. Your task is complete.".into(),
        is_error: false,
        structured: json!({"returned": true}),
        effect: Effect::Finished,
        events,
    })
}

async fn write_file(c: &impl GenericClient, run: Uuid, path: &str, content: &str) -> Result<(), crate::Error> {
    let sha = baton_domain::tools::workspace::sha256_hex(content);
    workspace::write(c, run, path, (content, &sha), None).await?;
    Ok(())
}
