//! The console's sessions (issue 22, part 2): a login opens a random
//! session kept in Postgres that expires and that logging out revokes; its
//! cookie is `HttpOnly; SameSite=Strict`, and `Secure` over TLS; wrong tokens
//! are limited per client; and two replicas behind one address share
//! sessions, CSRF tokens and the limit.

use baton_domain::console::origin::PublicUrl;
use baton_domain::console::session::id_hash;
use baton_tests::{ServedConsole, TestEnv};
use reqwest::{RequestBuilder, Response, StatusCode};

const TOKEN: &str = "s3cret";

/// The value of the hidden `name` input in a page.
fn hidden(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name} field in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_string()
}

async fn login_csrf(console: &ServedConsole) -> String {
    let page = console.client().get(format!("{}/login", console.base)).send().await.unwrap().text().await.unwrap();
    hidden(&page, "csrf")
}

/// `POST /login` on `console` with the login form's token read from `csrf_from`, from `client` (an address).
fn login(console: &ServedConsole, csrf: &str, token: &str, client: &str) -> RequestBuilder {
    let form = [("token", token), ("csrf", csrf)];
    console.client().post(format!("{}/login", console.base)).header("x-forwarded-for", client).form(&form)
}

fn set_cookie(response: &Response) -> String {
    response.headers()["set-cookie"].to_str().unwrap().to_string()
}

/// `name=value` of a `Set-Cookie`.
fn pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

