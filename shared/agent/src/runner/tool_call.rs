//! One tool call of a stored turn: its effect, its result and its events in
//! one fenced transaction.

use baton_domain::ToolError;
use baton_store::Transaction;

use super::{Claimed, Exit, Runner};
use crate::budget;
use crate::providers::ToolCall;
use crate::step::{test_pause_in_step, Scope, Written};
use crate::tools::{dispatch, Effect, ToolCtx, ToolOutcome};
use crate::transcript;
use crate::Error;

impl Runner {
    pub(super) async fn call_tool(&self, c: &mut Claimed<'_>, call: &ToolCall) -> Result<Option<Exit>, Error> {
        let written = self.run_tool(c, call).await?;
        let exit = written.exit.clone();
        c.absorb(written);
        Ok(exit)
    }

    /// One tool call of a stored turn (after a resume, or a turn stored on
    /// its own): its effect, its result and its events in one fenced
    /// transaction (run again whole if the database asks for a retry).
    async fn run_tool(&self, c: &Claimed<'_>, call: &ToolCall) -> Result<Written, Error> {
        self.step(c)
            .run(|Scope { tx, w, .. }| {
                Box::pin(async move {
                    test_pause_in_step().await;
                    let effect = self.run_call(tx, c, call, w).await?;
                    w.exit = exit_of(effect);
                    // A handoff or a run's end counted its spend in the write that ended the invocation.
                    if !counts_spend(effect) {
                        w.budget = budget::record(tx, c.inv.id, &w.spending()).await?;
                    }
                    Ok(())
                })
            })
            .await
    }

    /// Runs one call inside the caller's fenced transaction and records its
    /// result (a parked call has no result yet: it runs again when woken).
    pub(super) async fn run_call(
        &self,
        tx: &Transaction<'_>,
        c: &Claimed<'_>,
        call: &ToolCall,
        w: &mut Written,
    ) -> Result<Effect, Error> {
        let may_have_children = transcript::asked_to_delegate(&c.steps) || transcript::asked_to_delegate(&w.steps);
        let ctx = ToolCtx {
            invocation: c.inv,
            profile: &c.profile,
            surface: &c.surface,
            call,
            may_have_children,
            as_claimed: c.as_claimed.as_ref(),
            spending: w.spending(),
            workspace: &w.workspace,
        };
        let made = transcript::tool_calls_made(&c.steps) + transcript::tool_calls_made(&w.steps);
        let outcome = if made >= c.limits.max_tool_calls {
            let error = ToolError::new(
                baton_domain::tools::error::codes::TOOL_BUDGET_EXHAUSTED,
                "You have used all your tool calls. Commit and finish, or hand off now.",
            );
            ToolOutcome::failed(&ctx, error)
        } else {
            let span = tracing::info_span!("tool", tool = %call.name, is_error = tracing::field::Empty);
            let outcome = tracing::Instrument::instrument(dispatch(tx, &ctx), span.clone()).await?;
            span.record("is_error", outcome.is_error);
            outcome
        };
        if outcome.effect == Effect::Parked {
            w.log(outcome.events);
            return Ok(outcome.effect);
        }
        crate::metrics::tool_call(&call.name, outcome.is_error);
        let payload = transcript::tool_result_payload(call, &outcome.content, outcome.is_error, &outcome.structured);
        w.append(transcript::TOOL_RESULT, payload);
        w.log(outcome.events);
        Ok(outcome.effect)
    }
}

/// Whether the tool's own write counted the step's spend (it ended the
/// invocation: a handoff, the run's end), so the step records none.
pub(super) fn counts_spend(effect: Effect) -> bool {
    matches!(effect, Effect::Transferred | Effect::Completed)
}

pub(super) fn exit_of(effect: Effect) -> Option<Exit> {
    match effect {
        Effect::Continue => None,
        Effect::Transferred => Some(Exit::Transferred),
        Effect::Finished | Effect::Completed => Some(Exit::Finished),
        Effect::Parked => Some(Exit::Parked),
    }
}
