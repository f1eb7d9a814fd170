//! Coding agents (CONTRACT §7): Codex, Claude Code, Qwen Code and Gemini
//! CLI, run as themselves on a checkout of the request's project.
//!
//! One invocation, start to end ([`CodingAgent::complete`]):
//! 1. its context: the request (project, conversation, constraints), the
//!    project's settings and the conversation's session, from Postgres;
//! 2. a fresh checkout of the project (`checkout`), a HOME of its own with
//!    the session's files restored, its own `/tmp`;
//! 3. a model gateway on loopback (`gateway`) that holds the real key and
//!    applies limits and the budget;
//! 4. the CLI, configured for this run (`cli`), in the box (`crate::jail`),
//!    its events read as they come (`journal`), everything it says scrubbed
//!    (`scrub`);
//! 5. the diff of the checkout: patch and files stored with the run,
//!    committed and pushed when the project pushes; the session saved.
//!
//! The result reaches the run like a `command` agent's: as the tool calls
//! that write, commit and finish the reply (or return a child's task), in
//! the one fenced transaction that also stores the diff and the session.

pub mod checkout;
pub mod cli;
pub mod gateway;
pub mod journal;
pub mod scrub;
mod session;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use baton_domain::policy::disclosure::DisclosurePolicy;
use baton_domain::policy::permissions::Permissions;
use baton_domain::policy::sandbox::{self, Capped};
use baton_domain::profiles::coding::{CodingBinding, CodingCli};
use baton_domain::projects::{self, Project};
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::journal::JournalEvent;
use baton_store::coding::{SessionKey, StoredChanges};
use baton_store::Pool;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::jail::{Jail, Layout};
use crate::limiter::{Caller, Limiter};
use crate::providers::{ModelRequest, ModelTurn, Provider, ProviderError, Usage};
use cli::{Progress, Report, Setup};
use journal::Journal;
use scrub::Scrubber;

pub use session::CodingOutcome;

/// How much of stderr a failure keeps (journal only).
const STDERR_TAIL: usize = 2000;

/// The coding-agent provider; one per worker.
pub struct CodingAgent {
    work_root: PathBuf,
    pub(crate) pool: Option<Pool>,
    pub(crate) limiter: Option<Arc<Limiter>>,
    pub(crate) jail: Jail,
}

impl CodingAgent {
    pub fn new(work_root: PathBuf) -> Self {
        Self { work_root, pool: None, limiter: None, jail: Jail::default() }
    }
}

/// What a coding invocation knows before it starts.
struct Context {
    handoff_id: Option<String>,
    intent: String,
    target_agent: String,
    conversation: Option<String>,
    project: Option<Project>,
    session: Option<baton_store::coding::Session>,
    policy: DisclosurePolicy,
    permissions: Permissions,
}

impl Context {
    fn session_key(&self) -> Option<SessionKey> {
        Some(SessionKey {
            conversation: self.conversation.clone()?,
            target_agent: self.target_agent.clone(),
            project: self.project.as_ref().map(|p| p.id.clone()).unwrap_or_default(),
        })
    }
}

fn stopped(code: &str, message: String, detail: String) -> ProviderError {
    // The codes are the contract's; the message is for people.
    let code: &'static str = match code {
        c if c == ErrorCode::AgentTimeout.as_str() => sandbox::codes::TIMEOUT,
        c if c == ErrorCode::AgentOutputLimit.as_str() => sandbox::codes::OUTPUT_LIMIT,
        _ => sandbox::codes::EXITED,
    };
    ProviderError::Stopped { code, message, detail }
}

fn failed(message: impl Into<String>) -> ProviderError {
    let message = message.into();
    stopped(ErrorCode::AgentFailed.as_str(), message.clone(), message)
}

