//! External (`command`) agents run in a box: only the environment their
//! profile lists, a working directory of their own, a process group killed
//! as a whole, capped output; and a worker's shutdown has a deadline, after
//! which a running agent is killed and re-run elsewhere or failed visibly.
//! The agents are shell scripts; processes are found by a unique marker in
//! their arguments.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton::roles::Role;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, sample_request_json, until_reply, BatonProcess, TestEnv};
use serde_json::Value;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(40);

fn command_profile(script: &str, extra: &str) -> String {
    format!(
        "[routes]\ndocs_agent = \"coder\"\n\n[[profiles]]\nid = \"coder\"\nname = \"coder\"\ndescription = \"An external coding agent.\"\n[profiles.model]\nprovider = \"command\"\ncommand = [\"sh\", \"-c\", '''{script}''']\n{extra}\n"
    )
}

/// A marker no other process on the machine has in its arguments: `sleep`
/// adds up its arguments, so `sleep 1000 0.<digits>` carries it harmlessly.
fn marker() -> String {
    format!("0.{}", Uuid::new_v4().as_u128() % 1_000_000_000_000)
}

/// Live processes whose command line contains `marker` (a zombie has an
/// empty command line, so it is counted by `zombie_children` instead).
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Children of this test process that exited and were never reaped.
fn zombie_children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid …; comm may hold spaces, so read after the last ')'.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        if fields.first() == Some(&"Z") && fields.get(1) == Some(&me.as_str()) {
            found.push(stat);
        }
    }
    found
}

async fn no_process_left(marker: &str) {
    eventually(Duration::from_secs(5), "every process of the agent's group is gone", || async {
        processes_with(marker).is_empty().then_some(())
    })
    .await;
}

fn work_dir(env: &TestEnv) -> PathBuf {
    std::env::temp_dir().join(format!("{}agents", env.settings.queue_prefix))
}

/// Peak resident memory of this process (each test runs in its own process).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn reply_of(messages: &[Value]) -> &Value {
    let reply = messages.last().unwrap();
    assert_eq!(reply["type"], "reply", "{reply}");
    reply
}

#[tokio::test]
async fn an_external_agent_sees_only_the_variables_its_profile_lists() {
    let env = TestEnv::new().await;
    let extra = "env = [\"BATON_TEST_AGENT_KEY\"]\nenv_values = { AGENT_MODE = \"review\" }";
    let script = "cat > /dev/null; env; echo \"CWD=$(pwd)\"; [ \"$BATON_TEST_AGENT_KEY\" = sk-for-the-agent ] && echo 'the key arrived'";
    env.apply_profiles(&command_profile(script, extra)).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    // A real worker process, with what a worker really has in its
    // environment: its database and broker URLs, a key meant for this
    // agent, and one meant for none.
    let keys = [("BATON_TEST_AGENT_KEY", "sk-for-the-agent"), ("BATON_TEST_OTHER_KEY", "sk-for-nobody")];
    let worker = spawn_worker(&env, "boxed", 2_000, &keys);
    env.send_request(&sample_request_json("sandbox-env", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    drop(worker);
    fleet.stop().await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    let text = reply["text"].as_str().unwrap();
    let vars: std::collections::BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(!vars.contains_key("DATABASE_URL") && !vars.contains_key("AMQP_URL"), "the fleet's URLs leaked: {text}");
    assert!(!text.contains(&env.settings.database_url) && !text.contains("amqp://"), "{text}");
    assert!(!text.contains("sk-for-nobody") && !vars.contains_key("BATON_QUEUE_PREFIX"), "{text}");
    // It got its key, and printing it reaches no chat: a worker's secret is cut from what an agent prints.
    assert!(text.contains("the key arrived"), "{text}");
    assert!(!text.contains("sk-for-the-agent"), "{text}");
    assert_eq!(vars.get("BATON_TEST_AGENT_KEY"), Some(&baton_agent::providers::coding::scrub::WORKER_SECRET), "{text}");
    assert_eq!(vars.get("AGENT_MODE"), Some(&"review"), "{text}");
    assert_eq!(vars.get("PATH"), Some(&baton_domain::policy::sandbox::DEFAULT_PATH), "{text}");
    assert_eq!(vars.get("HOME"), vars.get("CWD"), "HOME is the agent's own directory: {text}");
    // Nothing but the listed, the fixed, PATH/HOME, what `sh` itself sets and the script's own CWD.
    let unexpected: Vec<&&str> = vars
        .keys()
        .filter(|k| {
            !["BATON_TEST_AGENT_KEY", "AGENT_MODE", "PATH", "HOME", "PWD", "SHLVL", "OLDPWD", "_", "CWD"].contains(k)
        })
        .collect();
    assert!(unexpected.is_empty(), "unexpected variables {unexpected:?} in {text}");
}

#[tokio::test]
async fn an_external_agent_has_its_own_working_directory_removed_after_the_run() {
    let mut env = TestEnv::new().await;
    let base = work_dir(&env);
    env.settings.agent_work_dir = base.clone();
    let script = "cat > /dev/null; echo scratch > notes.txt; test -f \"$PWD/notes.txt\" && echo \"dir=$PWD\"; stat -c %a \"$PWD\"";
    env.apply_profiles(&command_profile(script, "")).await;
    let messages = env.run_request("sandbox-dir").await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    let text = reply["text"].as_str().unwrap();
    let dir = PathBuf::from(text.lines().find_map(|l| l.strip_prefix("dir=")).unwrap_or_else(|| panic!("{text}")));
    assert_eq!(dir.parent(), Some(base.as_path()), "the agent ran in a directory under the configured base: {text}");
    assert!(text.lines().any(|l| l == "700"), "only the worker's user can enter it: {text}");
    assert!(!dir.exists(), "{} was removed after the run", dir.display());
    assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0, "nothing is left under the base");
    std::fs::remove_dir_all(&base).unwrap();
}

#[tokio::test]
async fn a_timed_out_agent_is_killed_with_every_process_it_started() {
    let mark = marker();
    let env = TestEnv::new().await;
    let script = format!("sleep 1000 {mark} & sleep 1000 {mark}");
    env.apply_profiles(&command_profile(&script, "timeout_secs = 1")).await;
    let messages = env.run_request("sandbox-timeout").await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "agent_timeout", "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("did not finish within 1 second and was stopped"), "the reply says so in words: {text}");
    no_process_left(&mark).await;
    assert!(zombie_children().is_empty(), "every child was reaped: {:?}", zombie_children());
}

#[tokio::test]
async fn a_cancelled_run_kills_its_running_agent_and_every_process_it_started() {
    let mark = marker();
    let env = TestEnv::new().await;
    let script = format!("sleep 1000 {mark} & sleep 1000 {mark}");
    env.apply_profiles(&command_profile(&script, "timeout_secs = 600")).await;
    let fleet = env.start_all();
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("sandbox-cancel", "docs_agent", "en")).await;
    eventually(WAIT, "the agent runs", || async { (processes_with(&mark).len() >= 2).then_some(()) }).await;
    let run = env.run_of("sandbox-cancel").await;
    assert!(baton::operator::cancel_run(&env.pool, run, "the user changed their mind").await.unwrap());
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(reply_of(&messages)["status"], "cancelled");
    // The heartbeat finds the claim gone within a third of the lease.
    no_process_left(&mark).await;
    fleet.stop().await;
}

