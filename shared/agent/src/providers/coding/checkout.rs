//! A coding invocation's checkout of its project (docs/profiles.md#coding-agents), and what
//! becomes of the agent's work.
//!
//! Each project is mirrored once per worker (`<work root>/projects/…git`,
//! fetched before each run), and each invocation gets a clone of the mirror
//! that shares its objects (`git clone --shared`: no copy of the history),
//! removed with the invocation's directory.
//!
//! The agent owns its checkout, `.git` included, so nothing Baton runs
//! afterwards trusts that `.git` (its hooks, its config, a filter it
//! declares): the diff, the commit and the push are made from the mirror,
//! which the agent cannot write when it runs boxed, with a private index
//! over the checkout's files, no hooks, and no global or system git config.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use baton_domain::projects::{self, Changes, Project};
use tokio::io::AsyncReadExt;

/// How long one git command may take (a clone of a large project included).
const GIT_TIMEOUT: Duration = Duration::from_secs(600);
/// The most of a git command's output that is read.
const GIT_OUTPUT_CAP: u64 = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GitError(pub String);

/// A project's mirror on this worker.
pub struct Mirror {
    pub dir: PathBuf,
    project: Project,
}

/// One checkout: where it is, and the commit it started from.
pub struct Checkout {
    pub dir: PathBuf,
    pub base: String,
    /// The branch it started from when that was not the project's ref
    /// (a resumed session's, or a retried run's).
    pub from_branch: Option<String>,
}

/// The work of an agent, made a commit and pushed.
pub struct Outcome {
    pub changes: Changes,
    pub patch: String,
    pub push_error: Option<String>,
}