#[async_trait]
impl Provider for CodingAgent {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelTurn, ProviderError> {
        let Some((cli, binding)) = request.profile.model.coding() else {
            return Err(ProviderError::Failed("not a coding-agent binding".into()));
        };
        if request.turn_index > 0 {
            // The tools that carry the result refused it: running the agent
            // again would repeat its side effects.
            return Err(ProviderError::Failed("the coding agent's result could not be recorded".into()));
        }
        let context = self.context(request, binding).await?;
        let dirs = Dirs::create(&self.work_root, context.session_key().as_ref())
            .map_err(|e| failed(format!("preparing the agent's directories: {e}")))?;
        // The directories go when `dirs` does, also when this future is dropped (a cancelled run).
        self.run(request, cli, binding, &context, &dirs).await
    }
}

/// One invocation's directories: the checkout, HOME and `/tmp` the agent
/// writes, and a scratch place only the worker uses.
///
/// A run that may continue a session gets the same path each time (named
/// after the session's key), because some CLIs find a session by its
/// working directory; a lock keeps two invocations of one key (a rare
/// overlap) apart, the second taking a path of its own.
struct Dirs {
    root: PathBuf,
    /// Held while the directories are in use.
    _lock: Option<std::fs::File>,
    work: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
    scratch: PathBuf,
}

impl Dirs {
    fn create(work_root: &Path, key: Option<&SessionKey>) -> std::io::Result<Dirs> {
        use std::os::unix::fs::PermissionsExt;
        let agents = work_root.join("agents");
        std::fs::create_dir_all(&agents)?;
        let (root, lock) = match key.and_then(|key| Self::claim(&agents, key)) {
            Some((root, lock)) => (root, Some(lock)),
            None => (agents.join(uuid::Uuid::new_v4().simple().to_string()), None),
        };
        if root.exists() {
            // Left by an invocation that died; its lock is free, so nothing uses it.
            std::fs::remove_dir_all(&root)?;
        }
        std::fs::create_dir_all(&root)?;
        // Passable, not listable, by the agent's user; the rest is its own.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))?;
        let dirs = Dirs {
            work: root.join("work"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            scratch: root.join("scratch"),
            root,
            _lock: lock,
        };
        for dir in [&dirs.home, &dirs.tmp, &dirs.scratch] {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(dirs)
    }

    /// The session's own path and its lock, unless another invocation holds it.
    fn claim(agents: &Path, key: &SessionKey) -> Option<(PathBuf, std::fs::File)> {
        let name = format!("{}\u{0}{}\u{0}{}", key.conversation, key.target_agent, key.project);
        let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).simple().to_string();
        let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(agents.join(format!("{id}.lock"))).ok()?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
        Some((agents.join(id), lock))
    }

}

impl Drop for Dirs {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.root) {
            tracing::warn!(error = %e, dir = %self.root.display(), "could not remove a coding agent's directory");
        }
    }
}

impl CodingAgent {
    async fn context(&self, request: &ModelRequest<'_>, binding: &CodingBinding) -> Result<Context, ProviderError> {
        let mut context = Context {
            handoff_id: None,
            intent: String::new(),
            target_agent: request.profile.id.clone(),
            conversation: None,
            project: None,
            session: None,
            policy: DisclosurePolicy::default(),
            permissions: Permissions::default(),
        };
        let Some(pool) = &self.pool else {
            return Ok(context);
        };
        let host = |e: baton_store::Error| ProviderError::Failed(format!("reading the coding agent's context: {e}"));
        let client = pool.get().await.map_err(|e| host(e.into()))?;
        let (body, projects, disclosure) = tokio::try_join!(
            baton_store::coding::request_body_of_run(&client, request.run_id),
            baton_store::coding::projects(&client),
            baton_store::profiles::disclosure(&client),
        )
        .map_err(host)?;
        let parsed: Option<HandoffRequest> = body.and_then(|(_, body)| serde_json::from_value(body).ok());
        let project_id = parsed.as_ref().and_then(|r| r.project_id.clone().or_else(|| r.context.project_id.clone()));
        let project_id = project_id.or_else(|| binding.project.clone());
        if let Some(r) = &parsed {
            context.handoff_id = Some(r.id.clone());
            context.intent = r.user_intent.clone();
            context.target_agent = r.target_agent.as_str().to_string();
            context.conversation = r.conversation_key().map(str::to_string);
            context.policy = disclosure.for_target(r.target_agent.as_str()).clone();
            context.permissions =
                Permissions::from_constraints(&r.constraints.forbidden_actions, &r.constraints.require_confirmation_for);
        }
        if let Some(id) = project_id {
            let project = projects.into_iter().find(|p| p.id == id).ok_or_else(|| {
                let message = format!("the project `{id}` is not configured in this fleet, so the coding agent did not start");
                failed(message)
            })?;
            context.project = Some(project);
        }
        if let Some(key) = context.session_key() {
            context.session = baton_store::coding::session(&client, &key).await.map_err(host)?;
        }
        Ok(context)
    }

