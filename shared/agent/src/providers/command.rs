//! An external agent run as a
//! process: the brief on stdin, the result on stdout. Its result becomes the
//! stage's reply (an owner commits and finishes with it) or the task's
//! result (a child returns it), through the ordinary tools, so it is stored
//! and committed exactly like any other agent's work.
//!
//! The agent runs in a box: an environment holding only what its profile
//! lists (never the worker's database or broker URLs), a working directory
//! of its own that Baton creates and removes, and a process group of its own
//! that is killed as a whole when the agent times out, floods its output,
//! is cancelled, or leaves a background process behind. Output is read
//! incrementally and capped, and the agent is always reaped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use baton_domain::policy::sandbox::{self, Capped};
use baton_domain::profiles::ModelBinding;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{ModelRequest, ModelTurn, Provider, ProviderError, ToolCall};

const DEFAULT_TIMEOUT_SECS: u64 = 600;
/// How much of stderr a failure shows.
const STDERR_TAIL: usize = 2000;
/// After the agent itself exited and its group was killed, how long its
/// output may take to drain (a process that left the group could hold the
/// pipes open for ever; then what was read so far is the output).
const DRAIN: Duration = Duration::from_secs(2);

pub struct CommandAgent {
    /// Where each invocation's working directory is created.
    work_root: PathBuf,
    /// Another user, bubblewrap (see [`crate::jail`]).
    pub(crate) jail: crate::jail::Jail,
}

impl Default for CommandAgent {
    fn default() -> Self {
        Self::new(std::env::temp_dir().join("baton-agents"))
    }
}

impl CommandAgent {
    pub fn new(work_root: PathBuf) -> Self {
        Self { work_root, jail: crate::jail::Jail::default() }
    }
}

/// What one run of an agent needs.
pub struct Spec<'a> {
    pub command: &'a [String],
    /// Variables passed through from the worker's environment, by name.
    pub env: &'a [String],
    pub env_values: &'a BTreeMap<String, String>,
    pub timeout: Duration,
    pub max_output_bytes: u64,
    pub work_root: &'a Path,
    pub jail: &'a crate::jail::Jail,
}

#[async_trait]
impl Provider for CommandAgent {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
        let ModelBinding::Command { command, timeout_secs, env, env_values, max_output_bytes, .. } =
            &request.profile.model
        else {
            return Err(ProviderError::Failed("not a command binding".into()));
        };
        if request.turn_index > 0 {
            // The tools that carry the result refused it: running the agent
            // again would repeat its side effects.
            return Err(ProviderError::Failed("the external agent's result could not be recorded".into()));
        }
        let brief = brief_of(request.messages);
        let spec = Spec {
            command,
            env,
            env_values,
            timeout: Duration::from_secs(timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)),
            max_output_bytes: max_output_bytes.unwrap_or(sandbox::DEFAULT_MAX_OUTPUT_BYTES),
            work_root: &self.work_root,
            jail: &self.jail,
        };
        // What it prints is hostile input: the worker's secrets and what the
        // disclosure policy removes never reach the reply.
        let scrub = crate::providers::coding::scrub::Scrubber::new(
            Default::default(),
            crate::providers::coding::scrub::Scrubber::worker_secrets(std::env::vars()),
        );
        let output = run(&spec, &brief).await.map_err(|e| match e {
            ProviderError::Stopped { code, message, detail } => {
                ProviderError::Stopped { code, message: scrub.text(&message), detail: scrub.text(&detail) }
            }
            other => other,
        })?;
        let output = scrub.text(&output);
        let result = output.trim();
        if result.is_empty() {
            return Err(ProviderError::Failed(format!("`{}` printed no result", command[0])));
        }
        Ok(ModelTurn { tool_calls: calls(request, result), attempts: Some(1), ..Default::default() })
    }
}

