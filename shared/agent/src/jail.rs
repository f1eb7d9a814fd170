//! The layers of the box an external agent (a `command` or a coding CLI)
//! runs in, beyond its empty environment and its own process group:
//!
//! - **Another user.** Where the worker runs as root, or `BATON_AGENT_USER`
//!   names one, the agent runs as that unprivileged user (default `nobody`
//!   under root), with no supplementary groups: it cannot read the worker's
//!   files or `/proc/<worker>/environ`, and cannot signal or trace it.
//! - **bubblewrap**, where `bwrap` is installed (`BATON_AGENT_BWRAP=auto`, the
//!   default; `off`, or a path): the file system read-only but for the
//!   agent's own directories, its own `/tmp`, an empty `/root`, `/home` and
//!   work root, its own PID namespace (no process of the worker is
//!   visible, and when the agent ends every process it started dies with
//!   the namespace, `setsid` or not), and `--die-with-parent`.
//!
//! The worker itself is made undumpable at start (`PR_SET_DUMPABLE` 0, see
//! [`harden_worker`]), so even a process of its own user cannot read its
//! memory or environment through `/proc`. Not covered: the network (the
//! agent reaches what the worker's host reaches, loopback included).

use std::path::{Path, PathBuf};

/// The fleet's settings for the box.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Jail {
    /// `bwrap`, when agents run inside it.
    pub bwrap: Option<PathBuf>,
    /// The user (uid, gid) agents run as, when not the worker's own.
    pub user: Option<(u32, u32)>,
}

/// What an agent may see and write.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Its working directory (writable).
    pub work: PathBuf,
    /// More places it may write (its HOME, its own `/tmp` source).
    pub writable: Vec<PathBuf>,
    /// Its `/tmp` (bound over the system's when boxed).
    pub tmp: Option<PathBuf>,
    /// Places it may read although they are hidden (a project's mirror under the work root).
    pub readable: Vec<PathBuf>,
    /// Hidden from it (the work root holding other invocations' directories).
    pub hidden: Vec<PathBuf>,
}

impl Jail {
    /// From `BATON_AGENT_USER` and `BATON_AGENT_BWRAP` (the worker's settings read them).
    pub fn from_settings(user: Option<&str>, bwrap: Option<&str>) -> Result<Jail, String> {
        let is_root = rustix::process::geteuid().is_root();
        let user = match user.map(str::trim) {
            Some("" | "self") => None,
            Some(name) => Some(lookup_user(name)?),
            None if is_root => Some(lookup_user("nobody")?),
            None => None,
        };
        let bwrap = match bwrap.map(str::trim) {
            Some("off") => None,
            None | Some("" | "auto") => find_on_path("bwrap"),
            Some(path) => {
                let path = PathBuf::from(path);
                if !path.is_file() {
                    return Err(format!("BATON_AGENT_BWRAP names `{}`, which is not a file", path.display()));
                }
                Some(path)
            }
        };
        Ok(Jail { bwrap, user })
    }

    /// Words for the log at start: what agents run in.
    pub fn describe(&self) -> String {
        let user = match self.user {
            Some((uid, gid)) => format!("as uid {uid}/gid {gid}"),
            None => "as the worker's user".into(),
        };
        let bwrap = match &self.bwrap {
            Some(path) => format!("inside {}", path.display()),
            None => "without bubblewrap".into(),
        };
        format!("external agents run {user}, {bwrap}")
    }

    /// The command that starts `program` in the box. The caller adds the
    /// environment (after `env_clear`), pipes and the process group.
    pub fn command(&self, program: &str, args: &[String], layout: &Layout) -> tokio::process::Command {
        let mut cmd = match &self.bwrap {
            Some(bwrap) => {
                let mut cmd = tokio::process::Command::new(bwrap);
                cmd.args(bwrap_args(layout)).arg("--").arg(program).args(args);
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args);
                cmd
            }
        };
        cmd.current_dir(&layout.work);
        if let Some((uid, gid)) = self.user {
            // Under root, std also drops every supplementary group.
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Gives the agent's user its own directories (after the worker made them).
    pub fn hand_over(&self, dirs: &[&Path]) -> std::io::Result<()> {
        let Some((uid, gid)) = self.user else { return Ok(()) };
        for dir in dirs {
            chown_tree(dir, uid, gid)?;
        }
        Ok(())
    }
}

fn bwrap_args(layout: &Layout) -> Vec<String> {
    let mut args: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/root",
        "--tmpfs",
        "/home",
        "--tmpfs",
        "/run",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let path = |p: &Path| p.to_string_lossy().into_owned();
    // Its own /tmp first: what is bound below /tmp after it stays visible.
    if let Some(tmp) = &layout.tmp {
        args.extend(["--bind".into(), path(tmp), "/tmp".into()]);
    }
    for hidden in &layout.hidden {
        args.extend(["--tmpfs".into(), path(hidden)]);
    }
    for readable in &layout.readable {
        args.extend(["--ro-bind".into(), path(readable), path(readable)]);
    }
    for dir in std::iter::once(&layout.work).chain(&layout.writable) {
        args.extend(["--bind".into(), path(dir), path(dir)]);
    }
    args.extend(["--chdir".into(), path(&layout.work)]);
    args
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    let meta = std::fs::symlink_metadata(path)?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// A user by name or number, from `/etc/passwd`.
fn lookup_user(name: &str) -> Result<(u32, u32), String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let found = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (user, uid, gid) = (fields.first()?, fields.get(2)?, fields.get(3)?);
        (*user == name || *uid == name).then(|| Some((uid.parse().ok()?, gid.parse().ok()?))).flatten()
    });
    match found {
        Some((0, _)) => Err(format!("BATON_AGENT_USER `{name}` is root; agents must run unprivileged")),
        Some(ids) => Ok(ids),
        None => name
            .parse::<u32>()
            .map(|uid| (uid, uid))
            .map_err(|_| format!("BATON_AGENT_USER names `{name}`, which is no user of this system")),
    }
}

/// Makes this process undumpable: no process of its own user (an agent
/// that runs as the worker's user, say) can read its memory or its
/// environment through `/proc`, or attach to it.
pub fn harden_worker() {
    if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
        tracing::warn!(error = %e, "could not make the worker undumpable");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_number_and_root_is_refused() {
        assert_eq!(lookup_user("nobody").unwrap().0, 65534);
        assert!(lookup_user("root").unwrap_err().contains("unprivileged"));
        assert!(lookup_user("no-such-user-here").is_err());
        assert_eq!(Jail::from_settings(Some("self"), Some("off")).unwrap(), Jail::default());
    }

    #[test]
    fn the_box_binds_only_the_agents_own_places_writable() {
        let layout = Layout {
            work: "/w/inv/work".into(),
            writable: vec!["/w/inv/home".into()],
            tmp: Some("/w/inv/tmp".into()),
            readable: vec!["/w/projects".into()],
            hidden: vec!["/w".into()],
        };
        let args = bwrap_args(&layout).join(" ");
        assert!(args.contains("--ro-bind / /") && args.contains("--unshare-pid") && args.contains("--die-with-parent"));
        assert!(args.contains("--bind /w/inv/tmp /tmp --tmpfs /w --ro-bind /w/projects /w/projects"), "{args}");
        assert!(
            args.ends_with("--bind /w/inv/work /w/inv/work --bind /w/inv/home /w/inv/home --chdir /w/inv/work"),
            "{args}"
        );
    }
}