    async fn run(
        &self,
        request: &ModelRequest<'_>,
        cli: CodingCli,
        binding: &CodingBinding,
        context: &Context,
        dirs: &Dirs,
    ) -> Result<ModelTurn, ProviderError> {
        let name = cli.display_name();
        let mut scrub = Scrubber::new(context.policy.clone(), Scrubber::worker_secrets(std::env::vars()));
        // The checkout.
        let mirrors = self.work_root.join("projects");
        // A conversation's session goes on on the branch it pushed; a new one
        // gets the request's (a retried run finds its own there).
        let branch = context.session.as_ref().and_then(|s| s.branch.clone()).or_else(|| {
            context.project.as_ref().and_then(|p| p.branch_for(context.handoff_id.as_deref().unwrap_or("run")))
        });
        let (mirror, checkout) = match &context.project {
            Some(project) => {
                let mirror = checkout::Mirror::fetch(&mirrors, project).await.map_err(|e| failed(e.0))?;
                let starts: Vec<&str> = branch.as_deref().into_iter().collect();
                let checkout = mirror.checkout(&dirs.work, &starts).await.map_err(|e| failed(e.0))?;
                (Some(mirror), Some(checkout))
            }
            None => {
                std::fs::create_dir_all(&dirs.work).map_err(|e| failed(format!("preparing the working directory: {e}")))?;
                (None, None)
            }
        };
        // The session to continue, with its files.
        let resume = match &context.session {
            Some(s) if s.cli == cli.as_str() => match session::restore(s, &dirs.home) {
                Ok(()) => Some(s.session_id.clone()),
                Err(why) => {
                    self.note_restart(request, &why).await;
                    None
                }
            },
            Some(s) => {
                self.note_restart(request, &format!("the last session was `{}`'s, not {name}'s", s.cli)).await;
                None
            }
            None => None,
        };
        // The gateway: its token and the real key are secrets the journal never shows.
        let caller = Caller { run_id: request.run_id, invocation_id: request.invocation_id };
        let api_key = binding.api_key_env.as_deref().and_then(|name| std::env::var(name).ok());
        let token = gateway::Gateway::new_token();
        scrub.add_secret(token.clone());
        if let Some(key) = &api_key {
            scrub.add_secret(key.clone());
        }
        let (journal, writer) = Journal::start(self.pool.clone(), request.run_id, request.invocation_id, Arc::new(scrub.clone()));
        let upstream = gateway::Upstream {
            wire: cli.wire_api(),
            base_url: binding.base_url.clone().unwrap_or_default(),
            api_key,
            timeout: binding.timeout(),
            limit: request.profile.model_limit.clone(),
            limiter: self.limiter.clone(),
            caller,
            calls_left: request.allowance.calls_left,
            tokens_left: request.allowance.tokens_left,
        };
        let gateway = gateway::Gateway::start(upstream, token, journal.clone())
            .await
            .map_err(|e| ProviderError::Failed(format!("starting the model gateway: {e}")))?;
        let base_url = gateway.base_url(cli.wire_api());
        let program = binding.bin.clone().unwrap_or_else(|| cli.default_bin().to_string());
        let system_prompt = system_prompt_of(request);
        let brief = brief_of(request);
        let setup = Setup {
            program: &program,
            home: &dirs.home,
            work: &dirs.work,
            base_url: &base_url,
            token: &gateway.token,
            model: binding.model.as_deref().unwrap_or_default(),
            system_prompt: &system_prompt,
            brief: &brief,
            resume: resume.as_deref(),
            permissions: &context.permissions,
            timeout: binding.timeout(),
            boxed: self.jail.bwrap.is_some(),
        };
        let launch = cli::of(cli).launch(&setup);
        for (path, text) in &launch.files {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| failed(format!("writing {name}'s settings: {e}")))?;
            }
            std::fs::write(path, text).map_err(|e| failed(format!("writing {name}'s settings: {e}")))?;
        }
        let base = checkout.as_ref().map(|c| c.base.clone());
        journal.note(
            JournalEvent::CodingAgentStarted,
            json!({
                "cli": cli.as_str(),
                "project": context.project.as_ref().map(|p| p.id.clone()),
                "base": base,
                "fromBranch": checkout.as_ref().and_then(|c| c.from_branch.clone()),
                "resumes": resume,
                "permissions": context.permissions,
                "box": self.jail.describe(),
            }),
        );
        self.jail
            .hand_over(&[&dirs.work, &dirs.home, &dirs.tmp])
            .map_err(|e| failed(format!("handing the agent its directories: {e}")))?;
        let mut readable = vec![];
        if mirror.is_some() {
            readable.push(mirrors.clone());
        }
        let layout = Layout {
            work: dirs.work.clone(),
            writable: vec![dirs.home.clone()],
            tmp: Some(dirs.tmp.clone()),
            readable,
            hidden: vec![self.work_root.clone()],
        };
        let mut env = sandbox::environment(&binding.env, &binding.env_values, |n| std::env::var(n).ok(), &dirs.home.to_string_lossy());
        env.insert("HOME".into(), dirs.home.to_string_lossy().into_owned());
        env.insert("TMPDIR".into(), if self.jail.bwrap.is_some() { "/tmp".into() } else { dirs.tmp.to_string_lossy().into_owned() });
        env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
        env.extend(launch.env.clone());
        let mut command = self.jail.command(&program, &launch.args, &layout);
        command.env_clear().envs(&env);
        let ended = supervise(command, launch.stdin.clone(), cli, &journal, &gateway, binding, &dirs.work).await;
        let spend = gateway.spend.clone();
        let over_budget = spend.over_budget.load(Ordering::Relaxed);
        drop(gateway);
        let usage = Usage {
            prompt_tokens: Some(spend.input_tokens.load(Ordering::Relaxed)),
            completion_tokens: Some(spend.output_tokens.load(Ordering::Relaxed)),
            ..Default::default()
        };
        let calls = spend.calls.load(Ordering::Relaxed);
        let ended = match ended {
            Ok(ended) => ended,
            Err(e) => {
                drop(journal);
                writer.flush().await;
                return Err(e);
            }
        };
        // What it changed, also when it failed: the patch is kept for an operator.
        let message = projects::commit_message(&context.intent, context.handoff_id.as_deref().unwrap_or(""), &request.run_id.to_string());
        let concluded = match (&mirror, &checkout) {
            (Some(mirror), Some(checkout)) => {
                let push = if over_budget { None } else { branch.as_deref() };
                match mirror.conclude(checkout, &dirs.scratch, push, &message).await {
                    Ok(outcome) => Some(outcome),
                    Err(e) => {
                        drop(journal);
                        writer.flush().await;
                        return Err(failed(format!("reading what the agent changed: {}", e.0)));
                    }
                }
            }
            _ => None,
        };
        let report = ended.report;
        let session_id = report.session_id.clone();
        let changes = concluded.as_ref().map(|c| c.changes.clone());
        journal.note(
            JournalEvent::CodingAgentFinished,
            json!({
                "sessionId": session_id,
                "exit": ended.status,
                "changes": changes,
                "pushError": concluded.as_ref().and_then(|c| c.push_error.clone()),
                "modelCalls": calls,
                "tokens": spend.tokens(),
                "reportedTokens": report.reported_tokens,
            }),
        );
        drop(journal);
        writer.flush().await;
        let stored = concluded.map(|c| StoredChanges {
            invocation_id: request.invocation_id,
            run_id: request.run_id,
            changes: c.changes,
            patch: scrub.text(&c.patch),
            push_error: c.push_error,
        });
        let session = match (context.session_key(), &session_id) {
            (Some(key), Some(id)) => {
                let pushed = stored.as_ref().and_then(|s| s.changes.branch.clone());
                let branch = pushed.or_else(|| context.session.as_ref().and_then(|s| s.branch.clone()));
                Some((key, session::save(cli, id, branch, &dirs.home)))
            }
            _ => None,
        };
        let outcome = CodingOutcome { changes: stored, session };
        let failure = failure_of(cli, &ended.status, &report, &ended.stderr, &spend);
        if over_budget {
            // The run stops at its next step, with `budget_exhausted`.
            let text = format!("{name} was stopped: the run's budget is spent.");
            return Ok(ModelTurn {
                content: Some(text),
                usage: Some(usage),
                attempts: Some(1),
                model_calls: Some(calls),
                coding: Some(Box::new(outcome)),
                ..Default::default()
            });
        }
        if let Some((message, detail)) = failure {
            self.keep_patch(&outcome).await;
            return Err(stopped(ErrorCode::AgentFailed.as_str(), scrub.text(&message), scrub.text(&detail)));
        }
        if let Some(push_error) = outcome.changes.as_ref().and_then(|c| c.push_error.clone()) {
            self.keep_patch(&outcome).await;
            let message = format!("{name} finished, but {push_error}; its patch is kept with the run");
            return Err(stopped(ErrorCode::AgentFailed.as_str(), scrub.text(&message), scrub.text(&message)));
        }
        let mut text = scrub.text(report.result.as_deref().unwrap_or("").trim());
        if let Some(stored) = &outcome.changes {
            let summary = projects::summary(&stored.changes);
            text = if text.is_empty() { summary } else { format!("{text}\n\n{summary}") };
        }
        if text.trim().is_empty() {
            text = format!("{name} finished without a word.");
        }
        // What it was stopped from doing, so the user can allow it in a new request.
        for (tool, detail) in ended.denied.iter().take(5) {
            let what = if detail.is_empty() { tool.as_str() } else { detail.as_str() };
            text.push_str(&format!("\n\n{name} was not allowed to run `{}`: {}.", scrub.text(what), denial_reason(&context.permissions)));
        }
        Ok(ModelTurn {
            content: None,
            tool_calls: crate::providers::command::calls(request, &text),
            usage: Some(usage),
            attempts: Some(1),
            model_calls: Some(calls),
            coding: Some(Box::new(outcome)),
        })
    }

    async fn note_restart(&self, request: &ModelRequest<'_>, why: &str) {
        let Some(pool) = &self.pool else { return };
        let event = baton_store::journal::Event::new(
            JournalEvent::CodingSessionRestarted,
            Some(request.invocation_id),
            json!({"reason": why}),
        );
        if let Ok(client) = pool.get().await {
            let _ = baton_store::journal::append(&client, request.run_id, &[event]).await;
        }
    }

    /// A failed invocation's diff, kept for an operator (no fence: it is a record, not a state change).
    async fn keep_patch(&self, outcome: &CodingOutcome) {
        let (Some(pool), Some(stored)) = (&self.pool, &outcome.changes) else { return };
        let kept = match pool.get().await {
            Ok(client) => baton_store::coding::put_changes(&client, stored).await,
            Err(e) => Err(e.into()),
        };
        if let Err(e) = kept {
            tracing::warn!(error = %e, "could not keep a failed coding agent's patch");
        }
    }
}

