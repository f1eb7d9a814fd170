//! What the fleet running in a test's process logs, kept in memory. Some
//! conditions show only there: a worker gave up storing a turn while the
//! database is away, an agent loop has ended. A test waits for such a line
//! (with a deadline) instead of sleeping through a fault window it guesses.
//!
//! [`capture`] installs the process's subscriber once (nextest runs each
//! test in its own process; under `cargo test` the tests of one binary share
//! it). A line names the fields of its spans (`run=…`, `invocation=…`,
//! `epoch=…`, `handoff_id=…`), so a test looks for its own ids.

use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// Every line logged since [`capture`], with when it was written.
static LINES: Mutex<Vec<(Instant, String)>> = Mutex::new(Vec::new());
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Keeps the fleet's log lines (Baton's own at `info`, the rest at `warn`)
/// from now on. Call it before the fleet starts.
pub fn capture() {
    INSTALLED.get_or_init(|| {
        let filter = Targets::new().with_target("baton", LevelFilter::INFO).with_default(LevelFilter::WARN);
        let layer = tracing_subscriber::fmt::layer().with_writer(Sink).with_ansi(false).without_time();
        // What the `baton` binary never logs, this never keeps either.
        let registry = tracing_subscriber::registry().with(baton::telemetry::withheld());
        let _ = registry.with(layer.with_filter(filter)).try_init();
    });
}

/// The lines so far that contain every one of `parts`, oldest first, with
/// when each was written.
pub fn lines_with(parts: &[&str]) -> Vec<(Instant, String)> {
    assert!(INSTALLED.get().is_some(), "call baton_tests::logs::capture() before the fleet starts");
    let lines = LINES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    lines.iter().filter(|(_, line)| parts.iter().all(|p| line.contains(p))).cloned().collect()
}

/// Waits until a line contains every one of `parts` (or panics after
/// `within`), and returns it.
pub async fn wait_for_line(within: Duration, parts: &[&str]) -> String {
    let what = format!("a log line with {parts:?}");
    crate::eventually(within, &what, || async { lines_with(parts).pop().map(|(_, line)| line) }).await
}

/// Writes each formatted event as one line of [`LINES`].
struct Sink;

struct Line(Vec<u8>);

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line(Vec::new())
    }
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The formatter writes one event to one writer, then drops it.
impl Drop for Line {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let line = String::from_utf8_lossy(&self.0).trim_end().to_string();
            LINES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((Instant::now(), line));
        }
    }
}

/// Prints every line kept so far to stderr when dropped during a panic, so a
/// test that failed in CI shows what the fleet did. Hold it for the test's
/// length: `let _logs = baton_tests::logs::shown_on_failure();`.
#[must_use = "the lines are shown when this guard is dropped"]
pub struct ShownOnFailure;

/// Starts keeping the fleet's lines ([`capture`]) and returns the guard
/// that shows them if the test fails.
pub fn shown_on_failure() -> ShownOnFailure {
    capture();
    ShownOnFailure
}

impl Drop for ShownOnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let lines = LINES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((first, _)) = lines.first() else {
            return;
        };
        eprintln!("--- the fleet's log ({} lines, seconds since the first) ---", lines.len());
        for (at, line) in lines.iter() {
            eprintln!("{:8.3} {line}", at.duration_since(*first).as_secs_f64());
        }
    }
}
