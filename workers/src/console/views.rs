//! The templates (embedded, auto-escaped), the markdown filter, and errors
//! rendered as pages.

use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use minijinja::{context, Environment, Value};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag};
use serde::Serialize;

const TEMPLATES: [(&str, &str); 9] = [
    ("base.html", include_str!("templates/base.html")),
    ("login.html", include_str!("templates/login.html")),
    ("error.html", include_str!("templates/error.html")),
    ("runs.html", include_str!("templates/runs.html")),
    ("run.html", include_str!("templates/run.html")),
    ("waiting.html", include_str!("templates/waiting.html")),
    ("handoff.html", include_str!("templates/handoff.html")),
    ("dead.html", include_str!("templates/dead.html")),
    ("fleet.html", include_str!("templates/fleet.html")),
];

pub struct Views {
    env: Environment<'static>,
}

impl Views {
    /// Every template, checked now: a broken one stops the role at start-up.
    pub fn new(csrf: &str, login_csrf: &str, needs_login: bool) -> anyhow::Result<Self> {
        let mut env = Environment::new();
        // `.html` templates escape every value unless it is marked safe.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        // A misspelt field is an error (logged, a 500), not an empty cell; `if` may still test for one.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
        for (name, source) in TEMPLATES {
            env.add_template(name, source)?;
        }
        env.add_filter("markdown", |text: &str| Value::from_safe_string(markdown(text)));
        env.add_global("csrf", csrf.to_string());
        env.add_global("login_csrf", login_csrf.to_string());
        env.add_global("needs_login", needs_login);
        Ok(Self { env })
    }

    /// Renders `name` with `ctx`, or an error page saying what went wrong.
    pub fn page<S: Serialize>(&self, name: &str, ctx: S) -> Response {
        let rendered = self.env.get_template(name).and_then(|t| t.render(ctx));
        match rendered {
            Ok(html) => Html(html).into_response(),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), template = name, "console page failed to render");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    self.error("This page failed to render; the console's log says why."),
                )
                    .into_response()
            }
        }
    }

    pub fn login(&self, note: &str) -> Html<String> {
        self.plain("login.html", note)
    }

    pub fn error(&self, message: &str) -> Html<String> {
        self.plain("error.html", message)
    }

    fn plain(&self, name: &str, message: &str) -> Html<String> {
        let rendered = self.env.get_template(name).and_then(|t| t.render(context! { message }));
        Html(rendered.unwrap_or_else(|_| {
            "<!doctype html><title>Baton</title><p>The console could not render this page.</p>".into()
        }))
    }
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

fn safe_url(url: CowStr<'_>) -> CowStr<'_> {
    let lower = url.trim().to_ascii_lowercase();
    let scheme = lower.split_once(':').map(|(s, _)| s);
    let local = scheme.is_none() || lower.starts_with('#') || lower.starts_with('/');
    if local || matches!(scheme, Some("http" | "https" | "mailto")) {
        url
    } else {
        CowStr::Borrowed("#")
    }
}

pub async fn stylesheet() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], include_str!("assets/console.css"))
}

pub async fn script() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], include_str!("assets/console.js"))
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

    /// The page wrapped around the message (the router's state is not at hand here).
    fn body(&self) -> String {
        let env = Environment::new();
        let html = env.render_str(include_str!("templates/error.html"), context! { message => &self.message });
        html.unwrap_or_else(|_| "The console could not render this error.".into())
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
        (self.status, Html(self.body())).into_response()
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
    }
}