/// Why a denied action was denied, in the reply's words.
fn denial_reason(p: &Permissions) -> &'static str {
    if p.needs_confirmation.is_empty() {
        "the request forbids it"
    } else if p.forbidden.is_empty() {
        "the request needs the user's confirmation for it, which cannot be asked while the agent works"
    } else {
        "the request forbids it, or needs the user's confirmation for it"
    }
}

/// Why the run failed, in words for people and for the journal; `None` when it did not.
fn failure_of(
    cli: CodingCli,
    status: &str,
    report: &Report,
    stderr: &str,
    spend: &gateway::Spend,
) -> Option<(String, String)> {
    let name = cli.display_name();
    let endpoint = spend.last_error.lock().expect("not poisoned").clone();
    let calls = spend.calls.load(Ordering::Relaxed);
    let why = if spend.endpoint_dead.load(Ordering::Relaxed) {
        Some(format!("its model endpoint could not be reached {} times in a row", gateway::UNREACHABLE_LIMIT))
    } else if let Some(error) = &report.error {
        Some(error.clone())
    } else if status != "exit status: 0" {
        Some(format!("it exited with {status}"))
    } else if report.result.is_none() && calls == 0 && spend.failed_calls.load(Ordering::Relaxed) > 0 {
        Some("it got no answer from its model".to_string())
    } else {
        None
    }?;
    let cause = match endpoint {
        Some(endpoint) if spend.failed_calls.load(Ordering::Relaxed) > 0 => format!(" ({endpoint})"),
        _ => String::new(),
    };
    let message = format!("{name} could not finish: {}{cause}", first_line(&why));
    let detail = format!("{message}; stderr: {}", cli::tail(stderr.trim(), STDERR_TAIL));
    Some((message, detail))
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text).trim();
    line.chars().take(300).collect()
}

