//! Gemini CLI: `gemini --approval-mode yolo --output-format stream-json`,
//! the brief on stdin. It speaks Gemini `streamGenerateContent` to
//! `GOOGLE_GEMINI_BASE_URL` (the gateway); its settings (API-key auth,
//! telemetry, usage statistics and updates off, one attempt per call) and
//! sessions live under `GEMINI_CLI_HOME` in the box's HOME (the profile's
//! system prompt in its user-level `GEMINI.md`), and the
//! request's forbidden actions become a policy file of deny rules.

use baton_domain::policy::permissions::Action;
use serde_json::{json, Value};

use super::{relative, tail, Cli, Launch, Parser, Progress, Report, Setup, OUTPUT_TAIL};

pub struct Gemini;

const EDIT_TOOLS: &[&str] = &["write_file", "replace", "edit"];
const SHELL_TOOL: &str = "run_shell_command";

impl Cli for Gemini {
    fn launch(&self, s: &Setup<'_>) -> Launch {
        let policy = s.home.join(".gemini/baton-policy.toml");
        let mut args: Vec<String> =
            ["--model", s.model, "--skip-trust", "--approval-mode", "yolo", "--output-format", "stream-json"]
                .iter()
                .map(ToString::to_string)
                .collect();
        args.extend(["--policy".into(), policy.to_string_lossy().into_owned()]);
        if let Some(session) = s.resume {
            args.extend(["--resume".into(), session.to_string()]);
        }
        let home = s.home.to_string_lossy().into_owned();
        let env = [
            ("GEMINI_CLI_HOME", home),
            ("GEMINI_API_KEY", s.token.to_string()),
            ("GOOGLE_GEMINI_BASE_URL", s.base_url.to_string()),
            // One process (it relaunches itself otherwise, and the copy ignores SIGTERM).
            ("GEMINI_CLI_NO_RELAUNCH", "true".to_string()),
            ("GEMINI_SANDBOX", "false".to_string()),
            ("GEMINI_SYSTEM_MD", "false".to_string()),
            ("GEMINI_TELEMETRY_ENABLED", "false".to_string()),
            ("NO_COLOR", "1".to_string()),
        ];
        let mut files = vec![(s.home.join(".gemini/settings.json"), settings().to_string()), (policy, rules(s))];
        // Its user-level GEMINI.md is appended to its own system instruction.
        if !s.system_prompt.trim().is_empty() {
            files.push((s.home.join(".gemini/GEMINI.md"), s.system_prompt.to_string()));
        }
        Launch {
            args,
            env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            stdin: Some(s.brief.to_string()),
            files,
        }
    }

    fn parser(&self, work: &std::path::Path) -> Box<dyn Parser> {
        Box::new(GeminiParser { work: work.to_path_buf(), ..Default::default() })
    }
}

fn settings() -> Value {
    json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "ide": {"enabled": false},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false, "maxAttempts": 1,
                    "retryFetchErrors": false, "sessionRetention": {"enabled": false}},
        "model": {"disableLoopDetection": true},
        "advanced": {"ignoreLocalEnv": true},
    })
}

/// Its policy engine's deny rules (TOML) for what the request denies.
fn rules(s: &Setup<'_>) -> String {
    let mut text = String::from("# Written by Baton for one invocation: the request's forbidden actions.\n");
    let quoted = |v: &str| Value::String(v.to_string()).to_string();
    let mut rule = |tools: &[&str], prefix: Option<&str>, why: &str| {
        let tools: Vec<String> = tools.iter().map(|t| quoted(t)).collect();
        text.push_str(&format!("\n[[rule]]\ntoolName = [{}]\n", tools.join(", ")));
        if let Some(prefix) = prefix {
            text.push_str(&format!("commandPrefix = {}\n", quoted(prefix)));
        }
        text.push_str(&format!("decision = \"deny\"\npriority = 900\ndenyMessage = {}\n", quoted(why)));
    };
    for action in s.permissions.denied() {
        let why = s.permissions.reason(action).unwrap_or("the request forbids it");
        match action {
            Action::Shell => rule(&[SHELL_TOOL], None, why),
            Action::Edit => rule(EDIT_TOOLS, None, why),
            Action::Web => rule(&["web_fetch", "google_web_search"], None, why),
            other => {
                for command in other.commands() {
                    rule(&[SHELL_TOOL], Some(command), why);
                }
            }
        }
    }
    text
}

