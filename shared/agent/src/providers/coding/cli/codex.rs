//! Codex: `codex exec --json`, the prompt on stdin, a model provider of
//! Baton's own given entirely as `-c` flags (the gateway, Responses over
//! SSE, the token in a variable), its remote features off. Its home is
//! `CODEX_HOME` inside the box's HOME; sessions live under it.

use baton_domain::policy::permissions::Action;
use serde_json::Value;

use super::{relative, tail, Cli, Launch, Parser, Progress, Report, Setup, OUTPUT_TAIL};

pub struct Codex;

/// The variable holding the gateway's token for it.
const TOKEN_VAR: &str = "BATON_MODEL_TOKEN";

impl Cli for Codex {
    fn launch(&self, s: &Setup<'_>) -> Launch {
        let codex_home = s.home.join(".codex");
        // Inside Baton's own bubblewrap its sandbox cannot nest; the box is the sandbox then.
        let sandbox = match (s.permissions.denies(Action::Edit), s.boxed) {
            (true, _) => "read-only",
            (false, true) => "danger-full-access",
            (false, false) => "workspace-write",
        };
        let mut args: Vec<String> =
            ["exec", "--json", "--skip-git-repo-check", "--color", "never", "--sandbox", sandbox]
                .map(String::from)
                .to_vec();
        if s.permissions.denies(Action::Shell) {
            args.extend(["--disable".into(), "shell_tool".into()]);
        }
        if let Some(thread) = s.resume {
            args.extend(["resume".into(), thread.to_string()]);
        }
        args.push("-".into());
        let mut files = vec![(codex_home.join("config.toml"), config(s))];
        let denied = s.permissions.denied_commands();
        if !denied.is_empty() {
            files.push((codex_home.join("rules/baton.rules"), rules(&denied)));
        }
        Launch {
            args,
            env: [
                ("CODEX_HOME".to_string(), codex_home.to_string_lossy().into_owned()),
                (TOKEN_VAR.to_string(), s.token.to_string()),
                ("NO_COLOR".to_string(), "1".to_string()),
            ]
            .into_iter()
            .collect(),
            stdin: Some(s.brief.to_string()),
            files,
        }
    }

    fn parser(&self, work: &std::path::Path) -> Box<dyn Parser> {
        Box::new(CodexParser { work: work.to_path_buf(), ..Default::default() })
    }
}

/// Its `config.toml` for one run: Baton's gateway as the only provider,
/// every remote feature off, retries bounded so a dead endpoint fails fast.
fn config(s: &Setup<'_>) -> String {
    let q = |v: &str| Value::String(v.to_string()).to_string();
    let idle_ms = super::claude::request_timeout_ms(s.timeout);
    let mut text = format!(
        "# Written by Baton for one invocation.\nmodel = {model}\nmodel_provider = \"baton\"\napproval_policy = \"never\"\n\
         check_for_update_on_startup = false\n",
        model = q(s.model),
    );
    if !s.system_prompt.trim().is_empty() {
        text.push_str(&format!("developer_instructions = {}\n", q(s.system_prompt)));
    }
    text.push_str(&format!(
        "\n[analytics]\nenabled = false\n[feedback]\nenabled = false\n[history]\npersistence = \"none\"\n\
         [otel]\nexporter = \"none\"\nmetrics_exporter = \"none\"\ntrace_exporter = \"none\"\n\n\
         [features]\nplugins = false\nremote_plugin = false\napps = false\nunbounded_connection_retries = false\n\n\
         # The model's commands never see the gateway's token.\n[shell_environment_policy]\nexclude = [\"BATON_*\"]\n\n\
         [skills]\ninclude_instructions = false\n[skills.bundled]\nenabled = false\n\n\
         [model_providers.baton]\nname = \"baton\"\nbase_url = {base_url}\nwire_api = \"responses\"\nenv_key = {key}\n\
         request_max_retries = 1\nstream_max_retries = 1\nstream_idle_timeout_ms = {idle_ms}\n",
        base_url = q(s.base_url),
        key = q(TOKEN_VAR),
    ));
    if s.permissions.denies(Action::Web) {
        text.push_str("\n[tools]\nweb_search = false\n");
    }
    text
}

/// Its exec policy (Starlark `prefix_rule`s): what the request forbids is
/// refused before it runs.
fn rules(commands: &[&str]) -> String {
    let mut text = String::from("# Written by Baton for one invocation: the request's forbidden actions.\n");
    for words in commands.iter().map(|c| c.split_whitespace().collect::<Vec<_>>()) {
        let pattern: Vec<String> = words.iter().map(|w| Value::String(w.to_string()).to_string()).collect();
        text.push_str(&format!(
            "prefix_rule(pattern = [{}], decision = \"forbidden\", justification = \"the request forbids it\")\n",
            pattern.join(", ")
        ));
    }
    text
}

#[derive(Default)]
struct CodexParser {
    report: Report,
    /// The messages it wrote, last one the result.
    last_message: Option<String>,
    /// An `error` event's message, the failure when no turn completes.
    last_error: Option<String>,
    work: std::path::PathBuf,
}

