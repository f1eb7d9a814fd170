//! Everything a coding agent produces is hostile input: before its text
//! reaches a reply, a question, a callback, the journal (and so the console)
//! or a log, the request's disclosure policy is applied to it, and every
//! secret value of the worker's own environment is cut out verbatim (the
//! box should keep them from the agent; this is the second wall).

use baton_domain::policy::disclosure::{redact_text, DisclosurePolicy};
use serde_json::Value;

/// What replaces a worker secret found in an agent's output.
pub const WORKER_SECRET: &str = "[redacted: a secret of the worker]";

/// Names of variables whose values are secrets (matched in upper case).
const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "DATABASE_URL",
    "AMQP_URL",
    "DSN",
    "COOKIE",
];
/// Values shorter than this are too common to cut out.
const MIN_SECRET_LEN: usize = 8;

#[derive(Debug, Clone, Default)]
pub struct Scrubber {
    policy: DisclosurePolicy,
    secrets: Vec<String>,
}

impl Scrubber {
    pub fn new(policy: DisclosurePolicy, mut secrets: Vec<String>) -> Self {
        secrets.retain(|s| s.len() >= MIN_SECRET_LEN);
        // Longest first, so a secret containing another goes whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { policy, secrets }
    }

    /// The values of the worker's variables that look like secrets.
    pub fn worker_secrets(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
        vars.into_iter()
            .filter(|(name, _)| {
                let name = name.to_ascii_uppercase();
                SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
            })
            .map(|(_, value)| value)
            .collect()
    }

    pub fn add_secret(&mut self, secret: String) {
        let mut all = std::mem::take(&mut self.secrets);
        all.push(secret);
        *self = Scrubber::new(std::mem::take(&mut self.policy), all);
    }

    pub fn text(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), WORKER_SECRET);
            }
        }
        redact_text(&text, &self.policy).0
    }

    /// Every string in `value`, scrubbed.
    pub fn value(&self, value: Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.text(&s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, self.value(v))).collect()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_secret_and_what_the_policy_removes_are_cut() {
        let vars = [
            ("DATABASE_URL".to_string(), "postgres://baton:hunter2@db/baton".to_string()),
            ("BATON_CANARY_TOKEN".to_string(), "canary-5f1e0c9a".to_string()),
            ("LANG".to_string(), "C.UTF-8 long enough".to_string()),
        ];
        let scrub = Scrubber::new(DisclosurePolicy::default(), Scrubber::worker_secrets(vars));
        let out = scrub
            .text("env: canary-5f1e0c9a and postgres://baton:hunter2@db/baton, mail a@b.example, C.UTF-8 long enough");
        assert!(!out.contains("canary-5f1e0c9a") && !out.contains("hunter2") && !out.contains("a@b.example"), "{out}");
        assert!(out.contains("C.UTF-8 long enough"), "{out}");
        let v = scrub.value(serde_json::json!({"cmd": ["echo", "canary-5f1e0c9a"]}));
        assert_eq!(v["cmd"][1], WORKER_SECRET);
    }
}
