//! Time as the spool sees it: a [`Timestamp`] in microseconds and the [`Clock`] it comes from.
//!
//! Every time the spool uses — enqueue and finish times, lease expiry, backoff, retention ages,
//! the retention time budget — is read from one [`Clock`] per spool instance. SQL backends pass
//! the clock's `now` into their statements instead of calling the engine's own `now()`, so a
//! test can drive leases, retries and retention with a [`ManualClock`] and get the same answers
//! on every backend.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// A point in time: microseconds since the Unix epoch (UTC), the resolution of a Postgres
/// `timestamptz` and what SQLite stores as an `INTEGER`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    /// A timestamp from microseconds since the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// Microseconds since the Unix epoch (what backends store).
    pub const fn as_unix_micros(self) -> i64 {
        self.0
    }

    /// Whole milliseconds since the Unix epoch (floor).
    pub const fn as_unix_millis(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// A timestamp from a [`SystemTime`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a time before 1970 or too far in the future to fit.
    pub fn from_system_time(t: SystemTime) -> Result<Self> {
        let since = t
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::invalid("timestamp", "is before 1970"))?;
        i64::try_from(since.as_micros())
            .map(Self)
            .map_err(|_| Error::invalid("timestamp", "is too far in the future"))
    }

    /// `self + d`, saturating at the largest representable time.
    pub fn saturating_add(self, d: Duration) -> Self {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(micros))
    }

    /// `self - d`, saturating at the smallest representable time.
    pub fn saturating_sub(self, d: Duration) -> Self {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(micros))
    }

    /// How long after `earlier` this is; zero when it is not after it.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        let micros = self.0.saturating_sub(earlier.0).max(0);
        Duration::from_micros(u64::try_from(micros).unwrap_or(0))
    }
}

impl fmt::Display for Timestamp {
    /// Seconds and microseconds since the Unix epoch (`1800000000.000123`); cairn-core has no
    /// calendar dependency, and the CLI renders dates.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(1_000_000);
        let micros = self.0.rem_euclid(1_000_000);
        write!(f, "{secs}.{micros:06}")
    }
}

/// Where a spool reads the time. Object safe: spools hold an `Arc<dyn Clock>`.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // A system clock set before 1970 is a broken host; the epoch keeps arithmetic sane.
        Timestamp::from_system_time(SystemTime::now()).unwrap_or(Timestamp::UNIX_EPOCH)
    }
}

/// A clock that moves only when told to, for tests. Clones share one time, so a test can hold
/// one clone and advance the time a spool under test reads from another.
#[derive(Debug, Clone)]
pub struct ManualClock {
    micros: Arc<AtomicI64>,
}

impl ManualClock {
    /// Where [`ManualClock::default`] starts: 2027-01-15T08:00:00Z, a plausible present, so
    /// stored times look sane to engines and people.
    pub const DEFAULT_START: Timestamp = Timestamp::from_unix_micros(1_800_000_000_000_000);

    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            micros: Arc::new(AtomicI64::new(start.as_unix_micros())),
        }
    }

    /// Moves the time forward by `d` (saturating) and returns the new time.
    pub fn advance(&self, d: Duration) -> Timestamp {
        let step = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        let before = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |m| {
                Some(m.saturating_add(step))
            })
            .unwrap_or_else(|m| m);
        Timestamp(before.saturating_add(step))
    }

    /// Sets the time. Setting it backwards is allowed (to test a host whose clock jumps).
    pub fn set(&self, t: Timestamp) {
        self.micros.store(t.as_unix_micros(), Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(Self::DEFAULT_START)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.micros.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::default();
        let b = a.clone();
        let t = a.advance(Duration::from_secs(5));
        assert_eq!(b.now(), t);
        assert_eq!(
            t.duration_since(ManualClock::DEFAULT_START),
            Duration::from_secs(5)
        );
        b.set(Timestamp::from_unix_micros(7));
        assert_eq!(a.now(), Timestamp::from_unix_micros(7));
    }

    #[test]
    fn arithmetic_saturates() {
        let max = Timestamp::from_unix_micros(i64::MAX);
        assert_eq!(max.saturating_add(Duration::from_secs(1)), max);
        assert_eq!(
            Timestamp::from_unix_micros(i64::MIN).saturating_sub(Duration::MAX),
            Timestamp::from_unix_micros(i64::MIN)
        );
        let t = Timestamp::from_unix_micros(10);
        assert_eq!(t.duration_since(max), Duration::ZERO);
    }

    #[test]
    fn display_is_seconds_dot_micros() {
        assert_eq!(
            Timestamp::from_unix_micros(1_500_000).to_string(),
            "1.500000"
        );
        assert_eq!(Timestamp::from_unix_micros(-1).to_string(), "-1.999999");
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > Timestamp::from_unix_micros(1_577_836_800_000_000));
    }
}
