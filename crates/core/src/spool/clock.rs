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
use std::time::{Duration, SystemTime};

use super::timestamp::Timestamp;

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
        Timestamp::from_unix_micros(before.saturating_add(step))
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
        Timestamp::from_unix_micros(self.micros.load(Ordering::SeqCst))
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
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > Timestamp::from_unix_micros(1_577_836_800_000_000));
    }
}
