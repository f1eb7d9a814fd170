//! The model-visible tools, executed inside the transaction that also
//! stores their result: a tool's effect and the step that records it commit
//! together, so a resumed invocation never applies a call twice. A tool that
//! waits (`agent_await`, `ask_user`) parks its invocation and stores no
//! result; woken, the same call runs again and finds what it waited for.

mod agents;
mod ask;
mod delegation;
mod workspace;

pub use workspace::StepWorkspace;

use baton_domain::profiles::Profile;
use baton_domain::run::journal::JournalEvent;
use baton_domain::tools::error::codes;
use baton_domain::tools::ToolName;
use baton_domain::ToolError;
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::GenericClient;
use serde_json::{json, Value};

use crate::providers::ToolCall;
use crate::Error;

/// Everything a tool may know about its caller.
pub struct ToolCtx<'a> {
    pub invocation: &'a Invocation,
    pub profile: &'a Profile,
    pub surface: &'a [ToolName],
    pub call: &'a ToolCall,
    /// Whether the invocation may have delegated tasks (a turn of its
    /// transcript asked to delegate); `false` spares reading them.
    pub may_have_children: bool,
    /// What the invocation's claim read, when it was this worker's first
    /// claim: the tools take it from here instead of reading it again.
    pub as_claimed: Option<&'a AsClaimed>,
    /// What the step running this call has spent before it (its model turn,
    /// the calls before this one): a tool that ends the invocation counts it
    /// in the same write, and the step then records no spend of its own.
    pub spending: baton_store::runs::budgets::Spending,
    /// What the step's transaction wrote to the workspace through the
    /// workspace tools.
    pub workspace: &'a StepWorkspace,
}

/// What a first claim's statement read that tools need too: the profiles
/// file at the version the claim saw.
#[derive(Clone)]
pub struct AsClaimed {
    pub profiles: std::sync::Arc<baton_store::profiles::Snapshot>,
}

/// What a tool call changes for the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Continue,
    /// The agent handed off: this invocation is transferred.
    Transferred,
    /// The agent finished: its task (a child).
    Finished,
    /// The final owner finished: the run is complete, and the write that
    /// ended the invocation counted the step's spend (as a handoff's does).
    Completed,
    /// The agent waits for delegated tasks: park it and free the worker.
    Parked,
}

/// A tool's result: `content` is what the model reads, `structured` the audit.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
    pub structured: Value,
    pub effect: Effect,
    pub events: Vec<Event>,
}

impl ToolOutcome {
    pub(crate) fn ok(ctx: &ToolCtx<'_>, content: impl Into<String>, structured: Value) -> Self {
        let mut outcome =
            Self { content: content.into(), is_error: false, structured, effect: Effect::Continue, events: vec![] };
        outcome.events.push(tool_event(ctx, JournalEvent::ToolCallCompleted, json!({})));
        outcome
    }

    pub(crate) fn failed(ctx: &ToolCtx<'_>, error: ToolError) -> Self {
        let event =
            tool_event(ctx, JournalEvent::ToolCallFailed, json!({"code": error.code, "message": error.message}));
        Self {
            content: error.message.clone(),
            is_error: true,
            structured: error.structured(),
            effect: Effect::Continue,
            events: vec![event],
        }
    }

    pub(crate) fn with_event(mut self, event: Event) -> Self {
        self.events.insert(0, event);
        self
    }
}

pub(crate) fn tool_event(ctx: &ToolCtx<'_>, kind: JournalEvent, mut payload: Value) -> Event {
    payload["tool"] = ctx.call.name.clone().into();
    payload["toolCallId"] = ctx.call.id.clone().into();
    Event::new(kind, Some(ctx.invocation.id), payload)
}

/// Runs one tool call. The agent's own mistake is an `isError` outcome; an
/// `Err` is a broken host contract that fails the invocation.
pub async fn dispatch(c: &impl GenericClient, ctx: &ToolCtx<'_>) -> Result<ToolOutcome, Error> {
    // A tool name the model made up is its own mistake to fix, not a broken
    // host: it reads which tools it has and carries on.
    let Some(tool) = ToolName::parse(&ctx.call.name) else {
        let names: Vec<&str> = ctx.surface.iter().map(|t| t.as_str()).collect();
        let error = ToolError::new(
            codes::TOOL_POLICY_DENIED,
            format!("There is no tool `{}`. Your tools are: {}.", ctx.call.name, names.join(", ")),
        );
        return Ok(ToolOutcome::failed(ctx, error));
    };
    if !ctx.surface.contains(&tool) {
        let names: Vec<&str> = ctx.surface.iter().map(|t| t.as_str()).collect();
        let code = if tool == ToolName::AskUser { codes::ASK_DENIED } else { codes::TOOL_POLICY_DENIED };
        let error = ToolError::new(
            code,
            format!("You cannot use {} here. Your tools are: {}.", tool.as_str(), names.join(", ")),
        );
        return Ok(ToolOutcome::failed(ctx, error));
    }
    let args = &ctx.call.arguments;
    let ran = match tool {
        ToolName::AgentList => agents::list(c, ctx, args).await,
        ToolName::AgentHandoff => agents::handoff(c, ctx, args).await,
        ToolName::WorkspaceList => workspace::list(c, ctx, args).await,
        ToolName::WorkspaceRead => workspace::read(c, ctx, args).await,
        ToolName::WorkspaceWrite => workspace::write(c, ctx, args).await,
        ToolName::WorkspacePatch => workspace::patch(c, ctx, args).await,
        ToolName::WorkspaceCommit => workspace::commit(c, ctx, args).await,
        // Boxed, these: a run's end (and a question, a delegation) is a large
        // state machine that every other tool call would otherwise carry.
        ToolName::WorkspaceFinish => Box::pin(workspace::finish(c, ctx, args)).await,
        ToolName::AgentDelegate => Box::pin(delegation::delegate(c, ctx, args)).await,
        ToolName::AgentAwait => Box::pin(delegation::await_tasks(c, ctx, args)).await,
        ToolName::TaskReturn => Box::pin(delegation::task_return(c, ctx, args)).await,
        ToolName::AskUser => Box::pin(ask::ask_user(c, ctx, args)).await,
    };
    match ran {
        Ok(outcome) => Ok(outcome),
        Err(ToolFailure::Agent(error)) => Ok(ToolOutcome::failed(ctx, error)),
        Err(ToolFailure::Host(error)) => Err(error),
    }
}

/// Why a tool call did not succeed, so that a tool's body reads as one
/// chain of `?`: `let args = parse(args)?; let row = store::get(c, id).await?;`.
#[derive(Debug)]
pub(crate) enum ToolFailure {
    /// The agent's own mistake (bad arguments, a policy refusal, a missing
    /// file): the model reads it as an `isError` result and carries on.
    Agent(ToolError),
    /// A broken host contract: the invocation fails.
    Host(Error),
}

impl From<ToolError> for ToolFailure {
    fn from(e: ToolError) -> Self {
        ToolFailure::Agent(e)
    }
}

impl From<Error> for ToolFailure {
    fn from(e: Error) -> Self {
        ToolFailure::Host(e)
    }
}

impl From<baton_store::Error> for ToolFailure {
    fn from(e: baton_store::Error) -> Self {
        ToolFailure::Host(e.into())
    }
}

/// What tool implementations return.
pub(crate) type ToolResult<T = ToolOutcome> = Result<T, ToolFailure>;
