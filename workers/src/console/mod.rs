//! The operator's web console, served by the `admin` role: every run and its
//! story across agents, the handoffs waiting for a person, what was
//! dead-lettered, and the fleet at a glance. Server-rendered HTML (minijinja,
//! auto-escaped), with its stylesheet and script embedded in the binary.
//!
//! # Layout
//! - `mod.rs`: binding (loopback, or a token), the router, serving until shutdown.
//! - `guard`: the names the console answers to, and where a POST may come from.
//! - `auth`: bearer token or session cookie (sessions and the login limit in
//!   Postgres), and the CSRF token every form carries.
//! - `views`: the templates, the markdown filter, errors as pages.
//! - `state`: what every handler shares (the pool, the broker, the settings).
//! - `badges`: the navigation's counts (waiting, dead letters) on every page.
//! - `pages/`: one module per page (overview, runs, run, waiting, dead letters, workers, fleet).
//! - `templates/`, `assets/`: the HTML templates, CSS and JS.

mod auth;
mod badges;
mod guard;
mod pages;
mod state;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
pub use state::State;

/// Refuses a bind the console cannot protect: off loopback it needs
/// `BATON_ADMIN_TOKEN`, else anyone on the network could cancel runs.
pub fn check_bind(settings: &Settings) -> anyhow::Result<()> {
    let open = settings.admin_token.as_ref().is_none_or(|t| t.expose().is_empty());
    if open && !settings.admin_addr.ip().is_loopback() {
        anyhow::bail!(
            "refusing to serve the console on {} without BATON_ADMIN_TOKEN: off loopback anyone who reaches it \
             could act on runs; set BATON_ADMIN_TOKEN, or bind BATON_ADMIN_ADDR to 127.0.0.1",
            settings.admin_addr
        );
    }
    Ok(())
}

/// The `admin` role: serves the console until shutdown.
pub async fn run(settings: &Settings, shutdown: &CancellationToken) -> anyhow::Result<()> {
    Console::bind(settings).await?.serve(shutdown.clone()).await
}

/// A console bound to its address, ready to serve.
pub struct Console {
    listener: tokio::net::TcpListener,
    state: Arc<State>,
}

impl Console {
    /// Checks the bind ([`check_bind`]), then listens (port 0 picks a free one).
    pub async fn bind(settings: &Settings) -> anyhow::Result<Self> {
        check_bind(settings)?;
        let listener = tokio::net::TcpListener::bind(settings.admin_addr)
            .await
            .with_context(|| format!("binding the console to {}", settings.admin_addr))?;
        let state = Arc::new(State::new(settings, listener.local_addr()?)?);
        Ok(Self { listener, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Serves until `shutdown`, then finishes the requests in flight.
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let addr = self.local_addr();
        tracing::info!(%addr, "console at http://{addr}/");
        let app = router(self.state.clone()).into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(self.listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await?;
        self.state.close().await;
        Ok(())
    }
}

fn router(state: Arc<State>) -> Router {
    let pages = Router::new()
        .route("/", get(|| async { axum::response::Redirect::to("/overview") }))
        .route("/overview", get(pages::overview::show))
        .route("/runs", get(pages::runs::list))
        .route("/runs/{id}", get(pages::run::show))
        .route("/runs/{id}/cancel", post(pages::run::cancel))
        .route("/runs/{id}/retry", post(pages::run::retry))
        .route("/waiting", get(pages::waiting::list))
        .route("/handoffs/{id}", get(pages::waiting::show))
        .route("/handoffs/{id}/result", post(pages::waiting::paste_result))
        .route("/handoffs/{id}/answer", post(pages::waiting::answer))
        .route("/handoffs/{id}/cancel", post(pages::waiting::cancel))
        .route("/dead", get(pages::dead::list))
        .route("/dead/{id}/replay", post(pages::dead::replay_one))
        .route("/dead/{id}/discard", post(pages::dead::discard_one))
        .route("/dead/replay-all", post(pages::dead::replay_all))
        .route("/dead/discard-all", post(pages::dead::discard_all))
        .route("/fleet", get(pages::fleet::show))
        .route("/workers", get(pages::workers::show))
        .route("/logout", post(auth::logout))
        // Inside `require`, so the badges are read only for an operator.
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), badges::attach))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), auth::require));
    Router::new()
        .merge(pages)
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/assets/console.css", get(views::stylesheet))
        .route("/assets/console.js", get(views::script))
        .route("/assets/waterfall.css", get(views::waterfall_stylesheet))
        .route("/assets/run.js", get(views::run_script))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::names))
        .layer(axum::middleware::map_response(guard_headers))
        .with_state(state)
}

/// Every page may load only the console's own script and stylesheet (an
/// injected `<script>` would not run even if escaping ever failed), and may
/// not be framed by another site.
async fn guard_headers(mut response: axum::response::Response) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let headers = response.headers_mut();
    let policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(policy));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // No URL of the console leaves for another site; its own forms still carry their `Origin`.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}
