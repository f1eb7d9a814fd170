//! The agent loop. Each iteration reads where the transcript stands and takes
//! exactly one step: assemble the prompt, call the model, or run one tool
//! call. Every step commits in its own fenced transaction, so a crash between
//! steps loses nothing and repeats nothing.
//!
//! `external.rs` holds an external agent's start, interruption and the
//! patience for its outcome; `tool_call.rs` runs one tool call; `held.rs`
//! keeps a finished turn through a database outage until it is stored.

mod claimed_turn;
mod external;
mod held;
mod over_budget;
mod tool_call;
mod turn;

use std::sync::Arc;

use baton_domain::profiles::Profile;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::InvocationKind;
use baton_domain::tools::delegation::Budget;
use baton_domain::tools::ToolName;
use baton_store::invocations::steps::{self, Step};
use baton_store::invocations::Invocation;
use baton_store::journal::Event;
use baton_store::{profiles, runs::budgets, runs::ending, Pool, Transaction};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::Instrument;

use crate::opening::{prompt_step, surface};
use crate::providers::{ModelTurn, ProviderError, Providers, ToolCall};
use crate::step::{name_calls, sanitize, test_pause_in_step, tokens_of, Scope, StepTx, Written};
use crate::tools::AsClaimed;
use crate::transcript::{self, Position};
use crate::{budget, Error};
pub use claimed_turn::DeferredClaim;
use external::patiently;
pub use held::Holding;
use held::{Held, Keeping};
use tool_call::{counts_spend, exit_of};
use turn::{closes_before_its_last_call, stores_with_its_calls, Asking};

pub use crate::step::Exit;

/// What a first claim already read in its own transaction (the profile,
/// its skills, the prompt it wrote, the run's spend): the loop starts from
/// it instead of reading it all again.
pub struct Preloaded {
    first: crate::opening::Opening,
    budget: budget::Tracker,
    /// Steps after the prompt that the claim's transaction also wrote (a
    /// folded first turn), and the tokens the invocation has used since.
    later: Vec<Step>,
    tokens: Option<i64>,
    as_claimed: Option<AsClaimed>,
}

impl Preloaded {
    pub fn new(first: crate::opening::Opening, spend: budgets::RunSpend) -> Self {
        Self { first, budget: budget::Tracker::new(spend), later: vec![], tokens: None, as_claimed: None }
    }

    /// With what the claim read that the tools need too.
    pub fn as_claimed(mut self, read: AsClaimed) -> Self {
        self.as_claimed = Some(read);
        self
    }
}

#[derive(Debug, Clone, Copy)]
pub struct LoopCaps {
    pub max_rounds: usize,
    pub max_tool_calls: usize,
    /// Plain-text answers tolerated before the invocation fails.
    pub max_nudges: usize,
}

impl Default for LoopCaps {
    fn default() -> Self {
        Self { max_rounds: 80, max_tool_calls: 80, max_nudges: 1 }
    }
}

#[derive(Clone)]
pub struct Runner {
    pool: Pool,
    providers: Arc<dyn Providers>,
    limits: LoopCaps,
    persist_patience: std::time::Duration,
    holding: Holding,
}

/// One claimed invocation on this worker.
struct Claimed<'a> {
    inv: &'a Invocation,
    epoch: i64,
    profile: Profile,
    /// The invocation's own profile's skills (never its caller's).
    skills: Vec<baton_domain::profiles::Skill>,
    surface: Vec<ToolName>,
    steps: Vec<Step>,
    limits: LoopCaps,
    tokens: i64,
    /// The run's budget and what the whole run has spent, as of this
    /// invocation's last step.
    budget: budget::Tracker,
    as_claimed: Option<AsClaimed>,
}