#[tokio::test]
async fn an_agent_that_floods_its_output_is_stopped_at_the_cap_with_bounded_memory() {
    let mark = marker();
    let env = TestEnv::new().await;
    let before = peak_rss_kib();
    env.apply_profiles(&command_profile(&format!("yes {mark}"), "timeout_secs = 30\nmax_output_bytes = 65536")).await;
    let started = Instant::now();
    let messages = env.run_request("sandbox-yes").await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "agent_output_limit", "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("ran out of output room (more than 64 KiB of output) and was stopped"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "stopped at the cap, not at the timeout: {:?}",
        started.elapsed()
    );
    no_process_left(&mark).await;
    let grown = peak_rss_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "the worker's peak memory grew by {grown} KiB while `yes` ran");
}

/// `baton up --role invocation` with a short shutdown grace.
fn spawn_worker(env: &TestEnv, worker_id: &str, grace_ms: u64, extra: &[(&str, &str)]) -> BatonProcess {
    let grace = grace_ms.to_string();
    let mut vars = vec![("BATON_SHUTDOWN_GRACE_MS", grace.as_str())];
    vars.extend_from_slice(extra);
    env.spawn_baton_env("invocation", worker_id, &vars)
}

/// Starts a worker process running the agent, waits until the agent runs,
/// sends SIGTERM and checks that the process left within the grace plus a
/// small margin, after waiting for the agent during the grace.
async fn deploy_during_the_agent(env: &TestEnv, id: &str, mark: &str, extra: &[(&str, &str)]) {
    let grace = Duration::from_millis(2_000);
    let mut leaving = spawn_worker(env, "leaving", grace.as_millis() as u64, extra);
    env.send_request(&sample_request_json(id, "docs_agent", "en")).await;
    eventually(WAIT, "the agent runs", || async { (!processes_with(mark).is_empty()).then_some(()) }).await;
    let sent = Instant::now();
    leaving.signal("TERM");
    assert_eq!(leaving.exit_code(WAIT).await, Some(0), "a clean exit");
    let took = sent.elapsed();
    assert!(took >= grace - Duration::from_millis(200), "the agent was given the grace: {took:?}");
    assert!(took < grace + Duration::from_secs(3), "the worker left within the grace and a small margin: {took:?}");
    no_process_left(mark).await;
}

