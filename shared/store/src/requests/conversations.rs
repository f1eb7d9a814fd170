//! Conversations (docs/bridge-protocol.md#conversations): a bridge's cancels, kept until their request
//! is there, and one chat's requests taking turns. A conversation's row lock
//! orders everything that changes whose turn it is (intake taking a request,
//! a run ending, a cancel), whichever worker does it.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::protocol::conversation::cancel::BridgeCancel;
use baton_domain::run::state::RunStatus;
use uuid::Uuid;

use crate::{sql, Result};

/// The advisory lock class of a handoff id: a cancel and its request take it
/// first, so whichever commits second sees the other.
pub(crate) const HANDOFF_LOCK: i32 = 0x6261_7401;

/// How long a cancel whose request never came is kept.
pub const CANCEL_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Serializes the transactions about one handoff (its request, its cancels)
/// until the caller's transaction ends.
pub async fn lock_handoff(c: &impl GenericClient, handoff_id: &str) -> Result<()> {
    sql::execute(c, "SELECT pg_advisory_xact_lock($1, hashtext($2))", &[&HANDOFF_LOCK, &handoff_id]).await?;
    Ok(())
}

/// [`lock_handoff`], and the applied profiles file's version
/// ([`crate::profiles::version`]) read by the same statement.
pub async fn lock_handoff_reading_version(c: &impl GenericClient, handoff_id: &str) -> Result<i64> {
    let row = sql::query_one(c, LOCK_READING_VERSION, &[&HANDOFF_LOCK, &handoff_id]).await?;
    Ok(row.get(1))
}

/// [`lock_handoff_reading_version`]'s statement.
pub(crate) const LOCK_READING_VERSION: &str =
    "SELECT pg_advisory_xact_lock($1, hashtext($2)), (SELECT version FROM profiles_version)";

/// Keeps a cancel; false when one with its id was kept before (a duplicate).
pub async fn keep_cancel(c: &impl GenericClient, cancel: &BridgeCancel) -> Result<bool> {
    let n = sql::execute(
        c,
        "INSERT INTO bridge_cancels (id, handoff_id, reason, sent_at) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        &[&cancel.id, &cancel.handoff_id, &cancel.reason, &cancel.at],
    )
    .await?;
    Ok(n == 1)
}

