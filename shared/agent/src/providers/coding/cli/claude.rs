//! Claude Code: `claude -p --output-format stream-json --verbose`, the
//! brief on stdin, the system prompt appended to its own. It speaks
//! Anthropic Messages to `ANTHROPIC_BASE_URL` (the gateway); its config and
//! sessions live under `CLAUDE_CONFIG_DIR` in the box's HOME.

use baton_domain::policy::permissions::Action;

use super::stream_json::StreamJson;
use super::{Cli, Launch, Parser, Setup};

pub struct Claude;

/// Its tools that write files.
const EDIT_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

impl Cli for Claude {
    fn launch(&self, s: &Setup<'_>) -> Launch {
        let home = s.home.to_string_lossy();
        let env: Vec<(&str, String)> = vec![
            ("CLAUDE_CONFIG_DIR", format!("{home}/.claude")),
            ("ANTHROPIC_BASE_URL", s.base_url.to_string()),
            ("ANTHROPIC_API_KEY", s.token.to_string()),
            ("ANTHROPIC_MODEL", s.model.to_string()),
            // Its small, fast helper calls go to the same model, through the gateway.
            ("ANTHROPIC_SMALL_FAST_MODEL", s.model.to_string()),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", s.model.to_string()),
            ("ANTHROPIC_DEFAULT_SONNET_MODEL", s.model.to_string()),
            ("ANTHROPIC_DEFAULT_OPUS_MODEL", s.model.to_string()),
            ("ANTHROPIC_DEFAULT_FABLE_MODEL", s.model.to_string()),
            ("CLAUDE_CODE_SUBAGENT_MODEL", s.model.to_string()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
            ("DISABLE_BUG_COMMAND", "1".into()),
            // A dead endpoint fails fast instead of retrying for minutes.
            ("CLAUDE_CODE_MAX_RETRIES", "1".into()),
            // Until the answer's headers; a stream that stalls is cut by the next.
            ("API_TIMEOUT_MS", request_timeout_ms(s.timeout).to_string()),
            ("CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS", request_timeout_ms(s.timeout).min(120_000).to_string()),
            // The repository's CLAUDE.md still counts (its settings do not, below).
            ("CLAUDE_CODE_ADDITIONAL_DIRECTORIES_CLAUDE_MD", "1".into()),
            // It refuses to skip permission prompts as root unless told it is boxed.
            ("IS_SANDBOX", "1".into()),
        ];
        let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose", "--model", s.model]
            .iter()
            .map(ToString::to_string)
            .collect();
        args.extend(["--permission-mode".into(), "bypassPermissions".into()]);
        // A repository's own `.claude/settings.json` could set the base URL or
        // run hooks: only the settings Baton writes in the box's HOME count.
        args.extend(["--setting-sources".into(), "user".into(), "--strict-mcp-config".into()]);
        args.extend(["--add-dir".into(), s.work.to_string_lossy().into_owned()]);
        if !s.system_prompt.trim().is_empty() {
            args.extend(["--append-system-prompt".into(), s.system_prompt.to_string()]);
        }
        let denied = disallowed_tools(s);
        if !denied.is_empty() {
            args.push("--disallowedTools".into());
            args.push(denied.join(","));
        }
        if let Some(session) = s.resume {
            args.extend(["--resume".into(), session.to_string()]);
        }
        Launch {
            args,
            env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            stdin: Some(s.brief.to_string()),
            files: vec![],
        }
    }

    fn parser(&self, work: &std::path::Path) -> Box<dyn Parser> {
        Box::new(StreamJson::new(work, EDIT_TOOLS, &["Bash"], "Claude Code"))
    }
}

/// Each model request's own limit: well inside the whole run's.
pub(super) fn request_timeout_ms(total: std::time::Duration) -> u64 {
    (total.as_millis() as u64 / 2).clamp(10_000, 600_000)
}

/// Its `--disallowedTools` rules for what the request denies.
fn disallowed_tools(s: &Setup<'_>) -> Vec<String> {
    let mut rules = vec![];
    for action in s.permissions.denied() {
        match action {
            Action::Shell => rules.push("Bash".to_string()),
            Action::Edit => rules.extend(EDIT_TOOLS.iter().map(ToString::to_string)),
            Action::Web => rules.extend(["WebFetch".to_string(), "WebSearch".to_string()]),
            other => rules.extend(other.commands().iter().map(|c| format!("Bash({c}:*)"))),
        }
    }
    rules.dedup();
    rules
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{read, setup};
    use super::*;
    use crate::providers::coding::cli::Progress;
    use baton_domain::policy::permissions::Permissions;

    const SAMPLE: &str = include_str!("samples/claude-ok.jsonl");

    #[test]
    fn a_run_reads_as_its_session_edits_commands_and_result() {
        let (progress, report) = read(&Claude, SAMPLE);
        assert!(report.session_id.is_some());
        assert_eq!(report.result.as_deref(), Some("Done: wrote hello.txt."));
        assert!(report.error.is_none());
        assert!(progress.contains(&Progress::FileEdited { path: "hello.txt".into() }), "{progress:?}");
        assert!(progress.iter().any(|p| matches!(p, Progress::Command { command, exit_code: Some(0), output } if command == "echo hi" && output == "hi")), "{progress:?}");
    }

    #[test]
    fn an_error_inside_a_success_is_a_failure() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: Connection error.","session_id":"s"}"#;
        let (_, report) = read(&Claude, line);
        assert_eq!(report.error.as_deref(), Some("API Error: Connection error."));
        assert!(report.result.is_none());
    }

    #[test]
    fn denied_actions_become_disallowed_tools_and_a_resume_its_flag() {
        let p = Permissions::from_constraints(&["git push".into()], &["editing files".into()]);
        let launch = Claude.launch(&setup(&p, Some("abc")));
        let args = launch.args.join(" ");
        assert!(args.contains("--disallowedTools Bash(git push:*),Write,Edit,MultiEdit,NotebookEdit"), "{args}");
        assert!(args.ends_with("--resume abc"), "{args}");
        assert_eq!(launch.env["ANTHROPIC_API_KEY"], "baton-token");
        assert_eq!(launch.stdin.as_deref(), Some("# Task\nEdit hello.txt"));
    }
}
