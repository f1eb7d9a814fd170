//! `baton demo --target codex` (or `claude_code`, `qwen_code`,
//! `gemini_cli`): a real coding CLI edits a real repository. The demo makes
//! a throwaway project (a bare git repository with one commit), starts the
//! scripted model server speaking that CLI's wire API, and a profiles file
//! whose `[[projects]]` and coding profile point at them; the request names
//! the project, and the reply says what changed and where it was pushed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use baton_domain::profiles::coding::CodingCli;

use crate::model_server::{Api, ModelServer, Script};
use crate::profiles_check::find_program;

/// The variable the demo's profile names for its (scripted) model's key.
const KEY_VAR: &str = "BATON_DEMO_MODEL_KEY";
/// The project the demo's request names.
pub const PROJECT: &str = "demo-site";

/// What a coding demo set up; removed when dropped.
pub struct CodingDemo {
    pub cli: CodingCli,
    pub server: ModelServer,
    pub profiles: String,
    /// The request's `targetAgent` (Gemini CLI is reached through a route).
    pub target: String,
    pub repository: PathBuf,
    _dir: tempfile::TempDir,
}

pub fn cli_of(target: &str) -> Option<CodingCli> {
    CodingCli::parse(target)
}

fn api_of(cli: CodingCli) -> Api {
    match cli {
        CodingCli::Codex => Api::OpenAiResponses,
        CodingCli::ClaudeCode => Api::AnthropicMessages,
        CodingCli::QwenCode => Api::ChatCompletions,
        CodingCli::GeminiCli => Api::Gemini,
    }
}

/// The CLI's program: `agents/node_modules/.bin` of this checkout (where
/// `npm install --prefix agents` puts the pinned versions), else the PATH.
pub fn find_cli(cli: CodingCli) -> anyhow::Result<PathBuf> {
    let name = cli.default_bin();
    let local = Path::new("agents/node_modules/.bin").join(name);
    if local.is_file() {
        return Ok(local.canonicalize()?);
    }
    find_program(name).with_context(|| {
        format!(
            "`{name}` ({}) is not installed: run `npm install --prefix agents` in the checkout, or put it on the PATH",
            cli.display_name()
        )
    })
}

impl CodingDemo {
    pub async fn prepare(cli: CodingCli, bin: Option<PathBuf>) -> anyhow::Result<CodingDemo> {
        let bin = match bin {
            Some(bin) => bin,
            None => find_cli(cli)?,
        };
        let dir = tempfile::Builder::new().prefix("baton-demo-").tempdir()?;
        let repository = dir.path().join("demo-site.git");
        seed_repository(dir.path(), &repository).await?;
        let script = Script::edit("hello.txt", "Hello from a coding agent, handed over by Baton.\n");
        let server = ModelServer::start(api_of(cli), script).await?;
        // The scripted model checks no key; the gateway still sends this one, never the CLI.
        std::env::set_var(KEY_VAR, "demo-key-not-a-secret");
        let target = match cli {
            CodingCli::GeminiCli => "docs_agent".to_string(),
            other => other.as_str().to_string(),
        };
        let profiles = format!(
            r#"[routes]
{target} = "coder"

[[projects]]
id = "{PROJECT}"
git = "{git}"
ref = "main"
push = "baton/{{handoffId}}"

[[profiles]]
id = "coder"
name = "Coder"
description = "Changes code in the user's project with {name}."
system_prompt = "You change code in the user's project. Keep changes small and say what you did."

[profiles.model]
provider = "{provider}"
model = "scripted-model"
base_url = "{base_url}"
api_key_env = "{KEY_VAR}"
timeout_secs = 180
bin = "{bin}"
"#,
            git = repository.display(),
            name = cli.display_name(),
            provider = cli.as_str(),
            base_url = server.base_url(),
            bin = bin.display(),
        );
        Ok(CodingDemo { cli, server, profiles, target, repository, _dir: dir })
    }

    /// What the pushed branch holds, for the demo's last lines.
    pub async fn pushed(&self, branch: &str) -> anyhow::Result<String> {
        let out = tokio::process::Command::new("git")
            .arg("--git-dir")
            .arg(&self.repository)
            .args(["log", "--stat", "--format=%h %an: %s", "-n", "1", branch])
            .output()
            .await?;
        if !out.status.success() {
            bail!("the branch `{branch}` is not in the demo repository");
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A bare repository with one commit on `main`.
async fn seed_repository(dir: &Path, bare: &Path) -> anyhow::Result<()> {
    let seed = dir.join("seed");
    std::fs::create_dir_all(&seed)?;
    std::fs::write(seed.join("README.md"), "# Demo site\n\nA project a coding agent works on.\n")?;
    let git = |args: &[&str], cwd: &Path| {
        let mut cmd = std::process::Command::new("git");
        cmd.args(["-c", "user.name=Baton demo", "-c", "user.email=demo@localhost", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(cwd);
        cmd
    };
    for args in [&["init", "-q"][..], &["add", "README.md"], &["commit", "-qm", "A project to work on"]] {
        let status = git(args, &seed).status()?;
        if !status.success() {
            bail!("git {} failed while making the demo project", args.join(" "));
        }
    }
    let bare_path = bare.to_string_lossy().into_owned();
    if !git(&["clone", "-q", "--bare", ".", &bare_path], &seed).status()?.success() {
        bail!("could not make the demo's bare repository");
    }
    Ok(())
}
