//! Invocations: claims under a row lock, leases renewed by heartbeat, and the
//! epoch fence every later write passes through.
//!
//! - [`spawn`]: a new invocation with its task and journal events (root, handoff, delegation).
//! - [`tasks`]: handoff and delegated task records.
//! - [`steps`]: the persisted transcript of each invocation.

pub mod spawn;
pub mod steps;
pub mod tasks;

use std::time::Duration;

use crate::GenericClient;
use baton_domain::profiles::brief::{render_handoff_brief, render_request_brief};
use baton_domain::protocol::request::HandoffRequest;
use baton_domain::protocol::request::Priority;
use baton_domain::run::state::{InvocationKind, InvocationStatus, RunStatus};
use baton_domain::tools::delegation::{AwaitSpec, Budget};
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::decode::{texts, RowOf};
use crate::{sql, Error, Result};

// The statuses the statements below name, spelled by the domain only.
pub(crate) const CREATED: &str = InvocationStatus::Created.as_str();
pub(crate) const RUNNING: &str = InvocationStatus::Running.as_str();
pub(crate) const PARKED: &str = InvocationStatus::Parked.as_str();
const CANCELLED: &str = InvocationStatus::Cancelled.as_str();

/// Created, running or parked: an invocation that has not ended.
pub(crate) fn live() -> Vec<&'static str> {
    texts(InvocationStatus::live(), InvocationStatus::as_str)
}

#[derive(Debug, Clone)]
pub struct Invocation {
    pub id: Uuid,
    pub run_id: Uuid,
    pub parent_invocation_id: Option<Uuid>,
    pub incoming_task_id: Option<Uuid>,
    pub profile_id: String,
    pub kind: InvocationKind,
    pub status: InvocationStatus,
    /// What the agent is asked to do: a root's or a child's as stored, a
    /// handoff stage's rendered from the brief its predecessor gave.
    pub brief: String,
    pub claim_epoch: i64,
    /// A child's narrowed limits (`maxRounds`, `maxToolCalls`, `maxTokens`).
    pub budget: Option<Budget>,
    pub deadline_at: Option<chrono::DateTime<chrono::Utc>>,
    pub tokens_used: i64,
    /// What a parked (or just woken) parent waits for.
    pub await_spec: Option<AwaitSpec>,
    /// Claims taken from a holder that neither finished nor handed back.
    pub takeovers: i32,
    /// Its run's priority (a model call under a limit waits in line by it).
    pub priority: Priority,
    /// A foreground owner's: the handoffs its run made before it.
    pub handoffs: i32,
}

pub struct NewInvocation<'a> {
    pub id: Uuid,
    pub run_id: Uuid,
    pub parent_invocation_id: Option<Uuid>,
    pub incoming_task_id: Option<Uuid>,
    pub profile_id: &'a str,
    pub kind: InvocationKind,
    pub brief: NewBrief<'a>,
    pub budget: Option<&'a Budget>,
    pub deadline_at: Option<chrono::DateTime<chrono::Utc>>,
    /// A foreground owner's: the handoffs its run made before it.
    pub handoffs: i32,
    /// A foreground owner's: what its run spent before it (V34).
    pub run_spent: RunSpent,
}

/// What a run spent before its current owner (its predecessors and their
/// children): tokens, model calls, tool calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSpent {
    pub tokens: i64,
    pub model_calls: i64,
    pub tool_calls: i64,
}

