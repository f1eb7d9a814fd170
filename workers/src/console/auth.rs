//! Who may use the console, and the CSRF token every POST must carry.
//!
//! On loopback without `BATON_ADMIN_TOKEN` anyone who reaches the port is an
//! operator. With a token, a request carries it as `Authorization: Bearer`
//! or as the session cookie `POST /login` sets (a hash of the token, never
//! the token itself); anything else is 401. Tokens are compared in constant
//! time. Every POST also carries the hidden form field `csrf`, which only a
//! page served to an operator contains: a form another site makes a browser
//! send has none and gets 403.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State as Shared};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::state::State;

const COOKIE: &str = "baton_session";
/// The largest form a POST may send (a pasted result included).
const MAX_FORM_BYTES: usize = 8 * 1024 * 1024;

/// The console's credentials, derived once at start-up.
pub struct Auth {
    /// The token, when one is set.
    token: Option<String>,
    /// What the session cookie holds: a hash of the token.
    session: Option<String>,
    csrf: String,
    login_csrf: String,
}

fn digest(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn same(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

impl Auth {
    /// With a token, the CSRF token is derived from it (the same in every
    /// console process); without one, from a secret of this process.
    pub fn new(token: Option<&str>) -> Self {
        let token = token.filter(|t| !t.is_empty()).map(str::to_string);
        let random = format!("{}{}", uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        let secret = token.clone().unwrap_or_else(|| random.clone());
        Self {
            session: token.as_deref().map(|t| digest(&["baton-session", t])),
            csrf: digest(&["baton-csrf", &secret]),
            login_csrf: digest(&["baton-login", &random]),
            token,
        }
    }

    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    pub fn login_csrf(&self) -> &str {
        &self.login_csrf
    }

    pub fn needs_login(&self) -> bool {
        self.token.is_some()
    }

    /// `Ok` for an operator; `Err(true)` when credentials were sent and are wrong.
    fn check(&self, headers: &HeaderMap) -> Result<(), bool> {
        let (Some(token), Some(session)) = (&self.token, &self.session) else {
            return Ok(());
        };
        let bearer =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if let Some(given) = bearer {
            return if same(given.trim(), token) { Ok(()) } else { Err(true) };
        }
        match cookie(headers, COOKIE) {
            Some(given) if same(&given, session) => Ok(()),
            Some(_) => Err(true),
            None => Err(false),
        }
    }

    fn session_cookie(&self, token: &str) -> Option<String> {
        let valid = self.token.as_deref().is_some_and(|t| same(token.trim(), t));
        let session = self.session.as_deref().filter(|_| valid)?;
        Some(format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict"))
    }
}

/// The value of cookie `name`, if the request has it.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// Middleware on every page and action: an operator, and on a POST a valid CSRF token.
pub async fn require(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    if let Err(wrong) = state.auth.check(request.headers()) {
        let note = if wrong { "That token is not the console's." } else { "" };
        return (StatusCode::UNAUTHORIZED, state.views.login(note)).into_response();
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the form is too large").into_response();
    };
    if !form_csrf(&bytes).is_some_and(|given| same(&given, state.auth.csrf())) {
        return (
            StatusCode::FORBIDDEN,
            state.views.error("This form has no valid CSRF token: reload the page and try again."),
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn form_csrf(body: &Bytes) -> Option<String> {
    form_urlencoded_pairs(body).into_iter().find(|(k, _)| k == "csrf").map(|(_, v)| v)
}

fn form_urlencoded_pairs(body: &Bytes) -> Vec<(String, String)> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(body).unwrap_or_default()
}

pub async fn login_page(Shared(state): Shared<Arc<State>>) -> Response {
    if !state.auth.needs_login() {
        return Redirect::to("/runs").into_response();
    }
    state.views.login("").into_response()
}

#[derive(Deserialize)]
pub struct Login {
    token: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /login`: the right token sets the session cookie; a wrong one is 401.
pub async fn login(Shared(state): Shared<Arc<State>>, Form(form): Form<Login>) -> Response {
    if !same(&form.csrf, state.auth.login_csrf()) {
        return (StatusCode::FORBIDDEN, state.views.error("The login form has no valid CSRF token: reload it."))
            .into_response();
    }
    match state.auth.session_cookie(&form.token) {
        Some(cookie) => ([(header::SET_COOKIE, cookie)], Redirect::to("/runs")).into_response(),
        None if !state.auth.needs_login() => Redirect::to("/runs").into_response(),
        None => (StatusCode::UNAUTHORIZED, state.views.login("That token is not the console's.")).into_response(),
    }
}

pub async fn logout() -> Response {
    let clear = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, clear)], Redirect::to("/login")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, value.parse().unwrap());
        h
    }

    #[test]
    fn without_a_token_everyone_is_let_in_and_with_one_only_its_holder() {
        assert_eq!(Auth::new(None).check(&HeaderMap::new()), Ok(()));
        let auth = Auth::new(Some("s3cret"));
        assert_eq!(auth.check(&HeaderMap::new()), Err(false));
        assert_eq!(auth.check(&headers(header::AUTHORIZATION, "Bearer s3cret")), Ok(()));
        assert_eq!(auth.check(&headers(header::AUTHORIZATION, "Bearer s3cre")), Err(true));
        let cookie = auth.session_cookie("s3cret").unwrap();
        assert!(!cookie.contains("s3cret"), "the cookie holds a hash, not the token");
        let value = cookie.split(';').next().unwrap();
        assert_eq!(auth.check(&headers(header::COOKIE, &format!("theme=dark; {value}"))), Ok(()));
        assert_eq!(auth.check(&headers(header::COOKIE, "baton_session=forged")), Err(true));
        assert!(auth.session_cookie("wrong").is_none());
    }

    #[test]
    fn the_csrf_token_follows_the_admin_token_and_is_never_the_login_one() {
        assert_eq!(Auth::new(Some("t")).csrf(), Auth::new(Some("t")).csrf());
        assert_ne!(Auth::new(Some("t")).csrf(), Auth::new(Some("u")).csrf());
        assert_ne!(Auth::new(None).csrf(), Auth::new(None).csrf());
        let auth = Auth::new(Some("t"));
        assert_ne!(auth.csrf(), auth.login_csrf());
        assert_eq!(form_csrf(&Bytes::from(format!("a=1&csrf={}", auth.csrf()))).as_deref(), Some(auth.csrf()));
    }
}
