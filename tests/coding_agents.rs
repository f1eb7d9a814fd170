//! Coding agents (docs/profiles.md#coding-agents) with the real CLIs: Codex, Claude Code, Qwen
//! Code and Gemini CLI, the pinned versions `npm install --prefix agents`
//! installs, run by the fleet on a checkout of a local bare repository,
//! against the scripted model server (`baton::model_server`), which speaks
//! each CLI's own wire API. Everything else is real: RabbitMQ, Postgres,
//! git, the box (bubblewrap and the agent user where the machine has them).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use baton::model_server::{Api, ModelServer, Script, Step};
use baton_domain::profiles::coding::CodingCli;
use baton_domain::run::journal::JournalEvent;
use baton_tests::{eventually, sample_request_json, until_reply, TestEnv};
use serde_json::Value;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(120);
/// The variable the profiles name for the model's key, and its value: the
/// gateway sends it upstream; the CLI never sees it.
const KEY_VAR: &str = "BATON_TEST_CODING_MODEL_KEY";
const REAL_KEY: &str = "sk-real-key-that-only-the-worker-holds-5d1c";

fn api_of(cli: CodingCli) -> Api {
    match cli {
        CodingCli::Codex => Api::OpenAiResponses,
        CodingCli::ClaudeCode => Api::AnthropicMessages,
        CodingCli::QwenCode => Api::ChatCompletions,
        CodingCli::GeminiCli => Api::Gemini,
    }
}

/// The pinned CLI, installed by `npm install --prefix agents` (`.ci/run` does
/// it; a test that finds it missing does it once, under a lock, so the
/// README's test command works on a fresh machine with npm).
fn bin(cli: CodingCli) -> PathBuf {
    let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    let path = agents.join("node_modules/.bin").join(cli.default_bin());
    if !path.is_file() {
        let lock = std::fs::File::create(std::env::temp_dir().join("baton-agents-npm-ci.lock")).unwrap();
        lock.lock().unwrap();
        if !path.is_file() {
            let status = std::process::Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(&agents)
                .status()
                .expect("npm (Node 20) installs the coding-agent CLIs");
            assert!(status.success(), "npm install in {} failed", agents.display());
        }
    }
    assert!(path.is_file(), "{} is not installed: run `npm install --prefix agents`", path.display());
    path
}

/// A request's `targetAgent` for a CLI (Gemini CLI is reached through a route).
fn target(cli: CodingCli) -> &'static str {
    match cli {
        CodingCli::GeminiCli => "docs_agent",
        other => other.as_str(),
    }
}

/// One test's project (a bare repository with one commit on `main`) and
/// the agents' work root, removed at the end.
struct Rig {
    env: TestEnv,
    cli: CodingCli,
    bare: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.env.settings.agent_work_dir);
    }
}

