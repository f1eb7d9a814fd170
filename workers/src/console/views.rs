//! The templates (embedded, auto-escaped), the markdown filter, and errors
//! rendered as pages.

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use minijinja::{context, Environment, Value};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};
use serde::Serialize;
use std::sync::LazyLock;

const TEMPLATES: [(&str, &str); 11] = [
    ("base.html", include_str!("templates/base.html")),
    ("login.html", include_str!("templates/login.html")),
    ("error.html", include_str!("templates/error.html")),
    ("runs.html", include_str!("templates/runs.html")),
    ("run.html", include_str!("templates/run.html")),
    ("waiting.html", include_str!("templates/waiting.html")),
    ("handoff.html", include_str!("templates/handoff.html")),
    ("dead.html", include_str!("templates/dead.html")),
    ("fleet.html", include_str!("templates/fleet.html")),
    ("overview.html", include_str!("templates/overview.html")),
    ("workers.html", include_str!("templates/workers.html")),
];

pub struct Views {
    env: Environment<'static>,
}

/// What a page is rendered for: the CSRF token its forms carry (the
/// session's, or the one shared by a console that needs no login; empty
/// for a bearer client, whose POSTs need none).
#[derive(Debug, Clone, Default)]
pub struct Operator {
    pub csrf: String,
    /// The navigation's badges (read for every page shown).
    pub badges: super::badges::Badges,
}

/// Every template and filter, auto-escaped; a broken template is an error.
fn environment() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    // `.html` templates escape every value unless it is marked safe.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    // A misspelt field is an error (logged, a 500), not an empty cell; `if` may still test for one.
    env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
    for (name, source) in TEMPLATES {
        env.add_template(name, source)?;
    }
    env.add_filter("markdown", |text: &str| Value::from_safe_string(markdown(text)));
    env.add_filter("segment", |text: &str| segment(text));
    Ok(env)
}

/// The error page around `message`, escaped like every page. Kept apart
/// from [`Views`] so that an error raised where no state is at hand (a
/// [`PageError`], a refusal before any handler) renders the same way.
pub fn error_page(message: &str) -> Html<String> {
    static ERRORS: LazyLock<Option<Environment<'static>>> = LazyLock::new(|| environment().ok());
    let rendered =
        ERRORS.as_ref().and_then(|env| env.get_template("error.html").ok()?.render(context! { message }).ok());
    Html(
        rendered.unwrap_or_else(|| {
            "<!doctype html><title>Baton</title><p>The console could not render this page.</p>".into()
        }),
    )
}

impl Views {
    /// Every template, checked now: a broken one stops the role at start-up.
    pub fn new(needs_login: bool) -> anyhow::Result<Self> {
        let mut env = environment()?;
        env.add_global("needs_login", needs_login);
        Ok(Self { env })
    }

    /// Renders `name` with `ctx` for `operator`, or an error page saying what went wrong.
    pub fn page<S: Serialize>(&self, operator: &Operator, name: &str, ctx: S) -> Response {
        let ctx = context! { csrf => operator.csrf, badges => operator.badges, ..Value::from_serialize(&ctx) };
        let rendered = self.env.get_template(name).and_then(|t| t.render(ctx));
        match rendered {
            Ok(html) => Html(html).into_response(),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), template = name, "console page failed to render");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    error_page("This page failed to render; the console's log says why."),
                )
                    .into_response()
            }
        }
    }

    /// The login form, with its CSRF token and a note (why the last try failed).
    pub fn login(&self, login_csrf: &str, note: &str) -> Html<String> {
        let rendered =
            self.env.get_template("login.html").and_then(|t| t.render(context! { message => note, login_csrf }));
        Html(rendered.unwrap_or_else(|_| {
            "<!doctype html><title>Baton</title><p>The console could not render this page.</p>".into()
        }))
    }
}

/// A value as one path segment: everything but ASCII letters, digits, `-`,
/// `_` and `~` percent-encoded (`/`, `.`, `?`, `#` and `%` included), so an id
/// holding `/` or `..` stays one segment and cannot aim a link or a form at
/// another route. (A browser still resolves a segment that is only `.` or
/// `..`, encoded or not, so such an id has no page; it can aim at nothing.)
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Markdown to HTML for briefs. Raw HTML in the source is shown as text,
/// never passed through, and only web, mail and in-page links are kept.
pub fn markdown(text: &str) -> String {
    let events =
        Parser::new_ext(text, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH).map(|event| match event {
            Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Link { link_type, dest_url: safe_url(dest_url), title, id })
            }
            Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Image { link_type, dest_url: safe_url(dest_url), title, id })
            }
            other => other,
        });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