/// What a new invocation is asked to do, as stored.
#[derive(Debug, Clone, Copy)]
pub enum NewBrief<'a> {
    /// The rendered brief (a root's, a child's).
    Text(&'a str),
    /// A handoff stage's task, the brief its predecessor gave
    /// `agent_handoff`: stored as given, rendered when read (V30).
    Handoff(&'a serde_json::Map<String, Value>),
    /// A run's root: nothing stored, rendered from the run's request (as the
    /// disclosure policy left it) when read (V39).
    Request,
}

/// The invocation's columns [`from_row`] reads, [`COLUMN_COUNT`] of them.
pub(crate) const COLUMNS: &str =
    "i.id, i.run_id, i.parent_invocation_id, i.incoming_task_id, i.profile_id, i.kind, i.status, i.brief, \
     i.claim_epoch, i.budget, i.deadline_at, i.tokens_used, i.await_spec, i.takeovers, \
     (SELECT r.priority FROM runs r WHERE r.id = i.run_id), i.handoff, i.handoffs, \
     CASE WHEN i.brief IS NULL AND i.handoff IS NULL THEN \
          (SELECT h.body FROM runs r JOIN handoff_requests h ON h.id = r.handoff_id WHERE r.id = i.run_id) END";
pub(crate) const COLUMN_COUNT: usize = 18;

pub(crate) fn from_row(row: &Row) -> Result<Invocation> {
    let id: Uuid = row.get(0);
    let at = RowOf { table: "invocations", id: &id };
    let brief = match (row.get::<_, Option<String>>(7), row.get::<_, Option<Value>>(15), row.get(17)) {
        (Some(brief), _, _) => brief,
        (None, Some(Value::Object(given)), _) => render_handoff_brief(&given),
        (None, None, Some(request)) => {
            render_request_brief(&crate::requests::packed::unpack::<HandoffRequest>(&id.to_string(), request).map_err(
                |e| Error::Corrupt(format!("invocations {id}: its run's request cannot be read for its brief: {e}")),
            )?)
        }
        (None, _, _) => {
            return Err(Error::Corrupt(format!("invocations {id}: neither a brief, a handoff's task nor a request")))
        }
    };
    Ok(Invocation {
        id,
        run_id: row.get(1),
        parent_invocation_id: row.get(2),
        incoming_task_id: row.get(3),
        profile_id: row.get(4),
        kind: at.wire(row, 5)?,
        status: at.wire(row, 6)?,
        brief,
        claim_epoch: row.get(8),
        budget: at.json_opt(row, 9)?,
        deadline_at: row.get(10),
        tokens_used: row.get(11),
        await_spec: at.json_opt(row, 12)?,
        takeovers: row.get(13),
        priority: at.wire(row, 14)?,
        handoffs: row.get(16),
    })
}

/// A new invocation's INSERT, its parameters numbered from `$11`: it runs
/// as the first part of the statement that queues its message
/// ([`crate::outbox::enqueue_fleet_after`]), with [`Inserted::params`].
pub(crate) const INSERT: &str =
    "INSERT INTO invocations (id, run_id, parent_invocation_id, incoming_task_id, profile_id, kind, status, exit_policy, brief,
                              budget, deadline_at, handoff, handoffs, run_spent_tokens, run_spent_model_calls, run_spent_tool_calls)
     VALUES ($11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)";

/// The values of a new invocation's row that are not the caller's as they are.
pub(crate) struct Inserted<'a> {
    new: &'a NewInvocation<'a>,
    brief: Option<&'a str>,
    handoff: Option<Value>,
    budget: Option<Value>,
    kind: &'static str,
    exit_policy: &'static str,
}

impl<'a> Inserted<'a> {
    pub(crate) fn of(new: &'a NewInvocation<'a>) -> Result<Self> {
        let (brief, handoff) = match new.brief {
            NewBrief::Text(text) => (Some(text), None),
            NewBrief::Handoff(given) => (None, Some(Value::Object(given.clone()))),
            NewBrief::Request => (None, None),
        };
        let budget = new.budget.map(serde_json::to_value).transpose()?;
        Ok(Self { new, brief, handoff, budget, kind: new.kind.as_str(), exit_policy: new.kind.exit_policy().as_str() })
    }

    /// [`INSERT`]'s parameters, in order.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 16] {
        let new = self.new;
        [
            &new.id,
            &new.run_id,
            &new.parent_invocation_id,
            &new.incoming_task_id,
            &new.profile_id,
            &self.kind,
            &CREATED,
            &self.exit_policy,
            &self.brief,
            &self.budget,
            &new.deadline_at,
            &self.handoff,
            &new.handoffs,
            &new.run_spent.tokens,
            &new.run_spent.model_calls,
            &new.run_spent.tool_calls,
        ]
    }
}

