//! What a request's `forbiddenActions` and `requireConfirmationFor` mean to
//! a coding CLI. The constraints are free text; the actions below are the
//! ones a CLI's permission settings can enforce, recognized by their usual
//! words. A phrase that names none of them stays in the brief (the agent
//! reads "Never: …") and is reported as not enforced.
//!
//! A coding agent runs unattended, so an action that needs the user's
//! confirmation is denied to the CLI like a forbidden one; when the agent
//! needed it, the run says so (see the agent crate).

use serde::Serialize;

crate::wire_enum! {
    /// An action a coding CLI's permissions can deny.
    pub enum Action {
        /// Running shell commands at all.
        Shell => "shell",
        /// Writing or editing files in the checkout.
        Edit => "edit",
        /// Fetching from or searching the web.
        Web => "web",
        /// `git push` (Baton pushes the agent's changes itself).
        GitPush => "git_push",
        /// `git commit` (Baton commits the agent's changes itself).
        GitCommit => "git_commit",
        /// Deleting files (`rm`).
        Delete => "delete",
        /// Installing packages (`npm install`, `pip install`, `apt-get`, `cargo install`).
        Install => "install",
    }
}

impl Action {
    /// The shell commands (as prefixes) this action denies, when it is about commands.
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            Action::GitPush => &["git push"],
            Action::GitCommit => &["git commit"],
            Action::Delete => &["rm", "rmdir", "git rm", "unlink"],
            Action::Install => &["npm install", "npm i", "pip install", "apt-get", "apt", "cargo install", "yarn add"],
            Action::Shell | Action::Edit | Action::Web => &[],
        }
    }

    /// The words that name it in a constraint (lower case).
    fn words(self) -> &'static [&'static str] {
        match self {
            Action::Shell => &["shell", "run command", "running command", "execute command", "bash", "terminal"],
            Action::Edit => &[
                "edit file",
                "editing file",
                "write file",
                "writing file",
                "modify file",
                "change file",
                "file write",
                "file edit",
                "code change",
            ],
            Action::Web => &["network", "internet", "web", "http", "download", "fetch url"],
            Action::GitPush => &["push", "git push"],
            Action::GitCommit => &["commit"],
            Action::Delete => &["delete", "remove file", "removing file", "rm ", "deleting"],
            Action::Install => &["install", "dependency", "dependencies", "package"],
        }
    }
}

/// The request's constraints as a coding CLI's permissions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    /// Denied outright (`forbiddenActions`).
    pub forbidden: Vec<Action>,
    /// Denied because no one can confirm them while the agent runs (`requireConfirmationFor`).
    pub needs_confirmation: Vec<Action>,
    /// Phrases that name no action a CLI can enforce: left to the brief.
    pub not_enforced: Vec<String>,
}

impl Permissions {
    pub fn from_constraints(forbidden: &[String], confirm: &[String]) -> Permissions {
        let mut p = Permissions::default();
        for (phrases, into) in [(forbidden, 0), (confirm, 1)] {
            for phrase in phrases {
                let actions = recognize(phrase);
                if actions.is_empty() {
                    p.not_enforced.push(phrase.clone());
                }
                let list = if into == 0 { &mut p.forbidden } else { &mut p.needs_confirmation };
                for action in actions {
                    if !list.contains(&action) {
                        list.push(action);
                    }
                }
            }
        }
        p.needs_confirmation.retain(|a| !p.forbidden.contains(a));
        p
    }

    /// Every action the CLI must not take.
    pub fn denied(&self) -> impl Iterator<Item = Action> + '_ {
        self.forbidden.iter().chain(&self.needs_confirmation).copied()
    }

    pub fn denies(&self, action: Action) -> bool {
        self.denied().any(|a| a == action)
    }

    /// The shell command prefixes denied (empty when the shell is denied as a whole).
    pub fn denied_commands(&self) -> Vec<&'static str> {
        let mut commands: Vec<&'static str> = self.denied().flat_map(|a| a.commands().iter().copied()).collect();
        commands.dedup();
        commands
    }

    /// Why a denied action was denied, for the reply's words.
    pub fn reason(&self, action: Action) -> Option<&'static str> {
        if self.forbidden.contains(&action) {
            Some("the request forbids it")
        } else if self.needs_confirmation.contains(&action) {
            Some("the request requires the user's confirmation for it")
        } else {
            None
        }
    }
}

/// The actions a phrase names.
fn recognize(phrase: &str) -> Vec<Action> {
    let lower = format!("{} ", phrase.to_lowercase());
    let mut found: Vec<Action> =
        Action::ALL.iter().copied().filter(|a| a.words().iter().any(|w| lower.contains(w))).collect();
    // "git push" is about pushing, not about the shell as a whole.
    if found.iter().any(|a| !a.commands().is_empty()) {
        found.retain(|a| *a != Action::Shell);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrases_become_actions_and_the_rest_is_reported() {
        let p = Permissions::from_constraints(
            &["git push".into(), "Run shell commands".into(), "being rude".into()],
            &["deleting files".into(), "git push to main".into()],
        );
        assert_eq!(p.forbidden, [Action::GitPush, Action::Shell]);
        assert_eq!(p.needs_confirmation, [Action::Delete]);
        assert_eq!(p.not_enforced, ["being rude"]);
        assert!(p.denied_commands().contains(&"git push") && p.denied_commands().contains(&"rm"));
        assert_eq!(p.reason(Action::Delete), Some("the request requires the user's confirmation for it"));
    }

    #[test]
    fn nothing_asked_denies_nothing() {
        let p = Permissions::from_constraints(&[], &[]);
        assert_eq!(p.denied().count(), 0);
        assert!(p.denied_commands().is_empty());
    }
}
