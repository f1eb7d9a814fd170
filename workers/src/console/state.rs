//! What every handler shares.

use std::net::SocketAddr;

use anyhow::Context;
use baton_bus::{Connection, Queues};
use baton_domain::console::origin::{Authority, Hosts};
use baton_store::Pool;
use tokio::sync::{Mutex, OnceCell};

use super::views::Views;
use crate::config::Settings;

pub struct State {
    pub pool: Pool,
    pub settings: Settings,
    pub views: Views,
    /// `BATON_ADMIN_TOKEN`, when one is set (the console then needs a login).
    pub token: Option<String>,
    /// The names this console answers to.
    pub hosts: Hosts,
    /// Tokens every replica shares, read from Postgres on first use.
    tokens: OnceCell<SharedTokens>,
    /// One broker connection, opened on first use and again after it broke.
    broker: Mutex<Option<Connection>>,
    /// The last dead-letter count for the navigation's badge, and when it was read.
    pub dead_count: Mutex<Option<(std::time::Instant, u32)>>,
}

/// The CSRF tokens of pages served without a session, the same in every
/// replica (they are kept in Postgres): the login form's, and the one of a
/// console that needs no login.
pub struct SharedTokens {
    pub login_csrf: String,
    pub open_csrf: String,
}

impl State {
    /// The state of a console listening on `bound` (which may differ from
    /// `admin_addr` when that asked for port 0).
    pub fn new(settings: &Settings, bound: SocketAddr) -> anyhow::Result<Self> {
        let token = settings.admin_token.as_ref().map(|t| t.expose().to_string()).filter(|t| !t.is_empty());
        let mut names = vec![Authority::of(bound), Authority::of(settings.admin_addr)];
        names.extend(settings.admin_url.as_ref().map(|u| u.authority.clone()));
        Ok(Self {
            pool: settings.db_pool("admin")?,
            views: Views::new(token.is_some())?,
            settings: settings.clone(),
            token,
            hosts: Hosts::new(names),
            tokens: OnceCell::new(),
            broker: Mutex::new(None),
            dead_count: Mutex::new(None),
        })
    }

    pub fn needs_login(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `BATON_ADMIN_URL` says people reach the console over TLS.
    pub fn https(&self) -> bool {
        self.settings.admin_url.as_ref().is_some_and(|u| u.https)
    }

    /// The tokens every replica shares (the first replica to ask makes them).
    pub async fn tokens(&self) -> anyhow::Result<&SharedTokens> {
        self.tokens
            .get_or_try_init(|| async {
                let c = self.db().await?;
                let token = super::auth::random_token;
                let login_csrf = baton_store::console::shared_token(&c, "login_csrf", &token()).await?;
                let open_csrf = baton_store::console::shared_token(&c, "open_csrf", &token()).await?;
                Ok(SharedTokens { login_csrf, open_csrf })
            })
            .await
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
