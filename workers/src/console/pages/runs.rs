//! `/runs`: newest first, filtered, paged by key, refreshing while live; a
//! filter that does not read is a 400 whose page says why.

use std::sync::Arc;

use axum::extract::{Query, State as Shared};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Extension;
use baton_domain::protocol::request::Source;
use baton_domain::run::state::RunState;
use baton_store::overview::{RunFilter, RunRow};
use chrono::{DateTime, Utc};
use minijinja::context;
use serde::{Deserialize, Serialize};

use super::{age, at, short_run_id, span};
use crate::console::state::State;
use crate::console::views::{Operator, PageResult};

const PAGE: i64 = 50;

/// The query string, as typed: every field optional, empty means "any".
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(default)]
pub struct Filters {
    status: String,
    target: String,
    chat: String,
    source: String,
    since: String,
    before: String,
}

#[derive(Serialize)]
struct Row {
    id: String,
    short: String,
    handoff_id: Option<String>,
    status: String,
    chain: String,
    target: String,
    source: String,
    chat: Option<String>,
    tokens: i64,
    attempt: i32,
    duration: String,
    age: String,
    created: String,
    /// Why a failed run failed: its code and the host's own words when kept.
    reason: Option<String>,
}

fn row(r: &RunRow) -> Row {
    let end = r.finished_at.unwrap_or_else(Utc::now);
    Row {
        id: r.run_id.to_string(),
        short: short_run_id(r.run_id),
        handoff_id: r.handoff_id.clone(),
        status: r.status.as_str().into(),
        chain: r.agents.join(" → "),
        target: r.target.clone().unwrap_or_default(),
        source: r.source.map(|s| s.as_str().to_string()).unwrap_or_default(),
        chat: r.chat.clone(),
        tokens: r.tokens,
        attempt: r.attempt,
        duration: span((end - r.created_at).num_milliseconds()),
        age: age(r.created_at),
        created: at(r.created_at),
        reason: r
            .error
            .as_ref()
            .filter(|_| r.status == RunState::Failed)
            .map(|e| format!("{}: {}", e.code, super::clip(e.reason(), 160))),
    }
}

impl Filters {
    /// The store's filter, or what the operator typed that does not read.
    fn parse(&self, now: DateTime<Utc>) -> Result<RunFilter, String> {
        let some = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
        let status =
            some(&self.status).map(|s| RunState::parse(&s).ok_or(format!("`{s}` is not a run status"))).transpose()?;
        let source =
            some(&self.source).map(|s| Source::parse(&s).ok_or(format!("`{s}` is not a source"))).transpose()?;
        let since = some(&self.since)
            .map(|s| since(&s, now).ok_or(format!("`{s}` is not an age (30m, 1h, 2d) or a time")))
            .transpose()?;
        let before =
            some(&self.before).map(|s| page_key(&s).ok_or("that page link is broken".to_string())).transpose()?;
        Ok(RunFilter { status, target: some(&self.target), chat: some(&self.chat), source, since, before, limit: PAGE })
    }

    /// This filter's URL, on the page after `key` (or the first page).
    fn url(&self, key: Option<(DateTime<Utc>, uuid::Uuid)>) -> String {
        let before = key.map(|(t, id)| format!("{}_{id}", t.timestamp_micros())).unwrap_or_default();
        let q = Filters { before, ..self.clone() };
        format!("/runs?{}", serde_urlencoded::to_string(&q).unwrap_or_default())
    }
}

/// `30m`, `1h`, `2d`, `45s` ago, or an RFC 3339 time.
fn since(text: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    let (n, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: i64 = n.parse().ok()?;
    let seconds = match unit.trim() {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    // An age past what a time can hold (`9223372036854775s`) reads as no age, never as a panic.
    now.checked_sub_signed(chrono::TimeDelta::try_seconds(n.checked_mul(seconds)?)?)
}

fn page_key(text: &str) -> Option<(DateTime<Utc>, uuid::Uuid)> {
    let (micros, id) = text.split_once('_')?;
    Some((DateTime::from_timestamp_micros(micros.parse().ok()?)?, id.parse().ok()?))
}

pub async fn list(
    Shared(state): Shared<Arc<State>>,
    Extension(op): Extension<Operator>,
    Query(filters): Query<Filters>,
) -> PageResult {
    let (rows, problem) = match filters.parse(Utc::now()) {
        Ok(filter) => (baton_store::overview::runs(&state.db().await?, &filter).await?, None),
        Err(problem) => (vec![], Some(problem)),
    };
    let older = (rows.len() as i64 == PAGE).then(|| filters.url(rows.last().map(RunRow::key)));
    // Only a running run changes while nobody acts: a blocked one waits for its answer.
    let live = rows.iter().any(|r| r.status == RunState::Running);
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    let page = state.views.page(
        &op,
        "runs.html",
        context! {
            nav => "runs",
            runs => rows.iter().map(row).collect::<Vec<_>>(),
            statuses => RunState::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            sources => Source::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
            paged => !filters.before.is_empty(),
            newest => filters.url(None),
            filter => filters,
            older, live, problem,
        },
    );
    Ok((status, page).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_read_as_since() {
        let now = Utc::now();
        assert_eq!(since("1h", now), Some(now - chrono::Duration::hours(1)));
        assert_eq!(since("30m", now), Some(now - chrono::Duration::minutes(30)));
        assert!(since("2026-11-30T10:00:00Z", now).is_some());
        for bad in [
            "h",
            "1y",
            "soon",
            "99999999999999999999d",
            "9223372036854775s",
            "106751991167301d",
            "9223372036854775807s",
        ] {
            assert_eq!(since(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn a_page_link_carries_the_filters_and_the_last_key() {
        let f = Filters { status: "completed".into(), target: "docs_agent".into(), ..Default::default() };
        let id = uuid::Uuid::now_v7();
        let t = DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap();
        let url = f.url(Some((t, id)));
        assert!(url.starts_with("/runs?status=completed&target=docs_agent"), "{url}");
        let before: Filters = serde_urlencoded::from_str(url.split_once('?').unwrap().1).unwrap();
        assert_eq!(page_key(&before.before), Some((t, id)));
        assert!(f.parse(Utc::now()).is_ok());
        assert!(Filters { status: "done".into(), ..Default::default() }.parse(Utc::now()).is_err());
    }
}