impl Claimed<'_> {
    /// Back to what the loop starts from, with what was written since the prompt.
    fn into_preloaded(self) -> Preloaded {
        let mut steps = self.steps.into_iter();
        let prompt = steps.next().expect("a claimed invocation's transcript starts with its prompt");
        let stored = prompt.clone();
        let first =
            crate::opening::Opening { events: vec![], prompt, stored, profile: self.profile, skills: self.skills };
        Preloaded {
            first,
            budget: self.budget,
            later: steps.collect(),
            tokens: Some(self.tokens),
            as_claimed: self.as_claimed,
        }
    }

    /// Adds what a committed step transaction wrote.
    fn absorb(&mut self, written: Written) {
        self.steps.extend(written.steps);
        self.tokens += written.tokens;
        if let Some(budget) = written.budget {
            self.budget = budget;
        }
    }
}

/// A delegated task's budget narrows the runtime's limits.
fn narrow(limits: LoopCaps, budget: Option<&Budget>) -> (LoopCaps, Option<u64>) {
    let Some(budget) = budget else {
        return (limits, None);
    };
    let cap = |limit: Option<u64>, max: usize| limit.map_or(max, |b| (b as usize).min(max));
    let narrowed = LoopCaps {
        max_rounds: cap(budget.max_rounds, limits.max_rounds),
        max_tool_calls: cap(budget.max_tool_calls, limits.max_tool_calls),
        ..limits
    };
    (narrowed, budget.max_tokens)
}

/// How long a finished model turn is held and its storing retried while the
/// database is away, unless [`Runner::with_persist_patience`] says otherwise
/// (`BATON_PERSIST_PATIENCE_MS`): as long as a failover takes (Patroni's
/// leader TTL, a cloud provider's multi-zone failover of 60–120 s), with
/// margin. The claim's fence decides when the database is back.
pub const PERSIST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(180);

/// What agents and users read when the host broke; the journal keeps the details.
const HOST_ERROR_TEXT: &str = "the agent stopped because of an internal error";
/// What a bridge reads when the agent's model endpoint failed after its retries.
const MODEL_UNAVAILABLE_TEXT: &str = "the agent's model did not answer; try again later";

const NUDGE_TEXT: &str = "Your last answer was plain text, which nobody receives. Use your tools to continue: \
commit and finish the work, or hand it to another agent.";

impl Runner {
    pub fn new(pool: Pool, providers: Arc<dyn Providers>, limits: LoopCaps) -> Self {
        Self { pool, providers, limits, persist_patience: PERSIST_PATIENCE, holding: Holding::default() }
    }

    /// How long a finished turn is retried while the database is away.
    pub fn with_persist_patience(self, persist_patience: std::time::Duration) -> Self {
        Self { persist_patience, ..self }
    }

    /// Where and when a held turn spills to disk.
    pub fn with_holding(self, holding: Holding) -> Self {
        Self { holding, ..self }
    }

    /// Runs (or resumes) a claimed invocation until it hands off, finishes,
    /// fails, loses its claim, or `stop` is requested. An external agent
    /// already running is let finish. A transient database failure is
    /// returned as an error: the claim still holds, and the caller runs it
    /// again once the database is back (see `Error::is_transient`).
    pub async fn run(&self, inv: &Invocation, stop: &CancellationToken) -> Result<Exit, Error> {
        self.run_until(inv, stop, &CancellationToken::new()).await
    }

