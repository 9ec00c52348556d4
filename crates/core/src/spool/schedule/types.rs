//! The stored schedule's value types and the dedup key of a tick.

use super::super::dedup::DedupKey;
use super::super::ids::{QueueName, ScheduleName};
use super::super::timestamp::Timestamp;
use super::super::types::{EnqueueOptions, Enqueued};
use crate::error::Result;

/// Most missed ticks [`CatchUp::All`] enqueues after a pause.
pub const MAX_CATCH_UP: u32 = 1000;
/// Most ticks one [`Spool::fire_schedule`](crate::spool::Spool::fire_schedule) takes: the
/// most missed ticks a catch-up enqueues ([`MAX_CATCH_UP`]) beside as many on-time ones.
pub const MAX_FIRE_TICKS: u32 = 2 * MAX_CATCH_UP;
/// Longest cron expression or time zone name, in bytes.
pub const MAX_CRON_LEN: usize = 256;

/// What a scheduler does with ticks that passed while no scheduler ran.
///
/// A tick is *missed* (late) when it came due before the scheduler was watching: before its
/// previous round began, or, in its first round, more than its grace before now (see
/// [`due_ticks`](crate::spool::due_ticks)). Ticks that come due while a scheduler runs are
/// always enqueued, whatever the policy; the policy decides only the missed ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// Skip them: only ticks from now on are enqueued.
    #[default]
    None,
    /// Enqueue the latest missed tick only.
    Latest,
    /// Enqueue every missed tick, at most `cap` (the latest ones; 1..=[`MAX_CATCH_UP`]).
    All {
        /// Most missed ticks enqueued.
        cap: u32,
    },
}

impl CatchUp {
    /// The policy's stored name (`spool_schedule.catch_up`): `none`, `latest` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            CatchUp::None => "none",
            CatchUp::Latest => "latest",
            CatchUp::All { .. } => "all",
        }
    }

    /// The cap of [`CatchUp::All`] (`spool_schedule.catch_up_cap`), `None` for the others.
    pub fn cap(self) -> Option<u32> {
        match self {
            CatchUp::All { cap } => Some(cap),
            CatchUp::None | CatchUp::Latest => None,
        }
    }

    /// The policy of a stored name and cap; `None` for a name this build does not know, or
    /// `all` without a cap that fits.
    pub fn from_stored(name: &str, cap: Option<i64>) -> Option<Self> {
        match (name, cap) {
            ("none", _) => Some(CatchUp::None),
            ("latest", _) => Some(CatchUp::Latest),
            ("all", Some(cap)) => u32::try_from(cap).ok().map(|cap| CatchUp::All { cap }),
            _ => None,
        }
    }
}

/// A schedule as stored: what [`Spool::put_schedule`](crate::spool::Spool::put_schedule) takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The schedule's name, unique in the store.
    pub name: ScheduleName,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
    /// first), in the syntax of the `croner` crate (ranges, steps, lists, names, `L`, `W`,
    /// `#`); at most [`MAX_CRON_LEN`] bytes.
    pub cron: String,
    /// An IANA time zone name (`UTC`, `Europe/Berlin`) the expression is read in; at most
    /// [`MAX_CRON_LEN`] bytes.
    ///
    /// Daylight saving time follows `croner` (Vixie cron's rule): an expression whose
    /// seconds, minute and hour are single values (`30 2 * * *`) is a *fixed-time* one, any
    /// other (`*/15 * * * *`, `0 * * * *`) an *interval* one. A wall-clock time skipped in
    /// spring (02:30 on the day Europe/Berlin goes from 02:00 to 03:00) fires a fixed-time
    /// schedule once at the first time after the gap (03:00), and an interval schedule not at
    /// all for the skipped times. A wall-clock time repeated in autumn (02:30 twice) fires a
    /// fixed-time schedule once, at its first occurrence, and an interval schedule at both.
    pub time_zone: String,
    /// The queue each tick's run is enqueued on.
    pub queue: QueueName,
    /// Each run's payload.
    pub payload: Vec<u8>,
    /// Each run's enqueue options (`not_before` must be unset: a tick's run is due at once;
    /// `traceparent` too: a schedule's runs carry no trace).
    pub options: EnqueueOptions,
    /// Ticks missed while no scheduler ran.
    pub catch_up: CatchUp,
}

/// A stored schedule and its progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The schedule.
    pub schedule: Schedule,
    /// The latest tick enqueued, or the schedule's creation time before its first tick: no
    /// tick at or before it is ever enqueued again.
    pub high_water: Timestamp,
    /// Bumped by every [`Spool::put_schedule`](crate::spool::Spool::put_schedule) of the name, so a
    /// scheduler that read an older version fires nothing.
    pub revision: u64,
    /// When the schedule was first stored.
    pub created_at: Timestamp,
    /// When it was last stored.
    pub updated_at: Timestamp,
}

/// What [`Spool::fire_schedule`](crate::spool::Spool::fire_schedule) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleFired {
    /// The ticks after the high-water mark were enqueued (each with the run it has, created or
    /// found by its key) and the mark moved to the latest tick given.
    Fired {
        /// Each tick after the old mark, ascending, with its run.
        runs: Vec<(Timestamp, Enqueued)>,
        /// The new high-water mark.
        high_water: Timestamp,
    },
    /// The schedule was edited or removed since the caller read it (its revision differs, or
    /// it is gone): nothing was enqueued. Read it again.
    Stale,
}

/// The dedup key of a schedule's tick: the same in every process, so a tick has one run.
///
/// # Errors
/// Never for a valid name and a tick within RFC 3339's years.
pub fn schedule_tick_key(name: &ScheduleName, tick: Timestamp) -> Result<DedupKey> {
    let at = tick
        .to_rfc3339()
        .unwrap_or_else(|| tick.as_unix_micros().to_string());
    DedupKey::from_parts([crate::spool::SCHEDULE_KEY_PART, name.as_str(), &at])
}

/// The schedule and tick of a run's dedup key, when it is a [`schedule_tick_key`]: the inverse
/// of that function, so a listing of a queue's runs can name the tick of each (`None` for any
/// other key).
pub fn schedule_tick_of(key: &DedupKey) -> Option<(ScheduleName, Timestamp)> {
    let parts = key.parts()?;
    let [tag, name, at] = parts.as_slice() else {
        return None;
    };
    if tag.as_slice() != b"cairn:schedule" {
        return None;
    }
    let name = ScheduleName::from_stored(String::from_utf8(name.clone()).ok()?).ok()?;
    let at = std::str::from_utf8(at).ok()?;
    let tick = parse_tick(at).or_else(|| at.parse().ok().map(Timestamp::from_unix_micros))?;
    (schedule_tick_key(&name, tick).ok()? == *key).then_some((name, tick))
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, as [`Timestamp::to_rfc3339`] writes it.
fn parse_tick(at: &str) -> Option<Timestamp> {
    let b = at.as_bytes();
    if b.len() != 27 || at.get(26..) != Some("Z") {
        return None;
    }
    let num = |from: usize, to: usize| at.get(from..to)?.parse::<u32>().ok();
    let seps = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ];
    if seps.iter().any(|&(i, c)| b[i] != c) {
        return None;
    }
    Timestamp::from_utc(
        i64::from(num(0, 4)?),
        num(5, 7)?,
        num(8, 10)?,
        num(11, 13)?,
        num(14, 16)?,
        num(17, 19)?,
        num(20, 26)?,
    )
}
