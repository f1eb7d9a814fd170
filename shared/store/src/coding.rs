//! Coding agents' records (docs/profiles.md#coding-agents): what each coding invocation changed
//! (written in the fenced transaction that stores its result), the sessions
//! a conversation's next request resumes, and the `[[projects]]` section.

use crate::GenericClient;
use baton_domain::projects::{Changes, Project};
use serde_json::Value;
use uuid::Uuid;

use crate::profiles::settings;
use crate::{sql, Result};

/// The most of a patch kept with a run.
pub const MAX_PATCH_BYTES: usize = 4 * 1024 * 1024;

/// The projects loaded with the profiles file.
pub async fn projects(c: &impl GenericClient) -> Result<Vec<Project>> {
    Ok(match settings::get(c, settings::PROJECTS).await? {
        Some(value) => serde_json::from_value(value)?,
        None => vec![],
    })
}

/// The request a run serves: its stored body (as the bridge sent it, after disclosure).
pub async fn request_body_of_run(c: &impl GenericClient, run_id: Uuid) -> Result<Option<(String, Value)>> {
    let sql = "SELECT r.id, r.body FROM handoff_requests r JOIN runs ON runs.handoff_id = r.id WHERE runs.id = $1";
    let Some(row) = sql::query_opt(c, sql, &[&run_id]).await? else { return Ok(None) };
    let id: String = row.get(0);
    let body = crate::requests::packed::unpack(&id, row.get(1))?;
    Ok(Some((id, body)))
}

/// One coding invocation's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChanges {
    pub invocation_id: Uuid,
    pub run_id: Uuid,
    pub changes: Changes,
    pub patch: String,
    pub push_error: Option<String>,
}

pub async fn put_changes(c: &impl GenericClient, s: &StoredChanges) -> Result<()> {
    let mut end = s.patch.len().min(MAX_PATCH_BYTES);
    while !s.patch.is_char_boundary(end) {
        end -= 1;
    }
    sql::execute(
        c,
        "INSERT INTO coding_changes (invocation_id, run_id, project, changes, patch, push_error)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (invocation_id) DO UPDATE SET changes = EXCLUDED.changes, patch = EXCLUDED.patch,
             push_error = EXCLUDED.push_error",
        &[
            &s.invocation_id,
            &s.run_id,
            &s.changes.project,
            &serde_json::to_value(&s.changes)?,
            &&s.patch[..end],
            &s.push_error,
        ],
    )
    .await?;
    Ok(())
}

/// Every coding invocation's diff of a run, oldest first (the console's run page).
pub async fn changes_of_run(c: &impl GenericClient, run_id: Uuid) -> Result<Vec<StoredChanges>> {
    let rows = sql::query(
        c,
        "SELECT invocation_id, run_id, changes, patch, push_error FROM coding_changes
          WHERE run_id = $1 ORDER BY created_at, invocation_id",
        &[&run_id],
    )
    .await?;
    rows.iter()
        .map(|r| {
            Ok(StoredChanges {
                invocation_id: r.get(0),
                run_id: r.get(1),
                changes: serde_json::from_value(r.get(2))?,
                patch: r.get(3),
                push_error: r.get(4),
            })
        })
        .collect()
}

/// What the reply's `result.changes` says: the last coding invocation's diff.
pub async fn reply_changes(c: &impl GenericClient, run_id: Uuid) -> Result<Option<Changes>> {
    let row = sql::query_opt(
        c,
        "SELECT changes FROM coding_changes WHERE run_id = $1 ORDER BY created_at DESC, invocation_id DESC LIMIT 1",
        &[&run_id],
    )
    .await?;
    row.map(|r| serde_json::from_value(r.get(0))).transpose().map_err(Into::into)
}

/// Which session a conversation's request continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionKey {
    pub conversation: String,
    pub target_agent: String,
    /// `""` without a project.
    pub project: String,
}

/// A CLI session a later request of the conversation resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub cli: String,
    pub session_id: String,
    /// The branch it pushed, where the next checkout starts.
    pub branch: Option<String>,
    /// The CLI's session files, as a tar.
    pub state: Option<Vec<u8>>,
}

pub async fn session(c: &impl GenericClient, key: &SessionKey) -> Result<Option<Session>> {
    let row = sql::query_opt(
        c,
        "SELECT cli, session_id, branch, state FROM coding_sessions
          WHERE conversation_key = $1 AND target_agent = $2 AND project = $3",
        &[&key.conversation, &key.target_agent, &key.project],
    )
    .await?;
    Ok(row.map(|r| Session { cli: r.get(0), session_id: r.get(1), branch: r.get(2), state: r.get(3) }))
}

pub async fn put_session(c: &impl GenericClient, key: &SessionKey, s: &Session) -> Result<()> {
    sql::execute(
        c,
        "INSERT INTO coding_sessions (conversation_key, target_agent, project, cli, session_id, branch, state)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (conversation_key, target_agent, project) DO UPDATE
            SET cli = EXCLUDED.cli, session_id = EXCLUDED.session_id, branch = EXCLUDED.branch,
                state = EXCLUDED.state, updated_at = now()",
        &[&key.conversation, &key.target_agent, &key.project, &s.cli, &s.session_id, &s.branch, &s.state],
    )
    .await?;
    Ok(())
}
