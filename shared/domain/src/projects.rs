//! `[[projects]]` (docs/profiles.md#coding-agents): the repositories coding agents work on,
//! by the `projectId` a request names; the branch a run's changes are
//! pushed to, and the summary of a diff. Pure: the git side lives in the
//! agent crate.

use serde::{Deserialize, Serialize};

/// The author of the commits Baton makes, unless a project names its own.
pub const DEFAULT_AUTHOR_NAME: &str = "Baton";
pub const DEFAULT_AUTHOR_EMAIL: &str = "baton@localhost";

/// What the `push` pattern's placeholder is replaced with.
pub const HANDOFF_ID_PLACEHOLDER: &str = "{handoffId}";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Project {
    /// `HandoffRequest.projectId`.
    pub id: String,
    /// Any URL or path git can clone from.
    pub git: String,
    /// What each run starts from (default: the repository's default branch).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The branch the changes are committed and pushed to, `{handoffId}` replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author_email: Option<String>,
}

impl Project {
    /// What a run checks out: the ref, or the remote's default branch.
    pub fn start_ref(&self) -> &str {
        self.git_ref.as_deref().unwrap_or("HEAD")
    }

    /// The branch a request's changes go to, if the project pushes.
    pub fn branch_for(&self, handoff_id: &str) -> Option<String> {
        self.push.as_deref().map(|pattern| branch_name(pattern, handoff_id))
    }

    pub fn author(&self) -> (&str, &str) {
        (
            self.author_name.as_deref().unwrap_or(DEFAULT_AUTHOR_NAME),
            self.author_email.as_deref().unwrap_or(DEFAULT_AUTHOR_EMAIL),
        )
    }

    /// Why the project is unusable (empty when fine).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = vec![];
        let id = &self.id;
        if id.trim().is_empty() {
            problems.push("a project has an empty id".to_string());
        }
        if self.git.trim().is_empty() || self.git.starts_with('-') {
            problems.push(format!("project `{id}`: `git` must name a repository"));
        }
        if let Some(r) = &self.git_ref {
            if !is_valid_ref(r) {
                problems.push(format!("project `{id}`: `ref = \"{r}\"` is not a valid git ref name"));
            }
        }
        if let Some(pattern) = &self.push {
            if !is_valid_ref(&branch_name(pattern, "h")) {
                problems.push(format!("project `{id}`: `push = \"{pattern}\"` does not make a valid branch name"));
            }
        }
        for (key, value) in [("author_name", &self.author_name), ("author_email", &self.author_email)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty() || v.contains(['<', '>', '\n'])) {
                problems.push(format!("project `{id}`: `{key}` must be a plain name or address"));
            }
        }
        problems
    }
}

/// The `push` pattern with the handoff id made a valid git ref component:
/// every character git refuses becomes `-`, and no `..`, leading dot or
/// `.lock` ending survives.
pub fn branch_name(pattern: &str, handoff_id: &str) -> String {
    let mut id: String =
        handoff_id.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).collect();
    while id.contains("..") {
        id = id.replace("..", ".");
    }
    let id = id.trim_start_matches(['.', '-']).trim_end_matches('.');
    let id = id.strip_suffix(".lock").unwrap_or(id);
    let id = if id.is_empty() { "handoff" } else { id };
    pattern.replace(HANDOFF_ID_PLACEHOLDER, id)
}

/// `git check-ref-format`'s rules for a branch name.
pub fn is_valid_ref(name: &str) -> bool {
    let bad_char = |c: char| c.is_ascii_control() || " ~^:?*[\\".contains(c);
    !name.is_empty()
        && name != "@"
        && !name.contains(bad_char)
        && !name.contains("..")
        && !name.contains("@{")
        && !name.contains("//")
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.starts_with('-')
        && name.split('/').all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
}

/// What a coding agent changed: `BridgeReply.result.changes`.
pub type Changes = crate::protocol::bridge::ReplyChanges;

/// Files and line counts from `git diff --numstat` (binary files count no lines).
pub fn numstat(project: &str, text: &str) -> Changes {
    let mut changes = Changes { project: project.to_string(), ..Default::default() };
    for line in text.lines() {
        let mut cols = line.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (cols.next(), cols.next(), cols.next()) else { continue };
        changes.insertions = changes.insertions.saturating_add(added.parse::<i32>().unwrap_or(0));
        changes.deletions = changes.deletions.saturating_add(removed.parse::<i32>().unwrap_or(0));
        changes.files.push(path.to_string());
    }
    changes
}

/// A one-paragraph account of the changes, in English, for the reply's text.
pub fn summary(changes: &Changes) -> String {
    if changes.files.is_empty() {
        return format!("No files in `{}` were changed.", changes.project);
    }
    let shown: Vec<&str> = changes.files.iter().take(10).map(String::as_str).collect();
    let more = changes.files.len().saturating_sub(shown.len());
    let mut text = format!(
        "Changed {} file{} in `{}` (+{} −{}): {}{}.",
        changes.files.len(),
        if changes.files.len() == 1 { "" } else { "s" },
        changes.project,
        changes.insertions,
        changes.deletions,
        shown.join(", "),
        if more > 0 { format!(" and {more} more") } else { String::new() },
    );
    if let (Some(branch), Some(commit)) = (&changes.branch, &changes.commit) {
        text.push_str(&format!(" Pushed to `{branch}` as {}.", &commit[..commit.len().min(12)]));
    }
    text
}

/// The commit message naming the request.
pub fn commit_message(intent: &str, handoff_id: &str, run_id: &str) -> String {
    let first: String = intent.lines().next().unwrap_or("").chars().take(72).collect();
    let first = if first.trim().is_empty() { "Changes made by a coding agent".to_string() } else { first };
    format!("{first}\n\nHandoff: {handoff_id}\nRun: {run_id}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_id_becomes_a_valid_branch() {
        for id in ["h_1", "../../etc", "a b:c?d*e[f", ".hidden.lock", "x..y", "中文", "-x", "@{u}"] {
            let name = branch_name("baton/{handoffId}", id);
            assert!(is_valid_ref(&name), "{id} -> {name}");
            assert!(name.starts_with("baton/"), "{name}");
        }
        assert_eq!(branch_name("baton/{handoffId}", "h_abc-1"), "baton/h_abc-1");
    }

    #[test]
    fn invalid_refs_are_refused() {
        for bad in ["", "a..b", "a/", "/a", "a.lock", "a b", "a~1", "-x", "a//b", "a/.b", "@"] {
            assert!(!is_valid_ref(bad), "{bad}");
        }
        assert!(is_valid_ref("feature/x-1.2"));
    }

    #[test]
    fn a_project_with_a_bad_push_pattern_or_author_is_named() {
        let p = Project {
            id: "web".into(),
            git: "file:///srv/web.git".into(),
            git_ref: Some("main".into()),
            push: Some("baton/{handoffId}..x".into()),
            author_name: Some("A <b>".into()),
            author_email: None,
        };
        let problems = p.problems();
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn numstat_counts_lines_and_lists_files() {
        let c = numstat("web", "3\t1\tsrc/a.rs\n-\t-\tlogo.png\n10\t0\tdocs/new file.md\n");
        assert_eq!(c.files, ["src/a.rs", "logo.png", "docs/new file.md"]);
        assert_eq!((c.insertions, c.deletions), (13, 1));
        assert!(summary(&c).contains("3 files") && summary(&c).contains("+13"), "{}", summary(&c));
        assert!(summary(&numstat("web", "")).contains("No files"));
    }
}
