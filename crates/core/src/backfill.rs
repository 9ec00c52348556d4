//! The paced head-cache backfill: one pass over every space, repairing stale caches gently.
//!
//! The pass visits spaces in id byte order ([`EpochStore::list_spaces`]), probes each space's
//! cache with the reads [`EpochDiagnostics`] offers and calls [`EpochStore::repair_heads`] only
//! when the cache is not current. After each space it pauses ([`pause_after`]) at least as long
//! as that space took and long enough to keep to the configured rate, so the pass never takes
//! more than half of the store's time nor more than `spaces_per_second` spaces a second. It
//! stops at the first error (reporting only its [`error_code`]: no payloads, no space ids), and
//! it stops when asked to shut down.
//!
//! # The completion marker
//! A finished pass appends one epoch to the reserved space [`MARKER_SPACE`]. The marker lives in
//! the epoch log itself, so no schema object is needed and an older build that ignores it keeps
//! working. A marker can go stale: a build that predates the head cache (after a rollback) or a
//! hand edit can leave caches stale after the marker was written. That is harmless, because no
//! reader trusts a cache on the marker's word: every append and every head read checks the cache
//! with [`crate::cache_is_current`] under the space lock and recomputes when it fails. The marker
//! only lets a server skip a pass that would find nothing to do; `cairn backfill` ignores it and
//! always runs a pass.
//!
//! [`EpochStore::list_spaces`]: crate::EpochStore::list_spaces
//! [`EpochStore::repair_heads`]: crate::EpochStore::repair_heads

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::seq::HeadProbe;
use crate::store::EpochDiagnostics;
use crate::types::{Event, SpaceId};

/// The reserved space that holds the backfill's completion markers. Its leading NUL byte keeps
/// it first in byte order; it starts with [`crate::RESERVED_SPACE_PREFIX`], so
/// [`SpaceId::new`] refuses it and no application, API client or command can plant a marker
/// (and make every later server skip its pass) or read it as its own space.
pub const MARKER_SPACE: &[u8] = b"\0cairn/backfill";

/// The event kind of a completion marker.
pub const MARKER_KIND: &str = "cairn.backfill.complete";

/// How the backfill runs.
#[derive(Clone, Debug, PartialEq)]
pub struct BackfillConfig {
    /// Whether the background pass runs at all.
    pub enabled: bool,
    /// The most spaces visited per second.
    pub spaces_per_second: f64,
    /// How many spaces between two progress reports.
    pub progress_every: u64,
    /// How many space ids one `list_spaces` call reads.
    pub page_size: usize,
}

impl Default for BackfillConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            spaces_per_second: 2.0,
            progress_every: 500,
            page_size: 100,
        }
    }
}

