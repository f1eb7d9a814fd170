//! Each coding CLI as two pure parts: how it is started (its command line,
//! environment and config files, all inside the box, for one invocation)
//! and how its machine-readable output reads (one JSON event per line).
//!
//! - [`claude`]: Claude Code (`claude -p --output-format stream-json`).
//! - [`codex`]: Codex (`codex exec --json`).
//! - [`qwen`]: Qwen Code (`qwen --output-format stream-json`).
//! - [`gemini`]: Gemini CLI (`gemini --output-format stream-json`).

pub mod claude;
pub mod codex;
pub mod gemini;
pub mod qwen;
pub mod stream_json;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_domain::policy::permissions::Permissions;
use baton_domain::profiles::coding::CodingCli;

/// What a CLI is started with for one invocation.
pub struct Setup<'a> {
    /// The program to run (the profile's `bin`, or the CLI's usual name).
    pub program: &'a str,
    /// Its HOME, where its config and session files live (kept per conversation).
    pub home: &'a Path,
    /// The checkout (its working directory).
    pub work: &'a Path,
    /// The gateway's base URL, in the CLI's own convention, and its token.
    pub base_url: &'a str,
    pub token: &'a str,
    pub model: &'a str,
    /// The profile's system prompt (and skills), given ahead of the brief.
    pub system_prompt: &'a str,
    /// The rendered brief: the task.
    pub brief: &'a str,
    /// The session this run continues.
    pub resume: Option<&'a str>,
    pub permissions: &'a Permissions,
    /// The profile's timeout: each model request is bounded well inside it.
    pub timeout: Duration,
    /// Inside Baton's bubblewrap (a CLI's own sandbox may not nest in it).
    pub boxed: bool,
}

/// How to start it.
#[derive(Debug, Default)]
pub struct Launch {
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Given on stdin (else stdin is empty).
    pub stdin: Option<String>,
    /// Files written before it starts: (path, contents).
    pub files: Vec<(PathBuf, String)>,
}

/// Something the CLI did while it works, for the journal.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Command {
        command: String,
        exit_code: Option<i64>,
        output: String,
    },
    FileEdited {
        path: String,
    },
    /// A tool call its permissions refused (a denied command, an edit it may not make).
    Denied {
        tool: String,
        detail: String,
    },
}

/// What the CLI reported when it ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub session_id: Option<String>,
    /// Its final answer.
    pub result: Option<String>,
    /// The error it reported (also when it exited 0).
    pub error: Option<String>,
    /// Tokens as the CLI itself reported them (journal only: the gateway counts).
    pub reported_tokens: Option<i64>,
}

/// Reads one CLI's output, a line at a time.
pub trait Parser: Send {
    /// One line of stdout; what it did, if the line says.
    fn line(&mut self, value: &serde_json::Value) -> Vec<Progress>;
    fn finish(self: Box<Self>) -> Report;
}

/// The whole of one CLI.
pub trait Cli: Send + Sync {
    fn launch(&self, setup: &Setup<'_>) -> Launch;
    /// A reader for one run's output; `work` is its checkout (paths are shown relative to it).
    fn parser(&self, work: &Path) -> Box<dyn Parser>;
}

pub fn of(cli: CodingCli) -> &'static dyn Cli {
    match cli {
        CodingCli::ClaudeCode => &claude::Claude,
        CodingCli::Codex => &codex::Codex,
        CodingCli::QwenCode => &qwen::Qwen,
        CodingCli::GeminiCli => &gemini::Gemini,
    }
}

/// A path the CLI reported, relative to the checkout when it is inside it.
pub fn relative(work: &Path, path: &str) -> String {
    Path::new(path).strip_prefix(work).map_or_else(|_| path.to_string(), |p| p.to_string_lossy().into_owned())
}

/// At most `max` characters of the end of a command's output.
pub fn tail(text: &str, max: usize) -> String {
    let start = text.char_indices().rev().nth(max).map_or(0, |(i, _)| i);
    text[start..].to_string()
}

/// What a command event keeps of a command's output.
pub const OUTPUT_TAIL: usize = 2000;

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Every line of a sample, through the parser.
    pub fn read(cli: &dyn Cli, sample: &str) -> (Vec<Progress>, Report) {
        let mut parser = cli.parser(Path::new("/tmp/codex-t1/w5"));
        let mut progress = vec![];
        for line in sample.lines().filter(|l| !l.trim().is_empty()) {
            let value: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            progress.extend(parser.line(&value));
        }
        (progress, parser.finish())
    }

    pub fn setup<'a>(permissions: &'a Permissions, resume: Option<&'a str>) -> Setup<'a> {
        Setup {
            program: "cli",
            home: Path::new("/box/home"),
            work: Path::new("/box/work"),
            base_url: "http://127.0.0.1:9",
            token: "baton-token",
            model: "m-1",
            system_prompt: "Be careful.",
            brief: "# Task\nEdit hello.txt",
            resume,
            permissions,
            timeout: Duration::from_secs(600),
            boxed: false,
        }
    }
}
