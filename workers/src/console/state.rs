//! What every handler shares.

use anyhow::Context;
use baton_bus::{Connection, Queues};
use baton_store::Pool;
use tokio::sync::Mutex;

use super::auth::Auth;
use super::views::Views;
use crate::config::Settings;

pub struct State {
    pub pool: Pool,
    pub settings: Settings,
    pub auth: Auth,
    pub views: Views,
    /// One broker connection, opened on first use and again after it broke.
    broker: Mutex<Option<Connection>>,
}

impl State {
    pub fn new(settings: &Settings) -> anyhow::Result<Self> {
        let auth = Auth::new(settings.admin_token.as_ref().map(super::super::config::Secret::expose));
        Ok(Self {
            pool: settings.db_pool("admin")?,
            views: Views::new(auth.csrf(), auth.login_csrf(), auth.needs_login())?,
            settings: settings.clone(),
            auth,
            broker: Mutex::new(None),
        })
    }

    pub fn queues(&self) -> Queues {
        self.settings.queues()
    }

    pub async fn db(&self) -> anyhow::Result<baton_store::Client> {
        Ok(baton_store::client(&self.pool).await?)
    }

    /// Runs `f` with the broker connection, connecting (and declaring the
    /// topology) first when there is none or it broke.
    pub async fn with_broker<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        F: AsyncFnOnce(&Connection) -> anyhow::Result<T>,
    {
        let mut held = self.broker.lock().await;
        if !held.as_ref().is_some_and(Connection::is_connected) {
            let name = format!("baton-admin-{}", self.settings.worker_id);
            let conn = Connection::open(&self.settings.amqp_url, &name)
                .await
                .with_context(|| format!("connecting to RabbitMQ at {}", self.settings.amqp_url_redacted()))?;
            conn.declare(&self.queues()).await?;
            *held = Some(conn);
        }
        f(held.as_ref().expect("connected above")).await
    }

    pub async fn close(&self) {
        if let Some(conn) = self.broker.lock().await.take() {
            conn.close("console stopped").await;
        }
    }
}
