//! The lists in the guide match the code: the settings table of the
//! operating guide names every environment variable Baton reads and no
//! other; its list of commands is what `baton --help` (and each command's
//! `--help`) lists; the concepts guide's tool table is the `ToolName` enum.
//! The events' tables are checked in `events_docs.rs`.

use std::cell::RefCell;
use std::collections::BTreeSet;

use baton_domain::tool_name::ToolName;
use baton_tests::docs::{assert_same_names, names_in_table, read, root, under};

const OPERATING: &str = "docs/operating.md";

/// Variables the code reads that are not Baton's settings, and why.
const NOT_SETTINGS: [(&str, &str); 4] = [
    ("HOSTNAME", "the host's own name, the default of BATON_WORKER_ID"),
    ("PATH", "where external agents and coding CLIs are found"),
    ("BATON_AMQP_HEARTBEAT_SECS", "read only to refuse it, naming BATON_AMQP_DEAD_PEER_SECS"),
    ("BATON_TEST_PAUSE_IN_STEP_MS", "a pause point of debug builds, for one test"),
];

/// The variables `Settings::from_vars` asks for.
fn settings_read() -> BTreeSet<String> {
    let asked = RefCell::new(BTreeSet::new());
    baton::config::Settings::from_vars(|name| {
        asked.borrow_mut().insert(name.to_string());
        None
    })
    .expect("the defaults are valid settings");
    asked.into_inner()
}

/// The variables named as a literal in a `env::var("…")` or
/// `env::var_os("…")` call, or in a list of `OTEL_*` names, in the source
/// of the binary and the shared crates (tests aside); `RUST_LOG` when a
/// log filter is read from the environment.
fn variables_in_source() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut files = Vec::new();
    for dir in ["workers/src", "shared/domain/src", "shared/store/src", "shared/bus/src", "shared/agent/src"] {
        collect_rs(&root().join(dir), &mut files);
    }
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for call in ["env::var(\"", "env::var_os(\""] {
            for (at, _) in code.match_indices(call) {
                found.insert(literal(&code[at + call.len()..]));
            }
        }
        for (at, _) in code.match_indices("\"OTEL_") {
            found.insert(literal(&code[at + 1..]));
        }
        if code.contains("EnvFilter::try_from_default_env") || code.contains("EnvFilter::from_default_env") {
            found.insert("RUST_LOG".into());
        }
    }
    found
}

fn literal(rest: &str) -> String {
    rest.split('"').next().unwrap_or_default().to_string()
}

fn collect_rs(dir: &std::path::Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect_rs(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn the_settings_table_names_every_variable_baton_reads_and_no_other() {
    let text = read(OPERATING);
    let listed = names_in_table(under(&text, "## Settings"));
    let mut read_by_code = settings_read();
    read_by_code.extend(variables_in_source());
    for (name, _why) in NOT_SETTINGS {
        read_by_code.remove(name);
    }
    assert!(read_by_code.len() > 40, "too few variables found in the code: {read_by_code:?}");
    assert_same_names(&read_by_code, &listed, "variables", &format!("under `## Settings` in {OPERATING}"));
}

/// The commands a `--help` lists under `Commands:`, `help` aside.
fn commands_in_help(args: &[&str]) -> Vec<String> {
    let out =
        std::process::Command::new(baton_tests::baton_binary()).args(args).arg("--help").output().expect("baton runs");
    assert!(out.status.success(), "baton {args:?} --help failed");
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    let Some(list) = help.split("Commands:\n").nth(1) else { return Vec::new() };
    list.lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// Every command `baton` has: `migrate`, `runs list`, … (a command with
/// subcommands stands for them).
fn commands_of_the_binary() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for command in commands_in_help(&[]) {
        let subs = commands_in_help(&[&command]);
        if subs.is_empty() {
            all.insert(command);
        } else {
            all.extend(subs.into_iter().map(|s| format!("{command} {s}")));
        }
    }
    all
}

/// The commands the operating guide's table documents: from each row's
/// `baton …`, the words up to its first argument or option.
fn commands_documented() -> BTreeSet<String> {
    let text = read(OPERATING);
    let mut all = BTreeSet::new();
    for name in names_in_table(under(&text, "## Roles and commands")) {
        let Some(rest) = name.strip_prefix("baton ") else { continue };
        let words: Vec<&str> = rest
            .split_whitespace()
            .take_while(|w| !w.starts_with('-') && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .collect();
        all.insert(words.join(" "));
    }
    all
}

#[test]
fn the_command_table_lists_what_baton_help_lists_and_no_other() {
    let binary = commands_of_the_binary();
    let documented = commands_documented();
    assert!(binary.contains("runs list") && binary.contains("migrate"), "help not read: {binary:?}");
    assert_same_names(&binary, &documented, "commands", &format!("under `## Roles and commands` in {OPERATING}"));
}

#[test]
fn the_tool_table_lists_every_model_visible_tool_and_no_other() {
    let page = "docs/concepts.md";
    let text = read(page);
    let listed = names_in_table(under(&text, "## Model-visible tools"));
    let code: BTreeSet<String> = ToolName::ALL.iter().map(|t| t.as_str().to_string()).collect();
    assert_same_names(&code, &listed, "tools", &format!("under `## Model-visible tools` in {page}"));
}
