//! One module per page. Handlers read what they show with the store's own
//! queries, shape it into plain serializable views, and render a template.

pub mod dead;
mod dead_view;
pub mod fleet;
pub mod overview;
pub mod run;
mod run_view;
pub mod runs;
pub mod waiting;
mod waterfall;
pub mod workers;

use chrono::{DateTime, Utc};

/// `2026-11-30 17:20:05`, in UTC.
pub fn at(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// How long ago, at a glance: `42s`, `5m`, `3h`, `2d`.
pub fn age(t: DateTime<Utc>) -> String {
    span((Utc::now() - t).num_milliseconds().max(0))
}

/// A duration in milliseconds, readable: `850ms`, `4.2s`, `3m 10s`, `2h 5m`.
pub fn span(ms: i64) -> String {
    match ms {
        ..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
        3_600_000..86_400_000 => format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
        _ => format!("{}d {}h", ms / 86_400_000, ms % 86_400_000 / 3_600_000),
    }
}

/// Pretty JSON for a `<pre>`.
pub fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The first `max` characters of `text`, with an ellipsis when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// A run id that tells runs apart at a glance: `…` and its last 8 hex
/// digits (a UUIDv7 begins with its creation time, so the first 8 are the
/// same for every run created within the same minute or so).
pub fn short_run_id(id: uuid::Uuid) -> String {
    let hex = id.simple().to_string();
    format!("…{}", &hex[hex.len() - 8..])
}

/// Parses a run id from the URL, or a 404.
pub fn run_id(id: &str) -> Result<uuid::Uuid, super::views::PageError> {
    id.parse().map_err(|_| super::views::PageError::not_found(format!("`{id}` is not a run id")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn spans_read_at_a_glance() {
        assert_eq!(super::span(850), "850ms");
        assert_eq!(super::span(4_200), "4.2s");
        assert_eq!(super::span(190_000), "3m 10s");
        assert_eq!(super::span(7_500_000), "2h 5m");
        assert_eq!(super::span(90_000_000), "1d 1h");
    }

    #[test]
    fn short_run_ids_tell_runs_of_the_same_second_apart() {
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        assert_eq!(a.to_string()[..8], b.to_string()[..8], "the prefix is the same");
        assert_ne!(super::short_run_id(a), super::short_run_id(b));
        let id: uuid::Uuid = "01970f2a-1b2c-7d3e-8f40-5a6b7c8d9e0f".parse().unwrap();
        assert_eq!(super::short_run_id(id), "…7c8d9e0f");
    }

    #[test]
    fn clipping_counts_characters_not_bytes() {
        assert_eq!(super::clip("你好世界", 2), "你好…");
        assert_eq!(super::clip("short", 10), "short");
    }
}
