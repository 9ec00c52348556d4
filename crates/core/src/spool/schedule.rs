//! Schedules: cron expressions stored in the store, each enqueuing one run per tick.
//!
//! A schedule names a cron expression (5 or 6 fields) in a time zone, a queue, a payload and
//! enqueue options. Any number of processes may run a scheduler over the same store; each tick
//! is enqueued exactly once, whoever is up: [`Spool::fire_schedule`](super::Spool::fire_schedule)
//! enqueues a tick's run under a dedup key derived from the schedule and the tick time
//! ([`schedule_tick_key`]) *and* moves the schedule's high-water mark past the tick, in one
//! transaction, refusing ticks at or before the mark. A tick is never enqueued twice, even
//! after retention deleted its run; no leader is elected.
//!
//! `types.rs` holds the stored values and the tick's key, `cron.rs` the expression in its zone
//! ([`CronTicks`]), `due.rs` the checks and the catch-up rule ([`due_ticks`]) every backend and
//! scheduler share; the loop that fires them is `scheduler.rs`'s
//! [`Scheduler`](super::Scheduler).

mod cron;
mod due;
mod types;

pub use cron::CronTicks;
pub use due::{check_fire_ticks, check_schedule, due_ticks, next_tick, schedules_need_revision};
pub use types::{
    schedule_tick_key, schedule_tick_of, CatchUp, Schedule, ScheduleFired, ScheduleInfo,
    MAX_CATCH_UP, MAX_CRON_LEN, MAX_FIRE_TICKS,
};

#[cfg(test)]
mod tests;