impl Parser for CodexParser {
    fn line(&mut self, v: &Value) -> Vec<Progress> {
        let mut progress = vec![];
        match v["type"].as_str() {
            Some("thread.started") => self.report.session_id = v["thread_id"].as_str().map(str::to_string),
            Some("item.completed") => {
                let item = &v["item"];
                match item["type"].as_str() {
                    Some("agent_message") => self.last_message = item["text"].as_str().map(str::to_string),
                    Some("command_execution") => progress.push(Progress::Command {
                        command: unwrap_shell(item["command"].as_str().unwrap_or("")),
                        exit_code: item["exit_code"].as_i64(),
                        output: tail(item["aggregated_output"].as_str().unwrap_or(""), OUTPUT_TAIL),
                    }),
                    Some("file_change") => {
                        for change in item["changes"].as_array().into_iter().flatten() {
                            let path = change["path"].as_str().unwrap_or("");
                            progress.push(Progress::FileEdited { path: relative(&self.work, path) });
                        }
                    }
                    _ => {}
                }
            }
            Some("turn.completed") => {
                let usage = &v["usage"];
                let n = |k: &str| usage[k].as_i64().unwrap_or(0);
                // Cumulative over a resumed thread: for the journal only.
                self.report.reported_tokens = Some(n("input_tokens") + n("output_tokens"));
                self.report.result = self.last_message.clone();
            }
            Some("turn.failed") => {
                self.report.error = Some(v["error"]["message"].as_str().unwrap_or("the turn failed").to_string());
            }
            // A stream error it retries, or a note about model metadata: a
            // failure only when no turn completes (`turn.failed` then says so).
            Some("error") if self.report.error.is_none() && self.report.result.is_none() => {
                self.last_error = v["message"].as_str().map(str::to_string);
            }
            _ => {}
        }
        progress
    }

    fn finish(mut self: Box<Self>) -> Report {
        if self.report.result.is_none() && self.report.error.is_none() {
            self.report.error = self.last_error.take();
        }
        self.report
    }
}

/// `/bin/bash -lc 'echo hi'` (any shell, either quoting) as the command it runs: `echo hi`.
fn unwrap_shell(command: &str) -> String {
    let Some((shell, rest)) = command.split_once(' ') else { return command.to_string() };
    let is_shell = ["bash", "sh", "zsh", "dash"].iter().any(|s| shell == *s || shell.ends_with(&format!("/{s}")));
    let Some(script) = rest.strip_prefix("-lc ").or_else(|| rest.strip_prefix("-c ")).filter(|_| is_shell) else {
        return command.to_string();
    };
    let script = script.trim();
    if let Some(inner) = script.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return inner.replace("'\\''", "'");
    }
    if let Some(inner) = script.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return inner.replace("\\\"", "\"").replace("\\\\", "\\");
    }
    script.to_string()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{read, setup};
    use super::*;
    use baton_domain::policy::permissions::Permissions;

    const SAMPLE: &str = include_str!("samples/codex-ok.jsonl");

    #[test]
    fn a_run_reads_as_its_thread_edits_commands_and_result() {
        let (progress, report) = read(&Codex, SAMPLE);
        assert!(report.session_id.is_some());
        assert_eq!(report.result.as_deref(), Some("Done: wrote hello.txt."));
        assert!(progress.iter().any(|p| matches!(p, Progress::FileEdited { path } if path.ends_with("hello.txt"))));
        assert!(
            progress.contains(&Progress::Command {
                command: "echo hi".into(),
                exit_code: Some(0),
                output: "hi\n".into()
            }),
            "{progress:?}"
        );
    }

    #[test]
    fn a_shell_wrapper_is_unwrapped_in_either_quoting() {
        assert_eq!(unwrap_shell("/bin/bash -lc 'echo hi'"), "echo hi");
        assert_eq!(unwrap_shell("/usr/bin/bash -lc \"printf '%s' 'x' > 'a b'\""), "printf '%s' 'x' > 'a b'");
        assert_eq!(unwrap_shell("sh -c 'it'\\''s'"), "it's");
        assert_eq!(unwrap_shell("git status"), "git status");
    }

    #[test]
    fn a_failed_turn_is_the_error_and_a_metadata_warning_is_not() {
        let lines = "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"error\",\"message\":\"Model metadata for `m` not found\"}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"ok\"}}\n{\"type\":\"turn.completed\",\"usage\":{}}";
        let (_, report) = read(&Codex, lines);
        assert_eq!((report.result.as_deref(), report.error.as_deref()), (Some("ok"), None));
        let failed = "{\"type\":\"error\",\"message\":\"stream disconnected\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"stream disconnected before completion\"}}";
        let (_, report) = read(&Codex, failed);
        assert_eq!(report.error.as_deref(), Some("stream disconnected before completion"));
    }

    #[test]
    fn the_provider_is_the_gateway_and_forbidden_commands_are_rules() {
        let p = Permissions::from_constraints(&["git push".into()], &[]);
        let launch = Codex.launch(&setup(&p, Some("thread-1")));
        let args = launch.args.join(" ");
        assert!(args.starts_with("exec --json") && args.ends_with("resume thread-1 -"), "{args}");
        let (path, config) = &launch.files[0];
        assert!(path.ends_with(".codex/config.toml"));
        assert!(
            config.contains("base_url = \"http://127.0.0.1:9\"")
                && config.contains("unbounded_connection_retries = false"),
            "{config}"
        );
        toml::from_str::<toml::Value>(config).expect("valid TOML");
        assert_eq!(launch.env[TOKEN_VAR], "baton-token");
        let (_, rules) = &launch.files[1];
        assert!(rules.contains("prefix_rule(pattern = [\"git\", \"push\"], decision = \"forbidden\""), "{rules}");
    }
}