/// The brief the agent was given (the first user message).
fn brief_of(messages: &[Value]) -> String {
    messages.iter().find(|m| m["role"] == "user").and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

fn is_child(request: &ModelRequest<'_>) -> bool {
    request.tools.iter().any(|t| t["function"]["name"] == "task_return")
}

/// The tool calls that record the result the way this stage must end.
pub(crate) fn calls(request: &ModelRequest<'_>, result: &str) -> Vec<ToolCall> {
    let call = |n: usize, name: &str, arguments: Value| ToolCall {
        id: format!("call_{n}"),
        name: name.to_string(),
        arguments,
    };
    if is_child(request) {
        return vec![call(1, "task_return", json!({"summary": result}))];
    }
    let path = baton_domain::tools::workspace::DEFAULT_BODY_PATH;
    vec![
        // Read first: replacing a file an earlier stage wrote needs a read.
        call(1, "workspace_read", json!({"path": path})),
        call(2, "workspace_write", json!({"path": path, "content": result})),
        call(3, "workspace_commit", json!({"path": path})),
        call(4, "workspace_finish", json!({})),
    ]
}

/// Runs the agent in its box and returns its stdout.
pub async fn run(spec: &Spec<'_>, stdin: &str) -> Result<String, ProviderError> {
    let program = spec.command.first().ok_or_else(|| ProviderError::Failed("the profile's command is empty".into()))?;
    let failed = |what: &str, e: std::io::Error| ProviderError::Failed(format!("{what} `{program}`: {e}"));
    std::fs::create_dir_all(spec.work_root).map_err(|e| failed("preparing a working directory for", e))?;
    // Its own directory (mode 0700, a random name), removed when this
    // function returns or is dropped.
    let owner_only = std::os::unix::fs::PermissionsExt::from_mode(0o700);
    let dir = tempfile::Builder::new()
        .prefix("agent-")
        .permissions(owner_only)
        .tempdir_in(spec.work_root)
        .map_err(|e| failed("preparing a working directory for", e))?;
    let home = dir.path().to_string_lossy().into_owned();
    let env = sandbox::environment(spec.env, spec.env_values, |name| std::env::var(name).ok(), &home);
    spec.jail.hand_over(&[dir.path()]).map_err(|e| failed("preparing a working directory for", e))?;
    let layout = crate::jail::Layout {
        work: dir.path().to_path_buf(),
        writable: vec![],
        tmp: None,
        readable: vec![],
        hidden: vec![spec.work_root.to_path_buf()],
    };
    let mut child = spec
        .jail
        .command(program, &spec.command[1..], &layout)
        .env_clear()
        .envs(&env)
        // A group of its own: whatever it starts is killed with it.
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed("could not start", e))?;
    // Declared after `child` and `dir`, so dropped first: the whole group is
    // killed before the leader is reaped and the directory removed.
    let group = Group::of(&child);
    let mut input = child.stdin.take().expect("piped");
    let brief = stdin.to_string();
    // A command that never reads stdin must not block us: write in the background.
    let writer = tokio::spawn(async move {
        let _ = input.write_all(brief.as_bytes()).await;
    });
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let watched = tokio::time::timeout(spec.timeout, watch(&mut child, &group, out, err, spec.max_output_bytes)).await;
    writer.abort();
    // Whatever ended the run, nothing of the agent outlives it, and the
    // leader is reaped (no zombie). When the leader was already reaped, the
    // group id can only name another group after the pid wrapped around
    // and was taken by a new group leader; while any member lives it cannot.
    group.kill();
    let _ = child.wait().await;
    let _ = dir.close();
    let ended =
        watched.map_err(|_| stopped(sandbox::codes::TIMEOUT, sandbox::timeout_message(spec.timeout), program))??;
    if !ended.status.success() {
        let message = sandbox::exited_message(&ended.status.to_string());
        let detail = format!("`{program}` exited with {}: {}", ended.status, tail(&ended.stderr));
        return Err(ProviderError::Stopped { code: sandbox::codes::EXITED, message, detail });
    }
    Ok(ended.stdout)
}

fn stopped(code: &'static str, message: String, program: &str) -> ProviderError {
    let detail = format!("`{program}`: {message}");
    ProviderError::Stopped { code, message, detail }
}

/// How the agent ended when it ended by itself.
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Reads both streams incrementally while waiting for the agent to exit.
/// When the agent itself exits, its group is killed so that a background
/// process left behind cannot hold the pipes open; then the rest drains.
async fn watch(
    child: &mut tokio::process::Child,
    group: &Group,
    out: impl AsyncRead + Unpin,
    err: impl AsyncRead + Unpin,
    cap: u64,
) -> Result<Ended, ProviderError> {
    let program = "the external agent";
    let (mut stdout, mut stderr) = (Capped::head(cap), Capped::tail(cap, STDERR_TAIL * 4));
    let status = {
        let reading = read_both(out, err, &mut stdout, &mut stderr);
        tokio::pin!(reading);
        tokio::select! {
            read = &mut reading => {
                read?;
                child.wait().await.map_err(|e| ProviderError::Failed(format!("waiting for {program}: {e}")))?
            }
            status = child.wait() => {
                let status = status.map_err(|e| ProviderError::Failed(format!("waiting for {program}: {e}")))?;
                group.kill();
                // Bounded: a process that left the group may hold the pipes.
                if let Ok(read) = tokio::time::timeout(DRAIN, &mut reading).await {
                    read?;
                }
                status
            }
        }
    };
    Ok(Ended { status, stdout: stdout.text(), stderr: stderr.text() })
}