pub async fn get(c: &impl GenericClient, id: Uuid) -> Result<Option<Invocation>> {
    let sql = format!("SELECT {COLUMNS} FROM invocations i WHERE i.id = $1");
    sql::query_opt(c, &sql, &[&id]).await?.as_ref().map(from_row).transpose()
}

pub async fn for_run(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<Invocation>> {
    let sql = format!("SELECT {COLUMNS} FROM invocations i WHERE i.run_id = $1 ORDER BY i.created_at, i.id");
    sql::query(c, &sql, &[&run_id]).await?.iter().map(from_row).collect()
}

/// Claims an invocation that is new, woken from a wait, or whose holder's lease expired, in one
/// statement under a row lock (`SKIP LOCKED`: a concurrent claimer just finds
/// nothing). Bumps the epoch; returns `None` when there is nothing to claim.
pub async fn claim(c: &impl GenericClient, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Invocation>> {
    let secs = lease.as_secs_f64();
    let params: sql::Params = &[&id, &owner, &secs, &RUNNING, &CREATED, &PARKED, &RunStatus::Running.as_str()];
    sql::query_opt(c, &claim_update(), params).await?.as_ref().map(from_row).transpose()
}

/// What a claim was: how long the invocation had waited since it was
/// created (for a successor: since its handoff committed), and whether the
/// claim took it from a lost worker.
pub struct ClaimFacts {
    pub waited_seconds: f64,
    pub takeover: bool,
}

/// The claim's UPDATE (`$1` the invocation, `$2` the owner, `$3` the lease
/// in seconds, `$4`–`$6` running, created, parked, `$7` a running run),
/// returning the invocation's [`COLUMNS`], how long it waited and whether
/// it was a takeover.
pub(crate) fn claim_update() -> String {
    format!(
        "UPDATE invocations i SET {CLAIM_SET}
           FROM (SELECT inv.id FROM invocations inv JOIN runs r ON r.id = inv.run_id
                  WHERE {CLAIMABLE} FOR UPDATE OF inv SKIP LOCKED) c
          WHERE i.id = c.id
      RETURNING {COLUMNS}, extract(epoch FROM clock_timestamp() - i.created_at)::float8, coalesce(i.taken_over_at = now(), false)"
    )
}

/// What a claim writes (`$2` the owner, `$3` the lease in seconds, `$4`
/// running), for an UPDATE of `invocations i`.
pub(crate) const CLAIM_SET: &str =
    "status = $4, claim_epoch = i.claim_epoch + 1, lease_owner = $2, woken = false, wake_at = NULL,
     takeovers = i.takeovers + CASE WHEN i.status = $4 AND i.lease_owner IS NOT NULL THEN 1 ELSE 0 END,
     taken_over_at = CASE WHEN i.status = $4 AND i.lease_owner IS NOT NULL THEN now() ELSE i.taken_over_at END,
     lease_expires_at = now() + make_interval(secs => $3), started_at = coalesce(i.started_at, now())";

/// Which invocation `inv` (of run `r`) a claim may take (`$1` its id, `$4`
/// to `$6` running, created, parked, `$7` a running run): new, woken from a
/// wait, handed back, or whose holder's lease expired **and** the relay's
/// sweep has since found it stalled (`republished_at` at or after the
/// expiry, [`take_stalled`]). A lease also lapses while the database is
/// away, and at its return a claim that was retried through the outage (a
/// duplicate delivery), or a duplicate the outbox sends again, would run
/// before the live holder's heartbeat renews and take over a turn it holds;
/// the sweep waits a lease after the relay regains the database, so only a
/// lease nobody renewed by then is taken over.
pub(crate) const CLAIMABLE: &str = "inv.id = $1 AND r.status = $7
     AND (inv.status = $5 OR (inv.status = $6 AND inv.woken)
          OR (inv.status = $4 AND inv.lease_expires_at < now()
              AND (inv.lease_owner IS NULL OR inv.republished_at >= inv.lease_expires_at)))";

/// [`COLUMNS`] as a claim of a new invocation returns them before it is
/// written (a deferred claim, [`record_claim`]): running, at epoch 1.
pub(crate) fn deferred_columns() -> String {
    COLUMNS.replacen("i.status", "$4::text", 1).replacen("i.claim_epoch", "i.claim_epoch + 1", 1)
}

/// Writes a claim that was deferred (`claims::claim_start`, which reads this module): the
/// invocation, still `created` under this transaction's row lock, becomes
/// running at `epoch` with this worker's lease; one that has ended in the
/// meantime (in this transaction) keeps its end and gets its epoch and
/// start. A no-op when the claim is already written (a handoff writes it
/// with the invocation's end, [`hand_over`]).
pub async fn record_claim(c: &impl GenericClient, id: Uuid, epoch: i64, owner: &str, lease: Duration) -> Result<()> {
    let secs = lease.as_secs_f64();
    sql::execute(
        c,
        "UPDATE invocations
            SET lease_owner = CASE WHEN status = $5 THEN $3 END,
                lease_expires_at = CASE WHEN status = $5 THEN now() + make_interval(secs => $4) END,
                status = CASE WHEN status = $5 THEN $6 ELSE status END,
                claim_epoch = $2, started_at = coalesce(started_at, now())
          WHERE id = $1 AND claim_epoch < $2",
        &[&id, &epoch, &owner, &secs, &CREATED, &RUNNING],
    )
    .await?;
    Ok(())
}

/// Extends the lease; `false` means the claim is gone (taken over, ended,
/// or handed back: a renewal racing a hand-back must not hold the released
/// row away from the next worker for another lease).
pub async fn renew(c: &impl GenericClient, id: Uuid, epoch: i64, lease: Duration) -> Result<bool> {
    let secs = lease.as_secs_f64();
    let n = sql::execute(
        c,
        "UPDATE invocations SET lease_expires_at = now() + make_interval(secs => $3)
          WHERE id = $1 AND claim_epoch = $2 AND status = $4 AND lease_owner IS NOT NULL",
        &[&id, &epoch, &secs, &RUNNING],
    )
    .await?;
    Ok(n == 1)
}

/// The fence: locks the invocation row for this transaction and refuses
/// unless this worker still holds it at `epoch`. Every write made on behalf of
/// a claim starts here, so a zombie worker changes nothing.
///
/// `unstored_from`: the first transcript seq the step writes. A row at it (or
/// after) means an earlier attempt of this very step committed though its
/// answer was lost (the primary died after the synchronous standby had the
/// commit): refused as [`Error::StepStored`], so the step is not written twice
/// and the invocation carries on from what is stored. An index probe, no write.
pub async fn fence(c: &impl GenericClient, id: Uuid, epoch: i64, unstored_from: Option<i32>) -> Result<()> {
    let row = sql::query_opt(
        c,
        "SELECT NOT EXISTS (SELECT 1 FROM transcript t WHERE t.invocation_id = $1 AND t.seq >= $4)
           FROM invocations WHERE id = $1 AND claim_epoch = $2 AND status = $3 FOR UPDATE",
        &[&id, &epoch, &RUNNING, &unstored_from],
    )
    .await?;
    match row.map(|row| row.get::<_, bool>(0)) {
        None => Err(Error::Fenced(id)),
        Some(false) => Err(Error::StepStored { invocation: id, seq: unstored_from.unwrap_or_default() }),
        Some(true) => Ok(()),
    }
}

/// Moves an invocation to a terminal (or parked) state from running.
pub async fn finish(c: &impl GenericClient, id: Uuid, status: InvocationStatus, error: Option<&Value>) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE invocations SET status = $2, error = $3, lease_owner = NULL, lease_expires_at = NULL,
                finished_at = CASE WHEN $4 THEN now() END
          WHERE id = $1 AND status = ANY($5)",
        &[&id, &status.as_str(), &error, &status.is_terminal(), &live()],
    )
    .await?;
    Ok(n == 1)
}