/// Runs git with nothing of the worker's git setup or the agent's hooks,
/// and returns its stdout.
async fn git(dir: Option<&Path>, args: &[&str], env: &[(&str, &str)]) -> Result<String, GitError> {
    let mut cmd = tokio::process::Command::new("git");
    if let Some(dir) = dir {
        cmd.arg("-C").arg(dir);
    }
    cmd.args(["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "protocol.file.allow=always"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_else(|_| baton_domain::policy::sandbox::DEFAULT_PATH.into()))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // The worker's own variables a push needs to reach its remote (keys stay out of the agent's box).
    for name in ["HOME", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "HTTPS_PROXY", "https_proxy", "NO_PROXY"] {
        if let Ok(value) = std::env::var(name) {
            cmd.env(name, value);
        }
    }
    let shown = args.first().copied().unwrap_or("");
    let mut child = cmd.spawn().map_err(|e| GitError(format!("could not run git: {e}")))?;
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let run = async {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let (mut out, mut err) = (out.take(GIT_OUTPUT_CAP), err.take(64 * 1024));
        let (a, b) = tokio::join!(out.read_to_end(&mut stdout), err.read_to_end(&mut stderr));
        a.and(b).map_err(|e| GitError(format!("reading git {shown}: {e}")))?;
        let status = child.wait().await.map_err(|e| GitError(format!("waiting for git {shown}: {e}")))?;
        Ok::<_, GitError>((status, stdout, stderr))
    };
    let (status, stdout, stderr) = tokio::time::timeout(GIT_TIMEOUT, run)
        .await
        .map_err(|_| GitError(format!("git {shown} did not finish in {} s", GIT_TIMEOUT.as_secs())))??;
    if !status.success() {
        // The last few lines: a remote's own reason comes before git's summary.
        let stderr = String::from_utf8_lossy(&stderr);
        let mut last: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).rev().take(4).collect();
        last.reverse();
        return Err(GitError(format!("git {shown} failed: {}", last.join(" / "))));
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// A file name for the project's mirror: its id, made safe, and a hash of its URL.
fn mirror_name(project: &Project) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    project.git.hash(&mut hasher);
    let id: String = project.id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    format!("{id}-{:016x}.git", hasher.finish())
}

impl Mirror {
    /// The project's mirror under `root`, cloned the first time and fetched
    /// every other, so the run starts from what the repository has now.
    pub async fn fetch(root: &Path, project: &Project) -> Result<Mirror, GitError> {
        let dir = root.join(mirror_name(project));
        let unreachable =
            |e: GitError| GitError(format!("the repository of project `{}` cannot be reached: {e}", project.id));
        if dir.join("HEAD").exists() {
            git(Some(&dir), &["fetch", "--prune", "--quiet", "origin"], &[]).await.map_err(unreachable)?;
        } else {
            std::fs::create_dir_all(root).map_err(|e| GitError(format!("creating {}: {e}", root.display())))?;
            let partial = root.join(format!(".{}.{}", mirror_name(project), uuid::Uuid::new_v4()));
            let path = partial.to_string_lossy().into_owned();
            let cloned = git(None, &["clone", "--mirror", "--quiet", "--", &project.git, &path], &[]).await;
            if let Err(e) = cloned {
                let _ = std::fs::remove_dir_all(&partial);
                return Err(unreachable(e));
            }
            // Another invocation may have won the race: its mirror is as good.
            if std::fs::rename(&partial, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&partial);
            }
        }
        Ok(Mirror { dir, project: project.clone() })
    }

    async fn commit_of(&self, rev: &str) -> Option<String> {
        let spec = format!("{rev}^{{commit}}");
        git(Some(&self.dir), &["rev-parse", "--verify", "--quiet", &spec], &[]).await.ok().map(|s| s.trim().to_string())
    }

    /// A clone at `dir` that starts from the first of `branches` the
    /// repository has, else from the project's ref.
    pub async fn checkout(&self, dir: &Path, branches: &[&str]) -> Result<Checkout, GitError> {
        let mut from_branch = None;
        let mut base = None;
        for branch in branches {
            if let Some(commit) = self.commit_of(&format!("refs/heads/{branch}")).await {
                (from_branch, base) = (Some(branch.to_string()), Some(commit));
                break;
            }
        }
        let base = match base {
            Some(base) => base,
            None => self.commit_of(self.project.start_ref()).await.ok_or_else(|| {
                GitError(format!("project `{}` has no ref `{}`", self.project.id, self.project.start_ref()))
            })?,
        };
        let (mirror, target) = (self.dir.to_string_lossy().into_owned(), dir.to_string_lossy().into_owned());
        git(None, &["clone", "--shared", "--no-checkout", "--quiet", "--", &mirror, &target], &[]).await?;
        let local = from_branch.clone().unwrap_or_else(|| "baton-work".into());
        git(Some(dir), &["checkout", "--quiet", "-B", &local, &base], &[]).await?;
        Ok(Checkout { dir: dir.to_path_buf(), base, from_branch })
    }

    /// The checkout's files against its base, as a patch and a summary;
    /// when the project pushes and something changed, one commit naming the
    /// request on top of the base, pushed (never forced) to `branch`.
    pub async fn conclude(
        &self,
        checkout: &Checkout,
        scratch: &Path,
        branch: Option<&str>,
        message: &str,
    ) -> Result<Outcome, GitError> {
        let index = scratch.join("baton.index");
        let (index, work) = (index.to_string_lossy().into_owned(), checkout.dir.to_string_lossy().into_owned());
        let git_dir = self.dir.to_string_lossy().into_owned();
        let (name, email) = self.project.author();
        let env = [
            ("GIT_DIR", git_dir.as_str()),
            ("GIT_INDEX_FILE", index.as_str()),
            ("GIT_WORK_TREE", work.as_str()),
            ("GIT_AUTHOR_NAME", name),
            ("GIT_AUTHOR_EMAIL", email),
            ("GIT_COMMITTER_NAME", name),
            ("GIT_COMMITTER_EMAIL", email),
        ];
        let dir = Some(checkout.dir.as_path());
        git(dir, &["read-tree", &checkout.base], &env).await?;
        git(dir, &["add", "--all", "--", "."], &env).await?;
        let numstat = git(dir, &["diff", "--cached", "--no-renames", "--numstat", &checkout.base], &env).await?;
        let patch = git(dir, &["diff", "--cached", "--no-renames", "--binary", &checkout.base], &env).await?;
        let mut changes = projects::numstat(&self.project.id, &numstat);
        let mut push_error = None;
        if let (Some(branch), false) = (branch, changes.files.is_empty()) {
            let tree = git(dir, &["write-tree"], &env).await?;
            let commit = git(dir, &["commit-tree", tree.trim(), "-p", &checkout.base, "-m", message], &env).await?;
            let commit = commit.trim().to_string();
            let refspec = format!("{commit}:refs/heads/{branch}");
            match git(dir, &["push", "--quiet", "--", &self.project.git, &refspec], &env).await {
                Ok(_) => {
                    // The mirror knows the branch now, so a follow-up starts from it even before the next fetch.
                    let _ = git(dir, &["update-ref", &format!("refs/heads/{branch}"), &commit], &env).await;
                    (changes.branch, changes.commit) = (Some(branch.to_string()), Some(commit));
                }
                Err(e) => push_error = Some(format!("the changes could not be pushed to `{branch}`: {e}")),
            }
        }
        Ok(Outcome { changes, patch, push_error })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sh(dir: &Path, script: &str) {
        let status = tokio::process::Command::new("sh").arg("-c").arg(script).current_dir(dir).status().await.unwrap();
        assert!(status.success(), "{script}");
    }

    /// A bare repository with one commit on `main`.
    async fn origin(root: &Path) -> Project {
        sh(
            root,
            "git init -q -b main seed && cd seed && echo one > a.txt && git add a.txt \
             && git -c user.name=t -c user.email=t@t commit -qm init && cd .. && git clone -q --bare seed origin.git",
        )
        .await;
        Project {
            id: "web".into(),
            git: root.join("origin.git").to_string_lossy().into_owned(),
            git_ref: Some("main".into()),
            push: Some("baton/{handoffId}".into()),
            author_name: None,
            author_email: None,
        }
    }

    #[tokio::test]
    async fn a_change_is_diffed_committed_and_pushed_and_the_next_run_starts_from_it() {
        let root = tempfile::tempdir().unwrap();
        let project = origin(root.path()).await;
        let mirror = Mirror::fetch(&root.path().join("mirrors"), &project).await.unwrap();
        let checkout = mirror.checkout(&root.path().join("w1"), &["baton/h1"]).await.unwrap();
        assert!(checkout.from_branch.is_none());
        // The agent edits a file, adds one, and plants a hook that must never run.
        sh(&checkout.dir, "echo two >> a.txt && echo new > b.txt && printf '#!/bin/sh\\ntouch /tmp/pwned-$$\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit").await;
        let scratch = tempfile::tempdir().unwrap();
        let out = mirror.conclude(&checkout, scratch.path(), Some("baton/h1"), "Edit\n\nHandoff: h1\n").await.unwrap();
        assert_eq!(out.changes.files, ["a.txt", "b.txt"]);
        assert_eq!((out.changes.insertions, out.changes.deletions), (2, 0));
        assert!(out.patch.contains("+two"), "{}", out.patch);
        assert_eq!(out.changes.branch.as_deref(), Some("baton/h1"));
        let pushed = git(None, &["--git-dir", &project.git, "log", "--format=%an %s", "baton/h1"], &[]).await.unwrap();
        assert!(pushed.starts_with("Baton Edit"), "{pushed}");
        // A follow-up starts from the pushed branch and adds a commit on top.
        let mirror = Mirror::fetch(&root.path().join("mirrors"), &project).await.unwrap();
        let again = mirror.checkout(&root.path().join("w2"), &["baton/h1"]).await.unwrap();
        assert_eq!(again.from_branch.as_deref(), Some("baton/h1"));
        sh(&again.dir, "echo three >> b.txt").await;
        let out = mirror.conclude(&again, scratch.path(), Some("baton/h1"), "More").await.unwrap();
        assert_eq!(out.changes.files, ["b.txt"]);
        assert!(out.push_error.is_none(), "{:?}", out.push_error);
        let count = git(None, &["--git-dir", &project.git, "rev-list", "--count", "baton/h1"], &[]).await.unwrap();
        assert_eq!(count.trim(), "3");
    }

    #[tokio::test]
    async fn nothing_changed_is_no_commit_and_an_unreachable_repository_is_named() {
        let root = tempfile::tempdir().unwrap();
        let project = origin(root.path()).await;
        let mirror = Mirror::fetch(&root.path().join("mirrors"), &project).await.unwrap();
        let checkout = mirror.checkout(&root.path().join("w"), &[]).await.unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let out = mirror.conclude(&checkout, scratch.path(), Some("baton/h"), "m").await.unwrap();
        assert!(out.changes.files.is_empty() && out.changes.branch.is_none() && out.changes.commit.is_none());
        let gone = Project { git: root.path().join("nowhere.git").to_string_lossy().into_owned(), ..project };
        let err = Mirror::fetch(&root.path().join("mirrors"), &gone).await.err().unwrap().to_string();
        assert!(err.contains("cannot be reached"), "{err}");
    }
}
