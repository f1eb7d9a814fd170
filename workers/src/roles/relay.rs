//! The relay: publishes outbox rows with publisher confirms, woken by
//! LISTEN/NOTIFY with a poll as a safety net, and re-publishes invocations
//! whose worker died (lease expired) or whose message was lost.

use std::sync::Arc;

use baton_bus::publish::settle;
use baton_bus::topology::DEAD;
use baton_bus::{Outgoing, Published, Publisher};
use baton_store::outbox::{self, Message};
use baton_store::tokio_postgres::{self, AsyncMessage};
use baton_store::{invocations, Pool};
use futures_lite::StreamExt;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{connect, Role};
use crate::config::Settings;

const BATCH: i64 = 256;
const CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The relay's sessions: its outbox transaction stays open while the broker
/// confirms (up to [`CONFIRM_TIMEOUT`]), so it may sit idle in that
/// transaction longer than other roles' do.
pub(crate) fn session(settings: &Settings) -> baton_store::SessionConfig {
    let mut session = settings.db_session_of(Role::Relay.name());
    let floor = CONFIRM_TIMEOUT + std::time::Duration::from_secs(10);
    session.idle_in_transaction_timeout = session.idle_in_transaction_timeout.map(|t| if t.is_zero() { t } else { t.max(floor) });
    session
}

pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    let (conn, pool) = connect(settings, Role::Relay).await?;
    let publisher = Publisher::open(&conn).await?;
    let wake = Arc::new(Notify::new());
    let (_listening, listener) = listen(settings, wake.clone()).await?;
    let relay = Relay { pool, publisher, settings: settings.clone() };
    tracing::info!("relay publishing");
    let callbacks_stop = shutdown.child_token();
    let callbacks = tokio::spawn(super::callbacks::deliver(relay.pool.clone(), settings.relay_poll, callbacks_stop.clone()));
    let result = relay.serve(&wake, &listener, shutdown).await;
    callbacks_stop.cancel();
    let _ = callbacks.await;
    super::close(relay.publisher.channel()).await;
    result
}

/// Opens a dedicated connection that LISTENs on the outbox channel. The
/// returned token is cancelled when that connection dies (keepalives notice a
/// vanished server); keep the client alive as long as notifications are wanted.
async fn listen(settings: &Settings, wake: Arc<Notify>) -> anyhow::Result<(tokio_postgres::Client, CancellationToken)> {
    let session = settings.db_session_of("relay-listen");
    let (client, mut connection) = baton_store::connect::connect(&settings.database_url, &session).await?;
    let dead = CancellationToken::new();
    let guard = dead.clone();
    tokio::spawn(async move {
        let mut messages = futures_lite::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(_)) => wake.notify_one(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        guard.cancel();
    });
    client.batch_execute("LISTEN baton_outbox").await?;
    Ok((client, dead))
}

struct Relay {
    pool: Pool,
    publisher: Publisher,
    settings: Settings,
}

impl Relay {
    async fn serve(&self, wake: &Notify, listener: &CancellationToken, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let mut sweep = tokio::time::interval(self.settings.relay_poll);
        loop {
            while self.publish_batch().await? == BATCH as usize {}
            tokio::select! {
                _ = wake.notified() => {}
                _ = sweep.tick() => self.sweep_stalled().await?,
                _ = listener.cancelled() => anyhow::bail!("lost the LISTEN connection to PostgreSQL"),
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
    }

    /// Publishes up to one batch. The rows stay locked (deleted only at
    /// commit) until every confirm is in: a crash re-publishes, never drops.
    pub async fn publish_batch(&self) -> anyhow::Result<usize> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let batch = outbox::take_batch(&tx, BATCH).await?;
        if batch.is_empty() {
            return Ok(0);
        }
        let queues = self.settings.queues();
        let mut pending = Vec::with_capacity(batch.len());
        for (_, m) in &batch {
            let queue = if m.external { m.queue.clone() } else { queues.name(&m.queue) };
            let body = serde_json::to_vec(&m.body)?;
            let confirm = self.publisher.send(&outgoing(m, &queue, &body)).await?;
            pending.push((confirm, queue, m, body));
        }
        for (confirm, queue, m, body) in pending {
            let confirmation = tokio::time::timeout(CONFIRM_TIMEOUT, confirm)
                .await
                .map_err(|_| anyhow::anyhow!("the broker did not confirm within {CONFIRM_TIMEOUT:?}"))??;
            // Settled one by one: a message the broker refuses (a full or
            // missing bridge queue) goes to baton.dead with the reason instead
            // of blocking every message behind it.
            match settle(confirmation, &queue) {
                Ok(Published::Confirmed) => {}
                Ok(Published::Returned(reason)) => self.dead_letter(m, &queue, &body, &reason).await?,
                Err(e) => self.dead_letter(m, &queue, &body, &e.to_string()).await?,
            }
        }
        tx.commit().await?;
        Ok(batch.len())
    }

    async fn dead_letter(&self, m: &Message, queue: &str, body: &[u8], reason: &str) -> anyhow::Result<()> {
        tracing::warn!(queue, reason, "message returned; dead-lettering it");
        let dead = self.settings.queues().name(DEAD);
        let out = Outgoing {
            queue: &dead,
            body,
            message_id: m.message_id.as_deref(),
            correlation_id: m.correlation_id.as_deref(),
            headers: vec![("x-baton-error", reason.to_string()), ("x-baton-source-queue", queue.to_string())],
            ..Default::default()
        };
        self.publisher.publish(&out).await?;
        Ok(())
    }

    /// Re-publishes stalled invocations through the outbox (the next batch
    /// sends them); whoever claims one bumps its epoch and fences the old
    /// worker. Also wakes parked parents whose wait timed out.
    async fn sweep_stalled(&self) -> anyhow::Result<()> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let stalled = invocations::take_stalled(&tx, self.settings.unclaimed_grace, self.settings.lease).await?;
        for (id, run_id, kind) in &stalled {
            tracing::info!(invocation = %id, "re-publishing stalled invocation");
            baton_agent::lifecycle::publish_invocation(&tx, *run_id, *id, *kind).await?;
        }
        // Parked parents whose wait timed out: wake them to read what is done.
        for (id, run_id) in invocations::wake_timed_out(&tx).await? {
            baton_agent::lifecycle::publish_wake(&tx, run_id, id).await?;
        }
        // Ended runs whose reply was never written: tell the collector again.
        for run_id in baton_store::runs::unreplied(&tx, self.settings.unclaimed_grace).await? {
            tracing::info!(run = %run_id, "re-publishing an unreplied finished run");
            baton_agent::lifecycle::publish_finished(&tx, run_id).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

fn outgoing<'a>(m: &'a Message, queue: &'a str, body: &'a [u8]) -> Outgoing<'a> {
    Outgoing {
        queue,
        body,
        message_id: m.message_id.as_deref(),
        correlation_id: m.correlation_id.as_deref(),
        mandatory: m.mandatory,
        ..Default::default()
    }
}
