//! Step transactions: each step of an invocation commits in one fenced
//! transaction ([`StepTx`]), run again whole when Postgres aborts it; what it
//! wrote joins the in-memory transcript only once committed. Also: how a
//! loop ended ([`Exit`]), and making what a model produced safe to store.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use baton_store::invocations::steps::{self, Step};
use baton_store::invocations::{self, Invocation};
use baton_store::journal::Event;
use baton_store::{Pool, Transaction};
use serde_json::Value;

use crate::providers::ModelTurn;
use crate::Error;

/// How an invocation's loop ended on this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Transferred,
    Finished,
    Failed(String),
    /// The claim was taken over by another worker; nothing more was written.
    Fenced,
    /// Shutdown was requested; the invocation waits at a persisted step.
    Stopped,
    /// The agent waits for delegated tasks; it is parked and the worker is free.
    Parked,
}

/// What a step transaction wrote; it joins the in-memory transcript only
/// once the transaction has committed. Its steps and journal events are
/// gathered as the step runs and written at its end, one transcript row and
/// one journal row ([`Written::store`]).
pub(crate) struct Written {
    next_seq: i32,
    pub(crate) steps: Vec<Step>,
    /// Journal events to write with the steps, in order.
    events: Vec<Event>,
    pub(crate) tokens: i64,
    /// Model calls this step made (its turn's), spent with its tool calls.
    pub(crate) model_calls: i32,
    pub(crate) exit: Option<Exit>,
    /// The run's budget and spend after this step's spending was added.
    pub(crate) budget: Option<crate::budget::Tracker>,
    /// What its tool calls wrote to the workspace, for the calls after them.
    pub(crate) workspace: crate::tools::StepWorkspace,
}

impl Written {
    pub(crate) fn new(next_seq: usize) -> Self {
        Self {
            next_seq: next_seq as i32,
            steps: vec![],
            events: vec![],
            tokens: 0,
            model_calls: 0,
            exit: None,
            budget: None,
            workspace: Default::default(),
        }
    }

    /// What the step has spent so far: its turn's tokens and model calls,
    /// and a call for each tool result it wrote.
    pub(crate) fn spending(&self) -> baton_store::runs::budgets::Spending {
        let tool_calls = self.steps.iter().filter(|s| s.kind == crate::transcript::TOOL_RESULT).count() as i32;
        baton_store::runs::budgets::Spending { tokens: self.tokens, model_calls: self.model_calls, tool_calls }
    }

    /// A transcript step, written when the step transaction ends.
    pub(crate) fn append(&mut self, kind: &str, payload: Value) {
        self.steps.push(Step { seq: self.next_seq, kind: kind.to_string(), payload });
        self.next_seq += 1;
    }

    /// Journal events, written after those already given when the step
    /// transaction ends.
    pub(crate) fn log(&mut self, events: impl IntoIterator<Item = Event>) {
        self.events.extend(events);
    }

    /// Writes what was gathered: `lead` (a step the transcript in memory
    /// already holds, such as a claim's prompt, written by this transaction
    /// too) and the steps, as one transcript row; the events as one journal
    /// row, in one statement. Nothing in the step's transaction reads them
    /// after: the statement goes out with the commit, which it then costs
    /// no round trip of its own.
    async fn store(&mut self, tx: &Transaction<'_>, inv: &Invocation, lead: Option<&Step>) -> Result<(), Error> {
        let rows: Vec<(i32, &str, &Value)> =
            lead.into_iter().chain(&self.steps).map(|s| (s.seq, s.kind.as_str(), &s.payload)).collect();
        steps::append_with_events_at_commit(tx, inv.id, &rows, inv.run_id, &self.events).await?;
        self.events.clear();
        Ok(())
    }
}

