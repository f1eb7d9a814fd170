//! The `baton` binary's offline commands. (Having a test here also makes
//! `cargo test --workspace` build the binary that the process tests in
//! `tests/` spawn.)

use std::process::Command;

fn baton(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_baton")).args(args).output().expect("run baton");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn profiles_check_says_which_profiles_are_ready() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/profiles.toml");
    let (ok, text) = baton(&["profiles", "check", file]);
    assert!(ok, "{text}");
    for id in ["writer", "editor", "checker", "finalizer"] {
        let line = text.lines().find(|l| l.starts_with(id)).unwrap_or_else(|| panic!("{id} missing:\n{text}"));
        assert!(line.ends_with("ready"), "{line}");
    }
    let callbacks = text
        .lines()
        .find(|l| l.starts_with("callbacks.sources.weixin"))
        .unwrap_or_else(|| panic!("no callbacks line:\n{text}"));
    assert!(
        callbacks.ends_with("requires configuration: environment variable BATON_CALLBACK_SECRET_WEIXIN"),
        "{callbacks}"
    );
}

#[test]
fn profiles_check_names_what_an_incomplete_binding_lacks() {
    let dir = std::env::temp_dir().join(format!("baton-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profiles.toml");
    std::fs::write(&file, "[[profiles]]\nid = \"coder\"\nname = \"Coder\"\ndescription = \"Codes.\"\n[profiles.model]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n").unwrap();
    let (ok, text) = baton(&["profiles", "check", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ok, "a profile that requires configuration fails the check: {text}");
    assert!(text.contains("coder") && text.contains("requires configuration: model"), "{text}");
    assert!(text.contains("profile `coder` requires configuration: model"), "{text}");
}

#[test]
fn profiles_check_fails_for_an_unset_key_variable_and_for_a_hosted_endpoint_without_a_key() {
    let dir = std::env::temp_dir().join(format!("baton-cli-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let check = |model: &str, vars: &[(&str, &str)]| {
        let file = dir.join("profiles.toml");
        let text = format!(
            "[[profiles]]\nid = \"writer\"\nname = \"Writer\"\ndescription = \"Writes.\"\n[profiles.model]\n\
             provider = \"openai\"\nmodel = \"deepseek-chat\"\n{model}\n"
        );
        std::fs::write(&file, text).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_baton"));
        command.args(["profiles", "check", file.to_str().unwrap()]).env_remove("BATON_TEST_KEY");
        vars.iter().for_each(|(k, v)| {
            command.env(k, v);
        });
        let out = command.output().expect("run baton");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let hosted = "base_url = \"https://api.deepseek.com/v1\"";
    let (code, err) = check(&format!("{hosted}\napi_key_env = \"BATON_TEST_KEY\""), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("profile `writer` requires configuration: environment variable BATON_TEST_KEY"), "{err}");
    let (code, err) = check(&format!("{hosted}\napi_key_env = \"BATON_TEST_KEY\""), &[("BATON_TEST_KEY", "sk-test")]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = check(hosted, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "profile `writer` requires configuration: api_key_env: https://api.deepseek.com/v1 is a hosted endpoint"
        ),
        "{err}"
    );
    let (code, err) = check("base_url = \"http://127.0.0.1:11434/v1\"", &[]);
    assert_eq!(code, Some(0), "a model served beside the fleet needs no key: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_profiles_file_is_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("baton-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("profiles.toml");
    std::fs::write(&file, "[routes]\ndocs_agent = \"ghost\"\n").unwrap();
    let (ok, text) = baton(&["profiles", "check", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!ok);
    assert!(text.contains("unknown profile `ghost`"), "{text}");
}

#[test]
fn a_malformed_setting_stops_baton_before_it_starts_naming_the_variable() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["up"])
        .env("BATON_LEASE_MS", "abc")
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/never")
        .env("AMQP_URL", "amqp://guest:guest@127.0.0.1:1/%2f")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run baton");
    // Without strict parsing it would go on to wait for a database that is
    // not there: bound the wait, so the test fails instead of hanging.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("BATON_LEASE_MS=abc is not a whole number of milliseconds"), "{text}");
}
