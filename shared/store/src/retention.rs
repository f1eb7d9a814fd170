//! Retention: what `baton runs prune` deletes, a batch per transaction.
//!
//! A finished run older than the cutoff goes with everything it owns
//! (journal, transcripts, workspace, ledger, questions, coding changes,
//! tasks, invocations). Its request's trail goes with it (handoff events,
//! every bridge message as queued, callbacks, answers, cancels), and so does
//! the trail of a request that got no run (refused, cancelled before it
//! ran) once its reply is older than the cutoff. The request row stays: it
//! keeps a repeated request id from running again, and `pruned_at` says
//! when its trail went. By age alone: answers that belong to no request
//! still kept (an unknown handoff's, say), conversations with no live run
//! and nobody waiting, and coding agents' sessions not resumed since.

use std::time::Duration;

use crate::GenericClient;
use baton_domain::run::state::RunStatus;
use uuid::Uuid;

use crate::{sql, Result};

const RUNNING: &str = RunStatus::Running.as_str();

/// What one batch pruned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub runs: u64,
    /// Requests whose trail went (with their run, or alone).
    pub requests: u64,
    /// Answers kept for no request left.
    pub answers: u64,
    pub conversations: u64,
    pub coding_sessions: u64,
}

impl Pruned {
    /// Whether any kind filled its batch (there may be more of it).
    pub fn filled(&self, limit: i64) -> bool {
        let limit = u64::try_from(limit).unwrap_or(0);
        [self.runs, self.requests, self.answers, self.conversations, self.coding_sessions].iter().any(|n| *n >= limit)
    }

    pub fn add(&mut self, other: Pruned) {
        self.runs += other.runs;
        self.requests += other.requests;
        self.answers += other.answers;
        self.conversations += other.conversations;
        self.coding_sessions += other.coding_sessions;
    }
}

/// Prunes up to `limit` of each kind that ended more than `older_than` ago
/// (see the module doc).
pub async fn prune(c: &impl GenericClient, older_than: Duration, limit: i64) -> Result<Pruned> {
    let secs = older_than.as_secs_f64();
    let runs = old_runs(c, secs, limit).await?;
    let requests = trails(c, secs, &runs, limit).await?;
    delete_runs(c, &runs).await?;
    delete_trails(c, &requests).await?;
    let (answers, conversations, coding_sessions) = by_age(c, secs, limit).await?;
    Ok(Pruned { runs: runs.len() as u64, requests: requests.len() as u64, answers, conversations, coding_sessions })
}

