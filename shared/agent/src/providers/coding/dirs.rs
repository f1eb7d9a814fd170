//! One coding invocation's directories.

use std::path::{Path, PathBuf};

use baton_store::coding::SessionKey;

/// One invocation's directories: the checkout, HOME and `/tmp` the agent
/// writes, and a scratch place only the worker uses.
///
/// A run that may continue a session gets the same path each time (named
/// after the session's key), because some CLIs find a session by its
/// working directory; a lock keeps two invocations of one key (a rare
/// overlap) apart, the second taking a path of its own.
pub(super) struct Dirs {
    root: PathBuf,
    /// Held while the directories are in use.
    _lock: Option<std::fs::File>,
    pub(super) work: PathBuf,
    pub(super) home: PathBuf,
    pub(super) tmp: PathBuf,
    pub(super) scratch: PathBuf,
}

impl Dirs {
    pub(super) fn create(work_root: &Path, key: Option<&SessionKey>) -> std::io::Result<Dirs> {
        use std::os::unix::fs::PermissionsExt;
        let agents = work_root.join("agents");
        std::fs::create_dir_all(&agents)?;
        let (root, lock) = match key.and_then(|key| Self::claim(&agents, key)) {
            Some((root, lock)) => (root, Some(lock)),
            None => (agents.join(uuid::Uuid::new_v4().simple().to_string()), None),
        };
        if root.exists() {
            // Left by an invocation that died; its lock is free, so nothing uses it.
            std::fs::remove_dir_all(&root)?;
        }
        std::fs::create_dir_all(&root)?;
        // Passable, not listable, by the agent's user; the rest is its own.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))?;
        let dirs = Dirs {
            work: root.join("work"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            scratch: root.join("scratch"),
            root,
            _lock: lock,
        };
        for dir in [&dirs.home, &dirs.tmp, &dirs.scratch] {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(dirs)
    }

    /// The session's own path and its lock, unless another invocation holds it.
    fn claim(agents: &Path, key: &SessionKey) -> Option<(PathBuf, std::fs::File)> {
        let name = format!("{}\u{0}{}\u{0}{}", key.conversation, key.target_agent, key.project);
        let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).simple().to_string();
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(agents.join(format!("{id}.lock")))
            .ok()?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some((agents.join(id), lock))
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::warn!(error = %e, dir = %self.root.display(), "could not remove a coding agent's directory");
        }
    }
}
