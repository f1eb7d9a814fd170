//! The run workspace in Postgres: files, what each invocation read, and the
//! run-level commit ledger.

use crate::GenericClient;
use uuid::Uuid;

use crate::{sql, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct File {
    pub content: String,
    pub sha256: String,
    /// The invocation that wrote this version (none for the host's own writes).
    pub written_by: Option<Uuid>,
}

pub async fn read(c: &impl GenericClient, run_id: Uuid, path: &str) -> Result<Option<File>> {
    let row = sql::query_opt(
        c,
        "SELECT content, sha256, written_by FROM workspace_files WHERE run_id = $1 AND path = $2",
        &[&run_id, &path],
    )
    .await?;
    Ok(row.map(|r| File { content: r.get(0), sha256: r.get(1), written_by: r.get(2) }))
}

/// What [`create_or_read`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// The file did not exist: it does now, as given.
    Created,
    /// The file exists: as stored (nothing was written).
    Exists(File),
    /// Another transaction made the file meanwhile (it committed while this
    /// statement waited for it): read it again.
    Raced,
}

/// Makes the file with its first version, by `writer`, if it does not
/// exist; else reads it, in the same statement: a new file costs one
/// statement, an existing one no more than its read did.
pub async fn create_or_read(
    c: &impl GenericClient,
    run_id: Uuid,
    path: &str,
    (content, sha256): (&str, &str),
    writer: Option<Uuid>,
) -> Result<Created> {
    let row = sql::query_one(
        c,
        "WITH made AS (
             INSERT INTO workspace_files (run_id, path, content, sha256, written_by) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, path) DO NOTHING RETURNING 1)
         SELECT EXISTS (SELECT FROM made), f.content, f.sha256, f.written_by
           FROM (SELECT 1) one LEFT JOIN workspace_files f ON f.run_id = $1 AND f.path = $2",
        &[&run_id, &path, &content, &sha256, &writer],
    )
    .await?;
    Ok(match (row.get::<_, bool>(0), row.get::<_, Option<String>>(1)) {
        (true, _) => Created::Created,
        (false, Some(content)) => Created::Exists(File { content, sha256: row.get(2), written_by: row.get(3) }),
        (false, None) => Created::Raced,
    })
}

/// Writes a file's new version, by `writer` (an invocation, which has then
/// seen the version it wrote: [`File::written_by`] says so, and no read mark
/// is written) or by the host (`None`). When the version it replaces was
/// another invocation's, that writer's knowledge of it is kept as its read
/// mark, in the same statement: its next change is then refused as stale,
/// not as unread, as if its own write had been marked as a read. (The
/// replaced version is read from the statement's snapshot, not locked: the
/// upsert below updates that row first, and a row the statement itself
/// updated is not locked again.)
pub async fn write(
    c: &impl GenericClient,
    run_id: Uuid,
    path: &str,
    (content, sha256): (&str, &str),
    writer: Option<Uuid>,
) -> Result<()> {
    sql::execute(
        c,
        "WITH replaced AS (
             SELECT written_by, sha256 FROM workspace_files
              WHERE run_id = $1 AND path = $2 AND written_by IS NOT NULL AND written_by IS DISTINCT FROM $5),
         kept AS (
             INSERT INTO workspace_reads (invocation_id, path, sha256, whole)
             SELECT written_by, $2, sha256, true FROM replaced
             ON CONFLICT (invocation_id, path) DO UPDATE SET sha256 = EXCLUDED.sha256, whole = true)
         INSERT INTO workspace_files (run_id, path, content, sha256, written_by) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (run_id, path) DO UPDATE
            SET content = EXCLUDED.content, sha256 = EXCLUDED.sha256, written_by = EXCLUDED.written_by, updated_at = now()",
        &[&run_id, &path, &content, &sha256, &writer],
    )
    .await?;
    Ok(())
}

