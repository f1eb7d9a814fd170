//! `ask_user`: an owner asks its user a question through the bridge and
//! waits. The question is stored, the request goes `blocked`, the question
//! is queued for the bridge, and the invocation parks like `agent_await`
//! (nothing held in memory, no tool result yet). When the answer (or the
//! question's timeout) wakes it, the same call runs again and finds its
//! question closed: that is its result.

use baton_domain::protocol::conversation::question::{self, QuestionInput, QuestionState};
use baton_domain::protocol::request::HandoffStatus;
use baton_domain::run::journal::JournalEvent;
use baton_domain::tools::args::AskUserArgs;
use baton_store::journal::Event;
use baton_store::requests::questions::{self, NewQuestion, Question};
use baton_store::requests::{self, Request};
use baton_store::{invocations, requests::bridge, runs, GenericClient};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{tool_event, Effect, ToolCtx, ToolOutcome, ToolResult};

pub async fn ask_user(c: &impl GenericClient, ctx: &ToolCtx<'_>, args: &Value) -> ToolResult {
    let args = AskUserArgs::parse(args)?;
    let inv = ctx.invocation;
    if let Some(asked) = questions::of_call(c, inv.id, &ctx.call.id).await? {
        return resume(c, ctx, asked).await;
    }
    let Some(request) = request_of(c, inv.run_id).await? else {
        return Ok(ToolOutcome::ok(ctx, question::NO_USER_TEXT, json!({"asked": false})));
    };
    let new = NewQuestion {
        id: Uuid::now_v7(),
        handoff_id: &request.id,
        run_id: inv.run_id,
        invocation_id: inv.id,
        tool_call_id: &ctx.call.id,
        question: &args.question,
        options: &args.options,
        timeout: question::timeout(ctx.profile.ask_timeout),
    };
    let asked = questions::insert(c, &new).await?;
    // The contract's order: the bridge hears `blocked`, then the question.
    bridge::status(c, &request, HandoffStatus::Blocked, Some("waiting for the user's answer")).await?;
    let question_id = asked.id.to_string();
    let input = QuestionInput {
        handoff_id: request.wire_id(),
        question_id: &question_id,
        chat_id: request.reply_chat_id.as_deref(),
        source: request.source.as_str(),
        language: request.language,
        question: &asked.question,
        options: &asked.options,
        expires_at: asked.expires_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        at: bridge::timestamp(),
    };
    bridge::question(c, &request, &input).await?;
    let started = tool_event(
        ctx,
        JournalEvent::AskUserStarted,
        json!({"questionId": question_id, "expiresAt": input.expires_at}),
    );
    park(c, ctx, &asked, started).await
}

/// The call runs again after a wake-up: its answer, its timeout, or (woken
/// for something else) another wait.
async fn resume(c: &impl GenericClient, ctx: &ToolCtx<'_>, asked: Question) -> ToolResult {
    let id = json!({"questionId": asked.id});
    match asked.state {
        QuestionState::Answered => {
            let text = question::answered_text(asked.answer.as_deref().unwrap_or_default());
            let event = tool_event(ctx, JournalEvent::AskUserAnswered, id);
            Ok(ToolOutcome::ok(ctx, text, json!({"answered": true})).with_event(event))
        }
        QuestionState::Expired => Ok(timed_out(ctx, id)),
        QuestionState::Open if asked.expired => {
            questions::expire(c, asked.id).await?;
            if let Some(request) = requests::get(c, &asked.handoff_id).await? {
                bridge::status(c, &request, HandoffStatus::Running, Some("the user did not answer in time")).await?;
            }
            Ok(timed_out(ctx, id))
        }
        QuestionState::Open => {
            let event = tool_event(ctx, JournalEvent::AskUserStarted, json!({"questionId": asked.id, "again": true}));
            park(c, ctx, &asked, event).await
        }
    }
}

fn timed_out(ctx: &ToolCtx<'_>, id: Value) -> ToolOutcome {
    let event = tool_event(ctx, JournalEvent::AskUserTimedOut, id);
    ToolOutcome::ok(ctx, question::TIMED_OUT_TEXT, json!({"answered": false, "timedOut": true})).with_event(event)
}

/// Parks the owner under its row lock (held since the fence) until the
/// answer wakes it, or the question expires and the relay's sweep does.
async fn park(c: &impl GenericClient, ctx: &ToolCtx<'_>, asked: &Question, started: Event) -> ToolResult {
    invocations::park_for_answer(c, ctx.invocation.id, asked.expires_at).await?;
    let parked = Event::new(
        JournalEvent::InvocationParked,
        Some(ctx.invocation.id),
        json!({"until": asked.expires_at.to_rfc3339()}),
    );
    Ok(ToolOutcome {
        content: String::new(),
        is_error: false,
        structured: Value::Null,
        effect: Effect::Parked,
        events: vec![started, parked],
    })
}

/// The request a run serves, if a bridge started it.
async fn request_of(c: &impl GenericClient, run_id: Uuid) -> Result<Option<Request>, baton_store::Error> {
    let Some(handoff) = runs::get(c, run_id).await?.and_then(|r| r.handoff_id) else {
        return Ok(None);
    };
    requests::get(c, &handoff).await
}