/// The final owner's end, in one statement: `completed`, with what its
/// last step spent (`tokens`, `model_calls`, `tool_calls`, so no spend
/// update follows) and its claim's epoch and start (a claim deferred to
/// this write costs no row version of its own, [`record_claim`]). Returns
/// whether it was live.
pub async fn complete(c: &impl GenericClient, inv: &Invocation, spending: (i64, i32, i32)) -> Result<bool> {
    let (tokens, model_calls, tool_calls) = spending;
    let n = sql::execute(
        c,
        "UPDATE invocations SET status = $2, error = NULL, lease_owner = NULL, lease_expires_at = NULL, finished_at = now(),
                model_calls = model_calls + $4, tool_calls = tool_calls + $5, tokens_used = tokens_used + $6,
                claim_epoch = $7, started_at = coalesce(started_at, now())
          WHERE id = $1 AND status = ANY($3)",
        &[&inv.id, &InvocationStatus::Completed.as_str(), &live(), &model_calls, &tool_calls, &tokens, &inv.claim_epoch],
    )
    .await?;
    Ok(n == 1)
}

/// A handoff's end of the invocation that hands off, in one statement: it
/// becomes `transferred` with what its last step spent (`tokens`, `model_calls`,
/// `tool_calls`, so no spend update follows), and with its claim's epoch
/// and start (a claim deferred to this write costs no row version of its
/// own, [`record_claim`]). A handoff stage's task ends
/// with it (it has no row, V30); a root has none. Returns how many of the
/// run's tasks went to `target`, the successor's profile, before this one
/// (for the new task's readable workspace key): every task, a handoff
/// stage's or a delegated one, has its one invocation, not the root. Also
/// returns what the run has spent so far (the caller's carried figures, its
/// own, and its children's, all ended: a handoff waits for its caller's
/// children), which the successor carries (V34).
pub async fn hand_over(
    c: &impl GenericClient,
    inv: &Invocation,
    target: &str,
    spending: (i64, i32, i32),
) -> Result<HandedOver> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(hand_over_sql);
    let live = live();
    let params = hand_over_params(inv, &target, &spending, &live);
    handed_over(&sql::query_one(c, &SQL, &params).await?)
}

