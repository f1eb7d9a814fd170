//! What was paid for, kept through a database outage: a model turn (or an
//! external agent's output) that came back while its step could not be
//! stored is held by the invocation, in memory and, once it is large or the
//! wait long, in a file under the worker's state directory, and storing it
//! is tried again until the database takes it, the claim is lost, or the
//! patience runs out. When the database is back, the fenced write decides:
//! the claim unchanged, the turn goes in and nothing is asked again; taken
//! over, the write is refused and the held turn discarded.
//!
//! The file is this process's only: it is removed once the turn is stored or
//! given up, and a worker that dies during the outage loses it (its
//! successor asks the model again: the one case left).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::providers::ModelTurn;
use crate::Error;

/// Where and when held turns spill to disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The worker's state directory; held turns go in its `held/`.
    pub dir: PathBuf,
    /// A held turn whose JSON is larger than this is spilled at once.
    pub spill_bytes: usize,
    /// A held turn still unstored after this long is spilled.
    pub spill_after: Duration,
}

impl Holding {
    pub const SPILL_BYTES: usize = 256 * 1024;
    pub const SPILL_AFTER: Duration = Duration::from_secs(30);
}

impl Holding {
    /// Removes the files that held turns of this state directory left behind
    /// when their worker died: a model turn's file older than `patience` (and
    /// a minute) belongs to nobody, since a live one is stored or given up by
    /// then. An external agent's (`…-external.json`) has no such bound and is
    /// left alone. Returns how many went.
    pub fn remove_stale(&self, patience: Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(self.dir.join("held")) else { return 0 };
        let stale = |entry: &std::fs::DirEntry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            !name.ends_with("-external.json") && age.is_some_and(|age| age > patience + Duration::from_secs(60))
        };
        entries.flatten().filter(stale).filter(|entry| std::fs::remove_file(entry.path()).is_ok()).count()
    }
}

impl Default for Holding {
    fn default() -> Self {
        Self {
            dir: std::env::temp_dir().join("baton-state"),
            spill_bytes: Self::SPILL_BYTES,
            spill_after: Self::SPILL_AFTER,
        }
    }
}

/// A turn held until it is stored: in memory, or spilled to a file (what a
/// coding agent changed stays in memory: it is never serialized).
pub(super) struct Held {
    turn: ModelTurn,
    /// Set once spilled: the turn's serializable part is in this file, and
    /// `turn` keeps only what the file does not.
    file: Option<PathBuf>,
    since: Instant,
    name: String,
}

impl Held {
    /// `name` tells this turn's file apart (invocation, epoch, step).
    pub(super) fn new(turn: ModelTurn, name: String) -> Self {
        Self { turn, file: None, since: Instant::now(), name }
    }

    /// The turn as it came back from the model.
    pub(super) fn turn(&self) -> Result<Cow<'_, ModelTurn>, Error> {
        let Some(file) = &self.file else { return Ok(Cow::Borrowed(&self.turn)) };
        let bytes = std::fs::read(file).map_err(|e| Error::Contract(format!("reading a held turn back: {e}")))?;
        let mut turn: ModelTurn =
            serde_json::from_slice(&bytes).map_err(|e| Error::Contract(format!("reading a held turn back: {e}")))?;
        turn.coding = self.turn.coding.clone();
        turn.latency_ms = self.turn.latency_ms;
        Ok(Cow::Owned(turn))
    }

    /// How long it has been held.
    pub(super) fn held_for(&self) -> Duration {
        self.since.elapsed()
    }

    /// Whether it is on disk.
    pub(super) fn is_spilled(&self) -> bool {
        self.file.is_some()
    }

    /// Spills the turn to disk when it is large or has waited long; a turn
    /// that cannot be written stays in memory (and says why, once).
    pub(super) fn spill_if_due(&mut self, holding: &Holding) {
        if self.file.is_some() {
            return;
        }
        let Ok(json) = serde_json::to_vec(&self.turn) else { return };
        if json.len() <= holding.spill_bytes && self.since.elapsed() < holding.spill_after {
            return;
        }
        let dir = holding.dir.join("held");
        let file = dir.join(format!("{}.json", self.name));
        match write_private(&dir, &file, &json) {
            Ok(()) => {
                tracing::info!(file = %file.display(), bytes = json.len(), "a held turn spilled to disk until it is stored");
                let (coding, latency_ms) = (self.turn.coding.take(), self.turn.latency_ms);
                self.turn = ModelTurn { coding, latency_ms, ..ModelTurn::default() };
                self.file = Some(file);
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "could not spill a held turn; keeping it in memory");
            }
        }
    }
}

impl Drop for Held {
    /// Stored or given up: the file goes.
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Writes `bytes` to `file` readable by this user only (the turn may carry
/// what the user wrote), creating `dir`; a partial write leaves no file.
fn write_private(dir: &Path, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let partial = file.with_extension("partial");
    let mut out = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&partial)?;
    out.write_all(bytes).and_then(|()| out.sync_all()).inspect_err(|_| drop(std::fs::remove_file(&partial)))?;
    std::fs::rename(&partial, file)
}

/// How a held turn is kept: for `patience` (`None`: until `kill`), while
/// `kill` has not fired (the claim lost, the shutdown deadline passed).
pub(super) struct Keeping<'a> {
    pub(super) holding: &'a Holding,
    pub(super) patience: Option<Duration>,
    pub(super) kill: &'a CancellationToken,
    /// The log line of each retry.
    pub(super) what: &'static str,
}