impl BackfillConfig {
    /// Checks the pacing fields, only when the backfill is enabled (a switched-off backfill's
    /// pacing is never used). Returns one line per problem.
    pub fn validate(&self) -> std::result::Result<(), Vec<String>> {
        if !self.enabled {
            return Ok(());
        }
        let mut problems = Vec::new();
        if !(self.spaces_per_second.is_finite() && self.spaces_per_second > 0.0) {
            problems.push(format!(
                "backfill.spaces_per_second is {}; give a positive number (default 2)",
                self.spaces_per_second
            ));
        }
        if self.progress_every == 0 {
            problems
                .push("backfill.progress_every is 0; give a positive count (default 500)".into());
        }
        if self.page_size == 0 {
            problems.push("backfill.page_size is 0; give a positive count (default 100)".into());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// The shortest time between the starts of two spaces at the configured rate.
    pub fn interval(&self) -> Duration {
        Duration::try_from_secs_f64(1.0 / self.spaces_per_second).unwrap_or(Duration::MAX)
    }
}

/// The pause after a space that took `took`: at least `took` (the pass never uses more than
/// half of the store's time) and at least what is left of `interval` (the pass never exceeds
/// the configured rate).
pub fn pause_after(took: Duration, interval: Duration) -> Duration {
    took.max(interval.saturating_sub(took))
}

/// The time source and sleeper the pass paces itself with; tests inject [`SimulatedPacer`].
#[async_trait]
pub trait Pacer: Send + Sync + std::fmt::Debug {
    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;
    /// Sleeps for `d`.
    async fn sleep(&self, d: Duration);
}

/// The real clock: [`tokio::time::Instant`] and [`tokio::time::sleep`].
#[derive(Debug)]
pub struct TokioPacer {
    origin: tokio::time::Instant,
}

impl Default for TokioPacer {
    fn default() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[async_trait]
impl Pacer for TokioPacer {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }
}

/// A simulated clock: time moves only when the pass reads it or sleeps. Every reading advances
/// it by `work_step` (so each space "takes" a known time) and every sleep returns at once after
/// advancing it by the requested duration, which it records.
#[derive(Debug, Default)]
pub struct SimulatedPacer {
    work_step: Duration,
    state: Mutex<SimState>,
}

#[derive(Debug, Default)]
struct SimState {
    now: Duration,
    sleeps: Vec<Duration>,
}

impl SimulatedPacer {
    /// A simulated clock whose every reading advances it by `work_step`.
    pub fn new(work_step: Duration) -> Self {
        Self {
            work_step,
            state: Mutex::default(),
        }
    }

    /// The pauses the pass asked for, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.lock().sleeps.clone()
    }

    /// The simulated time now (without advancing it).
    pub fn elapsed(&self) -> Duration {
        self.lock().now
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Pacer for SimulatedPacer {
    fn now(&self) -> Duration {
        let mut s = self.lock();
        s.now += self.work_step;
        s.now
    }
    async fn sleep(&self, d: Duration) {
        let mut s = self.lock();
        s.now += d;
        s.sleeps.push(d);
    }
}

/// Counts of one pass so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackfillProgress {
    /// Spaces visited (probed).
    pub visited: u64,
    /// Spaces whose cache was rewritten.
    pub repaired: u64,
    /// Spaces whose cache was already current (skipped without a repair).
    pub current: u64,
}

/// How a pass ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackfillOutcome {
    /// The backfill is switched off; nothing was read.
    Disabled,
    /// A completion marker is present and the caller asked to honour it; nothing was visited.
    AlreadyComplete,
    /// Every space was visited and the completion marker was written.
    Completed(BackfillProgress),
    /// Shutdown was asked for; the pass stopped between spaces.
    Stopped(BackfillProgress),
    /// The first error stopped the pass; `code` is its [`error_code`].
    Failed {
        /// What was done before the error.
        progress: BackfillProgress,
        /// The error's code.
        code: &'static str,
    },
}

/// Receives the pass's progress: after every space, every `progress_every` spaces, and on the
/// first error. The server logs through it; `cairn backfill` draws a progress bar.
pub trait BackfillObserver: Send + Sync {
    /// After each space.
    fn space_done(&self, _progress: &BackfillProgress) {}
    /// Every `progress_every` spaces.
    fn checkpoint(&self, _progress: &BackfillProgress) {}
    /// Once, when an error stops the pass. Only the code is given: no payloads, no space ids.
    fn failed(&self, _code: &'static str, _progress: &BackfillProgress) {}
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct Quiet;
impl BackfillObserver for Quiet {}

/// A short code for an error, safe to log: it names the error's kind only, never its text,
/// payloads or space ids.
pub fn error_code(err: &Error) -> &'static str {
    match err {
        Error::InvalidInput { .. } => "invalid_input",
        Error::InvalidBatchItem { .. } => "invalid_batch_item",
        Error::NotFound { .. } => "not_found",
        Error::BadCursor { .. } => "bad_cursor",
        Error::HashMismatch { .. } => "hash_mismatch",
        Error::UnknownParent { .. } => "unknown_parent",
        Error::Conflict { .. } => "conflict",
        Error::Retryable { .. } => "retryable",
        Error::Unavailable { .. } => "unavailable",
        Error::Corrupt { .. } => "corrupt",
        Error::StorageFull { .. } => "storage_full",
        Error::Incompatible { .. } => "incompatible",
        Error::Migration { .. } | Error::MigrationPartly { .. } | Error::MigrationDown { .. } => {
            "migration"
        }
        Error::UnsafePath { .. } => "unsafe_path",
        Error::Reserved { .. } => "reserved",
        Error::StoreReplaced { .. } => "store_replaced",
        Error::Io { .. } => "io",
        Error::Backend { .. } => "backend",
        _ => "other",
    }
}

/// The reserved marker space's id.
pub fn marker_space() -> SpaceId {
    SpaceId::from_stored(MARKER_SPACE).expect("the marker space id is within bounds")
}

/// Whether a completion marker has been written.
///
/// # Errors
/// Backend errors only.
pub async fn marker_present(store: &dyn EpochDiagnostics) -> Result<bool> {
    match store.heads(&marker_space()).await {
        Ok(heads) => Ok(!heads.is_empty()),
        Err(Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Probes a space's cache with the diagnostics reads: the cached rows, the next seq, and
/// whether the newest cached row is the epoch at the largest seq. The reads are not under the
/// space lock; a racing append keeps the cache exact itself, and a racing cache-unaware writer
/// is caught by the seq check of the next append or the next pass.
///
/// # Errors
/// Backend errors only.
pub async fn probe(store: &dyn EpochDiagnostics, space: &SpaceId) -> Result<HeadProbe> {
    let cached = store.cached_heads(space).await?;
    let next = store.next_seq(space).await?;
    let max_seq = next
        .0
        .checked_sub(1)
        .filter(|s| *s > 0)
        .map(crate::types::Seq);
    let mut max_id = None;
    if let Some(max) = max_seq {
        if let Some(newest) = cached.iter().filter(|h| h.seq == max).max() {
            if let Some(epoch) = store.epoch(space, &newest.id).await? {
                if epoch.seq == max {
                    max_id = Some(epoch.id);
                }
            }
        }
    }
    Ok(HeadProbe {
        max_seq,
        max_id,
        cached,
    })
}

/// Runs one paced pass over every space.
///
/// With `honour_marker`, a present completion marker ends the call at once with
/// [`BackfillOutcome::AlreadyComplete`]. `shutdown` resolving stops the pass between spaces
/// (during a pause too).
pub async fn run_pass(
    store: &dyn EpochDiagnostics,
    config: &BackfillConfig,
    pacer: &dyn Pacer,
    observer: &dyn BackfillObserver,
    honour_marker: bool,
    shutdown: impl Future<Output = ()>,
) -> BackfillOutcome {
    if !config.enabled {
        return BackfillOutcome::Disabled;
    }
    let mut progress = BackfillProgress::default();
    let fail = |progress: BackfillProgress, err: Error| {
        let code = error_code(&err);
        observer.failed(code, &progress);
        BackfillOutcome::Failed { progress, code }
    };
    if honour_marker {
        match marker_present(store).await {
            Ok(true) => return BackfillOutcome::AlreadyComplete,
            Ok(false) => {}
            Err(e) => return fail(progress, e),
        }
    }
    let interval = config.interval();
    let marker = marker_space();
    let mut after: Option<SpaceId> = None;
    tokio::pin!(shutdown);
    loop {
        let page = match store
            .list_spaces(after.as_ref(), config.page_size.max(1))
            .await
        {
            Ok(p) => p,
            Err(e) => return fail(progress, e),
        };
        if page.is_empty() {
            break;
        }
        for space in &page {
            if *space == marker {
                continue;
            }
            let start = pacer.now();
            let step = async {
                let probe = probe(store, space).await?;
                if probe.cache_is_current() {
                    return Ok(false);
                }
                Ok::<_, Error>(matches!(
                    store.repair_heads(space).await?,
                    crate::types::RepairOutcome::Rewritten { .. }
                ))
            };
            let repaired = match step.await {
                Ok(r) => r,
                Err(e) => return fail(progress, e),
            };
            progress.visited += 1;
            if repaired {
                progress.repaired += 1;
            } else {
                progress.current += 1;
            }
            observer.space_done(&progress);
            if progress.visited % config.progress_every.max(1) == 0 {
                observer.checkpoint(&progress);
            }
            let took = pacer.now().saturating_sub(start);
            tokio::select! {
                biased;
                () = &mut shutdown => return BackfillOutcome::Stopped(progress),
                () = pacer.sleep(pause_after(took, interval)) => {}
            }
        }
        after = page.last().cloned();
    }
    let payload = format!(
        "visited={} repaired={} current={}",
        progress.visited, progress.repaired, progress.current
    );
    if let Err(e) = store
        .append(&marker, vec![Event::new(MARKER_KIND, payload)])
        .await
    {
        return fail(progress, e);
    }
    BackfillOutcome::Completed(progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_is_at_least_the_work_and_keeps_the_rate() {
        let half = Duration::from_millis(500);
        assert_eq!(
            pause_after(Duration::from_millis(100), half),
            Duration::from_millis(400)
        );
        assert_eq!(
            pause_after(Duration::from_millis(300), half),
            Duration::from_millis(300)
        );
        assert_eq!(
            pause_after(Duration::from_millis(900), half),
            Duration::from_millis(900)
        );
        assert_eq!(pause_after(Duration::ZERO, half), half);
    }

    #[test]
    fn pacing_is_validated_only_when_enabled() {
        let bad = BackfillConfig {
            enabled: true,
            spaces_per_second: 0.0,
            progress_every: 0,
            page_size: 0,
        };
        assert_eq!(bad.validate().unwrap_err().len(), 3);
        let off = BackfillConfig {
            enabled: false,
            ..bad
        };
        assert!(off.validate().is_ok());
        assert!(BackfillConfig::default().validate().is_ok());
        let nan = BackfillConfig {
            spaces_per_second: f64::NAN,
            ..BackfillConfig::default()
        };
        assert_eq!(nan.validate().unwrap_err().len(), 1);
    }

    #[test]
    fn default_interval_is_half_a_second() {
        assert_eq!(
            BackfillConfig::default().interval(),
            Duration::from_millis(500)
        );
    }
}
