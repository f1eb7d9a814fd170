//! Run budgets: the limits a run got at intake and what it has spent, on
//! the run's own row. Spending is added in the step transaction that
//! spends (a model turn, a tool call), so the count is exact across every
//! invocation of the run, children included, and survives any crash.

use std::time::Duration;

use baton_domain::budget::{BudgetsConfig, RunBudget, Spent};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{sql, Result};

/// A run's budget and spend as the database saw them at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSpend {
    pub budget: RunBudget,
    /// `elapsed` is measured on the database's clock (run creation to now,
    /// or to its end), so workers with skewed clocks agree.
    pub spent: Spent,
}

/// What one step transaction spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spending {
    pub tokens: i64,
    pub model_calls: i64,
    pub tool_calls: i64,
}

const BUDGETS: &str = "budgets";

/// The `[budgets]` section loaded with the profiles file (empty when none was).
pub async fn config(c: &impl GenericClient) -> Result<BudgetsConfig> {
    match crate::settings::get(c, BUDGETS).await? {
        Some(value) => Ok(serde_json::from_value(value)?),
        None => Ok(Default::default()),
    }
}

pub async fn put_config(c: &impl GenericClient, config: &BudgetsConfig) -> Result<()> {
    crate::settings::put(c, BUDGETS, &serde_json::to_value(config)?).await
}

/// Copies the budget onto a run (at intake, in the transaction that creates it).
pub async fn assign(c: &impl GenericClient, run_id: Uuid, budget: &RunBudget) -> Result<()> {
    let value = serde_json::to_value(budget)?;
    sql::execute(c, "UPDATE runs SET budget = $2 WHERE id = $1", &[&run_id, &value]).await?;
    Ok(())
}

const FIGURES: &str = "budget, spent_tokens, spent_model_calls, spent_tool_calls, \
     greatest(extract(epoch FROM coalesce(finished_at, now()) - created_at), 0)::float8";

/// Adds a step's spending to its run and returns the run's new totals. The
/// row lock this takes is held only until the step commits; callers do it
/// last in the step, after any other row the step locks.
pub async fn spend(c: &impl GenericClient, run_id: Uuid, spending: &Spending) -> Result<RunSpend> {
    let sql = format!(
        "UPDATE runs SET spent_tokens = spent_tokens + $2, spent_model_calls = spent_model_calls + $3,
                         spent_tool_calls = spent_tool_calls + $4
          WHERE id = $1 RETURNING {FIGURES}"
    );
    let row = sql::query_one(c, &sql, &[&run_id, &spending.tokens, &spending.model_calls, &spending.tool_calls]).await?;
    from_row(&row)
}

/// A run's budget and spend, `None` when the run does not exist.
pub async fn get(c: &impl GenericClient, run_id: Uuid) -> Result<Option<RunSpend>> {
    let sql = format!("SELECT {FIGURES} FROM runs WHERE id = $1");
    sql::query_opt(c, &sql, &[&run_id]).await?.as_ref().map(from_row).transpose()
}

fn from_row(row: &Row) -> Result<RunSpend> {
    let budget: Option<serde_json::Value> = row.get(0);
    let budget = budget.map(serde_json::from_value).transpose()?.unwrap_or_default();
    let count = |i: usize| row.get::<_, i64>(i).max(0) as u64;
    let elapsed = Duration::from_secs_f64(row.get::<_, f64>(4));
    Ok(RunSpend { budget, spent: Spent { tokens: count(1), model_calls: count(2), tool_calls: count(3), elapsed } })
}