/// The statement of a handoff's end ([`hand_over`]), for a test that holds
/// it to a generic plan.
pub fn hand_over_sql() -> String {
    format!("{HAND_OVER} {HANDED_OVER}")
}

/// [`hand_over`], with the successor `new` written in the same statement,
/// reserved for `owner` for `lease` (eager dispatch, see
/// [`crate::outbox::after_commit`]): still `created` and claimable by
/// anyone, but with no message queued; should the owner not claim it, the
/// reservation lapses and [`take_stalled`] publishes it. It carries what
/// the run spent (`new`'s own `run_spent` is not read), and is inserted
/// only if the invocation ended.
pub(crate) async fn hand_over_reserving(
    c: &impl GenericClient,
    inv: &Invocation,
    spending: (i64, i32, i32),
    new: &NewInvocation<'_>,
    (owner, lease): (&str, Duration),
) -> Result<HandedOver> {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{HAND_OVER},
              successor AS (
                  INSERT INTO invocations (id, run_id, parent_invocation_id, incoming_task_id, profile_id, kind, status, exit_policy,
                                           brief, budget, deadline_at, handoff, handoffs,
                                           run_spent_tokens, run_spent_model_calls, run_spent_tool_calls, lease_owner, lease_expires_at)
                  SELECT $11::uuid, $12::uuid, $13::uuid, $14::uuid, $15::text, $16::text, $17::text, $18::text, $19::text,
                         $20::jsonb, $21::timestamptz, $22::jsonb, $23::int, s.tokens, s.model_calls, s.tool_calls,
                         $24::text, now() + make_interval(secs => $25::float8)
                    FROM spent s
                  RETURNING 1)
             {HANDED_OVER}"
        )
    });
    let inserted = Inserted::of(new)?;
    let columns = inserted.params();
    let secs = lease.as_secs_f64();
    let live = live();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        hand_over_params(inv, &new.profile_id, &spending, &live).to_vec();
    params.extend_from_slice(&columns[..13]);
    params.extend_from_slice(&[&owner, &secs]);
    handed_over(&sql::query_one(c, &SQL, &params).await?)
}

