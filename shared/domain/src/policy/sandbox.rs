//! The box an external (`command`) agent runs in, as pure decisions: which
//! environment it gets, how much of its output is kept, what an interrupted
//! one becomes, and the words a bridge reads when one is stopped.
//!
//! The process side (a process group, a working directory, killing and
//! reaping) lives in the agent crate; everything here is testable without one.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// PATH when the profile neither passes the worker's own nor sets one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Bytes of stdout (and of stderr) an agent may print before it is stopped,
/// unless its profile says otherwise.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 1024 * 1024;

/// Error codes of an external agent that was stopped; they reach the bridge
/// in `BridgeReply.error.code`.
pub mod codes {
    use crate::protocol::contract::ErrorCode;

    pub const TIMEOUT: &str = ErrorCode::AgentTimeout.as_str();
    pub const OUTPUT_LIMIT: &str = ErrorCode::AgentOutputLimit.as_str();
    pub const INTERRUPTED: &str = ErrorCode::AgentInterrupted.as_str();
    pub const EXITED: &str = ErrorCode::AgentFailed.as_str();
}

/// What happens to an external agent that a worker shutdown (a deploy)
/// interrupts, or whose worker died while it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnInterrupt {
    /// The invocation fails visibly: an agent with side effects (a pushed
    /// branch, a posted comment) is never run twice. The default, because
    /// only the operator knows whether the agent is safe to repeat.
    #[default]
    Fail,
    /// The agent is killed and run again from scratch by another worker:
    /// for agents whose work is idempotent or stays in their working dir.
    Rerun,
}

impl OnInterrupt {
    pub fn is_default(&self) -> bool {
        *self == OnInterrupt::Fail
    }
}

