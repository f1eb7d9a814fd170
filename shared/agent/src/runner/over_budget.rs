//! A run over its budget fails as a whole: every other live invocation of
//! the run, owner or child, is cancelled with it and stops at its next step
//! (its fence).

use baton_domain::policy::budget::Exhausted;
use baton_domain::run::journal::JournalEvent;
use baton_domain::run::state::{InvocationStatus, TaskStatus};
use baton_store::invocations::{self, Invocation};
use baton_store::journal::Event;
use baton_store::{runs::budgets, runs::ending, Pool};
use serde_json::json;

use crate::step::{Exit, Scope, StepTx};
use crate::Error;

/// Fails the run because it reached `exhausted`, in one fenced transaction:
/// the journal records the spend, this invocation and its task fail, and the
/// run fails (its other live invocations and tasks are cancelled, the
/// collector tells the bridge).
pub(crate) async fn stop_run(pool: &Pool, inv: &Invocation, epoch: i64, exhausted: Exhausted) -> Result<Exit, Error> {
    let error = exhausted.error();
    tracing::warn!(limit = exhausted.limit.as_str(), "run budget exhausted");
    let (step, error) = (StepTx::new(pool, inv, epoch), &error);
    step.run(|Scope { tx, w, .. }| {
        Box::pin(async move {
            // A child takes its parent's lock before touching its task, as on every path that ends a child.
            ending::lock_parent(tx, inv).await?;
            let mut figures = match budgets::get(tx, inv.run_id).await? {
                Some(now) => now.budget.figures(&now.spent),
                None => json!({}),
            };
            figures["limit"] = json!(exhausted.limit.as_str());
            let mut evs = vec![Event::new(JournalEvent::RunBudgetExhausted, Some(inv.id), figures)];
            invocations::finish(tx, inv.id, InvocationStatus::Failed, Some(error)).await?;
            evs.push(Event::new(JournalEvent::InvocationFailed, Some(inv.id), error.clone()));
            if let Some(task) = ending::end_incoming(tx, inv, TaskStatus::Failed, Some(error)).await? {
                evs.push(Event::new(JournalEvent::TaskFailed, Some(inv.id), json!({"taskId": task})));
            }
            evs.extend(ending::fail_run(tx, inv.run_id, error).await?);
            w.log(evs);
            Ok(())
        })
    })
    .await?;
    crate::metrics::budget_exhausted(exhausted.limit.as_str());
    Ok(Exit::Failed(error["message"].as_str().unwrap_or_default().to_string()))
}