/// A kept cancel not applied yet: its id and reason.
pub async fn pending_cancel(c: &impl GenericClient, handoff_id: &str) -> Result<Option<(String, Option<String>)>> {
    let row = sql::query_opt(
        c,
        "SELECT id, reason FROM bridge_cancels WHERE handoff_id = $1 AND applied_at IS NULL ORDER BY received_at LIMIT 1",
        &[&handoff_id],
    )
    .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Marks every kept cancel of the handoff as applied.
pub async fn mark_applied(c: &impl GenericClient, handoff_id: &str) -> Result<()> {
    sql::execute(
        c,
        "UPDATE bridge_cancels SET applied_at = now() WHERE handoff_id = $1 AND applied_at IS NULL",
        &[&handoff_id],
    )
    .await?;
    Ok(())
}

/// Drops cancels older than [`CANCEL_RETENTION`] (their request never came,
/// or came and was cancelled long ago); returns how many.
pub async fn prune_cancels(c: &impl GenericClient) -> Result<u64> {
    let secs = CANCEL_RETENTION.as_secs_f64();
    sql::execute(c, "DELETE FROM bridge_cancels WHERE received_at < now() - make_interval(secs => $1)", &[&secs]).await
}

/// How often locking a conversation makes its row again: once more than
/// needed, since retention deletes only rows idle for days, and a row made
/// now is not.
const LOCK_TRIES: usize = 3;

/// Locks the conversation's row (creating it), and returns its live run
/// (one that has ended does not count, whatever the row says). A row that
/// retention deleted between the insert and the lock is made again.
pub async fn lock(c: &impl GenericClient, key: &str) -> Result<Option<Uuid>> {
    for _ in 0..LOCK_TRIES {
        sql::execute(c, "INSERT INTO conversations (key) VALUES ($1) ON CONFLICT (key) DO NOTHING", &[&key]).await?;
        let row = sql::query_opt(
            c,
            "SELECT r.id FROM conversations c LEFT JOIN runs r ON r.id = c.live_run AND r.status = $2
              WHERE c.key = $1 FOR UPDATE OF c",
            &[&key, &RunStatus::Running.as_str()],
        )
        .await?;
        if let Some(row) = row {
            return Ok(row.get(0));
        }
    }
    Err(vanished(key))
}

/// [`lock`], in one round trip, also telling whether requests wait in the
/// conversation's queue (a free conversation with none waiting starts its
/// new request at once, without queueing it).
pub async fn lock_noting_waiting(c: &impl GenericClient, key: &str) -> Result<(Option<Uuid>, bool)> {
    const CREATE: &str = "INSERT INTO conversations (key) VALUES ($1) ON CONFLICT (key) DO NOTHING";
    const LOCK: &str = "SELECT r.id, EXISTS (SELECT 1 FROM conversation_queue q WHERE q.key = c.key)
                          FROM conversations c LEFT JOIN runs r ON r.id = c.live_run AND r.status = $2
                         WHERE c.key = $1 FOR UPDATE OF c";
    // Both prepared first (from the cache after the first time), so the two
    // statements below are sent together on the first poll, in this order.
    let (create, lock) = tokio::try_join!(c.prepare_cached(CREATE), c.prepare_cached(LOCK))?;
    let running = RunStatus::Running.as_str();
    let (create_params, lock_params): (sql::Params, sql::Params) = (&[&key], &[&key, &running]);
    for _ in 0..LOCK_TRIES {
        let (created, row) = tokio::join!(c.execute(&create, create_params), c.query_opt(&lock, lock_params));
        let row = created.and(row)?;
        if let Some(row) = row {
            return Ok((row.get(0), row.get(1)));
        }
    }
    Err(vanished(key))
}

/// Makes the conversation's row with `run` as its live run, when the chat
/// has none: true when it did (a new chat is free and nobody waits in it;
/// its new row is this transaction's until the commit, and the run is
/// inserted later in it; the run keeps the key, V44). False
/// when the row exists: then [`lock_noting_waiting`] decides.
pub async fn start_new(c: &impl GenericClient, key: &str, run: Uuid) -> Result<bool> {
    let row = sql::query_opt(c, START_NEW, &[&key, &run]).await?;
    Ok(row.is_some())
}

/// [`start_new`]'s statement.
pub(crate) const START_NEW: &str =
    "INSERT INTO conversations (key, live_run) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING RETURNING key";

fn vanished(key: &str) -> crate::Error {
    crate::Error::Corrupt(format!("conversations {key}: the row was deleted each time it was made"))
}

/// Gives the conversation's turn to `run`, which keeps the key its end
/// gives the turn back by (`runs::finish_releasing`): a run started from a request has
/// it already; a run written before V44 and retried since gets it here.
pub async fn set_live(c: &impl GenericClient, key: &str, run: Uuid) -> Result<()> {
    sql::execute(
        c,
        "WITH r AS (UPDATE runs SET conversation_key = $1 WHERE id = $2 AND conversation_key IS DISTINCT FROM $1)
         UPDATE conversations SET live_run = $2, updated_at = now() WHERE key = $1",
        &[&key, &run],
    )
    .await?;
    Ok(())
}

/// Takes back a live run named by [`start_new`] that did not start (the
/// request was refused).
pub async fn clear_live(c: &impl GenericClient, key: &str) -> Result<()> {
    sql::execute(c, "UPDATE conversations SET live_run = NULL, updated_at = now() WHERE key = $1", &[&key]).await?;
    Ok(())
}

/// Puts a request at the end of its conversation's queue; its place in the
/// fleet-wide arrival order (increasing, taken under the conversation's
/// lock), `None` when it was queued already.
pub async fn enqueue(c: &impl GenericClient, key: &str, handoff_id: &str) -> Result<Option<i64>> {
    let row = sql::query_opt(
        c,
        "INSERT INTO conversation_queue (key, handoff_id) VALUES ($1, $2) ON CONFLICT (handoff_id) DO NOTHING RETURNING seq",
        &[&key, &handoff_id],
    )
    .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Takes the conversation's oldest waiting request off its queue.
pub async fn pop(c: &impl GenericClient, key: &str) -> Result<Option<String>> {
    let row = sql::query_opt(
        c,
        "DELETE FROM conversation_queue WHERE seq = (SELECT min(seq) FROM conversation_queue WHERE key = $1) RETURNING handoff_id",
        &[&key],
    )
    .await?;
    Ok(row.map(|r| r.get(0)))
}

/// [`pop`] for the conversation a run gave back in this transaction
/// (`runs::finish_releasing`, or the completion that includes it): nothing
/// when it gave back none. For a statement sent with the one that ends the
/// run, before its answer says whether it did.
pub async fn pop_released(c: &impl GenericClient, run_id: Uuid) -> Result<Option<String>> {
    let row = sql::query_opt(c, POP_RELEASED, &[&run_id]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// [`pop_released`]'s statement: the chat's row was written by this
/// transaction (its `xmin`) and holds no live run.
pub(crate) const POP_RELEASED: &str = "DELETE FROM conversation_queue WHERE seq = (
         SELECT min(q.seq) FROM runs r
           JOIN conversations c ON c.key = r.conversation_key
           JOIN conversation_queue q ON q.key = r.conversation_key
          WHERE r.id = $1 AND c.live_run IS NULL AND c.xmin = xid(pg_current_xact_id()))
     RETURNING handoff_id";

/// The conversation a request waits in, if it waits.
pub async fn queued_in(c: &impl GenericClient, handoff_id: &str) -> Result<Option<String>> {
    let row = sql::query_opt(c, "SELECT key FROM conversation_queue WHERE handoff_id = $1", &[&handoff_id]).await?;
    Ok(row.map(|r| r.get(0)))
}

/// Takes a request off its queue; false when it was not waiting.
pub async fn leave_queue(c: &impl GenericClient, handoff_id: &str) -> Result<bool> {
    Ok(sql::execute(c, "DELETE FROM conversation_queue WHERE handoff_id = $1", &[&handoff_id]).await? == 1)
}