/// Up to `limit` finished runs older than the cutoff whose bridge was told.
async fn old_runs(c: &impl GenericClient, secs: f64, limit: i64) -> Result<Vec<Uuid>> {
    let rows = sql::query(
        c,
        // By age of creation (`runs_by_created`): a run finished before the
        // cutoff was created before it (V42).
        "SELECT id FROM runs
          WHERE created_at < now() - make_interval(secs => $1)
            AND status <> $3 AND finished_at < now() - make_interval(secs => $1)
            -- never a run whose bridge has not been told yet
            AND NOT EXISTS (SELECT 1 FROM handoff_requests h WHERE h.id = runs.handoff_id AND h.reply_sent_at IS NULL)
          ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED",
        &[&secs, &limit, &RUNNING],
    )
    .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Up to `limit` requests whose trail goes: those of `runs` first, then
/// replied ones older than the cutoff whose run is gone or never was.
async fn trails(c: &impl GenericClient, secs: f64, runs: &[Uuid], limit: i64) -> Result<Vec<String>> {
    let rows = sql::query(
        c,
        "SELECT h.id FROM handoff_requests h
          WHERE h.pruned_at IS NULL
            AND (h.id IN (SELECT handoff_id FROM runs WHERE id = ANY($2))
                 OR (h.reply_sent_at < now() - make_interval(secs => $1)
                     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.handoff_id = h.id)))
          ORDER BY h.id IN (SELECT handoff_id FROM runs WHERE id = ANY($2)) DESC, h.reply_sent_at
          LIMIT $3 FOR UPDATE OF h SKIP LOCKED",
        &[&secs, &runs, &limit],
    )
    .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

async fn delete_runs(c: &impl GenericClient, ids: &[Uuid]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    for statement in [
        // Before the invocations they name.
        "DELETE FROM questions WHERE run_id = ANY($1)",
        "DELETE FROM journal WHERE run_id = ANY($1)",
        "DELETE FROM transcript WHERE invocation_id IN (SELECT id FROM invocations WHERE run_id = ANY($1))",
        "DELETE FROM workspace_reads WHERE invocation_id IN (SELECT id FROM invocations WHERE run_id = ANY($1))",
        "DELETE FROM workspace_files WHERE run_id = ANY($1)",
        "DELETE FROM commits WHERE run_id = ANY($1)",
        "DELETE FROM coding_changes WHERE run_id = ANY($1)",
        "DELETE FROM tasks WHERE run_id = ANY($1)",
        "DELETE FROM invocations WHERE run_id = ANY($1)",
        // A run's request, through its key (a run serves one request).
        "UPDATE handoff_requests SET run_id = NULL
          WHERE id IN (SELECT handoff_id FROM runs WHERE id = ANY($1)) AND run_id = ANY($1)",
        "DELETE FROM runs WHERE id = ANY($1)",
    ] {
        sql::execute(c, statement, &[&ids]).await?;
    }
    Ok(())
}

async fn delete_trails(c: &impl GenericClient, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    for statement in [
        "DELETE FROM questions WHERE handoff_id = ANY($1)",
        "DELETE FROM handoff_log WHERE handoff_id = ANY($1)",
        "DELETE FROM bridge_messages WHERE handoff_id = ANY($1) AND NOT pending",
        "DELETE FROM callbacks WHERE handoff_id = ANY($1)",
        "DELETE FROM bridge_answers WHERE handoff_id = ANY($1)",
        "DELETE FROM bridge_cancels WHERE handoff_id = ANY($1)",
        "UPDATE handoff_requests SET pruned_at = now(), run_id = NULL WHERE id = ANY($1)",
    ] {
        sql::execute(c, statement, &[&ids]).await?;
    }
    Ok(())
}

/// Answers, conversations and coding sessions older than the cutoff that
/// nothing kept still needs; up to `limit` of each.
async fn by_age(c: &impl GenericClient, secs: f64, limit: i64) -> Result<(u64, u64, u64)> {
    let answers = sql::execute(
        c,
        "DELETE FROM bridge_answers WHERE id IN (
             SELECT a.id FROM bridge_answers a
              WHERE a.received_at < now() - make_interval(secs => $1)
                AND NOT EXISTS (SELECT 1 FROM handoff_requests h WHERE h.id = a.handoff_id AND h.pruned_at IS NULL)
              LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&secs, &limit],
    )
    .await?;
    // A conversation row is made again by the next request of its chat.
    let conversations = sql::execute(
        c,
        "DELETE FROM conversations WHERE key IN (
             SELECT v.key FROM conversations v
              WHERE v.updated_at < now() - make_interval(secs => $1)
                AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = v.live_run AND r.status = $3)
                AND NOT EXISTS (SELECT 1 FROM conversation_queue q WHERE q.key = v.key)
              LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&secs, &limit, &RUNNING],
    )
    .await?;
    let coding_sessions = sql::execute(
        c,
        "DELETE FROM coding_sessions WHERE (conversation_key, target_agent, project) IN (
             SELECT conversation_key, target_agent, project FROM coding_sessions
              WHERE updated_at < now() - make_interval(secs => $1)
              LIMIT $2 FOR UPDATE SKIP LOCKED)",
        &[&secs, &limit],
    )
    .await?;
    Ok((answers, conversations, coding_sessions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_that_filled_any_kind_asks_for_another_and_totals_add_up() {
        let some = Pruned { runs: 2, requests: 3, answers: 0, conversations: 1, coding_sessions: 0 };
        assert!(!some.filled(5));
        assert!(some.filled(3), "the requests filled their batch");
        assert!(!Pruned::default().filled(1));
        let mut total = Pruned::default();
        total.add(some);
        total.add(Pruned { coding_sessions: 4, ..some });
        assert_eq!(total, Pruned { runs: 4, requests: 6, answers: 0, conversations: 2, coding_sessions: 4 });
    }
}