    /// [`Runner::run`], and an external agent still running when `kill`
    /// fires (the shutdown deadline, a lost claim) is killed with its whole
    /// process group, then failed or handed back as its profile's
    /// `on_interrupt` says.
    pub async fn run_until(
        &self,
        inv: &Invocation,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<Exit, Error> {
        self.run_from(inv, None, stop, kill).await
    }

    /// [`Runner::run_until`], starting from what the claim read (`None`:
    /// read it now, as a resumed invocation does).
    pub async fn run_from(
        &self,
        inv: &Invocation,
        preloaded: Option<Preloaded>,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<Exit, Error> {
        match self.drive(inv, preloaded, stop, kill).await {
            Ok(exit) => Ok(exit),
            Err(e) if e.is_fenced() => Ok(Exit::Fenced),
            Err(e) if e.is_transient() => Err(e),
            // An external agent that was stopped: the bridge reads why in words.
            // Failing is kept up through a database outage: given up, the
            // next attempt would find the agent's start marker and run it again.
            Err(Error::Provider(ProviderError::Stopped { code, message, detail })) => {
                tracing::warn!(error = %detail, "external agent stopped");
                patiently(kill, || self.fail(inv, code, &message, Some(&detail))).await?;
                Ok(Exit::Failed(detail))
            }
            Err(e) => {
                let detail = match &e {
                    // Its own words, without the error's "model call failed:" once more.
                    Error::Provider(ProviderError::Failed(words)) => words.clone(),
                    e => e.to_string(),
                };
                tracing::error!(error = %detail, "invocation failed");
                let (code, text) = match &e {
                    // An operator can act on this one: say it in words.
                    Error::Store(unreadable @ baton_store::Error::Unreadable { .. }) => (
                        ErrorCode::ProfileUnreadable,
                        format!("the agent `{}` could not go on: {unreadable}", inv.profile_id),
                    ),
                    // The endpoint's own words stay in the run's cause, for operators.
                    Error::Provider(ProviderError::Failed(_)) => {
                        (ErrorCode::ModelUnavailable, MODEL_UNAVAILABLE_TEXT.to_string())
                    }
                    _ => (ErrorCode::HostError, HOST_ERROR_TEXT.to_string()),
                };
                patiently(kill, || self.fail(inv, code.as_str(), &text, Some(&detail))).await?;
                Ok(Exit::Failed(detail))
            }
        }
    }

    async fn drive(
        &self,
        inv: &Invocation,
        preloaded: Option<Preloaded>,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<Exit, Error> {
        let mut claimed = match preloaded {
            Some(preloaded) => self.claimed(inv, preloaded),
            None => self.load(inv).await?,
        };
        loop {
            if stop.is_cancelled() {
                return Ok(Exit::Stopped);
            }
            if let Some(exhausted) = claimed.budget.check() {
                return Box::pin(over_budget::stop_run(&self.pool, inv, claimed.epoch, exhausted)).await;
            }
            let exit = match transcript::position(&claimed.steps) {
                Position::Fresh => self.assemble(&mut claimed).await.map(|_| None)?,
                Position::PendingCall(call) => self.call_tool(&mut claimed, &call).await?,
                Position::NeedsModel => self.model_turn(&mut claimed, stop, kill).await?,
            };
            if let Some(exit) = exit {
                return Ok(exit);
            }
        }
    }

    async fn load<'a>(&self, inv: &'a Invocation) -> Result<Claimed<'a>, Error> {
        let client = self.pool.get().await?;
        // Pipelined: the queries go out before any answer comes back.
        let (profile, steps, spend) = tokio::try_join!(
            profiles::get(&client, &inv.profile_id),
            steps::load(&client, inv.id),
            budgets::get(&client, inv.run_id)
        )?;
        let profile =
            profile.ok_or_else(|| Error::Contract(format!("profile `{}` no longer exists", inv.profile_id)))?;
        let budget = budget::Tracker::new(spend.ok_or_else(|| Error::Contract("the run no longer exists".into()))?);
        let surface = surface(&profile, inv.kind);
        let (limits, _) = narrow(self.limits, inv.budget.as_ref());
        let skills = profiles::skills(&client, &profile.skills).await?;
        Ok(Claimed {
            inv,
            epoch: inv.claim_epoch,
            profile,
            skills,
            surface,
            steps,
            limits,
            tokens: inv.tokens_used,
            budget,
            as_claimed: None,
        })
    }

    /// A first claim's invocation, from what its claim read.
    fn claimed<'a>(&self, inv: &'a Invocation, preloaded: Preloaded) -> Claimed<'a> {
        let Preloaded { first, budget, later, tokens, as_claimed } = preloaded;
        let surface = surface(&first.profile, inv.kind);
        let (limits, _) = narrow(self.limits, inv.budget.as_ref());
        let (profile, skills) = (first.profile, first.skills);
        let steps = std::iter::once(first.prompt).chain(later).collect();
        let tokens = tokens.unwrap_or(inv.tokens_used);
        Claimed { inv, epoch: inv.claim_epoch, profile, skills, surface, steps, limits, tokens, budget, as_claimed }
    }

    /// The claimed invocation's next step transaction.
    fn step<'a>(&'a self, c: &'a Claimed<'_>) -> StepTx<'a> {
        StepTx::new(&self.pool, c.inv, c.epoch).after(c.steps.len())
    }

    async fn assemble(&self, c: &mut Claimed<'_>) -> Result<(), Error> {
        let (prompt, evs) = prompt_step(c.inv, &c.profile, &c.skills);
        let written = self.step(c).append(transcript::PROMPT, prompt).log(evs).commit().await?;
        c.absorb(written);
        Ok(())
    }

    async fn model_turn(
        &self,
        c: &mut Claimed<'_>,
        stop: &CancellationToken,
        kill: &CancellationToken,
    ) -> Result<Option<Exit>, Error> {
        let turns = transcript::model_turns(&c.steps);
        if let Some(message) = self.spent(c, turns) {
            let code = if c.inv.kind == InvocationKind::Child {
                "agent.child_budget_exhausted"
            } else {
                ErrorCode::RoundBudgetExhausted.as_str()
            };
            self.fail(c.inv, code, &message, None).await?;
            return Ok(Some(Exit::Failed(message)));
        }
        let on_interrupt = c.profile.model.on_interrupt();
        if let Some(on_interrupt) = on_interrupt {
            if let Some(exit) = self.before_external(c, on_interrupt).await? {
                return Ok(Some(exit));
            }
        }
        let provider = self.providers.for_binding(&c.profile.model)?;
        let asking = Asking::of(c);
        let request = asking.request(c, turns);
        // No transaction or row lock is held across the model call. A model
        // call is dropped on shutdown (nothing was stored, so it is simply
        // asked again); an external agent is let finish until `kill` (the
        // shutdown deadline, a lost claim): dropping its run kills its group.
        // The run's wall clock cuts a model call, not an external agent (it
        // has its own `timeout_secs`, and cutting it would waste work whose
        // side effects may be done): a run over its time stops at the step
        // after the agent's result.
        let model_span = tracing::info_span!("model", agent = %c.profile.id, turn = turns, input_tokens = Empty, output_tokens = Empty, tokens = Empty);
        let mut turn = if let Some(on_interrupt) = on_interrupt {
            tokio::select! {
                biased;
                turn = timed(&c.profile.id, provider.complete(&request)).instrument(model_span.clone()) => turn?,
                _ = kill.cancelled() => return self.external_interrupted(c, on_interrupt).await.map(Some),
            }
        } else {
            tokio::select! {
                biased;
                turn = timed(&c.profile.id, provider.complete(&request)).instrument(model_span.clone()) => turn?,
                _ = stop.cancelled() => return Ok(Some(Exit::Stopped)),
                _ = tokio::time::sleep(c.budget.time_left()) => {
                    return Box::pin(over_budget::stop_run(&self.pool, c.inv, c.epoch, c.budget.out_of_time())).await.map(Some);
                }
            }
        };
        record_usage(&model_span, &turn);
        name_calls(&mut turn, turns);
        // The turn and the tool calls it asks for commit together: one
        // transaction instead of one per step. If a call breaks the host, the
        // turn is stored alone first, so the model is never asked twice. While
        // the database is away the turn is held (see `held`): a model's for
        // the persist patience, an external agent's until the claim is lost
        // or the shutdown deadline passes (given up, the next attempt would
        // find its start marker and run it a second time).
        let kind = if on_interrupt.is_some() { "-external" } else { "" };
        let held = Held::new(turn, format!("{}-{}-{}{kind}", c.inv.id, c.epoch, c.steps.len()));
        let keeping = Keeping {
            holding: &self.holding,
            patience: on_interrupt.is_none().then_some(self.persist_patience),
            kill,
            what: match on_interrupt {
                Some(_) => "the database is unavailable; keeping an external agent's outcome until it is stored",
                None => "storing a finished turn; retrying",
            },
        };
        let claimed: &Claimed<'_> = c;
        let written = keeping.store(held, |turn| async move { self.store_finished(claimed, &turn).await }).await?;
        let exit = written.exit.clone();
        c.absorb(written);
        Ok(exit)
    }

    /// Stores a finished turn with its calls, or alone if a call broke the host.
    async fn store_finished(&self, c: &Claimed<'_>, turn: &ModelTurn) -> Result<Written, Error> {
        match self.turn_and_calls(c, turn).await {
            Err(e) if !e.is_fenced() && !e.is_transient() => {
                tracing::warn!(error = %e, "a tool call failed; storing the turn on its own");
                self.store_turn(c, turn).await
            }
            other => other,
        }
    }

    /// Why the invocation may not call its model again, if it may not.
    fn spent(&self, c: &Claimed<'_>, turns: usize) -> Option<String> {
        let (_, max_tokens) = narrow(self.limits, c.inv.budget.as_ref());
        if turns >= c.limits.max_rounds {
            return Some(format!("the agent used all {} of its model turns without finishing", c.limits.max_rounds));
        }
        if let Some(max) = max_tokens.filter(|m| c.tokens >= *m as i64) {
            return Some(format!("the agent used {} tokens, over its budget of {max}", c.tokens));
        }
        match c.inv.deadline_at {
            Some(deadline) if chrono::Utc::now() >= deadline => Some("the task ran past its deadline".to_string()),
            _ => None,
        }
    }

    async fn turn_and_calls(&self, c: &Claimed<'_>, turn: &ModelTurn) -> Result<Written, Error> {
        if !stores_with_its_calls(turn) {
            return self.store_turn(c, turn).await;
        }
        let payload = sanitize(serde_json::to_value(turn).map_err(|e| Error::Contract(e.to_string()))?);
        let calls: Vec<ToolCall> =
            serde_json::from_value(payload["toolCalls"].clone()).map_err(|e| Error::Contract(e.to_string()))?;
        let (step, calls) = (self.turn_step(c, turn, payload, calls.len()), &calls);
        step.run(|Scope { tx, w, .. }| {
            Box::pin(async move {
                test_pause_in_step().await;
                store_coding(tx, turn).await?;
                self.run_calls(tx, c, calls, turn, w).await
            })
        })
        .await
    }

    /// A stored turn's calls, in order, in the turn's transaction, until one
    /// ends the loop; then the turn's spend.
    async fn run_calls(
        &self,
        tx: &Transaction<'_>,
        c: &Claimed<'_>,
        calls: &[ToolCall],
        turn: &ModelTurn,
        w: &mut Written,
    ) -> Result<(), Error> {
        w.model_calls = model_calls(turn);
        let mut counted = false;
        for call in calls {
            let effect = self.run_call(tx, c, call, w).await?;
            if let Some(exit) = exit_of(effect) {
                w.exit = Some(exit);
                counted = counts_spend(effect);
                break;
            }
        }
        // A handoff, or the run's end, counted the step's spend in the
        // write that ended the invocation.
        if !counted {
            w.budget = budget::record(tx, c.inv.id, &w.spending()).await?;
        }
        Ok(())
    }

    async fn store_turn(&self, c: &Claimed<'_>, turn: &ModelTurn) -> Result<Written, Error> {
        let closing_not_last = closes_before_its_last_call(turn);
        let plain = turn.tool_calls.is_empty();
        let payload = sanitize(serde_json::to_value(turn).map_err(|e| Error::Contract(e.to_string()))?);
        let step = self.turn_step(c, turn, payload, turn.tool_calls.len());
        step.run(|Scope { tx, w, .. }| {
            Box::pin(async move {
                let mut evs = vec![];
                if closing_not_last {
                    let message = "the agent called a tool after a closing tool in the same turn";
                    evs.extend(
                        Box::pin(ending::fail_invocation(tx, c.inv, ErrorCode::ToolAfterFinish.as_str(), message))
                            .await?,
                    );
                    w.exit = Some(Exit::Failed(message.into()));
                } else if plain && transcript::nudges(&c.steps) < self.limits.max_nudges {
                    w.append(transcript::NUDGE, json!({"content": NUDGE_TEXT}));
                } else if plain {
                    let message = "the agent stopped answering in plain text without finishing or handing off";
                    evs.extend(
                        Box::pin(ending::fail_invocation(tx, c.inv, ErrorCode::NoClosingTool.as_str(), message))
                            .await?,
                    );
                    w.exit = Some(Exit::Failed(message.into()));
                }
                w.log(evs);
                store_coding(tx, turn).await?;
                w.model_calls = model_calls(turn);
                w.budget = budget::record(tx, c.inv.id, &w.spending()).await?;
                Ok(())
            })
        })
        .await
    }

    /// A model turn's step: the turn, its tokens and its journal event,
    /// written with the fence.
    fn turn_step<'a>(&'a self, c: &'a Claimed<'_>, turn: &ModelTurn, payload: Value, calls: usize) -> StepTx<'a> {
        let tokens = tokens_of(turn);
        // A scripted turn has no attempts or latency: the journal leaves them out.
        let mut stored = json!({"toolCalls": calls, "tokens": tokens});
        if let Some(attempts) = turn.attempts {
            stored["attempts"] = attempts.into();
        }
        if let Some(latency) = turn.latency_ms {
            stored["latencyMs"] = latency.into();
        }
        let event = Event::new(JournalEvent::ModelResponseStored, Some(c.inv.id), stored);
        self.step(c).append(transcript::MODEL_TURN, payload).log([event]).count_tokens(tokens)
    }

    /// Fails the invocation in one fenced transaction: an owner's run fails
    /// with it, a child's task fails and its parent reads why. `detail` (the
    /// host's own words) goes to the journal only; agents and users read `message`.
    pub async fn fail(&self, inv: &Invocation, code: &str, message: &str, detail: Option<&str>) -> Result<(), Error> {
        let step = StepTx::new(&self.pool, inv, inv.claim_epoch);
        let failed = step
            .run(|Scope { tx, w, .. }| {
                Box::pin(async move {
                    let mut evs = Box::pin(ending::fail_invocation_because(tx, inv, code, message, detail)).await?;
                    if let Some(detail) = detail {
                        evs.insert(
                            0,
                            Event::new(JournalEvent::HostError, Some(inv.id), json!({"code": code, "detail": detail})),
                        );
                    }
                    w.log(evs);
                    Ok(())
                })
            })
            .await;
        match failed {
            // The claim was taken over: its new holder carries on, nothing is written.
            Err(e) if e.is_fenced() => Ok(()),
            other => other.map(drop),
        }
    }
}