async fn git(args: &[&str], cwd: &Path) -> String {
    let out = tokio::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(cwd)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Rig {
    async fn new(cli: CodingCli) -> Rig {
        std::env::set_var(KEY_VAR, REAL_KEY);
        let mut env = TestEnv::new().await;
        env.settings.agent_work_dir = std::env::temp_dir().join(format!("{}agents", env.settings.queue_prefix));
        let dir = tempfile::tempdir().unwrap();
        let seed = dir.path().join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        std::fs::write(seed.join("README.md"), "# Site\n").unwrap();
        git(&["init", "-q"], &seed).await;
        git(&["add", "README.md"], &seed).await;
        git(&["commit", "-qm", "init"], &seed).await;
        let bare = dir.path().join("site.git");
        git(&["clone", "-q", "--bare", ".", bare.to_str().unwrap()], &seed).await;
        Rig { env, cli, bare, dir }
    }

    /// The profiles file: the project, and one coding profile routed from the CLI's target.
    fn profiles(&self, base_url: &str, extra: &str) -> String {
        format!(
            r#"[routes]
{target} = "coder"

[[projects]]
id = "site"
git = "{git}"
ref = "main"
push = "baton/{{handoffId}}"
author_name = "Baton Test"
author_email = "baton-test@localhost"

[[profiles]]
id = "coder"
name = "Coder"
description = "Changes code."
system_prompt = "You change code in the user's project."

[profiles.model]
provider = "{provider}"
model = "scripted-model"
base_url = "{base_url}"
api_key_env = "{KEY_VAR}"
timeout_secs = 90
bin = "{bin}"
{extra}
"#,
            target = target(self.cli),
            git = self.bare.display(),
            provider = self.cli.as_str(),
            bin = bin(self.cli).display(),
        )
    }

    fn request(&self, id: &str, chat: &str) -> Value {
        let mut request = sample_request_json(id, target(self.cli), "en");
        request["projectId"] = "site".into();
        request["conversationKey"] = chat.into();
        request["userIntent"] = "Add a hello.txt greeting.".into();
        request
    }

    /// What the bare repository's branch holds at `path`.
    async fn file_on(&self, branch: &str, path: &str) -> String {
        git(&["--git-dir", self.bare.to_str().unwrap(), "show", &format!("{branch}:{path}")], self.dir.path()).await
    }

    async fn journal_of(&self, run: Uuid, kind: JournalEvent) -> Vec<Value> {
        let rows = self
            .env
            .db()
            .await
            .query("SELECT payload FROM events WHERE run_id = $1 AND type = $2 ORDER BY id", &[&run, &kind.as_str()])
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }
}

fn reply_of(messages: &[Value]) -> &Value {
    messages.iter().find(|m| m["type"] == "reply").expect("a reply")
}

/// The first request edits the project; the follow-up in the same chat
/// resumes the CLI's session (the model is sent the earlier turns) on the
/// branch the first pushed, and adds a commit there.
async fn edits_the_project_and_a_follow_up_resumes_the_session(cli: CodingCli) {
    let rig = Rig::new(cli).await;
    let server = ModelServer::start(api_of(cli), Script::edit("hello.txt", "hello from the model\n")).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let fleet = rig.env.start_all();
    let mut replies = rig.env.replies().await;
    let first = format!("code-{}", Uuid::new_v4().simple());
    rig.env.send_request(&rig.request(&first, "chat-1")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    let changes = &reply["result"]["changes"];
    let branch = format!("baton/{first}");
    assert_eq!(changes["project"], "site", "{reply}");
    assert_eq!(changes["files"], serde_json::json!(["hello.txt"]), "{reply}");
    assert_eq!((changes["insertions"].as_u64(), changes["deletions"].as_u64()), (Some(1), Some(0)));
    assert_eq!(changes["branch"], branch.as_str());
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("Done: wrote hello.txt.") && text.contains("hello.txt") && text.contains(&branch), "{text}");
    assert_eq!(rig.file_on(&branch, "hello.txt").await, "hello from the model\n");
    let author =
        git(&["--git-dir", rig.bare.to_str().unwrap(), "log", "-1", "--format=%an|%s%n%b", &branch], rig.dir.path())
            .await;
    assert!(
        author.starts_with("Baton Test|Add a hello.txt greeting.") && author.contains(&format!("Handoff: {first}")),
        "{author}"
    );
    // Usage is counted once, from the gateway: every call the model answered, 110 tokens each.
    let run = rig.env.run_of(&first).await;
    let calls = server.model_calls();
    assert!(calls.len() >= 3, "the model was asked for each step: {}", calls.len());
    let (tokens, counted) = {
        let row = rig
            .env
            .db()
            .await
            .query_one("SELECT tokens_used, model_calls FROM invocations WHERE run_id = $1 AND kind = 'root'", &[&run])
            .await
            .unwrap();
        (row.get::<_, i64>(0), row.get::<_, i32>(1))
    };
    assert_eq!(counted as usize, calls.len(), "each model call counted once");
    assert_eq!(tokens, 110 * calls.len() as i64, "each call's tokens counted once");
    // The real key went upstream; the CLI only ever had its invocation's token.
    for call in &calls {
        let auth: Vec<&str> = call
            .headers
            .iter()
            .filter(|(k, _)| ["authorization", "x-api-key", "x-goog-api-key"].contains(&k.as_str()))
            .map(|(_, v)| v.as_str())
            .collect();
        assert!(auth.iter().any(|v| v.contains(REAL_KEY)), "the gateway sent the real key: {auth:?}");
        assert!(!call.body.to_string().contains(REAL_KEY), "the key is in no model request");
    }
    // What it did, live in the journal.
    let commands = rig.journal_of(run, JournalEvent::CodingAgentCommand).await;
    assert!(commands.iter().any(|c| c["command"] == "echo hi" && c["exitCode"] == 0), "{commands:?}");
    let model_calls = rig.journal_of(run, JournalEvent::CodingModelCall).await;
    assert_eq!(model_calls.len(), calls.len(), "each call recorded with its usage: {model_calls:?}");
    assert!(model_calls.iter().all(|c| c["inputTokens"] == 100 && c["outputTokens"] == 10), "{model_calls:?}");
    let kept: i64 = rig
        .env
        .scalar_i64(
            "SELECT count(*) FROM coding_changes WHERE run_id = $1 AND patch LIKE '%+hello from the model%'",
            &[&run],
        )
        .await;
    assert_eq!(kept, 1, "the patch is stored with the run");
    // The console's run page shows the patch, the files and what the agent did.
    let console = rig.env.serve_console(None).await;
    let page = reqwest::get(format!("{}/runs/{run}", console.base)).await.unwrap().text().await.unwrap();
    assert!(page.contains("Project changes") && page.contains("+hello from the model"), "the patch is on the run page");
    assert!(
        page.contains(&format!("baton&#x2f;{first}")) && page.contains("coding_agent_command"),
        "the branch and the commands are on the run page"
    );

    // The follow-up: same chat, same target and project.
    let before = server.model_calls().len();
    let second = format!("code-{}", Uuid::new_v4().simple());
    rig.env.send_request(&rig.request(&second, "chat-1")).await;
    let messages = until_reply(&mut replies, WAIT).await;
    fleet.stop().await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    let resumed = &server.model_calls()[before];
    assert!(
        resumed.earlier_results >= 2,
        "the resumed session sent the model its earlier turns ({} earlier tool results)",
        resumed.earlier_results
    );
    let changes = &reply["result"]["changes"];
    assert_eq!(changes["files"], serde_json::json!(["FOLLOWUP.md"]), "{reply}");
    assert_eq!(changes["branch"], branch.as_str(), "the session's branch goes on: {reply}");
    assert_eq!(rig.file_on(&branch, "hello.txt").await, "hello from the model\n", "built on the first change");
    assert_eq!(rig.file_on(&branch, "FOLLOWUP.md").await, "a follow-up change\n");
    let count = git(&["--git-dir", rig.bare.to_str().unwrap(), "rev-list", "--count", &branch], rig.dir.path()).await;
    assert_eq!(count.trim(), "3", "one commit per request on top of main, never a force-push");
}

/// The model endpoint is down: the run fails in words within the limit, never hangs,
/// also where the CLI itself exits 0 (Qwen Code).
async fn a_dead_endpoint_fails_the_run_in_words(cli: CodingCli) {
    let rig = Rig::new(cli).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let base_url = match api_of(cli) {
        Api::OpenAiResponses | Api::ChatCompletions => format!("http://127.0.0.1:{port}/v1"),
        _ => format!("http://127.0.0.1:{port}"),
    };
    rig.env.apply_profiles(&rig.profiles(&base_url, "")).await;
    let started = Instant::now();
    let id = format!("down-{}", Uuid::new_v4().simple());
    let messages = rig.env.run(&rig.request(&id, "chat-down")).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "agent_failed", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("{} could not finish", cli.display_name())), "{message}");
    assert!(started.elapsed() < Duration::from_secs(60), "failed within the limit: {:?}", started.elapsed());
    let text = reply["text"].as_str().unwrap();
    assert!(!text.contains(&port.to_string()) || text.contains("could not"), "{text}");
}

