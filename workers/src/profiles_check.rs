//! `baton profiles check FILE`: what each profile still needs before it can
//! run here, so the check can gate a deploy (it exits non-zero when a
//! profile is not ready).
//!
//! A profile requires configuration when its binding is incomplete, when a
//! key variable it names is unset in this environment, when it calls a
//! hosted endpoint without naming a key at all, or when its coding CLI is
//! not installed. An endpoint is hosted unless its host is this machine, a
//! private or link-local address, or a name without a dot (a compose
//! service such as `ollama`) or under `.local` / `.internal`: a model
//! served next to the fleet often takes no key, a provider's API always
//! does.

use std::path::{Path, PathBuf};

use baton_domain::profiles::{ModelBinding, Profile, ProfilesFile};
use baton_domain::protocol::callback::{sign::Secret, CallbacksConfig};

/// Whether one profile can run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// What is missing, each named.
    RequiresConfiguration(Vec<String>),
    /// Complete, but this build cannot run its provider.
    NotRunnable(String),
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readiness::Ready => f.write_str("ready"),
            Readiness::RequiresConfiguration(missing) => write!(f, "requires configuration: {}", missing.join(", ")),
            Readiness::NotRunnable(why) => write!(f, "not runnable: {why}"),
        }
    }
}

/// What the check found: a line per profile and per callback source, and
/// the profiles that are not ready.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub lines: Vec<String>,
    /// `profile `id` requires configuration: …`, one per profile not ready.
    pub problems: Vec<String>,
}

/// Checks every profile of `file` and its callbacks against this
/// environment (`var` reads a variable).
pub fn check(file: &ProfilesFile, var: impl Fn(&str) -> Option<String>) -> Report {
    let mut report = Report::default();
    for p in &file.profiles {
        let readiness = readiness(p, &var);
        report.lines.push(format!("{:<16} {:<11} {readiness}", p.id, p.model.provider_name()));
        if readiness != Readiness::Ready {
            report.problems.push(format!("profile `{}` {readiness}", p.id));
        }
    }
    report.lines.extend(callback_readiness(&file.callbacks, &var));
    report
}

/// Whether `p` can run here, and if not, what it still needs.
pub fn readiness(p: &Profile, var: impl Fn(&str) -> Option<String>) -> Readiness {
    let mut missing: Vec<String> = p.model.missing_configuration().iter().map(ToString::to_string).collect();
    let (key_var, base_url) = match &p.model {
        ModelBinding::Openai { api_key_env, base_url, .. } => (api_key_env.as_ref(), base_url.as_deref()),
        other => (other.coding().and_then(|(_, b)| b.api_key_env.as_ref()), None),
    };
    match key_var {
        Some(name) if var(name).is_none_or(|v| v.trim().is_empty()) => {
            missing.push(format!("environment variable {name} (its model key) is unset"));
        }
        None if base_url.is_some_and(is_hosted) => missing.push(format!(
            "api_key_env: {} is a hosted endpoint and no key variable is named",
            base_url.unwrap_or_default()
        )),
        _ => {}
    }
    // A coding CLI must be installed where the worker looks for it.
    if let Some((cli, binding)) = p.model.coding() {
        let bin = baton_agent::providers::coding::program_of(cli, binding);
        if find_program(&bin).is_none() {
            missing.push(format!(
                "the `{bin}` program ({}; `npm install --prefix agents` installs it)",
                cli.display_name()
            ));
        }
    }
    match (missing.is_empty(), p.model.unavailable()) {
        (false, _) => Readiness::RequiresConfiguration(missing),
        (true, Some(why)) => Readiness::NotRunnable(why),
        (true, None) => Readiness::Ready,
    }
}

/// Whether `base_url` is a provider's API rather than a model served beside
/// the fleet (see the module doc).
pub fn is_hosted(base_url: &str) -> bool {
    let rest = base_url.split_once("://").map_or(base_url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    }
    .to_ascii_lowercase();
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return match ip {
            std::net::IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_private() || v4.is_link_local()),
            std::net::IpAddr::V6(v6) => !(v6.is_loopback() || (v6.segments()[0] & 0xfe00) == 0xfc00),
        };
    }
    let local = host == "localhost" || host.ends_with(".localhost") || !host.contains('.');
    !(local || host.ends_with(".local") || host.ends_with(".internal"))
}

/// What the check says of status callbacks: where they may go, and
/// whether each source's secret is set (and usable) in this environment.
fn callback_readiness(config: &CallbacksConfig, var: &impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut lines = vec![if config.allowed_origins.is_empty() {
        format!("{:<28} refused: no allowed_origins", "callbacks")
    } else {
        format!("{:<28} allowed to {}", "callbacks", config.allowed_origins.join(", "))
    }];
    for (source, signing) in &config.sources {
        let name = &signing.secret_env;
        let state = match var(name).map(|v| Secret::parse(&v)) {
            Some(Ok(_)) => "ready".to_string(),
            Some(Err(e)) => format!("requires configuration: environment variable {name} ({e})"),
            None => format!("requires configuration: environment variable {name}"),
        };
        lines.push(format!("{:<28} {state}", format!("callbacks.sources.{source}")));
    }
    lines
}

/// A program by path, or by name on the PATH.
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(model: &str) -> ProfilesFile {
        let text = format!(
            "[[profiles]]\nid = \"solo\"\nname = \"Solo\"\ndescription = \"d\"\ntools = [\"workspace_finish\"]\n\
             [profiles.model]\n{model}\n"
        );
        ProfilesFile::parse(&text).unwrap()
    }

    #[test]
    fn a_hosted_endpoint_is_one_off_this_machine_and_off_the_private_network() {
        for hosted in
            ["https://api.deepseek.com/v1", "https://dashscope.aliyuncs.com/compatible-mode/v1", "http://8.8.8.8/v1"]
        {
            assert!(is_hosted(hosted), "{hosted}");
        }
        for local in [
            "http://127.0.0.1:11434/v1",
            "http://localhost:8000/v1",
            "http://[::1]:8000/v1",
            "http://10.0.0.7/v1",
            "http://192.168.1.20:8000/v1",
            "http://ollama:11434/v1",
            "http://gpu-box.local/v1",
        ] {
            assert!(!is_hosted(local), "{local}");
        }
    }

    #[test]
    fn a_profile_with_an_unset_key_or_no_key_for_a_hosted_endpoint_is_named_with_what_it_misses() {
        let unset = file(
            "provider = \"openai\"\nbase_url = \"https://api.deepseek.com/v1\"\nmodel = \"m\"\napi_key_env = \"K\"",
        );
        let report = check(&unset, |_| None);
        assert_eq!(
            report.problems,
            ["profile `solo` requires configuration: environment variable K (its model key) is unset"]
        );
        assert!(check(&unset, |n| (n == "K").then(|| "sk-1".into())).problems.is_empty());

        let keyless = file("provider = \"openai\"\nbase_url = \"https://api.deepseek.com/v1\"\nmodel = \"m\"");
        let problems = check(&keyless, |_| None).problems;
        assert!(problems[0].starts_with("profile `solo` requires configuration: api_key_env:"), "{problems:?}");
        let local = file("provider = \"openai\"\nbase_url = \"http://127.0.0.1:11434/v1\"\nmodel = \"m\"");
        assert!(check(&local, |_| None).problems.is_empty(), "a model beside the fleet needs no key");
        let incomplete = file("provider = \"openai\"\nmodel = \"m\"");
        assert_eq!(check(&incomplete, |_| None).problems, ["profile `solo` requires configuration: base_url"]);
    }
}
