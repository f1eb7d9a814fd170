//! A claim that starts an invocation reads, in its own statement, all a
//! first step needs: kept apart from [`crate::invocations`] and
//! [`crate::runs`], which it reads from both.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::protocol::request::HandoffStatus;
use baton_domain::run::state::{InvocationKind, RunStatus, TaskStatus};
use uuid::Uuid;

use crate::after_commit::Known;
use crate::invocations::{self, ClaimFacts, Invocation, CREATED, PARKED, RUNNING};
use crate::runs::budgets::{self, RunSpend, FIGURES, NEW_OWNER_FIGURES};
use crate::runs::{self, Run, RUN_COLUMNS};
use crate::{sql, Result};

/// What a worker reads when it claims an invocation to run it, all from the
/// claim's own statement: the invocation and its [`ClaimFacts`], its run
/// and the run's spend, the version of the profiles file, and, on a first
/// claim, the incoming task it moved from queued to running.
pub struct ClaimStart {
    pub inv: Invocation,
    pub facts: ClaimFacts,
    pub run: Run,
    pub spend: RunSpend,
    pub profiles_version: i64,
    pub task_started: Option<Uuid>,
    /// The claim is not written yet (see [`claim_start`]).
    pub deferred: bool,
    /// A root's first claim whose request is `running` already (intake
    /// started the root in its own process and said so): the claim says
    /// nothing more to the bridge, and need not read the request.
    pub request_running: bool,
}

/// [`claim_start`] for an invocation this process took itself (eager
/// dispatch: a root intake wrote, a handoff's successor), new and of a
/// profile whose first turn the worker takes within this transaction:
/// `known` is what the transaction that wrote it knew. Such a claim is
/// always deferred and has no incoming task to start, no children to sum
/// and (a root) a request intake set `running`, so one lookup of its row
/// and its run does, under the same lock and condition; a root's brief is
/// the one intake rendered. `None` when it is not claimable that way (no
/// longer new, its run no longer running, or locked): the caller claims it
/// with [`claim_start`], which finds out why.
pub async fn claim_taken_here(c: &impl GenericClient, id: Uuid, known: &Known) -> Result<Option<ClaimStart>> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "SELECT i.id, i.run_id, i.parent_invocation_id, i.incoming_task_id, i.profile_id, i.kind, $2::text,
                    coalesce(i.brief, $4::text), i.claim_epoch + 1, i.budget, i.deadline_at, i.tokens_used,
                    i.await_spec, i.takeovers, r.priority, i.handoff, i.handoffs, NULL::bytea,
                    extract(epoch FROM clock_timestamp() - i.created_at)::float8, i.incoming_task_id,
                    {RUN_COLUMNS}, {NEW_OWNER_FIGURES}, (SELECT version FROM profiles_version)
               FROM invocations i JOIN runs r ON r.id = i.run_id
              WHERE i.id = $1 AND i.status = $5 AND i.claim_epoch = 0 AND i.kind <> $6 AND r.status = $3
                FOR UPDATE OF i SKIP LOCKED"
        )
    });
    let params: sql::Params =
        &[&id, &RUNNING, &RunStatus::Running.as_str(), &known.root_brief, &CREATED, &InvocationKind::Child.as_str()];
    let Some(row) = sql::query_opt(c, &SQL, params).await? else {
        return Ok(None);
    };
    let n = invocations::COLUMN_COUNT;
    let inv = invocations::from_row(&row)?;
    Ok(Some(ClaimStart {
        facts: ClaimFacts { waited_seconds: row.get(n), takeover: false },
        deferred: true,
        task_started: row.get(n + 1),
        run: runs::run_at(&row, n + 2)?,
        spend: budgets::spend_at(&row, n + 11)?,
        profiles_version: row.get(n + 16),
        request_running: inv.kind == InvocationKind::Root,
        inv,
    }))
}