impl Keeping<'_> {
    /// Runs `store` with the held turn until it is stored or the keeping
    /// ends; each attempt is a whole fenced transaction, so a claim taken
    /// over meanwhile ends it too (as `Fenced`, and the turn is discarded).
    pub(super) async fn store<T, F, Fut>(&self, mut held: Held, mut store: F) -> Result<T, Error>
    where
        F: FnMut(ModelTurn) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        use backon::BackoffBuilder;
        let mut delays = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter()
            .without_max_times()
            .build();
        let mut tries = 0u32;
        loop {
            let turn = held.turn()?.into_owned();
            let e = match store(turn).await {
                // An earlier attempt's commit went through unconfirmed: the
                // turn is stored; the invocation reads it back and goes on.
                Err(e @ Error::Store(baton_store::Error::StepStored { .. })) => {
                    tracing::info!(held_for = ?held.held_for(), tries, "a held turn was stored by an earlier attempt whose commit was unconfirmed");
                    crate::metrics::held_turn("stored");
                    return Err(e);
                }
                Err(e) if e.is_transient() && !self.kill.is_cancelled() && self.within(&held) => e,
                Err(e) if e.is_transient() && tries > 0 => {
                    tracing::warn!(error = %e, held_for = ?held.held_for(), "giving up a held turn");
                    crate::metrics::held_turn("given_up");
                    return Err(e);
                }
                Err(e) if e.is_fenced() && tries > 0 => {
                    tracing::warn!(held_for = ?held.held_for(), "the claim was taken over meanwhile; the held turn is discarded");
                    crate::metrics::held_turn("fenced");
                    return Err(e);
                }
                Ok(stored) if tries > 0 => {
                    tracing::info!(held_for = ?held.held_for(), tries, "a held turn stored after the database came back");
                    crate::metrics::held_turn("stored");
                    return Ok(stored);
                }
                other => return other,
            };
            tries += 1;
            held.spill_if_due(self.holding);
            let delay = delays.next().unwrap_or(Duration::from_secs(2));
            tracing::warn!(error = %e, ?delay, held_for = ?held.held_for(), spilled = held.is_spilled(), "{}", self.what);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.kill.cancelled() => return Err(e),
            }
        }
    }

    fn within(&self, held: &Held) -> bool {
        self.patience.is_none_or(|patience| held.held_for() < patience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(text: &str) -> ModelTurn {
        ModelTurn { content: Some(text.into()), ..ModelTurn::default() }
    }

    #[test]
    fn a_large_turn_spills_to_a_private_file_reads_back_whole_and_the_file_goes_with_it() {
        let dir = std::env::temp_dir().join(format!("baton-held-test-{}", uuid::Uuid::new_v4().simple()));
        let holding = Holding { dir: dir.clone(), spill_bytes: 8, spill_after: Duration::from_secs(3600) };
        let mut held = Held::new(turn("a long answer that was paid for"), "inv-1-3".into());
        held.spill_if_due(&holding);
        let file = dir.join("held").join("inv-1-3.json");
        assert!(held.is_spilled() && file.exists());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(held.turn().unwrap().content.as_deref(), Some("a long answer that was paid for"));
        drop(held);
        assert!(!file.exists(), "the file is removed with the held turn");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn only_the_stale_files_of_model_turns_are_removed() {
        let dir = std::env::temp_dir().join(format!("baton-held-test-{}", uuid::Uuid::new_v4().simple()));
        let holding = Holding { dir: dir.clone(), spill_bytes: 0, spill_after: Duration::ZERO };
        let (mut model, mut external) =
            (Held::new(turn("a"), "i-1-2".into()), Held::new(turn("b"), "i-2-2-external".into()));
        model.spill_if_due(&holding);
        external.spill_if_due(&holding);
        assert_eq!(holding.remove_stale(Duration::from_secs(3600)), 0, "fresh files stay");
        let old = std::time::SystemTime::now() - Duration::from_secs(3 * 3600);
        for name in ["i-1-2.json", "i-2-2-external.json"] {
            let file = std::fs::File::options().write(true).open(dir.join("held").join(name)).unwrap();
            file.set_modified(old).unwrap();
        }
        assert_eq!(holding.remove_stale(Duration::from_secs(3600)), 1, "the model turn's stale file goes");
        assert!(dir.join("held").join("i-2-2-external.json").exists(), "an external agent's stays");
        drop((model, external));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_small_turn_stays_in_memory_until_it_has_waited_long() {
        let dir = std::env::temp_dir().join(format!("baton-held-test-{}", uuid::Uuid::new_v4().simple()));
        let mut holding = Holding { dir: dir.clone(), spill_bytes: 1 << 20, spill_after: Duration::from_secs(3600) };
        let mut held = Held::new(turn("short"), "inv-2-1".into());
        held.spill_if_due(&holding);
        assert!(!held.is_spilled());
        holding.spill_after = Duration::ZERO;
        held.spill_if_due(&holding);
        assert!(held.is_spilled());
        assert_eq!(held.turn().unwrap().content.as_deref(), Some("short"));
        drop(held);
        let _ = std::fs::remove_dir_all(dir);
    }
}