/// The brief the agent was given (the first user message).
fn brief_of(request: &ModelRequest<'_>) -> String {
    let user = request.messages.iter().find(|m| m["role"] == "user");
    user.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

/// The system prompt the runtime assembled for the profile.
fn system_prompt_of(request: &ModelRequest<'_>) -> String {
    let system = request.messages.iter().find(|m| m["role"] == "system");
    system.and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

/// How the CLI ended by itself.
struct Ended {
    status: String,
    report: Report,
    stderr: String,
    /// Tool calls its permissions refused: (tool, what it tried).
    denied: Vec<(String, String)>,
}

/// Runs the CLI until it exits, times out, floods its output or the run's
/// budget stops it; its events go to the journal as they come. Whatever
/// ends it, its whole process group (and, boxed, its PID namespace) dies.
async fn supervise(
    mut command: tokio::process::Command,
    stdin: Option<String>,
    cli: CodingCli,
    journal: &Journal,
    gateway: &gateway::Gateway,
    binding: &CodingBinding,
    work: &Path,
) -> Result<Ended, ProviderError> {
    use std::process::Stdio;
    let name = cli.display_name();
    let mut child = command
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("{name} could not be started: {e}")))?;
    let group = crate::providers::command::Group::of(&child);
    let mut input = child.stdin.take().expect("piped");
    let writer = tokio::spawn(async move {
        if let Some(text) = stdin {
            let _ = input.write_all(text.as_bytes()).await;
        }
        drop(input);
    });
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let cap = binding.max_output_bytes();
    let stderr_task = tokio::spawn(async move {
        let mut tail = Capped::tail(u64::MAX, STDERR_TAIL * 4);
        let mut err = err;
        let mut buf = [0u8; 8192];
        loop {
            match tokio::io::AsyncReadExt::read(&mut err, &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    tail.push(&buf[..n]);
                }
            }
        }
        tail.text()
    });
    let mut parser = cli::of(cli).parser(work);
    let denied = std::sync::Mutex::new(Vec::new());
    let reading = async {
        let mut lines = tokio::io::BufReader::new(out);
        let (mut line, mut total) = (Vec::new(), 0u64);
        loop {
            line.clear();
            let n = lines.read_until(b'\n', &mut line).await.unwrap_or(0);
            if n == 0 {
                return Ok(());
            }
            total += n as u64;
            if total > cap {
                let message = sandbox::output_limit_message(cap);
                return Err(stopped(ErrorCode::AgentOutputLimit.as_str(), message.clone(), format!("{name}: {message}")));
            }
            let Ok(value) = serde_json::from_slice::<serde_json::Value>(line.trim_ascii()) else { continue };
            for progress in parser.line(&value) {
                if let Progress::Denied { tool, detail } = &progress {
                    denied.lock().expect("not poisoned").push((tool.clone(), detail.clone()));
                }
                note(journal, progress);
            }
        }
    };
    let timeout = binding.timeout();
    let result = tokio::select! {
        read = async {
            let read = reading.await;
            let status = child.wait().await;
            (read, status)
        } => {
            match read {
                (Err(e), _) => Err(e),
                (Ok(()), Ok(status)) => Ok(status.to_string()),
                (Ok(()), Err(e)) => Err(failed(format!("waiting for {name}: {e}"))),
            }
        }
        _ = tokio::time::sleep(timeout) => {
            let message = sandbox::timeout_message(timeout);
            Err(stopped(ErrorCode::AgentTimeout.as_str(), message.clone(), format!("{name}: {message}")))
        }
        _ = gateway.stop_agent.cancelled() => Ok("stopped by its gateway".to_string()),
    };
    writer.abort();
    group.kill();
    let _ = child.wait().await;
    let stderr = tokio::time::timeout(Duration::from_secs(2), stderr_task).await.ok().and_then(Result::ok).unwrap_or_default();
    let status = result?;
    Ok(Ended { status, report: parser.finish(), stderr, denied: denied.into_inner().expect("not poisoned") })
}

