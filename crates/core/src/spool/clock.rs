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

    /// The earliest time cairn accepts from a caller: 1970-01-01T00:00:00Z (the Unix epoch).
    /// See [`Timestamp::check`].
    pub const EARLIEST: Timestamp = Timestamp(0);

    /// The latest time cairn accepts from a caller: 9999-12-31T23:59:59.999999Z, the last
    /// microsecond RFC 3339 (four-digit years) can write. See [`Timestamp::check`].
    pub const LATEST: Timestamp = Timestamp(253_402_300_799_999_999);

    /// Checks a time given to cairn (a run's not-before time, an imported run's times):
    /// [`Timestamp::EARLIEST`] to [`Timestamp::LATEST`], both included. Every entry — the
    /// library's enqueue and import, the HTTP API, the CLI — goes through this check, so a
    /// stored time is always one RFC 3339 can print.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `what` and the range, for a time outside it.
    pub fn check(self, what: &'static str) -> Result<Self> {
        if (Self::EARLIEST..=Self::LATEST).contains(&self) {
            Ok(self)
        } else {
            Err(Error::invalid(
                what,
                format!(
                    "is {} µs since the Unix epoch; it must be between {} and {} \
                     ({} to {} µs)",
                    self.0,
                    Self::EARLIEST,
                    Self::LATEST,
                    Self::EARLIEST.0,
                    Self::LATEST.0
                ),
            ))
        }
    }

    /// The time as RFC 3339 in UTC with microseconds (`2026-12-06T05:21:46.109617Z`), or
    /// `None` for a time outside the years 0000 to 9999, which RFC 3339 cannot write.
    pub fn to_rfc3339(self) -> Option<String> {
        let days = self.0.div_euclid(MICROS_PER_DAY);
        let of_day = self.0.rem_euclid(MICROS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        if !(0..=9999).contains(&year) {
            return None;
        }
        let secs = of_day / 1_000_000;
        Some(format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60,
            of_day % 1_000_000
        ))
    }

    /// The time of a UTC calendar date and time of day, or `None` for a date that does not
    /// exist (month 13, February 30) or a time of day out of range. Years are proleptic
    /// Gregorian; the result is not checked against [`Timestamp::check`]'s range.
    pub fn from_utc(
        year: i64,
        month: u32,
        day: u32,
        hour: u32,
        minute: u32,
        second: u32,
        micros: u32,
    ) -> Option<Self> {
        let leap =
            year.rem_euclid(4) == 0 && (year.rem_euclid(100) != 0 || year.rem_euclid(400) == 0);
        let month_len = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if !(1..=month_len).contains(&day)
            || hour > 23
            || minute > 59
            || second > 59
            || micros > 999_999
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        let of_day = i64::from(hour * 3600 + minute * 60 + second) * 1_000_000 + i64::from(micros);
        days.checked_mul(MICROS_PER_DAY)?
            .checked_add(of_day)
            .map(Self)
    }

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
    /// RFC 3339 in UTC with microseconds ([`Timestamp::to_rfc3339`]); a time outside the years
    /// 0000 to 9999 (which no caller can store, see [`Timestamp::check`]) as its microseconds
    /// since the Unix epoch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_rfc3339() {
            Some(text) => f.write_str(&text),
            None => write!(f, "{} µs since the Unix epoch", self.0),
        }
    }
}

const MICROS_PER_DAY: i64 = 86_400 * 1_000_000;

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, exact over the whole `i64` microsecond range).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The day count since 1970-01-01 of a proleptic Gregorian date (the inverse of
/// [`civil_from_days`]).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
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
    fn display_is_rfc3339_with_micros() {
        assert_eq!(
            Timestamp::from_unix_micros(1_500_000).to_string(),
            "1970-01-01T00:00:01.500000Z"
        );
        assert_eq!(
            Timestamp::from_unix_micros(-1).to_string(),
            "1969-12-31T23:59:59.999999Z"
        );
        // The figure the issue saw printed as `1796529268.109617`.
        assert_eq!(
            Timestamp::from_unix_micros(1_796_529_268_109_617).to_string(),
            "2026-12-06T03:54:28.109617Z"
        );
        assert_eq!(Timestamp::LATEST.to_string(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(
            Timestamp::from_unix_micros(i64::MIN).to_string(),
            "-9223372036854775808 µs since the Unix epoch"
        );
        assert_eq!(Timestamp::from_unix_micros(i64::MIN).to_rfc3339(), None);
    }

    #[test]
    fn the_accepted_range_is_1970_to_9999_inclusive() {
        assert_eq!(
            Timestamp::EARLIEST.check("t").unwrap(),
            Timestamp::UNIX_EPOCH
        );
        assert_eq!(Timestamp::LATEST.check("t").unwrap(), Timestamp::LATEST);
        assert_eq!(
            Timestamp::from_utc(9999, 12, 31, 23, 59, 59, 999_999),
            Some(Timestamp::LATEST)
        );
        assert_eq!(
            Timestamp::from_utc(1970, 1, 1, 0, 0, 0, 0),
            Some(Timestamp::EARLIEST)
        );
        for bad in [
            -1,
            i64::MIN,
            Timestamp::LATEST.as_unix_micros() + 1,
            i64::MAX,
        ] {
            let err = Timestamp::from_unix_micros(bad)
                .check("not-before time")
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "not-before time",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn calendar_conversion_round_trips_and_refuses_impossible_dates() {
        assert_eq!(Timestamp::from_utc(2024, 2, 30, 0, 0, 0, 0), None);
        assert_eq!(Timestamp::from_utc(2023, 2, 29, 0, 0, 0, 0), None);
        assert_eq!(Timestamp::from_utc(2026, 13, 1, 0, 0, 0, 0), None);
        assert_eq!(Timestamp::from_utc(2026, 1, 1, 24, 0, 0, 0), None);
        let leap = Timestamp::from_utc(2000, 2, 29, 12, 0, 0, 1).unwrap();
        assert_eq!(leap.to_string(), "2000-02-29T12:00:00.000001Z");
        // Every day of four centuries (every leap rule) and both ends of the range.
        let day = 86_400 * 1_000_000;
        for n in (-3 * 146_097..=3 * 146_097).step_by(7) {
            let t = Timestamp::from_unix_micros(n * day + 3_723_000_004);
            let text = t.to_rfc3339().unwrap();
            let (date, time) = text.split_once('T').unwrap();
            let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
            assert_eq!(time, "01:02:03.000004Z");
            assert_eq!(
                Timestamp::from_utc(d[0], d[1] as u32, d[2] as u32, 1, 2, 3, 4),
                Some(t),
                "{text}"
            );
        }
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > Timestamp::from_unix_micros(1_577_836_800_000_000));
    }
}
