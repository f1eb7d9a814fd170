//! The CLI's command in the box: its configuration files written into the
//! box's HOME, its environment (empty but for what the profile lists and
//! what the CLI needs), its directories handed to the agent's user.

use baton_domain::policy::sandbox;
use baton_domain::profiles::coding::{CodingBinding, CodingCli};
use baton_domain::run::journal::JournalEvent;
use serde_json::json;

use super::cli::{self, Setup};
use super::journal::Journal;
use super::{failed, gateway, CodingAgent, Job, Work};
use crate::jail::Layout;
use crate::providers::{ModelRequest, ProviderError};

impl CodingAgent {
    /// The command that starts the CLI, and what it reads on stdin.
    pub(super) fn launch(
        &self,
        job: &Job<'_>,
        work: &Work,
        gateway: &gateway::Gateway,
        journal: &Journal,
    ) -> Result<(tokio::process::Command, Option<String>), ProviderError> {
        let Job { request, cli, binding, context, dirs } = *job;
        let name = cli.display_name();
        let base_url = gateway.base_url(cli.wire_api());
        // Its real path: the box shows only its install tree, so a path
        // through other directories (`tests/../agents/…`) would not resolve.
        let program = program_of(cli, binding);
        let program = match std::path::Path::new(&program).canonicalize() {
            Ok(real) if std::path::Path::new(&program).is_absolute() => real.to_string_lossy().into_owned(),
            _ => program,
        };
        let (system_prompt, brief) = (system_prompt_of(request), brief_of(request));
        let setup = Setup {
            program: &program,
            home: &dirs.home,
            work: &dirs.work,
            base_url: &base_url,
            token: &gateway.token,
            model: binding.model.as_deref().unwrap_or_default(),
            system_prompt: &system_prompt,
            brief: &brief,
            resume: work.resume.as_deref(),
            permissions: &context.permissions,
            timeout: binding.timeout(),
            boxed: self.jail.bwrap.is_some(),
        };
        let launch = cli::of(cli).launch(&setup);
        for (path, text) in &launch.files {
            let written =
                path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(path, text));
            written.map_err(|e| failed(format!("writing {name}'s settings: {e}")))?;
        }
        journal.note(
            JournalEvent::CodingAgentStarted,
            json!({
                "cli": cli.as_str(),
                "project": context.project.as_ref().map(|p| p.id.clone()),
                "base": work.checkout.as_ref().map(|c| c.base.clone()),
                "fromBranch": work.checkout.as_ref().and_then(|c| c.from_branch.clone()),
                "resumes": work.resume,
                "permissions": context.permissions,
                "box": self.jail.describe(),
            }),
        );
        self.jail
            .hand_over(&[&dirs.work, &dirs.home, &dirs.tmp])
            .map_err(|e| failed(format!("handing the agent its directories: {e}")))?;
        let layout = Layout {
            work: dirs.work.clone(),
            writable: vec![dirs.home.clone()],
            tmp: Some(dirs.tmp.clone()),
            // The checkout shares the mirror's objects; the CLI's own files
            // may sit where the box hides (a checkout under /tmp, say).
            readable: work.mirror.iter().map(|_| self.mirrors()).chain(install_dir(&program)).collect(),
            hidden: vec![self.work_root.clone()],
        };
        let home = dirs.home.to_string_lossy().into_owned();
        let mut env = sandbox::environment(&binding.env, &binding.env_values, |n| std::env::var(n).ok(), &home);
        env.insert("HOME".into(), home);
        let tmp = if self.jail.bwrap.is_some() { "/tmp".into() } else { dirs.tmp.to_string_lossy().into_owned() };
        env.insert("TMPDIR".into(), tmp);
        env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
        env.extend(launch.env);
        let mut command = self.jail.command(&program, &launch.args, &layout);
        command.env_clear().envs(&env);
        Ok((command, launch.stdin))
    }
}

/// The CLI's program: the profile's `bin`; else the pinned one of the
/// checkout the worker runs from (`agents/node_modules/.bin`, where
/// `npm install --prefix agents` puts it); else its usual name, on the PATH.
pub fn program_of(cli: CodingCli, binding: &CodingBinding) -> String {
    if let Some(bin) = &binding.bin {
        return bin.clone();
    }
    let pinned = std::path::Path::new("agents/node_modules/.bin").join(cli.default_bin());
    match pinned.canonicalize() {
        Ok(path) if path.is_file() => path.to_string_lossy().into_owned(),
        _ => cli.default_bin().to_string(),
    }
}

/// Where the CLI's program and what it loads live: its `node_modules` tree
/// (an npm package's `.bin` entry is a link into it), else its directory.
fn install_dir(program: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(program);
    if !path.is_absolute() {
        return None;
    }
    let real = path.canonicalize().ok()?;
    let tree = real.ancestors().filter(|a| a.file_name().is_some_and(|n| n == "node_modules")).last();
    tree.or_else(|| real.parent()).map(std::path::Path::to_path_buf)
}

/// The brief the agent was given (the first user message).
fn brief_of(request: &ModelRequest<'_>) -> String {
    let user = request.messages.iter().find(|m| m["role"] == "user");
    user.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

/// The system prompt the runtime assembled for the profile.
fn system_prompt_of(request: &ModelRequest<'_>) -> String {
    let system = request.messages.iter().find(|m| m["role"] == "system");
    system.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}
