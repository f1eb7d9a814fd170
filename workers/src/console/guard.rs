//! Before anything else: the console answers only to its own names (a page
//! of another site whose name was pointed here, DNS rebinding, gets 403),
//! and a POST must come from its own pages (`Origin`, or `Sec-Fetch-Site`).
//! The decisions are the domain's ([`baton_domain::console::origin`]).

use std::sync::Arc;

use axum::extract::{Request, State as Shared};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use baton_domain::console::origin::{self, Refused};

use super::state::State;
use super::views::error_page;

/// Middleware on every route, assets and login included.
pub async fn names(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    // HTTP/2 carries the host as the request's authority instead.
    let authority = request.uri().authority().map(axum::http::uri::Authority::as_str);
    let host = match state.hosts.check(text(header::HOST.as_str()).or(authority)) {
        Ok(host) => host,
        Err(refused) => return refuse(&refused),
    };
    if !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        let fetch_site = text("sec-fetch-site");
        if let Err(refused) = origin::check_post(&host, text(header::ORIGIN.as_str()), fetch_site) {
            return refuse(&refused);
        }
    }
    next.run(request).await
}

fn refuse(refused: &Refused) -> Response {
    tracing::info!(%refused, "console refused a request");
    (StatusCode::FORBIDDEN, error_page(&refused.to_string())).into_response()
}