/// Reads stdout and stderr to their ends, each into its capped buffer;
/// stops (with the limit error) as soon as either goes over its cap.
async fn read_both(
    mut out: impl AsyncRead + Unpin,
    mut err: impl AsyncRead + Unpin,
    stdout: &mut Capped,
    stderr: &mut Capped,
) -> Result<(), ProviderError> {
    let (mut a, mut b) = ([0u8; 8192], [0u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        let (chunk, sink, open) = tokio::select! {
            n = out.read(&mut a), if out_open => (n.map(|n| &a[..n]), &mut *stdout, &mut out_open),
            n = err.read(&mut b), if err_open => (n.map(|n| &b[..n]), &mut *stderr, &mut err_open),
        };
        match chunk {
            Ok([]) | Err(_) => *open = false,
            Ok(bytes) if !sink.push(bytes) => {
                let message = sandbox::output_limit_message(sink.cap());
                return Err(stopped(sandbox::codes::OUTPUT_LIMIT, message, "the external agent"));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The agent's process group; killing it kills every process the agent
/// started that stayed in it (a daemon that calls `setsid` leaves; the
/// container's init reaps such orphans).
pub(crate) struct Group(Option<rustix::process::Pid>);

impl Group {
    /// The group `child` leads (it was spawned with `process_group(0)`).
    pub(crate) fn of(child: &tokio::process::Child) -> Group {
        Group(child.id().and_then(|id| rustix::process::Pid::from_raw(id as i32)))
    }

    pub(crate) fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH (the group is already gone) is the normal case.
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Group {
    /// A run that is dropped (cancelled, the worker's shutdown deadline)
    /// takes its whole group with it.
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(text: &str) -> String {
    let text = text.trim();
    let start = text.char_indices().rev().nth(STDERR_TAIL).map_or(0, |(i, _)| i);
    text[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    async fn run_sh(script: &str, timeout: Duration, cap: u64) -> Result<String, ProviderError> {
        let root = std::env::temp_dir().join("baton-agent-unit");
        let (command, values) = (sh(script), BTreeMap::new());
        let jail = crate::jail::Jail::default();
        let spec = Spec {
            command: &command,
            env: &[],
            env_values: &values,
            timeout,
            max_output_bytes: cap,
            work_root: &root,
            jail: &jail,
        };
        run(&spec, "hello").await
    }

    #[tokio::test]
    async fn the_brief_goes_in_and_the_result_comes_out() {
        let out = run_sh("tr a-z A-Z", Duration::from_secs(5), 1024).await.unwrap();
        assert_eq!(out, "HELLO");
    }

    #[tokio::test]
    async fn a_failing_command_shows_the_tail_of_stderr() {
        let err = run_sh("echo boom >&2; exit 3", Duration::from_secs(5), 1024).await.unwrap_err().to_string();
        assert!(err.contains("exit status: 3") && err.contains("boom"), "{err}");
    }

    #[tokio::test]
    async fn a_slow_command_times_out() {
        let err = run_sh("sleep 5", Duration::from_millis(200), 1024).await.unwrap_err();
        assert!(matches!(&err, ProviderError::Stopped { code: "agent_timeout", .. }), "{err}");
        assert!(err.to_string().contains("did not finish"), "{err}");
    }

    #[tokio::test]
    async fn a_background_process_left_behind_does_not_hold_the_result() {
        let started = std::time::Instant::now();
        let out = run_sh("sleep 30 & echo done", Duration::from_secs(20), 1024).await.unwrap();
        assert_eq!(out.trim(), "done");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_flood_on_stdout_or_stderr_stops_the_agent() {
        for script in ["yes", "yes >&2"] {
            let err = run_sh(script, Duration::from_secs(20), 4096).await.unwrap_err();
            assert!(matches!(&err, ProviderError::Stopped { code: "agent_output_limit", .. }), "{script}: {err}");
        }
    }

    #[test]
    fn the_tail_keeps_the_end() {
        let long = "x".repeat(5000) + "END";
        assert!(tail(&long).ends_with("END"));
        assert!(tail(&long).len() <= STDERR_TAIL + 3);
    }
}
