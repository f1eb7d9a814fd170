//! Run budgets on the step path. Every step transaction counts what it
//! spent (a model call and its tokens, tool results) on its invocation and
//! reads back the whole run's totals. Each step first checks those totals;
//! an invocation that finds its run over a limit fails the whole run
//! (`runner::over_budget`).

use std::time::Duration;

use baton_domain::policy::budget::{Exhausted, Limit};
use baton_store::runs::budgets::{self, RunSpend, Spending};
use baton_store::Transaction;
use tokio::time::Instant;

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

    /// What the run may still spend, for a coding agent's gateway.
    pub(crate) fn allowance(&self) -> crate::providers::Allowance {
        let (budget, spent) = (&self.spend.budget, &self.spend.spent);
        crate::providers::Allowance {
            calls_left: Some(budget.max_model_calls.saturating_sub(spent.model_calls)),
            tokens_left: Some(budget.max_tokens.saturating_sub(spent.tokens) as i64),
        }
    }

    /// How long the run may still go on before its wall clock runs out.
    pub(crate) fn time_left(&self) -> Duration {
        let elapsed = self.spend.spent.elapsed + self.read_at.elapsed();
        self.spend.budget.wall_clock().saturating_sub(elapsed)
    }

    /// The wall-clock limit, as reached now.
    pub(crate) fn out_of_time(&self) -> Exhausted {
        let max = self.spend.budget.max_wall_clock_secs;
        Exhausted {
            limit: Limit::WallClock,
            spent: max.max((self.spend.spent.elapsed + self.read_at.elapsed()).as_secs()),
            max,
        }
    }
}

/// Counts what a step transaction spent (its `Written::spending`:
/// its model turn's calls, one per tool result; its tokens are already on
/// the invocation) and reads back the run's totals. Runs after the step's fence.
pub(crate) async fn record(
    tx: &Transaction<'_>,
    invocation: uuid::Uuid,
    spending: &Spending,
) -> Result<Option<Tracker>, Error> {
    if *spending == Spending::default() {
        return Ok(None);
    }
    Ok(Some(Tracker::new(budgets::spend(tx, invocation, spending).await?)))
}
