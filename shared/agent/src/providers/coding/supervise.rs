//! The CLI's run: started in the box, its events read as they come, and
//! stopped (its whole process group, and boxed, its PID namespace) however
//! it ends.

use std::path::Path;
use std::time::Duration;

use baton_domain::policy::sandbox::{self, Capped};
use baton_domain::profiles::coding::{CodingBinding, CodingCli};
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::run::journal::JournalEvent;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::cli::{self, Progress, Report};
use super::journal::Journal;
use super::{failed, gateway, stopped, STDERR_TAIL};
use crate::providers::ProviderError;

/// How the CLI ended by itself.
pub(super) struct Ended {
    pub(super) status: String,
    pub(super) report: Report,
    pub(super) stderr: String,
    /// Tool calls its permissions refused: (tool, what it tried).
    pub(super) denied: Vec<(String, String)>,
}

/// Runs the CLI until it exits, times out, floods its output or the run's
/// budget stops it; its events go to the journal as they come. Whatever
/// ends it, its whole process group (and, boxed, its PID namespace) dies.
pub(super) async fn supervise(
    mut command: tokio::process::Command,
    stdin: Option<String>,
    cli: CodingCli,
    journal: &Journal,
    gateway: &gateway::Gateway,
    binding: &CodingBinding,
    work: &Path,
) -> Result<Ended, ProviderError> {
    use std::process::Stdio;
    let name = cli.display_name();
    let mut child = command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("{name} could not be started: {e}")))?;
    let group = crate::providers::command::Group::of(&child);
    let mut input = child.stdin.take().expect("piped");
    let writer = tokio::spawn(async move {
        if let Some(text) = stdin {
            let _ = input.write_all(text.as_bytes()).await;
        }
        drop(input);
    });
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let cap = binding.max_output_bytes();
    let stderr_task = tokio::spawn(async move {
        let mut tail = Capped::tail(u64::MAX, STDERR_TAIL * 4);
        let mut err = err;
        let mut buf = [0u8; 8192];
        loop {
            match tokio::io::AsyncReadExt::read(&mut err, &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    tail.push(&buf[..n]);
                }
            }
        }
        tail.text()
    });
    let mut parser = cli::of(cli).parser(work);
    let denied = std::sync::Mutex::new(Vec::new());
    let reading = async {
        let mut lines = tokio::io::BufReader::new(out);
        let (mut line, mut total) = (Vec::new(), 0u64);
        loop {
            line.clear();
            let n = lines.read_until(b'\n', &mut line).await.unwrap_or(0);
            if n == 0 {
                return Ok(());
            }
            total += n as u64;
            if total > cap {
                let message = sandbox::output_limit_message(cap);
                return Err(stopped(
                    ErrorCode::AgentOutputLimit.as_str(),
                    message.clone(),
                    format!("{name}: {message}"),
                ));
            }
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(line.trim_ascii()) else { continue };
            for progress in parser.line(&value) {
                if let Progress::Denied { tool, detail } = &progress {
                    denied.lock().expect("not poisoned").push((tool.clone(), detail.clone()));
                }
                note(journal, progress);
            }
        }
    };
    let timeout = binding.timeout();
    let result = tokio::select! {
        read = async {
            let read = reading.await;
            let status = child.wait().await;
            (read, status)
        } => {
            match read {
                (Err(e), _) => Err(e),
                (Ok(()), Ok(status)) => Ok(status.to_string()),
                (Ok(()), Err(e)) => Err(failed(format!("waiting for {name}: {e}"))),
            }
        }
        _ = tokio::time::sleep(timeout) => {
            let message = sandbox::timeout_message(timeout);
            Err(stopped(ErrorCode::AgentTimeout.as_str(), message.clone(), format!("{name}: {message}")))
        }
        _ = gateway.stop_agent.cancelled() => Ok("stopped by its gateway".to_string()),
    };
    writer.abort();
    group.kill();
    let _ = child.wait().await;
    let stderr =
        tokio::time::timeout(Duration::from_secs(2), stderr_task).await.ok().and_then(Result::ok).unwrap_or_default();
    let status = result?;
    Ok(Ended { status, report: parser.finish(), stderr, denied: denied.into_inner().expect("not poisoned") })
}

/// One thing the CLI did, as a journal event.
fn note(journal: &Journal, progress: Progress) {
    match progress {
        Progress::Command { command, exit_code, output } => journal.note(
            JournalEvent::CodingAgentCommand,
            json!({"command": command, "exitCode": exit_code, "output": output}),
        ),
        Progress::FileEdited { path } => journal.note(JournalEvent::CodingAgentFileEdited, json!({"path": path})),
        Progress::Denied { tool, detail } => {
            journal.note(JournalEvent::CodingAgentCommand, json!({"command": detail, "tool": tool, "denied": true}));
        }
    }
}