async fn page(console: &ServedConsole, path: &str, cookie: &str) -> (StatusCode, String) {
    let response =
        console.client().get(format!("{}{path}", console.base)).header("cookie", cookie).send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

#[tokio::test]
async fn a_login_opens_a_random_session_in_postgres_that_expires_and_logging_out_revokes() {
    let env = TestEnv::new().await;
    let console = env.serve_console(Some(TOKEN)).await;
    let csrf = login_csrf(&console).await;
    let first = login(&console, &csrf, TOKEN, "203.0.113.1").send().await.unwrap();
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let header = set_cookie(&first);
    let cookie = pair(&header);
    assert!(
        header.ends_with("; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200"),
        "HttpOnly, SameSite=Strict, 12 h, not Secure over plain HTTP: {header}"
    );
    let id = cookie.strip_prefix("baton_session=").unwrap().to_string();
    assert!(id.len() == 64 && !id.contains(TOKEN), "{id}");
    let second = pair(&set_cookie(&login(&console, &csrf, TOKEN, "203.0.113.1").send().await.unwrap()));
    assert_ne!(cookie, second, "each login is a session of its own, not a hash of the token");

    let c = env.db().await;
    let row = c
        .query_one(
            "SELECT csrf, client, revoked_at IS NULL, extract(epoch FROM expires_at - now())::float8 FROM console_sessions WHERE id_hash = $1",
            &[&id_hash(&id)],
        )
        .await
        .expect("the session is stored by the hash of its id");
    let (session_csrf, client, live, left): (String, String, bool, f64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert!(live && client == "203.0.113.1");
    assert!((12.0 * 3600.0 - 60.0..=12.0 * 3600.0).contains(&left), "it expires 12 h after the login: {left} s");
    let (status, runs) = page(&console, "/runs", &cookie).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hidden(&runs, "csrf"), session_csrf, "the session's own CSRF token is on its pages");
    assert_ne!(hidden(&page(&console, "/runs", &second).await.1, "csrf"), session_csrf, "one per session");

    let logout = console
        .client()
        .post(format!("{}/logout", console.base))
        .header("cookie", &cookie)
        .form(&[("csrf", session_csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(logout.status(), StatusCode::SEE_OTHER);
    assert!(set_cookie(&logout).contains("Max-Age=0"), "the browser forgets it");
    let revoked: bool = c
        .query_one("SELECT revoked_at IS NOT NULL FROM console_sessions WHERE id_hash = $1", &[&id_hash(&id)])
        .await
        .unwrap()
        .get(0);
    assert!(revoked, "the row says it was revoked");
    let (status, after) = page(&console, "/runs", &cookie).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a kept copy of the cookie no longer works");
    assert!(after.contains("Your session has ended"), "{after}");
    assert_eq!(page(&console, "/runs", &second).await.0, StatusCode::OK, "the other session is not touched");

    let other = second.strip_prefix("baton_session=").unwrap();
    c.execute(
        "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1",
        &[&id_hash(other)],
    )
    .await
    .unwrap();
    assert_eq!(page(&console, "/runs", &second).await.0, StatusCode::UNAUTHORIZED, "an expired session is refused");
}

#[tokio::test]
async fn the_session_cookie_is_secure_when_the_console_is_reached_over_tls() {
    let env = TestEnv::new().await;
    let console = env.serve_console(Some(TOKEN)).await;
    let csrf = login_csrf(&console).await;
    let proxied =
        login(&console, &csrf, TOKEN, "203.0.113.2").header("x-forwarded-proto", "https").send().await.unwrap();
    assert!(set_cookie(&proxied).ends_with("; Secure"), "behind a TLS proxy: {}", set_cookie(&proxied));

    let public = env
        .serve_console_with(Some(TOKEN), |s| {
            s.admin_url = Some(PublicUrl::parse("https://console.example.org").unwrap());
        })
        .await;
    let form = [("token", TOKEN), ("csrf", csrf.as_str())];
    let named = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let configured = named
        .post(format!("{}/login", public.base))
        .header("host", "console.example.org")
        .header("origin", "https://console.example.org")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(configured.status(), StatusCode::SEE_OTHER);
    assert!(set_cookie(&configured).ends_with("; Secure"), "BATON_ADMIN_URL is https: {}", set_cookie(&configured));
}

#[tokio::test]
async fn wrong_tokens_are_limited_per_client_on_every_replica() {
    let env = TestEnv::new().await;
    let (a, b) = (env.serve_console(Some(TOKEN)).await, env.serve_console(Some(TOKEN)).await);
    let csrf = login_csrf(&a).await;
    for n in 1..=10 {
        let wrong = login(&a, &csrf, "guess", "203.0.113.5").send().await.unwrap();
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "wrong token {n}");
    }
    let limited = login(&a, &csrf, "guess", "203.0.113.5").send().await.unwrap();
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = limited.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=900).contains(&wait), "until the 15-minute window ends: {wait}");
    assert!(limited.text().await.unwrap().contains("Too many wrong tokens"));
    for console in [&a, &b] {
        let right = login(console, &csrf, TOKEN, "203.0.113.5").send().await.unwrap();
        assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS, "the right token is refused too, on either replica");
        let bearer = console.client().get(format!("{}/runs", console.base)).bearer_auth(TOKEN);
        let bearer = bearer.header("x-forwarded-for", "203.0.113.5").send().await.unwrap();
        assert_eq!(bearer.status(), StatusCode::TOO_MANY_REQUESTS, "and as a bearer token");
    }
    let failures: i32 = env
        .db()
        .await
        .query_one("SELECT failures FROM console_login_failures WHERE client = '203.0.113.5'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(failures, 11, "counted in Postgres, where every replica reads them");

    let other = login(&b, &csrf, TOKEN, "203.0.113.6").send().await.unwrap();
    assert_eq!(other.status(), StatusCode::SEE_OTHER, "another client is not limited");
    let guessing =
        a.client().get(format!("{}/runs", a.base)).bearer_auth("guess").header("x-forwarded-for", "203.0.113.7");
    assert_eq!(guessing.send().await.unwrap().status(), StatusCode::UNAUTHORIZED, "a wrong bearer token counts too");

    env.db()
        .await
        .execute("UPDATE console_login_failures SET window_started_at = now() - interval '16 minutes'", &[])
        .await
        .unwrap();
    let later = login(&a, &csrf, TOKEN, "203.0.113.5").send().await.unwrap();
    assert_eq!(later.status(), StatusCode::SEE_OTHER, "once the window is over");
    let left: i64 = env
        .db()
        .await
        .query_one("SELECT count(*) FROM console_login_failures WHERE client = '203.0.113.5'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "a login forgets the client's failures");
}

#[tokio::test]
async fn two_replicas_share_sessions_and_csrf_tokens() {
    let env = TestEnv::new().await;
    let (a, b) = (env.serve_console(Some(TOKEN)).await, env.serve_console(Some(TOKEN)).await);
    let csrf = login_csrf(&a).await;
    let logged_in = login(&b, &csrf, TOKEN, "203.0.113.9").send().await.unwrap();
    assert_eq!(logged_in.status(), StatusCode::SEE_OTHER, "a login form from one replica posted to the other");
    let cookie = pair(&set_cookie(&logged_in));
    let (status, on_a) = page(&a, "/runs", &cookie).await;
    assert_eq!(status, StatusCode::OK, "the session opened on b works on a");
    let form = [("csrf", hidden(&on_a, "csrf"))];
    let cancel = format!("{}/runs/{}/cancel", b.base, uuid::Uuid::now_v7());
    let acted = b.client().post(&cancel).header("cookie", &cookie).form(&form).send().await.unwrap();
    assert_eq!(acted.status(), StatusCode::NOT_FOUND, "a's form is accepted by b (and finds no such run)");

    // Without a token: the CSRF token of one replica's pages is every replica's.
    let (open_a, open_b) = (env.serve_console(None).await, env.serve_console(None).await);
    let dead = open_a.client().get(format!("{}/dead", open_a.base)).send().await.unwrap().text().await.unwrap();
    let form = [("csrf", hidden(&dead, "csrf"))];
    let cancel = format!("{}/runs/{}/cancel", open_b.base, uuid::Uuid::now_v7());
    let acted = open_b.client().post(&cancel).form(&form).send().await.unwrap();
    assert_eq!(acted.status(), StatusCode::NOT_FOUND, "not 403: the token is shared through Postgres");
}