/// A link kept only if it stays on the console or goes to the web or mail:
/// a path, an in-page anchor, `http`, `https` or `mailto`. Tabs and newlines
/// (which browsers drop) are removed and what surrounds it is trimmed
/// first, so what is checked is what the browser follows; `//host` and
/// `/\host` (protocol-relative: another site) become `#`.
fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let cleaned: String = url.chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')).collect();
    let cleaned = cleaned.trim_matches(|c: char| c.is_ascii_control() || c == ' ');
    let lower = cleaned.to_ascii_lowercase();
    let other_host = {
        let mut start = lower.chars().take(2);
        matches!((start.next(), start.next()), (Some('/' | '\\'), Some('/' | '\\')))
    };
    // A scheme is what comes before a `:` that no `/`, `?` or `#` precedes.
    let scheme = lower.split_once(':').map(|(s, _)| s).filter(|s| !s.contains(['/', '?', '#']));
    let kept = match scheme {
        _ if other_host => false,
        None => true,
        Some(scheme) => matches!(scheme, "http" | "https" | "mailto"),
    };
    match kept {
        true => CowStr::from(cleaned.to_string()),
        false => CowStr::Borrowed("#"),
    }
}

pub async fn stylesheet() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/console.css"))
}

pub async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/console.js"))
}

/// The run page's own stylesheet: its waterfall.
pub async fn waterfall_stylesheet() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/waterfall.css"))
}

/// The run page's own script: its event log's filter.
pub async fn run_script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/run.js"))
}

/// An error on a page, shown to the operator (escaped) and logged.
pub struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    pub fn not_found(what: impl Into<String>) -> Self {
        Self { status: StatusCode::NOT_FOUND, message: what.into() }
    }

    pub fn refused(why: impl Into<String>) -> Self {
        Self { status: StatusCode::CONFLICT, message: why.into() }
    }
}

impl<E: Into<anyhow::Error>> From<E> for PageError {
    fn from(e: E) -> Self {
        let e = e.into();
        tracing::warn!(error = %format!("{e:#}"), "console request failed");
        Self { status: StatusCode::INTERNAL_SERVER_ERROR, message: format!("{e:#}") }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        (self.status, error_page(&self.message)).into_response()
    }
}

pub type PageResult = Result<Response, PageError>;

#[cfg(test)]
mod tests {
    use super::markdown;

    #[test]
    fn markdown_renders_and_raw_html_is_shown_as_text() {
        let html = markdown("# Task\n\nWrite **this**.\n\n<script>alert(1)</script>\n\nand <b>bold</b>");
        assert!(html.contains("<h1>Task</h1>") && html.contains("<strong>this</strong>"), "{html}");
        assert!(!html.contains("<script>") && html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
    }

    #[test]
    fn only_safe_links_are_kept() {
        assert!(markdown("[x](javascript:alert(1))").contains("href=\"#\""));
        assert!(markdown("[x](JavaScript:alert(1))").contains("href=\"#\""));
        assert!(markdown("[x](data:text/html,hi)").contains("href=\"#\""));
        assert!(markdown("[x](https://example.org/a)").contains("href=\"https://example.org/a\""));
        assert!(markdown("[x](output/main.md)").contains("href=\"output/main.md\""));
        assert!(markdown("[x](/runs)").contains("href=\"/runs\""));
        assert!(markdown("[x](#usage)").contains("href=\"#usage\""));
    }

    #[test]
    fn links_to_another_host_without_a_scheme_are_dropped() {
        assert!(markdown("[x](//attacker.example/x)").contains("href=\"#\""));
        for other in
            ["//attacker.example/x", "/\\attacker.example", "\\\\attacker.example", " //a.example", "/\t/a.example"]
        {
            assert_eq!(&*super::safe_url(other.into()), "#", "{other:?}");
        }
        assert_eq!(&*super::safe_url("\tjava\nscript:alert(1)".into()), "#");
        assert_eq!(&*super::safe_url(" /runs/x ".into()), "/runs/x", "what is kept is what was checked");
        assert_eq!(&*super::safe_url("a/b:c".into()), "a/b:c", "a colon after a slash is no scheme");
    }

    #[test]
    fn error_pages_escape_their_message() {
        let html = super::error_page("no run <meta http-equiv=\"refresh\" content=\"0;url=//attacker.example\">").0;
        assert!(html.contains("&lt;meta http-equiv=") && !html.contains("<meta http"), "{html}");
    }

    #[test]
    fn a_segment_stays_one_segment() {
        assert_eq!(super::segment("web-chain_1~"), "web-chain_1~");
        assert_eq!(super::segment("a/b"), "a%2Fb");
        assert_eq!(super::segment("../runs/x?y#z"), "%2E%2E%2Fruns%2Fx%3Fy%23z");
        assert_eq!(super::segment("50% é"), "50%25%20%C3%A9");
    }
}
