//! The overview's figures, shaped from counts: runs by status in a window,
//! the failure rate, and the navigation's badges.
//!
//! A cancelled run is not a failure: someone chose to stop it. The failure
//! rate is failed runs over the runs that ended by themselves (completed
//! or failed), so a day of cancels neither raises nor hides it.

use serde::Serialize;

use crate::run::state::RunState;

/// Runs by status in one window, every status present (zero when none).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// `(status, count)` in [`RunState::ALL`] order.
    pub by_status: Vec<(&'static str, i64)>,
    pub total: i64,
    pub failed: i64,
    /// `failed / (completed + failed)`, as `12.5%`; `None` when no run ended by itself.
    pub failure_rate: Option<String>,
    /// The same as a fraction, for a class (`bad` above [`ALARMING`]).
    pub alarming: bool,
}

/// A failure rate above which the overview shows it in red.
pub const ALARMING: f64 = 0.1;

impl Window {
    /// Shapes the counts a query returned (statuses it did not return count 0).
    pub fn of(counts: &[(RunState, i64)]) -> Self {
        let count = |s: RunState| counts.iter().filter(|(c, _)| *c == s).map(|(_, n)| n).sum::<i64>();
        let by_status: Vec<(&'static str, i64)> = RunState::ALL.iter().map(|s| (s.as_str(), count(*s))).collect();
        let (failed, completed) = (count(RunState::Failed), count(RunState::Completed));
        let rate = failure_rate(failed, completed);
        Window {
            total: by_status.iter().map(|(_, n)| n).sum(),
            failed,
            failure_rate: rate.map(percent),
            alarming: rate.is_some_and(|r| r > ALARMING),
            by_status,
        }
    }
}

/// Failed over completed plus failed; `None` when neither happened.
pub fn failure_rate(failed: i64, completed: i64) -> Option<f64> {
    let ended = failed + completed;
    (ended > 0).then(|| failed as f64 / ended as f64)
}

/// `0%`, `12.5%`, `100%`: one decimal only where it says something.
pub fn percent(fraction: f64) -> String {
    let p = (fraction * 1000.0).round() / 10.0;
    if p.fract() == 0.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// A navigation badge: nothing at zero, the count up to 99, then `99+`;
/// `?` when the count could not be read (the broker did not answer).
pub fn badge(count: Option<i64>) -> Option<String> {
    match count {
        None => Some("?".into()),
        Some(n) if n <= 0 => None,
        Some(n) if n > 99 => Some("99+".into()),
        Some(n) => Some(n.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancelled_runs_are_counted_but_are_not_failures() {
        let w = Window::of(&[(RunState::Completed, 7), (RunState::Failed, 1), (RunState::Cancelled, 12)]);
        assert_eq!(w.total, 20);
        assert_eq!(w.failure_rate.as_deref(), Some("12.5%"), "1 of the 8 that ended by themselves");
        assert!(w.alarming);
        assert_eq!(w.by_status.iter().find(|(s, _)| *s == "running"), Some(&("running", 0)), "every status shown");
        let quiet = Window::of(&[(RunState::Cancelled, 3), (RunState::Running, 2)]);
        assert_eq!((quiet.failure_rate, quiet.alarming), (None, false), "nothing ended by itself");
        assert_eq!(Window::of(&[(RunState::Completed, 19), (RunState::Failed, 1)]).failure_rate.as_deref(), Some("5%"));
    }

    #[test]
    fn percentages_and_badges_read_at_a_glance() {
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent(1.0 / 3.0), "33.3%");
        assert_eq!(percent(1.0), "100%");
        assert_eq!(badge(Some(0)), None);
        assert_eq!(badge(Some(3)).as_deref(), Some("3"));
        assert_eq!(badge(Some(250)).as_deref(), Some("99+"));
        assert_eq!(badge(None).as_deref(), Some("?"));
    }
}
