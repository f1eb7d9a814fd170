//! Run budgets: the limits a run got at intake, and what it has spent.
//! Spending is counted on the spending invocation's own row, in the step
//! transaction that spends (a model turn, a tool call), and summed over the
//! run's invocations, children included: exact across workers, it survives
//! any crash, and it takes no lock beyond the one the step's fence holds
//! (a counter on the run's row would make every invocation of a busy run
//! queue on that row, and take it after the others' rows).

use std::time::Duration;

use crate::GenericClient;
use baton_domain::policy::budget::{RunBudget, Spent};
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

/// What one step transaction spent: its model turn's tokens, its model
/// calls and its tool calls, added to the invocation's row in the one write
/// that records them ([`spend`], or the handoff's [`hand_over`](crate::invocations::hand_over)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spending {
    pub tokens: i64,
    pub model_calls: i32,
    pub tool_calls: i32,
}

/// Copies the budget onto a run (at intake, in the transaction that creates it).
pub async fn assign(c: &impl GenericClient, run_id: Uuid, budget: &RunBudget) -> Result<()> {
    let value = serde_json::to_value(budget)?;
    sql::execute(c, "UPDATE runs SET budget = $2 WHERE id = $1", &[&run_id, &value]).await?;
    Ok(())
}

/// The run's figures: its budget, the sums over its invocations, and how
/// long it has run on the database's clock (to its end, once it ended),
/// less the time it spent waiting for its user's answers: a question may
/// wait a day, and the user's time is not the agents'.
pub(crate) const FIGURES: &str = concat!("r.budget, s.tokens, s.model_calls, s.tool_calls, ", elapsed!());

/// [`FIGURES`] for a new owner `i` (a root or handoff stage never claimed,
/// so no child of its own yet): what its run spent before it, carried on
/// its row, and its own.
pub(crate) const NEW_OWNER_FIGURES: &str = concat!(
    "r.budget, (i.run_spent_tokens + i.tokens_used)::bigint, (i.run_spent_model_calls + i.model_calls)::bigint,
     (i.run_spent_tool_calls + i.tool_calls)::bigint, ",
    elapsed!()
);

/// How long the run `r` has worked: to now or its end, less its questions' time.
macro_rules! elapsed {
    () => {
        "greatest(extract(epoch FROM coalesce(r.finished_at, now()) - r.created_at)
              - coalesce((SELECT sum(extract(epoch FROM least(coalesce(q.closed_at, now()), coalesce(r.finished_at, now())) - q.created_at))
                            FROM questions q WHERE q.run_id = r.id), 0), 0)::float8"
    };
}
use elapsed;

/// The run's spend as seen from owner `o` (a root or handoff stage; a
/// child's is its parent): what the run spent before `o` (carried on its
/// row, V34), `o`'s own, and its delegated children's. A LATERAL subquery
/// named `s` (`tokens`, `model_calls`, `tool_calls`); `{owner}` is the SQL
/// of the owner's id. Its cost does not grow with the run's length.
pub(crate) fn owner_spend(owner: &str) -> String {
    format!(
        "LATERAL (SELECT (o.run_spent_tokens + o.tokens_used + coalesce(sum(ch.tokens_used), 0))::bigint AS tokens,
                         (o.run_spent_model_calls + o.model_calls + coalesce(sum(ch.model_calls), 0))::bigint AS model_calls,
                         (o.run_spent_tool_calls + o.tool_calls + coalesce(sum(ch.tool_calls), 0))::bigint AS tool_calls
                    FROM invocations o
                    LEFT JOIN invocations ch ON ch.parent_invocation_id = o.id AND ch.kind = 'child'
                   WHERE o.id = {owner}
                   GROUP BY o.id) s"
    )
}

/// Adds a step's spending to its invocation (whose row the step's fence has
/// locked) and returns the run's new totals.
pub async fn spend(c: &impl GenericClient, invocation_id: Uuid, spending: &Spending) -> Result<RunSpend> {
    // The outer query reads the invocations as they were before the CTE's
    // update: the run's spend is read as before, plus this step's.
    let owner_spend = owner_spend("CASE WHEN me.kind = 'child' THEN me.parent_invocation_id ELSE me.id END");
    let sql = format!(
        "WITH me AS (
             UPDATE invocations SET tokens_used = tokens_used + $4, model_calls = model_calls + $2,
                    tool_calls = tool_calls + $3
              WHERE id = $1 RETURNING run_id, kind, parent_invocation_id, id)
         SELECT r.budget, s.tokens + $4, s.model_calls + $2, s.tool_calls + $3, {elapsed}
           FROM me JOIN runs r ON r.id = me.run_id, {owner_spend}",
        elapsed = elapsed!(),
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
        [&invocation_id, &spending.model_calls, &spending.tool_calls, &spending.tokens];
    let row = sql::query_one(c, &sql, &params).await?;
    from_row(&row)
}

/// A run's budget and spend, `None` when the run does not exist.
pub async fn get(c: &impl GenericClient, run_id: Uuid) -> Result<Option<RunSpend>> {
    let sql = format!(
        "SELECT {FIGURES}
           FROM runs r,
                LATERAL (SELECT coalesce(sum(i.tokens_used), 0)::bigint AS tokens,
                                coalesce(sum(i.model_calls), 0)::bigint AS model_calls,
                                coalesce(sum(i.tool_calls), 0)::bigint AS tool_calls
                           FROM invocations i WHERE i.run_id = r.id) s
          WHERE r.id = $1"
    );
    sql::query_opt(c, &sql, &[&run_id]).await?.as_ref().map(from_row).transpose()
}

fn from_row(row: &Row) -> Result<RunSpend> {
    spend_at(row, 0)
}

/// The spend read from [`FIGURES`], starting at column `from`.
pub(crate) fn spend_at(row: &Row, from: usize) -> Result<RunSpend> {
    let budget: Option<serde_json::Value> = row.get(from);
    let budget = budget.map(serde_json::from_value).transpose()?.unwrap_or_default();
    let count = |i: usize| row.get::<_, i64>(from + i).max(0) as u64;
    let elapsed = Duration::from_secs_f64(row.get::<_, f64>(from + 4));
    Ok(RunSpend { budget, spent: Spent { tokens: count(1), model_calls: count(2), tool_calls: count(3), elapsed } })
}
