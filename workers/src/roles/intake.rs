//! Intake: validates bridge requests, stores them once per id, and starts a
//! run with its root invocation, all in one transaction.

use baton_bus::topology::{BRIDGE_REPLIES, BRIDGE_REQUESTS};
use baton_bus::{Outgoing, Publisher};
use baton_domain::brief::render_request_brief;
use baton_domain::disclosure;
use baton_domain::bridge::{self as wire, ReplyInput};
use baton_domain::journal;
use baton_domain::reply::Outcome;
use baton_domain::request::{parse_request, HandoffRequest, RequestError, TargetAgent};
use baton_domain::state::InvocationKind;
use baton_domain::Language;
use baton_store::invocations::{self, NewInvocation};
use baton_store::journal::Event;
use baton_store::requests::{self, NewRequest};
use baton_store::{profiles, runs, GenericClient, Pool};
use baton_bus::lapin::message::Delivery;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{ack, connect, consume, dead_letter, retry_transient, Role, TRANSIENT_PATIENCE};
use crate::bridge;
use crate::config::Settings;

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Intake).await?;
    let publisher = Publisher::open(&conn).await?;
    let queue = settings.queues().name(BRIDGE_REQUESTS);
    tracing::info!(%queue, "intake consuming");
    let result = consume(&conn, &queue, settings.prefetch, shutdown, |d| handle(&pool, &publisher, settings, shutdown, d)).await;
    super::close(publisher.channel()).await;
    result
}

async fn handle(pool: &Pool, publisher: &Publisher, settings: &Settings, shutdown: &CancellationToken, delivery: Delivery) -> anyhow::Result<()> {
    match parse_request(&delivery.data) {
        Ok(request) => {
            let reply_to = delivery.properties.reply_to().as_ref().map(|r| r.as_str().to_string());
            let stored = retry_transient("storing a request", TRANSIENT_PATIENCE, shutdown, || accept(pool, &request, reply_to.as_deref()));
            match stored.await {
                Ok(()) => ack(&delivery).await,
                Err(e) if super::is_transient(&e) => Err(e),
                // A request the store cannot take will never be taken: tell
                // the sender and dead-letter it instead of redelivering it.
                Err(e) => {
                    tracing::error!(handoff = %request.id, error = %format!("{e:#}"), "request could not be stored");
                    let error = RequestError {
                        reason: "the request could not be stored; an operator can see why in baton.dead".into(),
                        handoff_id: Some(request.id.clone()),
                        reply_to_chat_id: request.reply_to_chat_id().map(str::to_string),
                        language: Some(request.language()),
                    };
                    reject(publisher, settings, &delivery, &error).await
                }
            }
        }
        Err(error) => reject(publisher, settings, &delivery, &error).await,
    }
}

/// A body that cannot be a request: dead-letter it, and tell the sender when
/// enough of it can be read to address a reply.
async fn reject(publisher: &Publisher, settings: &Settings, delivery: &Delivery, error: &RequestError) -> anyhow::Result<()> {
    if let (Some(id), Some(_)) = (&error.handoff_id, &error.reply_to_chat_id) {
        let language = error.language.unwrap_or(Language::En);
        let input = ReplyInput {
            handoff_id: id,
            chat_id: error.reply_to_chat_id.as_deref(),
            source: "other",
            language,
            outcome: Outcome::Failed { code: "invalid_request".into(), message: error.reason.clone() },
            run_id: None,
            agents: vec![],
            at: bridge::timestamp(),
        };
        let body = serde_json::to_vec(&wire::reply(&input))?;
        let reply_to = delivery.properties.reply_to().as_ref().map(|r| r.as_str().to_string());
        let queue = reply_to.unwrap_or_else(|| settings.queues().name(BRIDGE_REPLIES));
        let message_id = wire::reply_message_id(id);
        let out = Outgoing {
            queue: &queue,
            body: &body,
            message_id: Some(&message_id),
            correlation_id: Some(id),
            mandatory: true,
            ..Default::default()
        };
        if let baton_bus::Published::Returned(why) = publisher.publish(&out).await? {
            tracing::warn!(handoff = %id, why, "the failed reply found no queue; it stays in baton.dead with the request");
        }
    }
    dead_letter(publisher, settings, delivery, BRIDGE_REQUESTS, &error.reason).await
}