#[tokio::test]
async fn a_deploy_hands_a_rerun_agent_to_another_worker_which_runs_it_again() {
    let mark = marker();
    let mut env = TestEnv::new().await;
    let flag = std::env::temp_dir().join(format!("{}first-run", env.settings.queue_prefix));
    // The first run marks that it started, then works "for ever"; the re-run
    // (from scratch, on another worker) finishes at once. The flag outlives
    // the first run only outside the box (whose /tmp is its own), so both
    // workers run this agent unboxed.
    let unboxed = [("BATON_AGENT_BWRAP", "off"), ("BATON_AGENT_USER", "self")];
    env.settings.agent_jail = Default::default();
    let script = format!(
        "cat > /dev/null; if [ -e {flag} ]; then echo 'Finished on the second run.'; else touch {flag}; sleep 1000 {mark}; fi",
        flag = flag.display()
    );
    env.apply_profiles(&command_profile(&script, "timeout_secs = 600\non_interrupt = \"rerun\"")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    deploy_during_the_agent(&env, "deploy-rerun", &mark, &unboxed).await;
    let root: Uuid =
        env.db().await.query_one("SELECT id FROM invocations WHERE kind = 'root'", &[]).await.unwrap().get(0);
    let handed_back = env
        .scalar_i64(
            "SELECT count(*) FROM invocations WHERE id = $1 AND status = 'running' AND lease_owner IS NULL",
            &[&root],
        )
        .await;
    assert_eq!(handed_back, 1, "the claim was handed back, not left to expire");

    let next = env.start(&[Role::Invocation]);
    let messages = until_reply(&mut replies, WAIT).await;
    next.stop().await;
    fleet.stop().await;
    let _ = std::fs::remove_file(&flag);
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    assert_eq!(reply["text"], "Finished on the second run.");
    let run = env.run_of("deploy-rerun").await;
    assert!(env.journal(run).await.contains(&JournalEvent::ExternalAgentRerun), "the journal says it ran again");
    let takeovers = env.scalar_i64("SELECT takeovers::bigint FROM invocations WHERE id = $1", &[&root]).await;
    assert_eq!(takeovers, 0, "a hand-back is not a takeover");
}

#[tokio::test]
async fn a_deploy_fails_an_agent_that_must_not_run_twice_with_a_readable_reason() {
    let mark = marker();
    let env = TestEnv::new().await;
    let script = format!("cat > /dev/null; sleep 1000 {mark}");
    // on_interrupt is "fail" by default.
    env.apply_profiles(&command_profile(&script, "timeout_secs = 600")).await;
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    deploy_during_the_agent(&env, "deploy-fail", &mark, &[]).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "agent_interrupted", "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("the external agent was interrupted") && text.contains("not re-run"), "{text}");
}

/// The worker is undumpable (`PR_SET_DUMPABLE` 0): even an agent that runs
/// as the worker's own user, outside bubblewrap, cannot read the worker's
/// environment through `/proc/<worker pid>/environ`. The worker runs as an
/// unprivileged user here (root could read any process's environment).
#[tokio::test]
async fn an_agent_of_the_workers_own_user_cannot_read_the_workers_environment() {
    let env = TestEnv::new().await;
    let canary = format!("canary-{}", Uuid::new_v4().simple());
    let script = "if cat /proc/$PPID/environ >/dev/null 2>&1; then tr '\\0' '\\n' < /proc/$PPID/environ; else echo 'the worker is unreadable'; fi";
    env.apply_profiles(&command_profile(script, "timeout_secs = 30")).await;
    let work = std::env::temp_dir().join(format!("{}unprivileged", env.settings.queue_prefix));
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    let log = std::fs::File::create(env.log_of("unprivileged")).unwrap();
    let mut worker = tokio::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(baton_tests::baton_binary())
        .args(["up", "--role", "invocation"])
        .env("DATABASE_URL", &env.settings.database_url)
        .env("AMQP_URL", &env.settings.amqp_url)
        .env("BATON_QUEUE_PREFIX", &env.settings.queue_prefix)
        .env("BATON_WORKER_ID", "unprivileged")
        .env("BATON_DB_POOL_SIZE", "3")
        .env("BATON_AGENT_WORK_DIR", &work)
        .env("BATON_AGENT_USER", "self")
        .env("BATON_AGENT_BWRAP", "off")
        .env("BATON_TEST_CANARY_VALUE", &canary)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("setpriv starts the worker as nobody");
    let fleet = env.start(&[Role::Intake, Role::Relay, Role::Collector]);
    let mut replies = env.replies().await;
    env.send_request(&sample_request_json("undumpable", "docs_agent", "en")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let _ = worker.kill().await;
    let _ = std::fs::remove_dir_all(&work);
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    assert_eq!(reply["text"], "the worker is unreadable", "{reply}");
    assert!(!messages.iter().any(|m| m.to_string().contains(&canary)));
}
