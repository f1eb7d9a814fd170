//! `agent_list` and `agent_handoff`.

use baton_domain::profiles::Profile;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{Continuation, InvocationKind};
use baton_domain::tools::args::{self, AgentListArgs, ListPurpose as Purpose};
use baton_domain::tools::handoff::{self, HandoffArgs};
use baton_store::invocations::tasks;
use baton_store::invocations::{NewBrief, NewInvocation};
use baton_store::journal::Event;
use baton_store::{invocations::spawn, profiles, GenericClient};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{tool_event, Effect, ToolCtx, ToolFailure, ToolOutcome, ToolResult};

fn operations(caller: &Profile, target: &Profile) -> Vec<&'static str> {
    let p = &target.delegation;
    let open = p.callable && p.accepts_caller(&caller.id) && target.is_configured();
    let mut ops = vec![];
    if open && caller.delegation.can_delegate && p.allow_as_subagent {
        ops.push("delegate");
    }
    if open && caller.delegation.can_handoff && p.allow_as_handoff_target {
        ops.push("handoff");
    }
    ops
}

pub async fn list(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args: AgentListArgs = args::parse(args)?;
    let purpose = args.purpose.unwrap_or(Purpose::Any);
    let query = args.query.unwrap_or_default().to_lowercase();
    let limit = args.limit.unwrap_or(8).clamp(1, 20) as usize;
    let mut lines = vec![];
    for target in profiles::all(c).await? {
        if target.id == ctx.profile.id {
            continue;
        }
        let ops = operations(ctx.profile, &target);
        let wanted = match purpose {
            Purpose::Any => !ops.is_empty(),
            Purpose::Delegate => ops.contains(&"delegate"),
            Purpose::Handoff => ops.contains(&"handoff"),
        };
        let haystack = format!("{} {} {}", target.id, target.name, target.description).to_lowercase();
        if wanted && haystack.contains(&query) {
            lines.push(format!("- {} ({}): {}", target.id, ops.join(", "), target.description));
        }
    }
    lines.truncate(limit);
    let text = if lines.is_empty() { "No agents are available for that.".to_string() } else { lines.join("\n") };
    Ok(ToolOutcome::ok(ctx, text, json!({"count": lines.len()})))
}

pub async fn handoff(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let inv = ctx.invocation;
    let requested = tool_event(ctx, JournalEvent::HandoffRequested, json!({"agentId": args.get("agentId")}));
    let (args, target) = match decide(c, ctx, args).await {
        Ok(v) => v,
        Err(ToolFailure::Agent(e)) => return Ok(ToolOutcome::failed(ctx, e).with_event(requested)),
        Err(host) => return Err(host),
    };
    // In this order: the current invocation steps down (with what its
    // step spent, in one statement that also counts the target's earlier
    // tasks) before its successor exists (the partial unique index allows
    // one live foreground owner per run). A handoff stage's task has no row
    // (V30): the brief it gives travels as the successor's own column, and
    // the task ends with the invocation that works on it.
    // With eager dispatch the two are one statement (`spawn::handoff`).
    let spending = (ctx.spending.tokens, ctx.spending.model_calls, ctx.spending.tool_calls + 1);
    let (next, task_id) = (Uuid::now_v7(), Uuid::now_v7());
    let new = NewInvocation {
        id: next,
        run_id: inv.run_id,
        parent_invocation_id: Some(inv.id),
        incoming_task_id: Some(task_id),
        profile_id: &target.id,
        kind: InvocationKind::Handoff,
        brief: NewBrief::Handoff(&args.brief),
        budget: None,
        deadline_at: None,
        handoffs: inv.handoffs + 1,
        run_spent: Default::default(), // what the handoff finds
    };
    let (handed, spawned) = spawn::handoff(c, inv, new, spending).await?;
    let key = readable_key(&target.id, handed.earlier_tasks as usize);
    // The task's and the successor's ids are the successor's row's: the
    // `events` view reads them from it (V35), so they are not written here.
    let registered = json!({"continuation": Continuation::TransferControl.as_str(), "workspaceKey": key});
    let mut events = vec![requested];
    events.extend(spawned);
    events.extend([
        Event::new(JournalEvent::TaskRegistered, Some(next), registered),
        // Which agent and call: `agent_handoff_requested` just before says so.
        Event::new(JournalEvent::HandoffAccepted, Some(inv.id), json!({})),
        tool_event(ctx, JournalEvent::ToolCallCompleted, json!({})),
        Event::new(JournalEvent::InvocationTransferred, Some(inv.id), json!({})),
        Event::new(JournalEvent::LoopFinished, Some(inv.id), json!({"exit": "transferred"})),
    ]);
    if inv.incoming_task_id.is_some() && inv.kind == InvocationKind::Handoff {
        events.push(Event::own_task(JournalEvent::TaskCompleted, inv.id));
    }
    Ok(ToolOutcome {
        content: handoff::acceptance_text(&target.id),
        is_error: false,
        structured: json!({"agentId": target.id, "status": "accepted"}),
        effect: Effect::Transferred,
        events,
    })
}

type Decided = (HandoffArgs, Profile);

/// Every policy check, in the seed's order; the reads go out together.
/// Nothing is written here.
async fn decide(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult<Decided> {
    let args = handoff::parse_args(args)?;
    let inv = ctx.invocation;
    // Both read at once; errors in the order the statements ran (a later
    // one fails only because the transaction is aborted).
    let (pending, target) = tokio::join!(
        async {
            match ctx.may_have_children {
                true => Ok::<_, crate::Error>(tasks::pending_children(c, inv.id).await?),
                false => Ok(0),
            }
        },
        async {
            match ctx.as_claimed {
                Some(read) => Ok::<_, crate::Error>(read.profiles.profile(&args.agent_id)?),
                None => Ok(profiles::get(c, &args.agent_id).await?),
            }
        },
    );
    let (pending, target) = (pending?, target?);
    handoff::check_source(ctx.profile, inv.kind)?;
    handoff::check_pending(pending as usize)?;
    handoff::check_depth(inv.handoffs as u32, ctx.profile.delegation.max_handoff_depth)?;
    handoff::check_target(&ctx.profile.id, &args.agent_id, target.as_ref())?;
    Ok((args, target.expect("checked above")))
}

/// The readable handle of a task: the target's id, then `-002`, `-003`, …
pub(crate) async fn workspace_key(c: &impl GenericClient, run_id: Uuid, target: &str) -> Result<String, crate::Error> {
    Ok(readable_key(target, tasks::count_for_target(c, run_id, target).await?))
}

/// The readable handle of a task after `earlier` tasks for the same target.
fn readable_key(target: &str, earlier: usize) -> String {
    if earlier == 0 {
        target.to_string()
    } else {
        format!("{target}-{:03}", earlier + 1)
    }
}