/// One step of a claimed invocation, written once: begin, fence the claim
/// with the step's own writes (transcript steps, journal events, tokens)
/// pipelined beside the fence, run the body, commit. A transaction the
/// database aborted (deadlock, serialization) is run again whole, body
/// included, so the step stays atomic.
///
/// A body is a closure returning a boxed future:
/// `step.run(|Scope { tx, w, .. }| Box::pin(async move { …; Ok(()) }))`.
/// (An `async` closure reads better, but the compiler cannot yet prove its
/// future `Send` for every lifetime, which a spawned worker loop needs.)
pub(crate) struct StepTx<'a> {
    pool: &'a Pool,
    inv: &'a Invocation,
    epoch: i64,
    next_seq: usize,
    /// Set by [`StepTx::after`]: the step writes transcript steps from there.
    writes_steps: bool,
    steps: Vec<(&'static str, Value)>,
    events: Vec<Event>,
    tokens: i64,
    /// A step already in the transcript in memory that this transaction
    /// writes too, before its own (a claim's prompt).
    lead: Option<&'a Step>,
}

impl<'a> StepTx<'a> {
    pub(crate) fn new(pool: &'a Pool, inv: &'a Invocation, epoch: i64) -> Self {
        Self {
            pool,
            inv,
            epoch,
            next_seq: 0,
            writes_steps: false,
            steps: vec![],
            events: vec![],
            tokens: 0,
            lead: None,
        }
    }

    /// Writes `step` (the transcript's step just before this one's) in the
    /// same transcript row as this step's own.
    pub(crate) fn leading(mut self, step: &'a Step) -> Self {
        self.lead = Some(step);
        self
    }

    /// The transcript holds `len` steps: the next one written gets seq `len`.
    pub(crate) fn after(mut self, len: usize) -> Self {
        self.next_seq = len;
        self.writes_steps = true;
        self
    }

    /// A transcript step written with the fence.
    pub(crate) fn append(mut self, kind: &'static str, payload: Value) -> Self {
        self.steps.push((kind, payload));
        self
    }

    /// Journal events written with the fence, before any the body writes.
    pub(crate) fn log(mut self, events: impl IntoIterator<Item = Event>) -> Self {
        self.events.extend(events);
        self
    }

    /// Journal events written with the fence, before those already given.
    pub(crate) fn log_before(mut self, events: Vec<Event>) -> Self {
        self.events.splice(0..0, events);
        self
    }

    /// Tokens a model turn used, counted on the invocation with the step's
    /// spending (see [`Written::spending`]).
    pub(crate) fn count_tokens(mut self, tokens: i64) -> Self {
        self.tokens = tokens;
        self
    }

    /// Commits the fence and the step's own writes, with no body.
    pub(crate) async fn commit(&self) -> Result<Written, Error> {
        self.run(|_| Box::pin(async { Ok(()) })).await
    }

    /// Runs `body` in the fenced transaction, after the step's own writes.
    pub(crate) async fn run<F>(&self, body: F) -> Result<Written, Error>
    where
        F: for<'t> Fn(Scope<'t, 'a>) -> Body<'t>,
    {
        retry(|| self.attempt(&body)).await
    }

    async fn attempt<F>(&self, body: &F) -> Result<Written, Error>
    where
        F: for<'t> Fn(Scope<'t, 'a>) -> Body<'t>,
    {
        let mut client = self.pool.get().await?;
        let tx = baton_store::begin(&mut client).await?;
        let w = self.write(&tx, true, body).await?;
        baton_store::commit(tx).await?;
        Ok(w)
    }