/// The model calls a stored turn counts against the run's budget.
fn model_calls(turn: &ModelTurn) -> i32 {
    turn.model_calls.map_or(1, |n| n as i32)
}

/// What a coding agent changed, and the session it leaves, in the turn's transaction.
async fn store_coding(tx: &Transaction<'_>, turn: &ModelTurn) -> Result<(), Error> {
    let Some(outcome) = &turn.coding else { return Ok(()) };
    if let Some(changes) = &outcome.changes {
        baton_store::coding::put_changes(tx, changes).await?;
    }
    if let Some((key, session)) = &outcome.session {
        baton_store::coding::put_session(tx, key, session).await?;
    }
    Ok(())
}

/// A model call, its duration, outcome and tokens recorded; the turn
/// carries its duration to its journal event.
async fn timed(
    profile: &str,
    call: impl std::future::Future<Output = Result<ModelTurn, ProviderError>>,
) -> Result<ModelTurn, ProviderError> {
    let started = std::time::Instant::now();
    let mut result = call.await;
    let took = started.elapsed();
    crate::metrics::model_request(profile, took, result.is_ok());
    if let Ok(turn) = result.as_mut() {
        turn.latency_ms = Some(took.as_millis() as u64);
    }
    if let Some(usage) = result.as_ref().ok().and_then(|turn| turn.usage.as_ref()) {
        crate::metrics::model_tokens(profile, usage.prompt_tokens, usage.completion_tokens);
    }
    result
}

/// A model call's token counts, as attributes of its span.
fn record_usage(span: &tracing::Span, turn: &ModelTurn) {
    if let Some(usage) = &turn.usage {
        span.record("input_tokens", usage.prompt_tokens);
        span.record("output_tokens", usage.completion_tokens);
    }
    span.record("tokens", tokens_of(turn));
}
