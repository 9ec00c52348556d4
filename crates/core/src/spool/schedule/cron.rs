//! A schedule's cron expression read in its time zone ([`CronTicks`]): parsing (5 or 6
//! fields, a known IANA zone) and the ticks before and after a time, on `croner` over chrono
//! with chrono-tz's zone rules (compiled into the build, so every process of one build reads a
//! zone alike, whatever the host's tzdata).
//!
//! Ticks are whole seconds. Searches run in real time, not wall-clock time, in both
//! directions (croner's rule), so the ticks found going back are the ticks found going forward;
//! the daylight-saving rule is [`Schedule::time_zone`](super::types::Schedule::time_zone)'s.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use super::super::timestamp::Timestamp;
use super::types::MAX_CRON_LEN;
use crate::error::{Error, Result};

const MICROS_PER_SECOND: i64 = 1_000_000;

/// A parsed cron expression in its time zone: what the ticks of a schedule are computed from.
#[derive(Clone)]
pub struct CronTicks {
    cron: Cron,
    zone: Tz,
}

impl fmt::Debug for CronTicks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CronTicks")
            .field("cron", &self.cron.pattern.to_string())
            .field("zone", &self.zone.name())
            .finish()
    }
}

impl CronTicks {
    /// Parses `cron` (5 fields: minute hour day-of-month month day-of-week; or 6, seconds
    /// first) in the IANA time zone `time_zone`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an expression or zone name longer than
    /// [`MAX_CRON_LEN`](super::types::MAX_CRON_LEN) bytes, an expression of another field
    /// count (nicknames such as `@hourly` and a year field included) or one `croner` does not
    /// parse, and a zone name that is not in the IANA database (names are case-sensitive).
    pub fn parse(cron: &str, time_zone: &str) -> Result<Self> {
        if cron.len() > MAX_CRON_LEN {
            return Err(Error::invalid(
                "cron expression",
                format!("is {} bytes; the limit is {MAX_CRON_LEN}", cron.len()),
            ));
        }
        if time_zone.len() > MAX_CRON_LEN {
            return Err(Error::invalid(
                "time zone",
                format!("is {} bytes; the limit is {MAX_CRON_LEN}", time_zone.len()),
            ));
        }
        let fields = cron.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(Error::invalid(
                "cron expression",
                format!(
                    "`{cron}` has {fields} fields; write 5 (minute hour day-of-month month \
                     day-of-week) or 6 (second first)"
                ),
            ));
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(cron)
            .map_err(|e| Error::invalid("cron expression", format!("`{cron}`: {e}")))?;
        let zone = Tz::from_str(time_zone).map_err(|_| {
            Error::invalid(
                "time zone",
                format!(
                    "`{time_zone}` is not an IANA time zone name (such as `UTC` or \
                     `Europe/Berlin`)"
                ),
            )
        })?;
        Ok(Self { cron: parsed, zone })
    }

    /// The first tick strictly after `t`, or `None` when the expression matches no time after
    /// it (within the years `croner` searches, up to 4999).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        // Ticks are whole seconds: the first one after `t` is the first one after its second.
        let from = self.at(floor_seconds(t))?;
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        Some(Timestamp::from_unix_micros(next.timestamp_micros()))
    }

    /// The latest tick at or before `t`, or `None` when there is none (from the year 1 on).
    pub fn latest_at_or_before(&self, t: Timestamp) -> Option<Timestamp> {
        let from = self.at(floor_seconds(t))?;
        let prev = self.cron.find_previous_occurrence(&from, true).ok()?;
        Some(Timestamp::from_unix_micros(prev.timestamp_micros()))
    }

    /// The latest tick strictly before `t` (a tick: a whole second), or `None`.
    pub fn latest_before(&self, t: Timestamp) -> Option<Timestamp> {
        let micros = t.as_unix_micros();
        // The latest whole second strictly before `t`.
        let second = (micros - 1).div_euclid(MICROS_PER_SECOND);
        self.latest_at_or_before(Timestamp::from_unix_micros(
            second.saturating_mul(MICROS_PER_SECOND),
        ))
    }

    /// `seconds` since the Unix epoch in the schedule's zone.
    fn at(&self, seconds: i64) -> Option<DateTime<Tz>> {
        let utc: DateTime<Utc> = DateTime::from_timestamp(seconds, 0)?;
        Some(self.zone.from_utc_datetime(&utc.naive_utc()))
    }
}

/// The whole second at or before `t`, in seconds since the Unix epoch.
fn floor_seconds(t: Timestamp) -> i64 {
    t.as_unix_micros().div_euclid(MICROS_PER_SECOND)
}