async fn accept(pool: &Pool, original: &HandoffRequest, reply_to: Option<&str>) -> anyhow::Result<()> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    // The disclosure policy runs before anything is stored or shown: no
    // agent, prompt, external tool or operator view sees what it removes.
    let policy = profiles::disclosure(&tx).await?;
    let filtered = disclosure::apply(policy.for_target(original.target_agent.as_str()), original);
    let request = &filtered.request;
    let body = serde_json::to_value(request)?;
    let new = NewRequest {
        id: &request.id,
        body: &body,
        source: request.source.as_str(),
        target_agent: request.target_agent.as_str(),
        status: request.status.as_str(),
        language: request.language().as_str(),
        reply_to,
        reply_chat_id: request.reply_to_chat_id(),
        status_url: status_url(request),
    };
    if !requests::insert_or_count(&tx, &new).await? {
        // The same id again: a duplicate (acknowledged, counted, nothing
        // more), or a draft the bridge now sends as `requested`.
        let stored = requests::get(&tx, &request.id).await?.expect("counted in this transaction");
        if stored.status == "draft" && request.is_runnable() {
            requests::promote_draft(&tx, &request.id, &body, status_url(request)).await?;
            record_disclosure(&tx, &request.id, &filtered.removed).await?;
            start(&tx, request).await?;
        } else {
            tracing::info!(handoff = %request.id, "duplicate request acknowledged; no new run");
        }
        tx.commit().await?;
        return Ok(());
    }
    requests::add_event(&tx, &request.id, "created", Some(request.status.as_str()), None).await?;
    record_disclosure(&tx, &request.id, &filtered.removed).await?;
    requests::add_event(&tx, &request.id, "context_packaged", None, None).await?;
    if request.is_runnable() {
        start(&tx, request).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Routes the request to its root agent and starts the run, or says why not.
async fn start(c: &impl GenericClient, request: &HandoffRequest) -> anyhow::Result<()> {
    let stored = requests::get(c, &request.id).await?.expect("inserted in this transaction");
    if request.target_agent == TargetAgent::Manual {
        bridge::status(c, &stored, "accepted", Some("waiting for an operator")).await?;
        return Ok(());
    }
    let profile = match profiles::route(c, request.target_agent.as_str()).await? {
        Some(id) => profiles::get(c, &id).await?,
        None => None,
    };
    let Some(profile) = profile.filter(|p| p.is_configured()) else {
        let message = format!("no configured agent handles `{}` requests", request.target_agent.as_str());
        return refuse(c, &stored, request, &message).await;
    };
    let run_id = Uuid::now_v7();
    let root = Uuid::now_v7();
    runs::insert(c, run_id, Some(&request.id), &profile.id).await?;
    requests::link_run(c, &request.id, run_id).await?;
    let brief = render_request_brief(request);
    let new = NewInvocation {
        id: root,
        run_id,
        parent_invocation_id: None,
        incoming_task_id: None,
        profile_id: &profile.id,
        kind: InvocationKind::Root,
        brief: &brief,
        budget: None,
        deadline_at: None,
    };
    invocations::insert(c, &new).await?;
    baton_agent::lifecycle::publish_invocation(c, run_id, root, InvocationKind::Root).await?;
    let events = [
        Event::new(journal::RUN_CREATED, None, json!({"handoffId": request.id, "source": request.source.as_str()})),
        Event::new(journal::PROFILE_RESOLVED, Some(root), json!({"targetAgent": request.target_agent.as_str(), "profileId": profile.id})),
        Event::new(journal::WORKSPACE_INITIALIZED, None, json!({})),
        Event::new(journal::INVOCATION_CREATED, Some(root), json!({"kind": "root", "profileId": profile.id})),
    ];
    baton_store::journal::append(c, run_id, &events).await?;
    requests::add_event(c, &request.id, "sent", None, Some(&profile.id)).await?;
    requests::add_event(c, &request.id, "accepted", Some("accepted"), None).await?;
    bridge::status(c, &stored, "accepted", None).await?;
    Ok(())
}

async fn refuse(c: &impl GenericClient, stored: &requests::Request, request: &HandoffRequest, message: &str) -> anyhow::Result<()> {
    requests::add_event(c, &request.id, "failed", Some("failed"), Some(message)).await?;
    bridge::status(c, stored, "failed", Some(message)).await?;
    let input = ReplyInput {
        handoff_id: &request.id,
        chat_id: request.reply_to_chat_id(),
        source: request.source.as_str(),
        language: request.language(),
        outcome: Outcome::Failed { code: "no_agent".into(), message: message.to_string() },
        run_id: None,
        agents: vec![],
        at: bridge::timestamp(),
    };
    bridge::reply(c, stored, &input).await?;
    Ok(())
}

fn status_url(request: &HandoffRequest) -> Option<&str> {
    request.callback.as_ref().and_then(|c| c.status_url.as_deref()).filter(|u| !u.trim().is_empty())
}

/// One `disclosure_filtered` event listing what the policy removed, if anything.
async fn record_disclosure(c: &impl GenericClient, id: &str, removed: &[baton_domain::request::Redaction]) -> anyhow::Result<()> {
    if removed.is_empty() {
        return Ok(());
    }
    let what: Vec<String> = removed.iter().map(|r| format!("{} ({})", r.field, r.reason)).collect();
    let note = format!("{} removal(s): {}", what.len(), what.join("; "));
    requests::add_event(c, id, "disclosure_filtered", None, Some(&note)).await?;
    Ok(())
}
