//! The fleet's processes as the workers page sees them: each `baton up`
//! heartbeats its registry row, so one whose heartbeat is older than a few
//! of its own beats is gone (killed, or cut off from the database), and one
//! that stopped gracefully says so.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// How many beats a process may miss before it is shown as gone: a beat
/// late under load, or one retried while the database was briefly away, is
/// no reason to call a process dead.
pub const MISSED_BEATS: f64 = 3.0;

/// How long after its last beat (or its stop) a row is kept: a day.
pub const KEPT_SECS: f64 = 86_400.0;

/// Where a process of the fleet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Heartbeating.
    Live,
    /// Stopped on a signal, after its roles finished.
    Stopped,
    /// Neither: its last beat is older than [`MISSED_BEATS`] beats.
    Gone,
}

impl Liveness {
    /// A process's state at `now`, from its row: when it stopped (if it
    /// did), its last heartbeat and its beat interval in seconds.
    pub fn of(
        stopped_at: Option<DateTime<Utc>>,
        heartbeat_at: DateTime<Utc>,
        beat_secs: f64,
        now: DateTime<Utc>,
    ) -> Self {
        if stopped_at.is_some() {
            return Liveness::Stopped;
        }
        let silent = (now - heartbeat_at).num_milliseconds() as f64 / 1000.0;
        if silent > beat_secs * MISSED_BEATS {
            Liveness::Gone
        } else {
            Liveness::Live
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Live => "live",
            Liveness::Stopped => "stopped",
            Liveness::Gone => "gone",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn a_process_is_gone_after_three_missed_beats_and_stopped_when_it_said_so() {
        let now = Utc::now();
        let ago = |s| now - TimeDelta::seconds(s);
        assert_eq!(Liveness::of(None, ago(4), 5.0, now), Liveness::Live);
        assert_eq!(Liveness::of(None, ago(14), 5.0, now), Liveness::Live, "two beats late is not gone");
        assert_eq!(Liveness::of(None, ago(16), 5.0, now), Liveness::Gone);
        assert_eq!(Liveness::of(None, ago(16), 10.0, now), Liveness::Live, "judged by its own interval");
        assert_eq!(Liveness::of(Some(ago(1)), ago(600), 5.0, now), Liveness::Stopped, "a stop is not a death");
        // A clock a little ahead of the database's reads as live, not as an error.
        assert_eq!(Liveness::of(None, now + TimeDelta::seconds(2), 5.0, now), Liveness::Live);
    }
}
