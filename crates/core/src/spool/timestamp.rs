//! Time as the spool sees it: a [`Timestamp`] in microseconds since the Unix epoch, and the
//! calendar arithmetic that prints it as RFC 3339.
//!
//! A leaf module: the run ids ([`RunId::generate`](super::RunId::generate)) are made from a
//! timestamp and the error type names run ids, so this module imports nothing of the crate.
//! The checks of a time given to cairn ([`Timestamp::check`]) live with the spool's other input
//! checks in `checks.rs`; where time comes from, in `clock.rs`.

use std::fmt;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