/// Inserts a new root reserved for this process (eager dispatch: see
/// [`crate::after_commit`]), still `created`, with no message queued.
pub(crate) async fn insert_reserved(
    c: &impl GenericClient,
    new: &NewInvocation<'_>,
    (owner, lease): (&str, Duration),
) -> Result<()> {
    const SQL: &str =
        "INSERT INTO invocations (id, run_id, parent_invocation_id, incoming_task_id, profile_id, kind, status, exit_policy, brief,
                                  budget, deadline_at, handoff, handoffs, run_spent_tokens, run_spent_model_calls, run_spent_tool_calls,
                                  lease_owner, lease_expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, now() + make_interval(secs => $18))";
    let inserted = Inserted::of(new)?;
    let secs = lease.as_secs_f64();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = inserted.params().to_vec();
    params.extend_from_slice(&[&owner, &secs]);
    sql::execute(c, SQL, &params).await?;
    Ok(())
}

/// The invocation ends transferred with its step's spend, and the run's
/// spend so far is read (`spent`): the common part of [`hand_over`]'s
/// statement, its parameters `$1` to `$10` ([`hand_over_params`]). The
/// children's kind is written out, not a parameter: a generic plan then
/// proves the partial index `invocations_by_parent` applies (with a
/// parameter it planned a sequential scan, so Postgres planned every
/// execution afresh, a quarter of a millisecond each).
const HAND_OVER: &str = "WITH ended AS (
             UPDATE invocations SET status = $2, error = NULL, lease_owner = NULL, lease_expires_at = NULL,
                    finished_at = now(), model_calls = model_calls + $3, tool_calls = tool_calls + $4,
                    tokens_used = tokens_used + $10,
                    claim_epoch = $9, started_at = coalesce(started_at, now())
              WHERE id = $1 AND status = ANY($5)
          RETURNING run_spent_tokens + tokens_used AS tokens, run_spent_model_calls + model_calls AS model_calls,
                    run_spent_tool_calls + tool_calls AS tool_calls),
              children AS (SELECT coalesce(sum(tokens_used), 0)::bigint AS tokens,
                                  coalesce(sum(model_calls), 0)::bigint AS model_calls,
                                  coalesce(sum(tool_calls), 0)::bigint AS tool_calls
                             FROM invocations WHERE parent_invocation_id = $1 AND kind = 'child'),
              spent AS (SELECT e.tokens + k.tokens AS tokens, e.model_calls + k.model_calls AS model_calls,
                               e.tool_calls + k.tool_calls AS tool_calls
                          FROM ended e, children k)";

/// What [`hand_over`] returns: no row when the invocation was not live (fenced).
const HANDED_OVER: &str =
    "SELECT (SELECT count(*) FROM invocations WHERE run_id = $6 AND profile_id = $7 AND kind <> $8),
                s.tokens, s.model_calls, s.tool_calls
           FROM spent s";

/// [`HAND_OVER`]'s parameters (`live`: [`live`]'s statuses).
fn hand_over_params<'a>(
    inv: &'a Invocation,
    target: &'a &'a str,
    (tokens, model_calls, tool_calls): &'a (i64, i32, i32),
    live: &'a Vec<&'static str>,
) -> [&'a (dyn tokio_postgres::types::ToSql + Sync); 10] {
    const TRANSFERRED: &str = InvocationStatus::Transferred.as_str();
    const ROOT: &str = InvocationKind::Root.as_str();
    [&inv.id, &TRANSFERRED, model_calls, tool_calls, live, &inv.run_id, target, &ROOT, &inv.claim_epoch, tokens]
}

