//! A scripted stage's first turn, folded into its claim's transaction: the
//! claim, the turn and the handoff it asks for commit once.

use baton_domain::tool_name::ToolName;
use baton_store::invocations::steps;
use baton_store::invocations::{self, Invocation};
use baton_store::journal::Event;
use baton_store::Transaction;
use tracing::field::Empty;

use super::turn::{stores_with_its_calls, Asking};
use super::{record_usage, Claimed, Exit, Preloaded, Runner};
use crate::providers::{ModelTurn, ToolCall};
use crate::step::{name_calls, sanitize, Scope};
use crate::transcript::{self, Position};
use crate::Error;

/// A claim its statement deferred ([`baton_store::claims::claim_start`]):
/// whose it is and its lease, for when it must be written.
#[derive(Debug, Clone, Copy)]
pub struct DeferredClaim<'a> {
    pub owner: &'a str,
    pub lease: std::time::Duration,
}

/// A turn that, if its closing call succeeds, ends the invocation in one
/// write that also records its claim: its one call is `agent_handoff`, or
/// (for a run's owner) it writes and commits the reply and closes with
/// `workspace_finish`, calls that read nothing of the invocation's row.
fn ends_in_one_write(turn: &ModelTurn, inv: &Invocation) -> bool {
    let name = |call: &ToolCall| ToolName::parse(&call.name);
    match turn.tool_calls.as_slice() {
        [call] if name(call) == Some(ToolName::AgentHandoff) => true,
        [before @ .., last] if inv.kind.is_foreground() && name(last) == Some(ToolName::WorkspaceFinish) => {
            before.iter().all(|call| matches!(name(call), Some(ToolName::WorkspaceWrite | ToolName::WorkspaceCommit)))
        }
        _ => false,
    }
}

impl Runner {
    /// Writes a first claim's prompt step and start events (`started`) in
    /// the claim's transaction and, with `take_turn`, takes the first model
    /// turn there too when it needs no I/O (a script's turn), with the tool
    /// calls it asks for: a scripted stage then claims, runs and hands off
    /// in one commit, its writes pipelined. Whatever it does not fold (no
    /// instant turn, a spent budget, a turn the loop must judge) it leaves
    /// to the loop: `Ok((preloaded, None))` with no step added after the
    /// prompt. An error leaves the transaction to be rolled back.
    ///
    /// With `deferred` (the claim's statement locked the invocation but did
    /// not write the claim), a turn that ends in one write (a handoff, or a
    /// run's owner finishing) leaves the claim to that write (or writes it
    /// after, if the closing call was refused); any other turn, or none,
    /// writes it first: the claim is written once.
    pub async fn start_claimed(
        &self,
        tx: &Transaction<'_>,
        inv: &Invocation,
        preloaded: Preloaded,
        started: Vec<Event>,
        take_turn: bool,
        deferred: Option<DeferredClaim<'_>>,
    ) -> Result<(Preloaded, Option<Exit>), Error> {
        // The transcript keeps the prompt's profiles version, not its text.
        let stored = preloaded.first.stored.clone();
        let mut c = self.claimed(inv, preloaded);
        let turn = self.instant_turn(&c).filter(|_| take_turn);
        if let Some(claim) = deferred.filter(|_| !turn.as_ref().is_some_and(|t| ends_in_one_write(t, inv))) {
            invocations::record_claim(tx, inv.id, inv.claim_epoch, claim.owner, claim.lease).await?;
        }
        let Some(turn) = turn else {
            let rows = [(stored.seq, stored.kind.as_str(), &stored.payload)];
            steps::append_with_events(tx, inv.id, &rows, inv.run_id, &started).await?;
            return Ok((c.into_preloaded(), None));
        };
        let payload = sanitize(serde_json::to_value(&turn).map_err(|e| Error::Contract(e.to_string()))?);
        let calls: Vec<ToolCall> =
            serde_json::from_value(payload["toolCalls"].clone()).map_err(|e| Error::Contract(e.to_string()))?;
        // The start events go first in the journal, with the turn's own; the
        // prompt goes in the transcript row of the turn and its results.
        let step = self.turn_step(&c, &turn, payload, calls.len()).log_before(started).leading(&stored);
        let (cr, this, calls, t) = (&c, self, &calls, &turn);
        let written = step
            .within(tx, |Scope { tx, w, .. }| Box::pin(async move { this.run_calls(tx, cr, calls, t, w).await }))
            .await?;
        let exit = written.exit.clone();
        // A turn that ends in one write left the claim to it; a handoff
        // refused or a finish refused after all leaves it to be written now.
        let ended = matches!(exit, Some(Exit::Transferred | Exit::Finished));
        if let Some(claim) = deferred.filter(|_| ends_in_one_write(&turn, inv) && !ended) {
            invocations::record_claim(tx, inv.id, inv.claim_epoch, claim.owner, claim.lease).await?;
        }
        c.absorb(written);
        Ok((c.into_preloaded(), exit))
    }

    /// The invocation's first turn, if the model gives it without I/O and
    /// the turn is one the fold can store with its calls (it asks for tools
    /// and closes last); the budgets are checked first, as the loop would.
    fn instant_turn(&self, c: &Claimed<'_>) -> Option<ModelTurn> {
        let turns = transcript::model_turns(&c.steps);
        if transcript::position(&c.steps) != Position::NeedsModel
            || c.budget.check().is_some()
            || self.spent(c, turns).is_some()
        {
            return None;
        }
        let provider = self.providers.for_binding(&c.profile.model).ok()?;
        let asking = Asking::of(c);
        let request = asking.request(c, turns);
        let started = std::time::Instant::now();
        let mut turn = provider.instant(&request)?.ok()?;
        if !stores_with_its_calls(&turn) {
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
