//! After the CLI: what it changed (the diff of its checkout, committed
//! and pushed), the session it leaves, and the turn that records it all,
//! or the failure in words.

use std::sync::atomic::Ordering;

use baton_domain::policy::permissions::Permissions;
use baton_domain::profiles::coding::CodingCli;
use baton_domain::projects;
use baton_domain::protocol::contract::ErrorCode;
use baton_domain::run::journal::JournalEvent;
use baton_store::coding::StoredChanges;
use serde_json::json;

use super::cli::{self, Report};
use super::journal::Journal;
use super::scrub::Scrubber;
use super::supervise::Ended;
use super::{failed, gateway, session, stopped, CodingAgent, CodingOutcome, Job, Work, STDERR_TAIL};
use crate::providers::{ModelTurn, ProviderError, Usage};

impl CodingAgent {
    /// What the agent changed (also when it failed: the patch is kept for an
    /// operator), committed and pushed unless the run's budget stopped it,
    /// and the session it leaves.
    pub(super) async fn conclude(
        &self,
        job: &Job<'_>,
        work: &Work,
        ended: &Ended,
        spend: &gateway::Spend,
        scrub: &Scrubber,
        journal: Journal,
    ) -> Result<CodingOutcome, ProviderError> {
        let (request, context) = (job.request, job.context);
        let message = projects::commit_message(
            &context.intent,
            context.handoff_id.as_deref().unwrap_or(""),
            &request.run_id.to_string(),
        );
        let concluded = match (&work.mirror, &work.checkout) {
            (Some(mirror), Some(checkout)) => {
                let push = if spend.over_budget.load(Ordering::Relaxed) { None } else { work.branch.as_deref() };
                let outcome = mirror.conclude(checkout, &job.dirs.scratch, push, &message).await;
                Some(outcome.map_err(|e| failed(format!("reading what the agent changed: {}", e.0)))?)
            }
            _ => None,
        };
        let session_id = ended.report.session_id.clone();
        journal.note(
            JournalEvent::CodingAgentFinished,
            json!({
                "sessionId": session_id,
                "exit": ended.status,
                "changes": concluded.as_ref().map(|c| c.changes.clone()),
                "pushError": concluded.as_ref().and_then(|c| c.push_error.clone()),
                "modelCalls": spend.calls.load(Ordering::Relaxed),
                "tokens": spend.tokens(),
                "reportedTokens": ended.report.reported_tokens,
            }),
        );
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
                Some((key, session::save(job.cli, id, branch, &job.dirs.home)))
            }
            _ => None,
        };
        Ok(CodingOutcome { changes: stored, session })
    }

    /// The turn that records the outcome, or the failure in words (the patch kept).
    pub(super) async fn turn_of(
        &self,
        job: &Job<'_>,
        ended: Ended,
        spend: &gateway::Spend,
        scrub: &Scrubber,
        outcome: CodingOutcome,
    ) -> Result<ModelTurn, ProviderError> {
        let name = job.cli.display_name();
        let usage = Usage {
            prompt_tokens: Some(spend.input_tokens.load(Ordering::Relaxed)),
            completion_tokens: Some(spend.output_tokens.load(Ordering::Relaxed)),
            ..Default::default()
        };
        let calls = spend.calls.load(Ordering::Relaxed);
        let turn = |content, tool_calls, outcome| ModelTurn {
            content,
            tool_calls,
            usage: Some(usage),
            attempts: Some(1),
            model_calls: Some(calls),
            coding: Some(Box::new(outcome)),
            latency_ms: None,
        };
        if spend.over_budget.load(Ordering::Relaxed) {
            // The run stops at its next step, with `budget_exhausted`.
            return Ok(turn(Some(format!("{name} was stopped: the run's budget is spent.")), vec![], outcome));
        }
        if let Some((message, detail)) = failure_of(job.cli, &ended.status, &ended.report, &ended.stderr, spend) {
            self.keep_patch(&outcome).await;
            return Err(stopped(ErrorCode::AgentFailed.as_str(), scrub.text(&message), scrub.text(&detail)));
        }
        if let Some(push_error) = outcome.changes.as_ref().and_then(|c| c.push_error.clone()) {
            self.keep_patch(&outcome).await;
            let message = scrub.text(&format!("{name} finished, but {push_error}; its patch is kept with the run"));
            return Err(stopped(ErrorCode::AgentFailed.as_str(), message.clone(), message));
        }
        let mut text = scrub.text(ended.report.result.as_deref().unwrap_or("").trim());
        if let Some(stored) = &outcome.changes {
            let summary = projects::summary(&stored.changes);
            text = if text.is_empty() { summary } else { format!("{text}\n\n{summary}") };
        }
        if text.trim().is_empty() {
            text = format!("{name} finished without a word.");
        }
        // What it was stopped from doing, so the user can allow it in a new request.
        for (tool, detail) in ended.denied.iter().take(5) {
            let what = scrub.text(if detail.is_empty() { tool } else { detail });
            let why = denial_reason(&job.context.permissions);
            text.push_str(&format!("\n\n{name} was not allowed to run `{what}`: {why}."));
        }
        Ok(turn(None, crate::providers::command::calls(job.request, &text), outcome))
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
        assert!(
            message.starts_with("Qwen Code could not finish: [API Error") && message.contains("connection refused"),
            "{message}"
        );
        let ok = Report { result: Some("done".into()), ..Default::default() };
        assert!(failure_of(CodingCli::Codex, "exit status: 0", &ok, "", &gateway::Spend::default()).is_none());
        let (message, _) = failure_of(CodingCli::Codex, "exit status: 1", &ok, "", &gateway::Spend::default()).unwrap();
        assert!(message.contains("exited with exit status: 1"), "{message}");
    }
}