macro_rules! per_cli {
    ($($cli:ident => $name:ident),* $(,)?) => {
        mod edits_and_resumes {
            use super::*;
            $(#[tokio::test] async fn $name() { edits_the_project_and_a_follow_up_resumes_the_session(CodingCli::$cli).await; })*
        }
        mod endpoint_down {
            use super::*;
            $(#[tokio::test] async fn $name() { a_dead_endpoint_fails_the_run_in_words(CodingCli::$cli).await; })*
        }
    };
}

per_cli!(Codex => codex, ClaudeCode => claude_code, QwenCode => qwen_code, GeminiCli => gemini_cli);

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) && !cmdline.contains("cargo") {
                found.push(cmdline);
            }
        }
    }
    found
}

#[tokio::test]
async fn cancelling_a_coding_run_kills_the_cli_and_everything_it_started_even_a_setsid_daemon() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let mark = format!("0.{}", Uuid::new_v4().as_u128() % 1_000_000_000_000);
    let script = Script {
        first: vec![
            Step::Shell { command: format!("setsid sleep 1000 {mark} & sleep 1000 {mark}") },
            Step::Say { text: "done".into() },
        ],
        resumed: vec![],
        endless: false,
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let fleet = rig.env.start_all();
    let mut replies = rig.env.replies().await;
    let id = format!("cancel-{}", Uuid::new_v4().simple());
    rig.env.send_request(&rig.request(&id, "chat-cancel")).await;
    eventually(WAIT, "the agent's commands run", || async { (processes_with(&mark).len() >= 2).then_some(()) }).await;
    let run = rig.env.run_of(&id).await;
    assert!(baton::operator::cancel_run(&rig.env.pool, run, "the user changed their mind").await.unwrap());
    let messages = until_reply(&mut replies, WAIT).await;
    assert_eq!(reply_of(&messages)["status"], "cancelled");
    eventually(Duration::from_secs(10), "every process of the agent is gone", || async {
        processes_with(&mark).is_empty().then_some(())
    })
    .await;
    fleet.stop().await;
}

