//! Coding agents (docs/profiles.md#coding-agents): Codex, Claude Code, Qwen Code and Gemini
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
mod dirs;
pub mod gateway;
pub mod journal;
mod launch;
mod outcome;
pub mod scrub;
mod session;
mod supervise;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use baton_domain::policy::disclosure::DisclosurePolicy;
use baton_domain::policy::permissions::Permissions;
use baton_domain::policy::sandbox;
use baton_domain::profiles::coding::{CodingBinding, CodingCli};
use baton_domain::projects::Project;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::protocol::request::HandoffRequest;
use baton_domain::run::journal::JournalEvent;
use baton_store::coding::SessionKey;
use baton_store::Pool;
use serde_json::json;

use crate::jail::Jail;
use crate::limiter::{Caller, Limiter};
use crate::providers::{ModelRequest, ModelTurn, Provider, ProviderError};
use dirs::Dirs;
use journal::Journal;
use scrub::Scrubber;
use supervise::supervise;

pub use launch::program_of;
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

/// One coding invocation, as the phases of its run see it.
#[derive(Clone, Copy)]
struct Job<'a> {
    request: &'a ModelRequest<'a>,
    cli: CodingCli,
    binding: &'a CodingBinding,
    context: &'a Context,
    dirs: &'a Dirs,
}

/// Where the agent works: its checkout (from the project's mirror), the
/// branch its changes go to, the session it continues.
struct Work {
    mirror: Option<checkout::Mirror>,
    checkout: Option<checkout::Checkout>,
    branch: Option<String>,
    resume: Option<String>,
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
            context.permissions = Permissions::from_constraints(
                &r.constraints.forbidden_actions,
                &r.constraints.require_confirmation_for,
            );
        }
        if let Some(id) = project_id {
            let project = projects.into_iter().find(|p| p.id == id).ok_or_else(|| {
                let message =
                    format!("the project `{id}` is not configured in this fleet, so the coding agent did not start");
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
        let job = Job { request, cli, binding, context, dirs };
        let mut scrub = Scrubber::new(context.policy.clone(), Scrubber::worker_secrets(std::env::vars()));
        let work = self.prepare(request, cli, context, dirs).await?;
        let (gateway, journal, writer) = self.open_gateway(request, cli, binding, &mut scrub).await?;
        let (command, stdin) = self.launch(&job, &work, &gateway, &journal)?;
        let ended = supervise(command, stdin, cli, &journal, &gateway, binding, &dirs.work).await;
        let spend = gateway.spend.clone();
        drop(gateway);
        let ended = match ended {
            Ok(ended) => ended,
            Err(e) => {
                drop(journal);
                writer.flush().await;
                return Err(e);
            }
        };
        let concluded = self.conclude(&job, &work, &ended, &spend, &scrub, journal).await;
        writer.flush().await;
        self.turn_of(&job, ended, &spend, &scrub, concluded?).await
    }

    /// The checkout (from the session's branch, else the request's), and
    /// the session to continue, its files restored into the new HOME.
    async fn prepare(
        &self,
        request: &ModelRequest<'_>,
        cli: CodingCli,
        context: &Context,
        dirs: &Dirs,
    ) -> Result<Work, ProviderError> {
        // A conversation's session goes on on the branch it pushed; a new one
        // gets the request's (a retried run finds its own there).
        let branch = context.session.as_ref().and_then(|s| s.branch.clone()).or_else(|| {
            context.project.as_ref().and_then(|p| p.branch_for(context.handoff_id.as_deref().unwrap_or("run")))
        });
        let (mirror, checkout) = match &context.project {
            Some(project) => {
                let mirror = checkout::Mirror::fetch(&self.mirrors(), project).await.map_err(|e| failed(e.0))?;
                let starts: Vec<&str> = branch.as_deref().into_iter().collect();
                let checkout = mirror.checkout(&dirs.work, &starts).await.map_err(|e| failed(e.0))?;
                (Some(mirror), Some(checkout))
            }
            None => {
                std::fs::create_dir_all(&dirs.work)
                    .map_err(|e| failed(format!("preparing the working directory: {e}")))?;
                (None, None)
            }
        };
        let name = cli.display_name();
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
        Ok(Work { mirror, checkout, branch, resume })
    }

    /// The invocation's gateway and journal; its token and the real key are
    /// secrets the journal never shows.
    async fn open_gateway(
        &self,
        request: &ModelRequest<'_>,
        cli: CodingCli,
        binding: &CodingBinding,
        scrub: &mut Scrubber,
    ) -> Result<(gateway::Gateway, Journal, journal::Writer), ProviderError> {
        let caller =
            Caller { run_id: request.run_id, invocation_id: request.invocation_id, priority: request.priority };
        let api_key = binding.api_key_env.as_deref().and_then(|name| std::env::var(name).ok());
        let token = gateway::Gateway::new_token();
        scrub.add_secret(token.clone());
        if let Some(key) = &api_key {
            scrub.add_secret(key.clone());
        }
        let (journal, writer) =
            Journal::start(self.pool.clone(), request.run_id, request.invocation_id, Arc::new(scrub.clone()));
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
        Ok((gateway, journal, writer))
    }

    fn mirrors(&self) -> PathBuf {
        self.work_root.join("projects")
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
