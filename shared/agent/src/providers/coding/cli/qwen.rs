//! Qwen Code: `qwen --auth-type openai --approval-mode yolo --output-format
//! stream-json`, the brief on stdin, the system prompt appended to its own.
//! It speaks Chat Completions (streaming) to `OPENAI_BASE_URL` (the
//! gateway); its settings (system scope, so a repository's own cannot
//! override them: telemetry, usage
//! statistics, auto-update and managed memory off, retries bounded,
//! permissions) and sessions live in the box's HOME.

use baton_domain::policy::permissions::Action;
use serde_json::{json, Value};

use super::stream_json::StreamJson;
use super::{Cli, Launch, Parser, Setup};

pub struct Qwen;

const EDIT_TOOLS: &[&str] = &["write_file", "edit", "replace", "multi_edit"];
const SHELL_TOOLS: &[&str] = &["run_shell_command"];

impl Cli for Qwen {
    fn launch(&self, s: &Setup<'_>) -> Launch {
        let mut args: Vec<String> =
            ["--auth-type", "openai", "--approval-mode", "yolo", "--output-format", "stream-json", "--model", s.model]
                .iter()
                .map(ToString::to_string)
                .collect();
        if !s.system_prompt.trim().is_empty() {
            args.extend(["--append-system-prompt".into(), s.system_prompt.to_string()]);
        }
        if let Some(session) = s.resume {
            args.extend(["--resume".into(), session.to_string()]);
        }
        let qwen_home = s.home.join(".qwen");
        let settings_path = qwen_home.join("system-settings.json");
        let env = [
            ("QWEN_HOME", qwen_home.to_string_lossy().into_owned()),
            // The system scope wins over a repository's own `.qwen/settings.json`.
            ("QWEN_CODE_SYSTEM_SETTINGS_PATH", settings_path.to_string_lossy().into_owned()),
            ("QWEN_USAGE_STATISTICS_ENABLED", "false".to_string()),
            ("QWEN_TELEMETRY_ENABLED", "false".to_string()),
            ("OPENAI_BASE_URL", s.base_url.to_string()),
            ("OPENAI_API_KEY", s.token.to_string()),
            ("OPENAI_MODEL", s.model.to_string()),
            ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1".to_string()),
            ("NO_UPDATE_NOTIFIER", "1".to_string()),
        ];
        Launch {
            args,
            env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            stdin: Some(s.brief.to_string()),
            files: vec![(settings_path, settings(s).to_string())],
        }
    }

    fn parser(&self, work: &std::path::Path) -> Box<dyn Parser> {
        Box::new(StreamJson::new(work, EDIT_TOOLS, SHELL_TOOLS, "Qwen Code"))
    }
}

/// Its settings for one run.
fn settings(s: &Setup<'_>) -> Value {
    let mut deny: Vec<String> = vec![];
    for action in s.permissions.denied() {
        match action {
            Action::Shell => deny.extend(SHELL_TOOLS.iter().map(ToString::to_string)),
            Action::Edit => deny.extend(EDIT_TOOLS.iter().map(ToString::to_string)),
            Action::Web => deny.extend(["web_fetch".to_string(), "web_search".to_string()]),
            other => deny.extend(other.commands().iter().map(|c| format!("Bash({c} *)"))),
        }
    }
    json!({
        "$version": 4,
        "general": {"enableAutoUpdate": false, "preventSystemSleep": false, "gitCoAuthor": {"pr": false}},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "memory": {"enableManagedAutoMemory": false, "enableManagedAutoDream": false},
        "tools": {"useRipgrep": false},
        "model": {"generationConfig": {
            "maxRetries": 0,
            "timeout": super::claude::request_timeout_ms(s.timeout),
        }},
        "permissions": {"deny": deny},
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{read, setup};
    use super::*;
    use crate::providers::coding::cli::Progress;
    use baton_domain::policy::permissions::Permissions;

    #[test]
    fn a_run_reads_as_its_session_edits_commands_and_result() {
        let (progress, report) = read(&Qwen, include_str!("samples/qwen-ok.jsonl"));
        assert!(report.session_id.is_some());
        assert_eq!(report.result.as_deref(), Some("Done: wrote hello.txt."));
        assert!(progress.iter().any(|p| matches!(p, Progress::FileEdited { path } if path.ends_with("hello.txt"))));
        assert!(progress.iter().any(|p| matches!(p, Progress::Command { command, .. } if command == "echo hi")));
    }

    #[test]
    fn a_dead_endpoint_is_an_error_not_an_answer() {
        let (_, report) = read(&Qwen, include_str!("samples/qwen-down.jsonl"));
        assert!(report.result.is_none());
        assert!(report.error.as_deref().is_some_and(|e| e.contains("API Error")), "{report:?}");
        let exit0 = r#"{"type":"result","subtype":"success","is_error":false,"result":"[API Error: Connection error.]","session_id":"s"}"#;
        let (_, report) = read(&Qwen, exit0);
        assert!(report.error.is_some() && report.result.is_none(), "{report:?}");
    }

    #[test]
    fn settings_turn_off_what_calls_home_and_deny_what_the_request_forbids() {
        let p = Permissions::from_constraints(&["run shell commands".into()], &[]);
        let launch = Qwen.launch(&setup(&p, None));
        let (path, text) = &launch.files[0];
        assert!(path.ends_with(".qwen/system-settings.json"));
        assert_eq!(launch.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"], path.to_string_lossy());
        let settings: Value = serde_json::from_str(text).unwrap();
        assert_eq!(settings["telemetry"]["enabled"], false);
        assert_eq!(settings["permissions"]["deny"], json!(["run_shell_command"]));
        assert_eq!(launch.env["OPENAI_API_KEY"], "baton-token");
    }
}