    /// Runs the step in a transaction that claimed the invocation (its row
    /// lock is the fence): no fence of its own, no commit, no retry (the
    /// caller's transaction is run again whole if it must be).
    pub(crate) async fn within<F>(&self, tx: &Transaction<'_>, body: F) -> Result<Written, Error>
    where
        F: for<'t> Fn(Scope<'t, 'a>) -> Body<'t>,
    {
        self.write(tx, false, &body).await
    }

    /// The fence (if `fence`) and the tokens counted, then the body, then
    /// the steps and events gathered, written at once.
    async fn write<F>(&self, tx: &Transaction<'_>, fence: bool, body: &F) -> Result<Written, Error>
    where
        F: for<'t> Fn(Scope<'t, 'a>) -> Body<'t>,
    {
        let mut w = Written::new(self.next_seq);
        for (kind, payload) in &self.steps {
            w.append(kind, payload.clone());
        }
        w.log(self.events.iter().cloned());
        let id = self.inv.id;
        let first_seq = self.lead.map_or(self.next_seq as i32, |lead| lead.seq);
        let unstored_from = self.writes_steps.then_some(first_seq);
        if fence {
            invocations::fence(tx, id, self.epoch, unstored_from).await?;
        }
        // Counted on the invocation with the step's other spending, in the
        // one write that records it (`budget::record`, or the handoff's).
        w.tokens = self.tokens;
        body(Scope { tx, w: &mut w, _borrows: PhantomData }).await?;
        w.store(tx, self.inv, self.lead).await?;
        Ok(w)
    }
}

/// What a step's body works with: the fenced transaction and what the step
/// has written so far.
pub(crate) struct Scope<'t, 'a> {
    pub(crate) tx: &'t Transaction<'t>,
    pub(crate) w: &'t mut Written,
    /// Says that the step's borrows (`'a`) outlive the body's (`'t`), so a
    /// body may use what its caller borrowed.
    _borrows: PhantomData<&'t &'a ()>,
}

/// A step body's future.
pub(crate) type Body<'t> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 't>>;

/// Runs a transaction again when the database aborted it for a deadlock or
/// a serialization failure (the whole step is re-run, so it stays atomic).
async fn retry<T, F, Fut>(mut attempt: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut tries = 0u64;
    loop {
        tries += 1;
        match attempt().await {
            Err(e) if e.is_retryable() && tries < 5 => {
                tracing::debug!(error = %e, tries, "retrying a step transaction");
                tokio::time::sleep(std::time::Duration::from_millis(5 * tries + (tries * 7919) % 11)).await;
            }
            other => return other,
        }
    }
}

/// A test-only pause point: with `BATON_TEST_PAUSE_IN_STEP_MS` set, a debug
/// build sleeps inside each step transaction, after the fence took the
/// invocation's row lock, so a test can freeze a worker (`SIGSTOP`) while it
/// holds that lock. Release builds compile it out; unset, it does nothing.
pub(crate) async fn test_pause_in_step() {
    #[cfg(debug_assertions)]
    {
        static PAUSE: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let pause =
            PAUSE.get_or_init(|| std::env::var("BATON_TEST_PAUSE_IN_STEP_MS").ok().and_then(|v| v.parse().ok()));
        if let Some(ms) = *pause {
            tracing::warn!(ms, "test pause point: holding a step transaction open");
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }
}

/// Postgres text cannot hold NUL; a model may still produce one, in a value
/// or in a key.
pub(crate) fn sanitize(value: Value) -> Value {
    baton_domain::wire::without_nul(value)
}

/// Tokens a turn used, whatever the provider calls them.
pub(crate) fn tokens_of(turn: &ModelTurn) -> i64 {
    turn.usage.as_ref().map_or(0, crate::providers::Usage::tokens)
}

/// Every call of a turn gets an id unique in the invocation: some endpoints
/// omit ids or repeat them, and results, resumption and the commit ledger
/// are keyed by them.
pub(crate) fn name_calls(turn: &mut ModelTurn, turn_index: usize) {
    let mut seen = std::collections::HashSet::new();
    for (i, call) in turn.tool_calls.iter_mut().enumerate() {
        if call.id.trim().is_empty() || !seen.insert(call.id.clone()) {
            call.id = format!("t{}_{}", turn_index + 1, i + 1);
            seen.insert(call.id.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolCall;
    use serde_json::json;

    #[test]
    fn missing_and_repeated_call_ids_are_renamed_uniquely() {
        let call = |id: &str| ToolCall { id: id.into(), name: "workspace_list".into(), arguments: json!({}) };
        let mut turn = ModelTurn { tool_calls: vec![call("a"), call(""), call("a"), call("b")], ..Default::default() };
        name_calls(&mut turn, 2);
        let ids: Vec<&str> = turn.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "t3_2", "t3_3", "b"]);
    }

    #[test]
    fn nul_characters_leave_keys_and_values() {
        let clean = sanitize(json!({"a\u{0}": ["x\u{0}y"]}));
        assert!(!clean.to_string().contains('\u{0}') && !clean.to_string().contains("\\u0000"), "{clean}");
        assert_eq!(clean["a\u{FFFD}"][0], "x\u{FFFD}y");
    }
}