#[tokio::test]
async fn a_run_budget_of_model_calls_stops_a_cli_that_keeps_calling() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let mut script = Script::edit("hello.txt", "x\n");
    script.endless = true;
    let server = ModelServer::start(Api::AnthropicMessages, script).await.unwrap();
    let profiles = format!("{}\n[budgets.default]\nmax_model_calls = 4\n", rig.profiles(&server.base_url(), ""));
    rig.env.apply_profiles(&profiles).await;
    let id = format!("budget-{}", Uuid::new_v4().simple());
    let messages = rig.env.run(&rig.request(&id, "chat-budget")).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    assert_eq!(reply["error"]["code"], "budget_exhausted", "{reply}");
    assert_eq!(server.model_calls().len(), 4, "no model call past the budget reached the endpoint");
    let run = rig.env.run_of(&id).await;
    assert!(rig.env.journal(run).await.contains(&JournalEvent::RunBudgetExhausted));
}

#[tokio::test]
async fn a_canary_secret_of_the_worker_reaches_no_reply_commit_journal_or_log() {
    baton_tests::logs::capture();
    let canary = format!("canary-{}", Uuid::new_v4().simple());
    std::env::set_var("BATON_TEST_CANARY_TOKEN", &canary);
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    // The agent hunts for the worker's environment everywhere it might be
    // seen, prints it, and writes it into the project.
    let hunt = "{ env; cat /proc/$PPID/environ; for p in /proc/[0-9]*; do cat $p/environ; done; } 2>/dev/null | tr '\\0' '\\n' | tee found.txt";
    let script = Script {
        first: vec![Step::Shell { command: hunt.into() }, Step::Say { text: "Looked around.".into() }],
        resumed: vec![],
        endless: false,
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let id = format!("canary-{}", Uuid::new_v4().simple());
    let messages = rig.env.run(&rig.request(&id, "chat-canary")).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    for message in &messages {
        assert!(!message.to_string().contains(&canary), "a bridge message carries the canary: {message}");
        assert!(!message.to_string().contains(REAL_KEY), "a bridge message carries the provider key");
    }
    let branch = format!("baton/{id}");
    let found = rig.file_on(&branch, "found.txt").await;
    assert!(found.contains("PATH="), "the agent did look: {found}");
    assert!(!found.contains(&canary) && !found.contains(REAL_KEY), "the pushed commit carries a secret");
    let run = rig.env.run_of(&id).await;
    let journal: String = rig
        .env
        .db()
        .await
        .query("SELECT payload::text FROM events WHERE run_id = $1", &[&run])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    assert!(journal.contains("PATH="), "the command's output is in the journal");
    assert!(!journal.contains(&canary) && !journal.contains(REAL_KEY), "the journal carries a secret");
    let patch: String = rig
        .env
        .db()
        .await
        .query_one("SELECT patch FROM coding_changes WHERE run_id = $1", &[&run])
        .await
        .unwrap()
        .get(0);
    assert!(!patch.contains(&canary));
    assert!(baton_tests::logs::lines_with(&[&canary]).is_empty(), "a log line carries the canary");
    // The worker's own model calls went out with the key, the box's never saw it.
    assert!(!server.model_calls().iter().any(|c| c.body.to_string().contains(&canary)));
}

#[tokio::test]
async fn a_forbidden_git_push_is_denied_to_the_cli_and_the_reply_says_so() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let script = Script {
        first: vec![
            Step::Shell { command: "git push origin HEAD:refs/heads/sneaky".into() },
            Step::Say { text: "Tried.".into() },
        ],
        resumed: vec![],
        endless: false,
    };
    let server = ModelServer::start(Api::AnthropicMessages, script).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let id = format!("deny-{}", Uuid::new_v4().simple());
    let mut request = rig.request(&id, "chat-deny");
    request["constraints"]["forbiddenActions"] = serde_json::json!(["git push"]);
    let messages = rig.env.run(&request).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "completed", "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains("was not allowed to run `git push origin HEAD:refs/heads/sneaky`: the request forbids it"),
        "{text}"
    );
    let branches = git(&["--git-dir", rig.bare.to_str().unwrap(), "branch", "--list", "sneaky"], rig.dir.path()).await;
    assert!(branches.trim().is_empty(), "nothing was pushed by the agent");
    let run = rig.env.run_of(&id).await;
    let started = rig.journal_of(run, JournalEvent::CodingAgentStarted).await;
    assert_eq!(started[0]["permissions"]["forbidden"], serde_json::json!(["git_push"]), "{started:?}");
}

