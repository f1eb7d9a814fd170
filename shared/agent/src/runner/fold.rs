//! A scripted stage's first turn, folded into its claim's transaction: the
//! claim, the turn and the handoff it asks for commit once.

use baton_store::invocations::Invocation;
use baton_store::Transaction;
use serde_json::Value;
use tracing::field::Empty;

use super::{is_closing, record_usage, tool_call::exit_of, Claimed, Exit, Preloaded, Runner};
use crate::budget;
use crate::providers::{ModelRequest, ModelTurn, ToolCall};
use crate::step::{name_calls, sanitize, Scope};
use crate::transcript::{self, Position};
use crate::Error;
use baton_domain::tools;

impl Runner {
    /// Takes a first claim's first model turn inside the claim's own
    /// transaction when it needs no I/O (a script's turn), with the tool
    /// calls it asks for: a scripted stage then claims, runs and hands off
    /// in one commit. Whatever it does not fold (no instant turn, a spent
    /// budget, a turn the loop must judge) it leaves to the loop, with
    /// nothing written: `Ok((preloaded, None))` and no steps added. An
    /// error leaves the transaction to be rolled back.
    pub async fn fold_first_turn(&self, tx: &Transaction<'_>, inv: &Invocation, preloaded: Preloaded) -> Result<(Preloaded, Option<Exit>), Error> {
        let mut c = self.claimed(inv, preloaded);
        let turn = match self.instant_turn(&c) {
            Some(turn) => turn,
            None => return Ok((c.into_preloaded(), None)),
        };
        let payload = sanitize(serde_json::to_value(&turn).map_err(|e| Error::Contract(e.to_string()))?);
        let calls: Vec<ToolCall> = serde_json::from_value(payload["toolCalls"].clone()).map_err(|e| Error::Contract(e.to_string()))?;
        let (step, calls) = (self.turn_step(&c, &turn, payload, calls.len()), &calls);
        let (cr, this) = (&c, self);
        let written = step
            .within(tx, |Scope { tx, w, .. }| {
                Box::pin(async move {
                    for call in calls {
                        let effect = this.run_call(tx, cr, call, w).await?;
                        if let Some(exit) = exit_of(effect) {
                            w.exit = Some(exit);
                            break;
                        }
                    }
                    w.budget = budget::record(tx, cr.inv.id, &w.steps, 1).await?;
                    Ok(())
                })
            })
            .await?;
        let exit = written.exit.clone();
        c.absorb(written);
        Ok((c.into_preloaded(), exit))
    }

    /// The invocation's first turn, if the model gives it without I/O and
    /// the turn is one the fold can store with its calls (it asks for tools
    /// and closes last); the budgets are checked first, as the loop would.
    fn instant_turn(&self, c: &Claimed<'_>) -> Option<ModelTurn> {
        let turns = transcript::model_turns(&c.steps);
        if transcript::position(&c.steps) != Position::NeedsModel || c.budget.check().is_some() || self.spent(c, turns).is_some() {
            return None;
        }
        let provider = self.providers.for_binding(&c.profile.model).ok()?;
        let messages = transcript::messages(&c.steps);
        let specs: Vec<Value> = c.surface.iter().map(|t| tools::spec(*t)).collect();
        let request = ModelRequest {
            profile: &c.profile,
            messages: &messages,
            tools: &specs,
            session_id: format!("{}:{}", c.inv.run_id, c.inv.id),
            turn_index: turns,
            run_id: c.inv.run_id,
            invocation_id: c.inv.id,
        };
        let started = std::time::Instant::now();
        let mut turn = provider.instant(&request)?.ok()?;
        let closing_not_last = turn.tool_calls.iter().rev().skip(1).any(|call| is_closing(&call.name));
        if turn.tool_calls.is_empty() || closing_not_last {
            return None;
        }
        crate::metrics::model_request(&c.profile.id, started.elapsed(), true);
        if let Some(usage) = &turn.usage {
            crate::metrics::model_tokens(&c.profile.id, usage.prompt_tokens, usage.completion_tokens);
        }
        let model_span = tracing::info_span!("model", agent = %c.profile.id, turn = turns, input_tokens = Empty, output_tokens = Empty, tokens = Empty);
        record_usage(&model_span, &turn);
        name_calls(&mut turn, turns);
        Some(turn)
    }
}
