//! Schedules: cron expressions stored in the store, each enqueuing one run per tick.
//!
//! A schedule names a cron expression (5 or 6 fields) in a time zone, a queue, a payload and
//! enqueue options. Any number of processes may run a scheduler over the same store; each tick
//! is enqueued exactly once, whoever is up: [`Spool::fire_schedule`](super::Spool::fire_schedule)
//! enqueues a tick's run under a dedup key derived from the schedule and the tick time
//! ([`schedule_tick_key`]) *and* moves the schedule's high-water mark past the tick, in one
//! transaction, refusing ticks at or before the mark. A tick is never enqueued twice, even
//! after retention deleted its run; no leader is elected.

use super::dedup::DedupKey;
use super::ids::{QueueName, ScheduleName};
use super::timestamp::Timestamp;
use super::types::{EnqueueOptions, Enqueued};
use crate::error::Result;

/// Most ticks [`CatchUp::All`] enqueues after a pause, and most ticks one
/// [`Spool::fire_schedule`](super::Spool::fire_schedule) takes.
pub const MAX_CATCH_UP: u32 = 1000;
/// Longest cron expression or time zone name, in bytes.
pub const MAX_CRON_LEN: usize = 256;

/// What a scheduler does with ticks that passed while no scheduler ran.
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

/// A schedule as stored: what [`Spool::put_schedule`](super::Spool::put_schedule) takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The schedule's name, unique in the store.
    pub name: ScheduleName,
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
    /// first).
    pub cron: String,
    /// An IANA time zone name (`UTC`, `Europe/Berlin`) the expression is read in.
    pub time_zone: String,
    /// The queue each tick's run is enqueued on.
    pub queue: QueueName,
    /// Each run's payload.
    pub payload: Vec<u8>,
    /// Each run's enqueue options (`not_before` must be unset: a tick's run is due at once).
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
    /// Bumped by every [`Spool::put_schedule`](super::Spool::put_schedule) of the name, so a
    /// scheduler that read an older version fires nothing.
    pub revision: u64,
    /// When the schedule was first stored.
    pub created_at: Timestamp,
    /// When it was last stored.
    pub updated_at: Timestamp,
}

/// What [`Spool::fire_schedule`](super::Spool::fire_schedule) did.
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
    DedupKey::from_parts(["cairn:schedule", name.as_str(), &at])
}