/// [`invocations::claim`], with its [`ClaimFacts`] and every read a claim's start needs, in one
/// statement (one round trip, one snapshot). The run's spend is read as
/// the claim found it (the claim itself spends nothing), from the owner's
/// carried figures and its children (`budgets::owner_spend`).
///
/// A new root or handoff stage whose profile is in `deferrable` (a profile
/// whose first turn the worker may take within this transaction) is locked
/// but not yet written: it is returned as claimed (running, epoch 1) with
/// [`ClaimStart::deferred`], and the transaction writes the claim with the
/// invocation's end when it hands off ([`invocations::hand_over`]), else
/// with [`invocations::record_claim`] before it commits or runs anything
/// that needs the invocation running: one row version instead of two.
pub async fn claim_start(
    c: &impl GenericClient,
    id: Uuid,
    owner: &str,
    lease: Duration,
    deferrable: &[String],
) -> Result<Option<ClaimStart>> {
    let columns = invocations::COLUMNS;
    let deferred_columns = invocations::deferred_columns();
    let (set, claimable) = (invocations::CLAIM_SET, invocations::CLAIMABLE);
    let sql = format!(
        "WITH t AS (SELECT inv.id, (inv.status = $5 AND inv.kind <> $10 AND inv.profile_id = ANY($11)) AS deferred
                      FROM invocations inv JOIN runs r ON r.id = inv.run_id
                     WHERE {claimable} FOR UPDATE OF inv SKIP LOCKED),
              u AS (UPDATE invocations i SET {set} FROM t WHERE i.id = t.id AND NOT t.deferred
                    RETURNING {columns}, extract(epoch FROM clock_timestamp() - i.created_at)::float8,
                              coalesce(i.taken_over_at = now(), false), false AS deferred),
              c AS (SELECT * FROM u
                    UNION ALL
                    SELECT {deferred_columns}, extract(epoch FROM clock_timestamp() - i.created_at)::float8, false, true
                      FROM invocations i JOIN t ON t.id = i.id WHERE t.deferred),
              started AS (UPDATE tasks t SET status = $9 FROM c
                           WHERE t.id = c.incoming_task_id AND c.claim_epoch = 1 AND c.kind = $10 AND t.status = $8
                       RETURNING t.id)
         SELECT c.*,
                CASE WHEN c.kind = $10 THEN (SELECT id FROM started)
                     WHEN c.claim_epoch = 1 THEN c.incoming_task_id END,
                {RUN_COLUMNS}, {FIGURES}, (SELECT version FROM profiles_version),
                CASE WHEN c.kind = 'root' AND c.claim_epoch = 1
                     THEN (SELECT h.status = $12 FROM handoff_requests h WHERE h.id = r.handoff_id) END
           FROM c JOIN runs r ON r.id = c.run_id, {owner_spend}",
        owner_spend = budgets::owner_spend("CASE WHEN c.kind = $10 THEN c.parent_invocation_id ELSE c.id END"),
    );
    let secs = lease.as_secs_f64();
    let (queued, running) = (TaskStatus::Queued.as_str(), TaskStatus::Running.as_str());
    // A delegated task's row starts with its child's first claim; a handoff
    // stage's task has no row (V30): its first claim starts it.
    let child = InvocationKind::Child.as_str();
    let request_running = HandoffStatus::Running.as_str();
    let params: sql::Params = &[
        &id,
        &owner,
        &secs,
        &RUNNING,
        &CREATED,
        &PARKED,
        &RunStatus::Running.as_str(),
        &queued,
        &running,
        &child,
        &deferrable,
        &request_running,
    ];
    let Some(row) = sql::query_opt(c, &sql, params).await? else {
        return Ok(None);
    };
    // The invocation's columns and the claim's three facts, then the task,
    // the run (9 columns), its spend (5), the version and, for a root's
    // first claim, whether its request is running.
    let n = invocations::COLUMN_COUNT;
    Ok(Some(ClaimStart {
        inv: invocations::from_row(&row)?,
        facts: ClaimFacts { waited_seconds: row.get(n), takeover: row.get(n + 1) },
        deferred: row.get(n + 2),
        task_started: row.get(n + 3),
        run: runs::run_at(&row, n + 4)?,
        spend: budgets::spend_at(&row, n + 13)?,
        profiles_version: row.get(n + 18),
        request_running: row.get::<_, Option<bool>>(n + 19).unwrap_or(false),
    }))
}
