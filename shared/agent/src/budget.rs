//! Run budgets on the step path. Every step transaction counts what it
//! spent (a model call and its tokens, tool results) on its invocation and
//! reads back the whole run's totals. Each step first checks those totals,
//! and an invocation that finds its run over a limit fails the whole run:
//! every other live invocation of the run, owner or child, is cancelled
//! with it and stops at its next step (its fence).

use std::time::Duration;

use baton_domain::budget::{Exhausted, Limit};
use baton_domain::journal;
use baton_domain::state::{InvocationStatus, TaskStatus};
use baton_store::budgets::{self, RunSpend, Spending};
use baton_store::invocations::{self, Invocation};
use baton_store::journal::{self as events, Event};
use baton_store::{lifecycle, tasks, Pool, Transaction};
use serde_json::json;
use tokio::time::Instant;

use crate::step::{Scope, StepTx, Written};
use crate::transcript;
use crate::Error;

/// A run's budget and spend as last read, and when: the wall clock goes on
/// counting between reads on this worker's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tracker {
    spend: RunSpend,
    read_at: Instant,
}

impl Tracker {
    pub(crate) fn new(spend: RunSpend) -> Self {
        Self { spend, read_at: Instant::now() }
    }

    /// The limit the run has reached, if any.
    pub(crate) fn check(&self) -> Option<Exhausted> {
        let mut spent = self.spend.spent;
        spent.elapsed += self.read_at.elapsed();
        self.spend.budget.check(&spent)
    }

    /// How long the run may still go on before its wall clock runs out.
    pub(crate) fn time_left(&self) -> Duration {
        let elapsed = self.spend.spent.elapsed + self.read_at.elapsed();
        self.spend.budget.wall_clock().saturating_sub(elapsed)
    }

    /// The wall-clock limit, as reached now.
    pub(crate) fn out_of_time(&self) -> Exhausted {
        let max = self.spend.budget.max_wall_clock_secs;
        Exhausted { limit: Limit::WallClock, spent: max.max((self.spend.spent.elapsed + self.read_at.elapsed()).as_secs()), max }
    }
}

/// Counts what a step transaction wrote (`model_calls` is 1 for a step that
/// stored a model turn; its tokens are already on the invocation) and reads
/// back the run's totals. Runs after the step's fence.
pub(crate) async fn record(tx: &Transaction<'_>, invocation: uuid::Uuid, w: &Written, model_calls: i32) -> Result<Option<Tracker>, Error> {
    let tool_calls = w.steps.iter().filter(|s| s.kind == transcript::TOOL_RESULT).count() as i32;
    let spending = Spending { model_calls, tool_calls };
    if spending == Spending::default() {
        return Ok(None);
    }
    Ok(Some(Tracker::new(budgets::spend(tx, invocation, &spending).await?)))
}

/// Fails the run because it reached `exhausted`, in one fenced transaction:
/// the journal records the spend, this invocation and its task fail, and the
/// run fails (its other live invocations and tasks are cancelled, the
/// collector tells the bridge).
pub(crate) async fn stop_run(pool: &Pool, inv: &Invocation, epoch: i64, exhausted: Exhausted) -> Result<crate::Exit, Error> {
    let error = exhausted.error();
    tracing::warn!(run = %inv.run_id, invocation = %inv.id, limit = exhausted.limit.as_str(), "run budget exhausted");
    let (step, error) = (StepTx::new(pool, inv, epoch), &error);
    step.run(|Scope { tx, .. }| {
        Box::pin(async move {
            // A child takes its parent's lock before touching its task, as on every path that ends a child.
            lifecycle::lock_parent(tx, inv).await?;
            let mut figures = match budgets::get(tx, inv.run_id).await? {
                Some(now) => now.budget.figures(&now.spent),
                None => json!({}),
            };
            figures["limit"] = json!(exhausted.limit.as_str());
            let mut evs = vec![Event::new(journal::RUN_BUDGET_EXHAUSTED, Some(inv.id), figures)];
            invocations::finish(tx, inv.id, InvocationStatus::Failed, Some(error)).await?;
            evs.push(Event::new(journal::INVOCATION_FAILED, Some(inv.id), error.clone()));
            if let Some(task) = inv.incoming_task_id {
                if tasks::transition(tx, task, TaskStatus::Failed, Some(error)).await? {
                    evs.push(Event::new(journal::TASK_FAILED, Some(inv.id), json!({"taskId": task})));
                }
            }
            evs.extend(lifecycle::fail_run(tx, inv.run_id, error).await?);
            events::append(tx, inv.run_id, &evs).await?;
            Ok(())
        })
    })
    .await?;
    Ok(crate::Exit::Failed(error["message"].as_str().unwrap_or_default().to_string()))
}