/// The agent's whole environment: nothing of the worker's (its database and
/// broker URLs, its API keys) unless the profile lists the name; fixed
/// values from the profile win over passed ones; PATH and HOME always exist
/// (HOME is the agent's own working directory unless the profile says otherwise).
pub fn environment(
    pass: &[String],
    values: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<String>,
    work_dir: &str,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        pass.iter().filter_map(|name| lookup(name).map(|v| (name.clone(), v))).collect();
    env.extend(values.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
    env.entry("HOME".into()).or_insert_with(|| work_dir.into());
    env
}

/// Why a profile's environment settings are unusable (empty when fine).
pub fn environment_problems(pass: &[String], values: &BTreeMap<String, String>) -> Vec<String> {
    let bad = |name: &str| name.is_empty() || name.contains('=') || name.contains('\0');
    let mut problems: Vec<String> = pass
        .iter()
        .chain(values.keys())
        .filter(|n| bad(n))
        .map(|n| format!("`{n}` is not an environment variable name"))
        .collect();
    problems.extend(
        values
            .iter()
            .filter(|(_, v)| v.contains('\0'))
            .map(|(k, _)| format!("the value of `{k}` contains a NUL character")),
    );
    problems
}

/// One output stream read incrementally: keeps the first `cap` bytes (or,
/// for a log stream, the last `keep` bytes) and counts everything, so a
/// flood costs no more memory than the cap.
#[derive(Debug)]
pub struct Capped {
    cap: u64,
    keep: Keep,
    kept: Vec<u8>,
    seen: u64,
}

#[derive(Debug, Clone, Copy)]
enum Keep {
    Head,
    Tail(usize),
}

impl Capped {
    /// Keeps what comes first (the agent's result on stdout).
    pub fn head(cap: u64) -> Self {
        Self { cap, keep: Keep::Head, kept: vec![], seen: 0 }
    }

    /// Keeps only the last `keep` bytes (stderr, shown when the agent fails).
    pub fn tail(cap: u64, keep: usize) -> Self {
        Self { cap, keep: Keep::Tail(keep), kept: vec![], seen: 0 }
    }

    /// Takes a chunk; `false` once the stream has gone over its cap.
    pub fn push(&mut self, chunk: &[u8]) -> bool {
        self.seen += chunk.len() as u64;
        match self.keep {
            Keep::Head => {
                let room = (self.cap as usize).saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Keep::Tail(keep) => {
                self.kept.extend_from_slice(&chunk[chunk.len().saturating_sub(keep)..]);
                let excess = self.kept.len().saturating_sub(keep);
                self.kept.drain(..excess);
            }
        }
        !self.over()
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    pub fn over(&self) -> bool {
        self.seen > self.cap
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.kept).into_owned()
    }
}

/// What the bridge (and a parent agent) reads when an external agent was stopped.
pub fn timeout_message(timeout: Duration) -> String {
    format!("the external agent did not finish within {} and was stopped", human(timeout))
}

pub fn output_limit_message(cap: u64) -> String {
    format!("the external agent ran out of output room (more than {} of output) and was stopped", bytes(cap))
}

pub const INTERRUPTED_MESSAGE: &str =
    "the external agent was interrupted (its worker shut down or stopped) before it finished, \
and it is not re-run because it may have changed things already";

pub fn exited_message(status: &str) -> String {
    format!("the external agent stopped with an error ({status})")
}

fn human(d: Duration) -> String {
    match d.as_secs() {
        0 => format!("{} ms", d.as_millis()),
        1 => "1 second".into(),
        s if s < 120 || s % 60 != 0 => format!("{s} seconds"),
        s => format!("{} minutes", s / 60),
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1024 * 1024 && n % (1024 * 1024) == 0 => format!("{} MiB", n / (1024 * 1024)),
        n if n >= 1024 && n % 1024 == 0 => format!("{} KiB", n / 1024),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker_env(name: &str) -> Option<String> {
        match name {
            "DATABASE_URL" => Some("postgres://secret@db/baton".into()),
            "AMQP_URL" => Some("amqp://guest:guest@mq".into()),
            "OPENAI_API_KEY" => Some("sk-live".into()),
            "PATH" => Some("/opt/bin:/usr/bin".into()),
            _ => None,
        }
    }

    #[test]
    fn only_listed_variables_pass_and_path_and_home_always_exist() {
        let env = environment(&["OPENAI_API_KEY".into(), "NOT_SET".into()], &BTreeMap::new(), worker_env, "/w/agent-1");
        assert_eq!(env.get("OPENAI_API_KEY").map(String::as_str), Some("sk-live"));
        assert!(!env.contains_key("DATABASE_URL") && !env.contains_key("AMQP_URL") && !env.contains_key("NOT_SET"));
        assert_eq!(env["PATH"], DEFAULT_PATH);
        assert_eq!(env["HOME"], "/w/agent-1");
        assert_eq!(env.len(), 3);
    }

    #[test]
    fn a_listed_path_and_fixed_values_win_over_defaults() {
        let values = BTreeMap::from([
            ("HOME".to_string(), "/home/agent".to_string()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
        ]);
        let env = environment(&["PATH".into()], &values, worker_env, "/w/agent-1");
        assert_eq!(env["PATH"], "/opt/bin:/usr/bin");
        assert_eq!(env["HOME"], "/home/agent");
        assert_eq!(env["LANG"], "C.UTF-8");
    }

    #[test]
    fn malformed_names_are_problems() {
        let values = BTreeMap::from([("A=B".to_string(), "x".to_string())]);
        let problems = environment_problems(&["".into(), "OK".into()], &values);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(environment_problems(&["OPENAI_API_KEY".into()], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn the_head_keeps_the_first_bytes_and_says_when_the_cap_is_passed() {
        let mut out = Capped::head(10);
        assert!(out.push(b"hello "));
        assert!(out.push(b"worl"));
        assert!(!out.over());
        assert!(!out.push(b"d and more"));
        assert!(out.over());
        assert_eq!(out.text(), "hello worl");
    }

    #[test]
    fn the_tail_keeps_the_last_bytes_within_its_size() {
        let mut err = Capped::tail(1_000, 4);
        for chunk in [&b"abc"[..], b"defgh", b"ij"] {
            assert!(err.push(chunk));
        }
        assert_eq!(err.text(), "ghij");
        assert!(!err.push(&[b'x'; 1_000]));
        assert_eq!(err.text(), "xxxx");
    }

    #[test]
    fn messages_are_sentences_a_person_reads() {
        assert_eq!(
            timeout_message(Duration::from_secs(1)),
            "the external agent did not finish within 1 second and was stopped"
        );
        assert_eq!(
            timeout_message(Duration::from_secs(600)),
            "the external agent did not finish within 10 minutes and was stopped"
        );
        assert!(output_limit_message(1024 * 1024).contains("ran out of output room (more than 1 MiB of output)"));
        assert!(output_limit_message(65_536).contains("64 KiB"));
    }

    #[test]
    fn on_interrupt_reads_from_toml_and_defaults_to_fail() {
        #[derive(Deserialize)]
        struct P {
            #[serde(default)]
            on_interrupt: OnInterrupt,
        }
        assert_eq!(toml::from_str::<P>("on_interrupt = \"rerun\"").unwrap().on_interrupt, OnInterrupt::Rerun);
        assert_eq!(toml::from_str::<P>("").unwrap().on_interrupt, OnInterrupt::Fail);
        assert!(toml::from_str::<P>("on_interrupt = \"retry\"").is_err());
    }
}
