//! Who may use the console, and the CSRF token every form carries.
//!
//! On loopback without `BATON_ADMIN_TOKEN` anyone who reaches the port is an
//! operator. With a token, a request carries it as `Authorization: Bearer`
//! (for scripts), or the cookie of a session that `POST /login` opened: a
//! random id of which Postgres keeps only the SHA-256, with the session's
//! CSRF token and its expiry ([`session::LIFETIME`] after the login);
//! logging out revokes it. Anything else is 401. Tokens are compared in
//! constant time, and a client that sent too many wrong ones
//! ([`session::LOGIN_LIMIT`], counted in Postgres so every replica sees
//! them) gets 429 until its window ends, the right token included.
//!
//! Every POST a session or an open console makes carries the hidden form
//! field `csrf`: the session's own token, or the one every replica of an
//! open console shares (kept in Postgres). A form another site makes a
//! browser send has none and gets 403. (A bearer client needs none: no
//! browser sends that header on its own.) The names a request may carry and
//! where a POST may come from are checked before any of this (`guard`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State as Shared};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use baton_domain::console::session::{self, COOKIE, LIFETIME, LOGIN_LIMIT};
use baton_store::console as stored;
use serde::Deserialize;
use subtle::ConstantTimeEq;

use super::state::State;
use super::views::{error_page, Operator};

/// The largest form a POST may send (a pasted result included).
const MAX_FORM_BYTES: usize = 8 * 1024 * 1024;

/// How long ended sessions and old failure counts are kept before a login removes them.
const KEPT_AFTER_END: Duration = Duration::from_secs(24 * 3600);

/// 64 hex digits from the operating system's random source (two v4 UUIDs:
/// 244 random bits): a session id or a CSRF token.
pub fn random_token() -> String {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("{}{}", a.simple(), b.simple())
}

fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    let cookies = headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok());
    session::cookie_value(cookies, COOKIE)
}

/// Who a request is: the CSRF token its pages carry, and whether its POSTs must show one.
struct Identified {
    csrf: String,
    by_bearer: bool,
}