fn handed_over(row: &Row) -> Result<HandedOver> {
    let run_spent = RunSpent { tokens: row.get(1), model_calls: row.get(2), tool_calls: row.get(3) };
    Ok(HandedOver { earlier_tasks: row.get(0), run_spent })
}

/// What [`hand_over`] found: the run's tasks for the successor's profile
/// before this handoff's (for the new task's readable workspace key), and
/// what the run has spent, which the successor carries.
pub struct HandedOver {
    pub earlier_tasks: i64,
    pub run_spent: RunSpent,
}

/// How the stalled-work sweep paces its re-publishes of one row.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// A created invocation is first re-published after this (its message
    /// may simply be waiting in a queue), then after 2×, 4× … as long.
    pub grace: Duration,
    /// An expired lease is re-published at once, a woken parent after this;
    /// a repeat waits 2×, 4× … as long.
    pub lease: Duration,
    /// The longest wait between two re-publishes of one row; also the only
    /// pace while the row's queue still holds ready messages (a backlog, not
    /// a lost message: another copy would only join the queue).
    pub cap: Duration,
    pub handoff_backlog: bool,
    pub delegate_backlog: bool,
}

/// Invocations whose message may have been lost or whose worker died: a
/// running one past its lease, a created one nobody claimed (one reserved
/// by a process that took it eagerly: once its reservation lapsed), or a woken
/// parent nobody claimed (its wake-up met a locked row), each returned on
/// the schedule of [`Pace`], so a backlog does not multiply messages.
pub async fn take_stalled(c: &impl GenericClient, pace: &Pace) -> Result<Vec<(Uuid, Uuid, InvocationKind)>> {
    let (grace, lease, cap) = (pace.grace.as_secs_f64(), pace.lease.as_secs_f64(), pace.cap.as_secs_f64());
    let rows = sql::query(
        c,
        "UPDATE invocations SET republished_at = now(), republish_count = republish_count + 1
          WHERE id IN (
              SELECT id FROM invocations
               WHERE (status IN ($6, $7) OR (status = $8 AND woken))
                 AND CASE WHEN status = $7 OR (status = $6 AND lease_owner IS NOT NULL) THEN
                          lease_expires_at < now()
                          AND (republished_at IS NULL OR republished_at < lease_expires_at
                               OR republished_at < now() - make_interval(secs =>
                                      least($3, $2 * power(2.0::float8, least(republish_count, 20)))))
                     ELSE
                          coalesce(republished_at, created_at) < now() - make_interval(secs =>
                              CASE WHEN (CASE WHEN kind = $9 OR status = $8 THEN $5::boolean ELSE $4::boolean END) THEN $3
                                   ELSE least($3, (CASE WHEN status = $6 THEN $1 ELSE $2 END)
                                                  * power(2.0::float8, least(republish_count, 20)))
                              END)
                     END
               LIMIT 500 FOR UPDATE SKIP LOCKED)
      RETURNING id, run_id, kind",
        &[
            &grace,
            &lease,
            &cap,
            &pace.handoff_backlog,
            &pace.delegate_backlog,
            &CREATED,
            &RUNNING,
            &PARKED,
            &InvocationKind::Child.as_str(),
        ],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let id: Uuid = r.get(0);
            Ok((id, r.get(1), RowOf { table: "invocations", id: &id }.wire(r, 2)?))
        })
        .collect()
}

