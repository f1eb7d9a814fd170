//! An external coding agent (codex, qwen_code, claude_code …) run as a
//! process: the brief on stdin, the result on stdout. Its result becomes the
//! stage's reply (an owner commits and finishes with it) or the task's
//! result (a child returns it), through the ordinary tools, so it is stored
//! and committed exactly like any other agent's work.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use baton_domain::profiles::ModelBinding;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{ModelRequest, ModelTurn, Provider, ProviderError, ToolCall};

const DEFAULT_TIMEOUT_SECS: u64 = 600;
/// How much of stderr a failure shows.
const STDERR_TAIL: usize = 2000;

#[derive(Default)]
pub struct CommandAgent;

#[async_trait]
impl Provider for CommandAgent {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
        let ModelBinding::Command { command, timeout_secs } = &request.profile.model else {
            return Err(ProviderError::Failed("not a command binding".into()));
        };
        if request.turn_index > 0 {
            // The tools that carry the result refused it: running the agent
            // again would repeat its side effects.
            return Err(ProviderError::Failed("the external agent's result could not be recorded".into()));
        }
        let brief = brief_of(request.messages);
        let timeout = Duration::from_secs(timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS));
        let output = run(command, &brief, timeout).await?;
        let result = output.trim();
        if result.is_empty() {
            return Err(ProviderError::Failed(format!("`{}` printed no result", command[0])));
        }
        Ok(ModelTurn { content: None, tool_calls: calls(request, result), usage: None, attempts: Some(1) })
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
fn calls(request: &ModelRequest<'_>, result: &str) -> Vec<ToolCall> {
    let call = |n: usize, name: &str, arguments: Value| ToolCall { id: format!("call_{n}"), name: name.to_string(), arguments };
    if is_child(request) {
        return vec![call(1, "task_return", json!({"summary": result}))];
    }
    let path = baton_domain::workspace::DEFAULT_BODY_PATH;
    vec![
        // Read first: replacing a file an earlier stage wrote needs a read.
        call(1, "workspace_read", json!({"path": path})),
        call(2, "workspace_write", json!({"path": path, "content": result})),
        call(3, "workspace_commit", json!({"path": path})),
        call(4, "workspace_finish", json!({})),
    ]
}

async fn run(command: &[String], stdin: &str, timeout: Duration) -> Result<String, ProviderError> {
    let program = command.first().ok_or_else(|| ProviderError::Failed("the profile's command is empty".into()))?;
    let mut child = tokio::process::Command::new(program)
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ProviderError::Failed(format!("could not start `{program}`: {e}")))?;
    let mut input = child.stdin.take().expect("piped");
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let brief = stdin.to_string();
    let work = async move {
        // A command that never reads stdin must not block us: write in the background.
        let writer = tokio::spawn(async move {
            let _ = input.write_all(brief.as_bytes()).await;
        });
        let (mut stdout, mut stderr) = (String::new(), String::new());
        let (a, b) = tokio::join!(out.read_to_string(&mut stdout), err.read_to_string(&mut stderr));
        a.and(b).map_err(|e| ProviderError::Failed(format!("reading `{program}`'s output: {e}")))?;
        let status = child.wait().await.map_err(|e| ProviderError::Failed(e.to_string()))?;
        writer.abort();
        Ok::<_, ProviderError>((status, stdout, stderr))
    };
    let (status, stdout, stderr) = tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| ProviderError::Failed(format!("`{program}` did not finish within {timeout:?}")))??;
    if !status.success() {
        return Err(ProviderError::Failed(format!("`{program}` exited with {status}: {}", tail(&stderr))));
    }
    Ok(stdout)
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

    #[tokio::test]
    async fn the_brief_goes_in_and_the_result_comes_out() {
        let out = run(&sh("tr a-z A-Z"), "hello", Duration::from_secs(5)).await.unwrap();
        assert_eq!(out, "HELLO");
    }

    #[tokio::test]
    async fn a_failing_command_shows_the_tail_of_stderr() {
        let err = run(&sh("echo boom >&2; exit 3"), "", Duration::from_secs(5)).await.unwrap_err().to_string();
        assert!(err.contains("exit status: 3") && err.contains("boom"), "{err}");
    }

    #[tokio::test]
    async fn a_slow_command_times_out() {
        let err = run(&sh("sleep 5"), "", Duration::from_millis(200)).await.unwrap_err().to_string();
        assert!(err.contains("did not finish"), "{err}");
    }

    #[test]
    fn the_tail_keeps_the_end() {
        let long = "x".repeat(5000) + "END";
        assert!(tail(&long).ends_with("END"));
        assert!(tail(&long).len() <= STDERR_TAIL + 3);
    }
}