/// Why a request is not let in.
enum Denied {
    /// 401 and the login form, with a note.
    Login(&'static str),
    /// 429: too many wrong tokens from this client; try again after this long.
    Throttled(Duration),
    /// The database could not say (a 500).
    Failed(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Denied {
    fn from(e: E) -> Self {
        Denied::Failed(e.into())
    }
}

impl Denied {
    async fn response(self, state: &State) -> Response {
        let login_csrf = match (&self, state.tokens().await) {
            (Denied::Failed(_), _) | (_, Err(_)) => None,
            (_, Ok(tokens)) => Some(tokens.login_csrf.as_str()),
        };
        match (self, login_csrf) {
            (Denied::Login(note), Some(csrf)) => {
                (StatusCode::UNAUTHORIZED, state.views.login(csrf, note)).into_response()
            }
            (Denied::Throttled(wait), Some(csrf)) => {
                let minutes = wait.as_secs().div_ceil(60).max(1);
                let note = format!(
                    "Too many wrong tokens came from your address: try again in {minutes} minute(s). \
                     Until then the console refuses every token from it, the right one included."
                );
                let retry = HeaderValue::from(wait.as_secs().max(1));
                let page = state.views.login(csrf, &note);
                (StatusCode::TOO_MANY_REQUESTS, [(header::RETRY_AFTER, retry)], page).into_response()
            }
            (Denied::Failed(e), _) => {
                tracing::warn!(error = %format!("{e:#}"), "the console could not check a request's credentials");
                let page =
                    error_page("The console could not check who you are (its database did not answer): try again.");
                (StatusCode::INTERNAL_SERVER_ERROR, page).into_response()
            }
            (_, None) => {
                let page =
                    error_page("The console could not read its login form's token from its database: try again.");
                (StatusCode::INTERNAL_SERVER_ERROR, page).into_response()
            }
        }
    }
}

/// Counts a wrong token against `client`: 401, or 429 once past the limit.
async fn failed(state: &State, client: &str) -> Denied {
    let counted = async {
        let c = state.db().await?;
        Ok::<_, anyhow::Error>(stored::login_failed(&c, client, LOGIN_LIMIT.window).await?)
    };
    match counted.await {
        Ok(f) => match LOGIN_LIMIT.wait(f.failures, f.window_started_at, f.now) {
            Some(wait) => Denied::Throttled(wait),
            None => Denied::Login("That token is not the console's."),
        },
        Err(e) => Denied::Failed(e),
    }
}

/// `Err` with how long to wait when `client` is past the limit.
async fn throttled(state: &State, client: &str) -> Result<(), Denied> {
    let f = stored::login_failures(&state.db().await?, client).await?;
    match LOGIN_LIMIT.wait(f.failures, f.window_started_at, f.now) {
        Some(wait) => Err(Denied::Throttled(wait)),
        None => Ok(()),
    }
}

async fn identify(state: &State, peer: SocketAddr, headers: &HeaderMap) -> Result<Identified, Denied> {
    let Some(token) = state.token.as_deref() else {
        let csrf = state.tokens().await?.open_csrf.clone();
        return Ok(Identified { csrf, by_bearer: false });
    };
    let client = session::client(peer.ip(), text(headers, "x-forwarded-for"));
    let bearer = text(headers, header::AUTHORIZATION.as_str()).and_then(|v| v.strip_prefix("Bearer "));
    if let Some(given) = bearer {
        if !same(given.trim(), token) {
            return Err(failed(state, &client).await);
        }
        throttled(state, &client).await?;
        return Ok(Identified { csrf: String::new(), by_bearer: true });
    }
    let Some(id) = session_id(headers) else { return Err(Denied::Login("")) };
    match stored::session(&state.db().await?, &session::id_hash(id)).await? {
        Some(s) => Ok(Identified { csrf: s.csrf, by_bearer: false }),
        None => Err(Denied::Login("Your session has ended (it expired, or you logged out): log in again.")),
    }
}

/// Middleware on every page and action: an operator, and on a POST from a
/// session or an open console the CSRF token of its pages.
pub async fn require(
    Shared(state): Shared<Arc<State>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    let who = match identify(&state, peer, request.headers()).await {
        Ok(who) => who,
        Err(denied) => return denied.response(&state).await,
    };
    let operator = Operator { csrf: who.csrf.clone(), ..Default::default() };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(operator);
    if parts.method != Method::POST || who.by_bearer {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the form is too large").into_response();
    };
    if !form_csrf(&bytes).is_some_and(|given| same(&given, &who.csrf)) {
        let page = error_page("This form has no valid CSRF token: reload the page and try again.");
        return (StatusCode::FORBIDDEN, page).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn form_csrf(body: &Bytes) -> Option<String> {
    let pairs = serde_urlencoded::from_bytes::<Vec<(String, String)>>(body).unwrap_or_default();
    pairs.into_iter().find(|(k, _)| k == "csrf").map(|(_, v)| v)
}

pub async fn login_page(Shared(state): Shared<Arc<State>>) -> Response {
    if !state.needs_login() {
        return Redirect::to("/runs").into_response();
    }
    match state.tokens().await {
        Ok(tokens) => state.views.login(&tokens.login_csrf, "").into_response(),
        Err(e) => Denied::Failed(e).response(&state).await,
    }
}

#[derive(Deserialize)]
pub struct Login {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /login`: the right token opens a session and sets its cookie; a
/// wrong one is 401 (429 past the limit).
pub async fn login(
    Shared(state): Shared<Arc<State>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<Login>,
) -> Response {
    let Some(token) = state.token.as_deref() else { return Redirect::to("/runs").into_response() };
    match state.tokens().await {
        Ok(tokens) if same(&form.csrf, &tokens.login_csrf) => {}
        Ok(_) => {
            let page = error_page("The login form has no valid CSRF token: reload it.");
            return (StatusCode::FORBIDDEN, page).into_response();
        }
        Err(e) => return Denied::Failed(e).response(&state).await,
    }
    let client = session::client(peer.ip(), text(&headers, "x-forwarded-for"));
    if !same(form.token.trim(), token) {
        return failed(&state, &client).await.response(&state).await;
    }
    let secure = session::secure(state.https(), text(&headers, "x-forwarded-proto"));
    match open_session(&state, &client).await {
        Ok(id) => ([(header::SET_COOKIE, session::cookie(&id, secure))], Redirect::to("/runs")).into_response(),
        Err(denied) => denied.response(&state).await,
    }
}

/// A new session for `client` (unless it is past the limit); its id.
async fn open_session(state: &State, client: &str) -> Result<String, Denied> {
    throttled(state, client).await?;
    let (id, csrf) = (random_token(), random_token());
    let c = state.db().await?;
    stored::open_session(&c, &session::id_hash(&id), &csrf, client, LIFETIME).await?;
    stored::login_succeeded(&c, client).await?;
    if let Err(e) = stored::prune(&c, LOGIN_LIMIT.window, KEPT_AFTER_END).await {
        tracing::warn!(error = %e, "could not remove the console's ended sessions");
    }
    Ok(id)
}

/// `POST /logout`: the session is revoked (its cookie no longer works
/// anywhere, even if kept) and the browser forgets it.
pub async fn logout(Shared(state): Shared<Arc<State>>, headers: HeaderMap) -> Response {
    if let Some(id) = session_id(&headers) {
        let revoked =
            async { Ok::<_, anyhow::Error>(stored::revoke_session(&state.db().await?, &session::id_hash(id)).await?) };
        if let Err(e) = revoked.await {
            return Denied::Failed(e).response(&state).await;
        }
    }
    let secure = session::secure(state.https(), text(&headers, "x-forwarded-proto"));
    ([(header::SET_COOKIE, session::cleared_cookie(secure))], Redirect::to("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_tokens_are_long_and_never_repeat() {
        let (a, b) = (random_token(), random_token());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_csrf_field_is_read_from_the_form() {
        assert_eq!(form_csrf(&Bytes::from("a=1&csrf=abc")).as_deref(), Some("abc"));
        assert_eq!(form_csrf(&Bytes::from("a=1")), None);
    }
}