#[derive(Default)]
struct GeminiParser {
    report: Report,
    work: std::path::PathBuf,
    /// Tool calls waiting for their results: id → (tool, command).
    pending: std::collections::HashMap<String, (String, String)>,
    /// The assistant's text since its last tool call: the result.
    text: String,
}

impl Parser for GeminiParser {
    fn line(&mut self, v: &Value) -> Vec<Progress> {
        let mut progress = vec![];
        match v["type"].as_str() {
            Some("init") => self.report.session_id = v["session_id"].as_str().map(str::to_string),
            Some("message") if v["role"] == "assistant" => {
                let content = v["content"].as_str().unwrap_or("");
                if v["delta"].as_bool() == Some(true) {
                    self.text.push_str(content);
                } else {
                    self.text = content.to_string();
                }
            }
            Some("tool_use") => {
                self.text.clear();
                let (tool, params) = (v["tool_name"].as_str().unwrap_or(""), &v["parameters"]);
                let id = v["tool_id"].as_str().unwrap_or("").to_string();
                if EDIT_TOOLS.contains(&tool) {
                    let path = params["file_path"].as_str().unwrap_or("");
                    self.pending.insert(id, (tool.to_string(), path.to_string()));
                } else if tool == SHELL_TOOL {
                    self.pending.insert(id, (tool.to_string(), params["command"].as_str().unwrap_or("").to_string()));
                }
            }
            Some("tool_result") => {
                let id = v["tool_id"].as_str().unwrap_or("");
                if let Some((tool, subject)) = self.pending.remove(id) {
                    let ok = v["status"] == "success";
                    let denied = v["error"]["type"] == "policy_violation";
                    let output = v["output"].as_str().unwrap_or("");
                    if denied {
                        progress.push(Progress::Denied { tool, detail: subject });
                    } else if tool == SHELL_TOOL {
                        let exit_code = Some(if ok { 0 } else { 1 });
                        progress.push(Progress::Command {
                            command: subject,
                            exit_code,
                            output: tail(output, OUTPUT_TAIL),
                        });
                    } else if ok {
                        progress.push(Progress::FileEdited { path: relative(&self.work, &subject) });
                    }
                }
            }
            Some("error") if self.report.error.is_none() => {
                self.report.error = v["message"].as_str().map(str::to_string);
            }
            Some("result") => {
                let stats = &v["stats"];
                let n = |k: &str| stats[k].as_i64().unwrap_or(0);
                self.report.reported_tokens = Some(n("input_tokens") + n("output_tokens"));
                if v["status"] == "success" {
                    let text = self.text.trim();
                    self.report.result = (!text.is_empty()).then(|| text.to_string());
                } else {
                    let why = v["error"]["message"].as_str().unwrap_or("Gemini CLI reported an error");
                    self.report.error = Some(why.to_string());
                }
            }
            _ => {}
        }
        progress
    }

    fn finish(self: Box<Self>) -> Report {
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{read, setup};
    use super::*;
    use baton_domain::policy::permissions::Permissions;

    #[test]
    fn a_run_reads_as_its_session_edits_commands_and_result() {
        let (progress, report) = read(&Gemini, include_str!("samples/gemini-ok.jsonl"));
        assert!(report.session_id.is_some());
        assert_eq!(report.result.as_deref(), Some("Done: wrote hello.txt."));
        assert!(progress.contains(&Progress::FileEdited { path: "hello.txt".into() }), "{progress:?}");
        assert!(progress
            .iter()
            .any(|p| matches!(p, Progress::Command { command, exit_code: Some(0), .. } if command == "echo hi")));
    }

    #[test]
    fn a_dead_endpoint_is_an_error() {
        let (_, report) = read(&Gemini, include_str!("samples/gemini-down.jsonl"));
        assert!(report.error.as_deref().is_some_and(|e| e.contains("API Error")), "{report:?}");
        assert!(report.result.is_none());
    }

    #[test]
    fn forbidden_commands_are_deny_rules() {
        let p = Permissions::from_constraints(&["git push".into()], &[]);
        let launch = Gemini.launch(&setup(&p, None));
        let (_, policy) = &launch.files[1];
        assert!(policy.contains("commandPrefix = \"git push\"") && policy.contains("decision = \"deny\""), "{policy}");
        assert!(launch.files.iter().any(|(p, text)| p.ends_with(".gemini/GEMINI.md") && text == "Be careful."));
    }
}
