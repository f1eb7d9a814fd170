//! The `stream-json` output Claude Code introduced and Qwen Code speaks
//! too: one JSON event per line (`system`/`init` with the session id,
//! `assistant` messages with `tool_use` parts, `user` messages with their
//! `tool_result`s, and a closing `result` with `is_error`, the final text,
//! usage and `permission_denials`).

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{relative, tail, Parser, Progress, Report, OUTPUT_TAIL};

/// Reads one run; the CLI's own tool names say which calls edit files and which run commands.
pub struct StreamJson {
    report: Report,
    edit_tools: &'static [&'static str],
    shell_tools: &'static [&'static str],
    name: &'static str,
    /// Commands started, by tool call id, until their results come.
    commands: HashMap<String, String>,
    /// Its working directory, as its first event says.
    cwd: Option<String>,
    /// Its last words, the reason when a failed result carries none.
    last_text: Option<String>,
}

impl Parser for StreamJson {
    fn line(&mut self, v: &Value) -> Vec<Progress> {
        if let Some(id) = v["session_id"].as_str() {
            self.report.session_id = Some(id.to_string());
        }
        let mut progress = vec![];
        match v["type"].as_str() {
            Some("assistant") => {
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    if let Some(text) = part["text"].as_str().filter(|_| part["type"] == "text") {
                        self.last_text = Some(text.to_string());
                    }
                    if part["type"] != "tool_use" {
                        continue;
                    }
                    let (name, input) = (part["name"].as_str().unwrap_or(""), &part["input"]);
                    if self.edit_tools.contains(&name) {
                        let path = input["file_path"].as_str().or(input["notebook_path"].as_str()).unwrap_or("");
                        let cwd = self.cwd();
                        progress.push(Progress::FileEdited { path: relative(Path::new(&cwd), path) });
                    } else if self.shell_tools.contains(&name) {
                        let id = part["id"].as_str().unwrap_or("").to_string();
                        self.commands.insert(id, input["command"].as_str().unwrap_or("").to_string());
                    }
                }
            }
            Some("user") => {
                for part in v["message"]["content"].as_array().into_iter().flatten() {
                    let id = part["tool_use_id"].as_str().unwrap_or("");
                    if let Some(command) = self.commands.remove(id) {
                        let output = text_of(&part["content"]);
                        let failed = part["is_error"].as_bool().unwrap_or(false);
                        let exit_code = Some(if failed { 1 } else { 0 });
                        progress.push(Progress::Command { command, exit_code, output: tail(&output, OUTPUT_TAIL) });
                    }
                }
            }
            Some("system") if v["subtype"] == "init" => {
                self.commands.clear();
                if let Some(cwd) = v["cwd"].as_str() {
                    self.cwd = Some(cwd.to_string());
                }
            }
            Some("result") => {
                let result = v["result"].as_str().map(str::to_string);
                // Qwen Code reports a dead endpoint as a "successful" answer beginning `[API Error`.
                let api_error = result.as_deref().is_some_and(|r| r.trim_start().starts_with("[API Error"));
                let failed = v["is_error"].as_bool().unwrap_or(false)
                    || v["subtype"].as_str().is_some_and(|s| s.starts_with("error"))
                    || api_error;
                if failed {
                    let why = result
                        .clone()
                        .or_else(|| self.last_text.clone())
                        .or_else(|| v["subtype"].as_str().map(str::to_string));
                    self.report.error = Some(why.unwrap_or_else(|| format!("{} reported an error", self.name)));
                } else {
                    self.report.result = result;
                }
                let usage = &v["usage"];
                let n = |k: &str| usage[k].as_i64().unwrap_or(0);
                self.report.reported_tokens = Some(n("input_tokens") + n("output_tokens"));
                for denial in v["permission_denials"].as_array().into_iter().flatten() {
                    let tool = denial["tool_name"].as_str().unwrap_or("a tool").to_string();
                    let detail = denial["tool_input"]["command"]
                        .as_str()
                        .map_or_else(|| denial["tool_input"].to_string(), str::to_string);
                    progress.push(Progress::Denied { tool, detail });
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

impl StreamJson {
    pub fn new(
        work: &Path,
        edit_tools: &'static [&'static str],
        shell_tools: &'static [&'static str],
        name: &'static str,
    ) -> Self {
        StreamJson {
            report: Report::default(),
            edit_tools,
            shell_tools,
            name,
            commands: HashMap::new(),
            cwd: Some(work.to_string_lossy().into_owned()),
            last_text: None,
        }
    }

    fn cwd(&self) -> String {
        self.cwd.clone().unwrap_or_default()
    }
}

/// A tool result's text: a string, or a list of text parts.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}