/// Ends every live invocation of a run (used when the run itself ends),
/// returning each one's id, kind and incoming task.
pub async fn cancel_live(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<(Uuid, InvocationKind, Option<Uuid>)>> {
    let rows = sql::query(
        c,
        "UPDATE invocations SET status = $2, finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
          WHERE run_id = $1 AND status = ANY($3)
      RETURNING id, kind, incoming_task_id",
        &[&run_id, &CANCELLED, &live()],
    )
    .await?;
    rows.iter()
        .map(|r| {
            let id: Uuid = r.get(0);
            Ok((id, RowOf { table: "invocations", id: &id }.wire(r, 1)?, r.get(2)))
        })
        .collect()
}

/// Parks a parent until its children finish or `wake_at`; the worker is freed.
pub async fn park(
    c: &impl GenericClient,
    id: Uuid,
    spec: &AwaitSpec,
    wake_at: chrono::DateTime<chrono::Utc>,
) -> Result<()> {
    sql::execute(
        c,
        "UPDATE invocations SET status = $4, await_spec = $2, wake_at = $3, woken = false,
                lease_owner = NULL, lease_expires_at = NULL
          WHERE id = $1 AND status = $5",
        &[&id, &serde_json::to_value(spec)?, &wake_at, &PARKED, &RUNNING],
    )
    .await?;
    Ok(())
}

/// Locks a parent for a wake-up decision: parking and waking both hold this
/// row lock, so a child finishing while its parent parks is never missed.
pub async fn lock(c: &impl GenericClient, id: Uuid) -> Result<Option<Invocation>> {
    let sql = format!("SELECT {COLUMNS} FROM invocations i WHERE i.id = $1 FOR UPDATE");
    sql::query_opt(c, &sql, &[&id]).await?.as_ref().map(from_row).transpose()
}

/// Marks a parked parent woken; `false` when it was not parked or already woken.
pub async fn wake(c: &impl GenericClient, id: Uuid) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE invocations SET woken = true, republished_at = now(), republish_count = 0 WHERE id = $1 AND status = $2 AND NOT woken",
        &[&id, &PARKED],
    )
    .await?;
    Ok(n == 1)
}

/// Parked parents whose wait timed out, marked woken.
pub async fn wake_timed_out(c: &impl GenericClient) -> Result<Vec<(Uuid, Uuid)>> {
    let rows = sql::query(
        c,
        "UPDATE invocations SET woken = true, republished_at = now(), republish_count = 0
          WHERE id IN (SELECT id FROM invocations WHERE status = $1 AND NOT woken AND wake_at < now()
                        LIMIT 500 FOR UPDATE SKIP LOCKED)
      RETURNING id, run_id",
        &[&PARKED],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Clears a wait once its result is stored.
pub async fn clear_await(c: &impl GenericClient, id: Uuid) -> Result<()> {
    sql::execute(c, "UPDATE invocations SET await_spec = NULL WHERE id = $1", &[&id]).await?;
    Ok(())
}

/// Cancels one invocation if it is still live.
pub async fn cancel(c: &impl GenericClient, id: Uuid) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE invocations SET status = $2, finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
          WHERE id = $1 AND status = ANY($3)",
        &[&id, &CANCELLED, &live()],
    )
    .await?;
    Ok(n == 1)
}

/// Hands a claim back (graceful shutdown): the lease ends now and no holder
/// remains, so the next claim is not counted as a takeover.
pub async fn release(c: &impl GenericClient, id: Uuid, epoch: i64) -> Result<bool> {
    let n = sql::execute(
        c,
        "UPDATE invocations SET lease_expires_at = now() - interval '1 millisecond', lease_owner = NULL
          WHERE id = $1 AND claim_epoch = $2 AND status = $3",
        &[&id, &epoch, &RUNNING],
    )
    .await?;
    Ok(n == 1)
}

/// Parks an owner until its user answers (the answer wakes it) or
/// `wake_at`; it waits for no task, so it has no await spec.
pub async fn park_for_answer(c: &impl GenericClient, id: Uuid, wake_at: chrono::DateTime<chrono::Utc>) -> Result<()> {
    sql::execute(
        c,
        "UPDATE invocations SET status = $3, await_spec = NULL, wake_at = $2, woken = false,
                lease_owner = NULL, lease_expires_at = NULL
          WHERE id = $1 AND status = $4",
        &[&id, &wake_at, &PARKED, &RUNNING],
    )
    .await?;
    Ok(())
}
