//! A CLI's session kept per conversation, target and project: its id, the
//! branch it pushed, and the session files of the box's HOME as a tar (only
//! regular files and directories: a link the agent planted is never
//! followed, neither when packed nor when unpacked), so whichever worker
//! takes the conversation's next request can resume it.

use std::path::Path;

use baton_domain::profiles::coding::CodingCli;
use baton_store::coding::{Session, SessionKey, StoredChanges};

/// The most session state kept; a larger HOME starts the next request afresh.
const MAX_STATE_BYTES: u64 = 16 * 1024 * 1024;
/// Directories at the top of the HOME that are caches, never session state
/// (Gemini CLI keeps its sessions under `.gemini/tmp`, so only the top is skipped).
const SKIPPED: &[&str] = &[".cache", ".npm", "node_modules"];

/// What a coding invocation leaves for the transaction that stores its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodingOutcome {
    pub changes: Option<StoredChanges>,
    pub session: Option<(SessionKey, Session)>,
}

/// The session to keep; its files when they fit.
pub(super) fn save(cli: CodingCli, session_id: &str, branch: Option<String>, home: &Path) -> Session {
    let state = match pack(home) {
        Ok(bytes) if bytes.len() as u64 <= MAX_STATE_BYTES => Some(bytes),
        Ok(bytes) => {
            tracing::warn!(bytes = bytes.len(), "a coding agent's session files are too large to keep");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not pack a coding agent's session files");
            None
        }
    };
    Session { cli: cli.as_str().to_string(), session_id: session_id.to_string(), branch, state }
}

fn pack(home: &Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut total = 0u64;
    add_dir(&mut builder, home, Path::new(""), &mut total)?;
    builder.into_inner()
}

fn add_dir(builder: &mut tar::Builder<Vec<u8>>, root: &Path, rel: &Path, total: &mut u64) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let name = entry.file_name();
        if rel.as_os_str().is_empty() && SKIPPED.iter().any(|s| name == *s) {
            continue;
        }
        let (path, kind) = (rel.join(&name), entry.file_type()?);
        if kind.is_dir() {
            builder.append_dir(&path, entry.path())?;
            add_dir(builder, root, &path, total)?;
        } else if kind.is_file() {
            *total += entry.metadata()?.len();
            if *total > MAX_STATE_BYTES {
                return Err(std::io::Error::other("over the size kept"));
            }
            builder.append_path_with_name(entry.path(), &path)?;
        }
    }
    Ok(())
}

/// Unpacks a kept session into the new HOME; why not, when it cannot be.
pub(super) fn restore(session: &Session, home: &Path) -> Result<(), String> {
    let Some(state) = &session.state else {
        return Err("its session files were not kept (too large, or unreadable)".into());
    };
    let mut archive = tar::Archive::new(state.as_slice());
    let mut total = 0u64;
    for entry in archive.entries().map_err(|e| format!("its session files do not read: {e}"))? {
        let mut entry = entry.map_err(|e| format!("its session files do not read: {e}"))?;
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        total += entry.size();
        if total > MAX_STATE_BYTES {
            return Err("its session files are larger than what is kept".into());
        }
        // `unpack_in` refuses a path that leaves `home`.
        entry.unpack_in(home).map_err(|e| format!("its session files could not be restored: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_files_round_trip_without_links_or_caches() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".claude/projects")).unwrap();
        std::fs::write(home.path().join(".claude/projects/s.jsonl"), "turn").unwrap();
        std::fs::create_dir_all(home.path().join(".cache")).unwrap();
        std::fs::write(home.path().join(".cache/big"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", home.path().join("link")).unwrap();
        let session = save(CodingCli::ClaudeCode, "s", Some("baton/h".into()), home.path());
        let again = tempfile::tempdir().unwrap();
        restore(&session, again.path()).unwrap();
        assert_eq!(std::fs::read_to_string(again.path().join(".claude/projects/s.jsonl")).unwrap(), "turn");
        assert!(!again.path().join(".cache").exists() && !again.path().join("link").exists());
        let lost = Session { state: None, ..session };
        assert!(restore(&lost, again.path()).unwrap_err().contains("not kept"));
    }
}