/// Every file with its size in bytes.
pub async fn list(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<(String, usize)>> {
    let rows = sql::query(
        c,
        "SELECT path, octet_length(content) FROM workspace_files WHERE run_id = $1 ORDER BY path",
        &[&run_id],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get::<_, i32>(1) as usize)).collect())
}

/// Is there a folder (a file below `path/`) at this path?
pub async fn is_folder(c: &impl GenericClient, run_id: Uuid, path: &str) -> Result<bool> {
    let prefix = format!("{}/%", path.trim_end_matches('/'));
    let row = sql::query_opt(
        c,
        "SELECT 1 FROM workspace_files WHERE run_id = $1 AND path LIKE $2 LIMIT 1",
        &[&run_id, &prefix],
    )
    .await?;
    Ok(row.is_some())
}

pub async fn mark_read(
    c: &impl GenericClient,
    invocation_id: Uuid,
    path: &str,
    sha256: &str,
    whole: bool,
) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO workspace_reads (invocation_id, path, sha256, whole) VALUES ($1, $2, $3, $4)
         ON CONFLICT (invocation_id, path) DO UPDATE SET sha256 = EXCLUDED.sha256, whole = EXCLUDED.whole OR
             (workspace_reads.whole AND workspace_reads.sha256 = EXCLUDED.sha256)",
        &[&invocation_id, &path, &sha256, &whole],
    )
    .await?;
    Ok(())
}

/// What this invocation last read of a file: (sha256, whether it read it whole).
pub async fn read_mark(c: &impl GenericClient, invocation_id: Uuid, path: &str) -> Result<Option<(String, bool)>> {
    let row = sql::query_opt(
        c,
        "SELECT sha256, whole FROM workspace_reads WHERE invocation_id = $1 AND path = $2",
        &[&invocation_id, &path],
    )
    .await?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

pub struct NewCommit<'a> {
    pub run_id: Uuid,
    pub invocation_id: Uuid,
    pub tool_call_id: &'a str,
    pub path: &'a str,
    pub mode: &'a str,
    pub reason: Option<&'a str>,
    pub reply: &'a str,
}

/// Appends to the run's ledger and returns the entry's ordinal (1, 2, …).
/// Keyed by the tool call, so a resumed invocation cannot commit twice: a
/// commit its call made already is returned as it is. Only the invocation's
/// fenced step writes its commits, so a plain insert when none is found
/// does what `ON CONFLICT` did, without its speculative insert's
/// confirmation record in the WAL.
pub async fn commit(c: &impl GenericClient, n: &NewCommit<'_>) -> Result<i32> {
    let row = sql::query_one(
        c,
        "WITH made AS (SELECT ordinal FROM commits WHERE invocation_id = $2 AND tool_call_id = $3),
              added AS (
                  INSERT INTO commits (run_id, ordinal, invocation_id, tool_call_id, path, mode, reason, reply)
                  SELECT $1, coalesce(max(ordinal), 0) + 1, $2, $3, $4, $5, $6, $7 FROM commits
                   WHERE run_id = $1 HAVING NOT EXISTS (SELECT FROM made)
                  RETURNING ordinal)
         SELECT ordinal FROM made UNION ALL SELECT ordinal FROM added",
        &[&n.run_id, &n.invocation_id, &n.tool_call_id, &n.path, &n.mode, &n.reason, &n.reply],
    )
    .await?;
    Ok(row.get(0))
}

/// The reply as of the latest commit, if any.
pub async fn latest_reply(c: &impl GenericClient, run_id: Uuid) -> Result<Option<String>> {
    let row =
        sql::query_opt(c, "SELECT reply FROM commits WHERE run_id = $1 ORDER BY ordinal DESC LIMIT 1", &[&run_id])
            .await?;
    Ok(row.map(|r| r.get(0)))
}

pub async fn ledger(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<(i32, String, String)>> {
    let rows = sql::query(
        c,
        "SELECT c.ordinal, i.profile_id, c.path FROM commits c JOIN invocations i ON i.id = c.invocation_id
          WHERE c.run_id = $1 ORDER BY c.ordinal",
        &[&run_id],
    )
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
}