#[tokio::test]
async fn an_unknown_project_or_an_unreachable_repository_is_a_failed_reply_in_words() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let server = ModelServer::start(Api::AnthropicMessages, Script::edit("hello.txt", "x\n")).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let fleet = rig.env.start_all();
    let mut replies = rig.env.replies().await;
    let unknown = format!("unknown-{}", Uuid::new_v4().simple());
    let mut request = rig.request(&unknown, "chat-unknown");
    request["projectId"] = "no-such-project".into();
    rig.env.send_request(&request).await;
    let reply = reply_of(&until_reply(&mut replies, WAIT).await).clone();
    assert_eq!(reply["status"], "failed", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("the project `no-such-project` is not configured"), "{message}");
    // The repository goes away: the checkout cannot be made.
    std::fs::rename(&rig.bare, rig.dir.path().join("moved.git")).unwrap();
    let gone = format!("gone-{}", Uuid::new_v4().simple());
    rig.env.send_request(&rig.request(&gone, "chat-gone")).await;
    let reply = reply_of(&until_reply(&mut replies, WAIT).await).clone();
    fleet.stop().await;
    assert_eq!(reply["status"], "failed", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("the repository of project `site` cannot be reached"), "{message}");
    assert!(server.model_calls().is_empty(), "no agent ran without its checkout");
}

#[tokio::test]
async fn a_push_the_repository_refuses_fails_the_reply_and_keeps_the_patch() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let hook = rig.bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho 'pushes are closed today' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let server = ModelServer::start(Api::AnthropicMessages, Script::edit("hello.txt", "kept\n")).await.unwrap();
    rig.env.apply_profiles(&rig.profiles(&server.base_url(), "")).await;
    let id = format!("push-{}", Uuid::new_v4().simple());
    let messages = rig.env.run(&rig.request(&id, "chat-push")).await;
    let reply = reply_of(&messages);
    assert_eq!(reply["status"], "failed", "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be pushed to `baton/") && message.contains("its patch is kept"), "{message}");
    let run = rig.env.run_of(&id).await;
    let row = rig
        .env
        .db()
        .await
        .query_one("SELECT patch, push_error FROM coding_changes WHERE run_id = $1", &[&run])
        .await
        .unwrap();
    let (patch, why): (String, Option<String>) = (row.get(0), row.get(1));
    assert!(patch.contains("+kept"), "{patch}");
    assert!(why.unwrap().contains("pushes are closed today"));
}

#[tokio::test]
async fn a_coding_agents_model_calls_wait_their_turn_under_the_fleets_limit() {
    let rig = Rig::new(CodingCli::ClaudeCode).await;
    let server = ModelServer::start(Api::AnthropicMessages, Script::edit("hello.txt", "x\n")).await.unwrap();
    // One call a second for this endpoint and key, fleet-wide.
    let limit = format!(
        "[[limits]]\nname = \"slow-endpoint\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_VAR}\"\nrequests_per_minute = 1\nwindow_secs = 1\n",
        server.base_url()
    );
    rig.env.apply_profiles(&format!("{limit}\n{}", rig.profiles(&server.base_url(), ""))).await;
    let id = format!("limit-{}", Uuid::new_v4().simple());
    let started = Instant::now();
    let messages = rig.env.run(&rig.request(&id, "chat-limit")).await;
    assert_eq!(reply_of(&messages)["status"], "completed");
    let calls = server.model_calls().len();
    assert!(calls >= 3);
    assert!(
        started.elapsed() >= Duration::from_secs(calls as u64 - 1),
        "one call a second: {:?} for {calls}",
        started.elapsed()
    );
    let run = rig.env.run_of(&id).await;
    let waited = rig.journal_of(run, JournalEvent::ModelCallThrottled).await;
    assert!(waited.len() >= calls - 1, "each later call waited its turn: {waited:?}");
    assert!(waited.iter().all(|w| w["limit"] == "slow-endpoint"), "{waited:?}");
}