/// One thing the CLI did, as a journal event.
fn note(journal: &Journal, progress: Progress) {
    match progress {
        Progress::Command { command, exit_code, output } => journal
            .note(JournalEvent::CodingAgentCommand, json!({"command": command, "exitCode": exit_code, "output": output})),
        Progress::FileEdited { path } => journal.note(JournalEvent::CodingAgentFileEdited, json!({"path": path})),
        Progress::Denied { tool, detail } => journal
            .note(JournalEvent::CodingAgentCommand, json!({"command": detail, "tool": tool, "denied": true})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_0_with_an_error_inside_is_a_failure_naming_the_endpoint() {
        let spend = gateway::Spend::default();
        spend.failed_calls.store(2, Ordering::Relaxed);
        *spend.last_error.lock().unwrap() = Some("the model endpoint could not be reached: connection refused".into());
        let report = Report { error: Some("[API Error: Connection error.]".into()), ..Default::default() };
        let (message, _) = failure_of(CodingCli::QwenCode, "exit status: 0", &report, "", &spend).unwrap();
        assert!(message.starts_with("Qwen Code could not finish: [API Error") && message.contains("connection refused"), "{message}");
        let ok = Report { result: Some("done".into()), ..Default::default() };
        assert!(failure_of(CodingCli::Codex, "exit status: 0", &ok, "", &gateway::Spend::default()).is_none());
        let (message, _) = failure_of(CodingCli::Codex, "exit status: 1", &ok, "", &gateway::Spend::default()).unwrap();
        assert!(message.contains("exited with exit status: 1"), "{message}");
    }
}
