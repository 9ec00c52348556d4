//! The decisions every backend and every scheduler share: the checks of a schedule
//! ([`check_schedule`]) and of the ticks given to `fire_schedule` ([`check_fire_ticks`]), and
//! which ticks a scheduler round fires ([`due_ticks`]).

use super::super::checks::check_payload;
use super::super::limits::MAX_RUN_PAYLOAD;
use super::super::timestamp::Timestamp;
use super::cron::CronTicks;
use super::types::{CatchUp, Schedule, ScheduleInfo, MAX_CATCH_UP, MAX_FIRE_TICKS};
use crate::error::{Error, Result};

/// Checks a schedule as [`Spool::put_schedule`](crate::spool::Spool::put_schedule) must
/// before anything is written, and returns its parsed expression.
///
/// # Errors
/// [`Error::InvalidInput`] for an expression or time zone [`CronTicks::parse`] refuses, an
/// expression that matches no time after `now`, a payload or options an enqueue would refuse,
/// options with `not_before` (a tick's run is due at its tick) or a `traceparent` (a
/// schedule's runs carry no trace: no enqueuer's span is waiting on them), or a
/// [`CatchUp::All`] cap outside 1..=[`MAX_CATCH_UP`].
pub fn check_schedule(schedule: &Schedule, now: Timestamp) -> Result<CronTicks> {
    let ticks = CronTicks::parse(&schedule.cron, &schedule.time_zone)?;
    check_payload("run payload", MAX_RUN_PAYLOAD, &schedule.payload)?;
    if schedule.options.not_before.is_some() {
        return Err(Error::invalid(
            "schedule options",
            "must not set not_before: each tick's run is due at its tick",
        ));
    }
    if schedule.options.traceparent.is_some() {
        return Err(Error::invalid(
            "schedule options",
            "must not set traceparent: a schedule's runs carry no trace",
        ));
    }
    schedule.options.effective_max_attempts()?;
    if let CatchUp::All { cap } = schedule.catch_up {
        if !(1..=MAX_CATCH_UP).contains(&cap) {
            return Err(Error::invalid(
                "catch-up cap",
                format!("is {cap}; it must be between 1 and {MAX_CATCH_UP}"),
            ));
        }
    }
    if ticks.next_after(now).is_none() {
        return Err(Error::invalid(
            "cron expression",
            format!(
                "`{}` matches no time after now in {}; it would never fire",
                schedule.cron, schedule.time_zone
            ),
        ));
    }
    Ok(ticks)
}

/// Checks the ticks given to [`Spool::fire_schedule`](crate::spool::Spool::fire_schedule)
/// before anything is read or written: at most [`MAX_FIRE_TICKS`], strictly ascending, each a
/// time cairn stores ([`Timestamp::check`]).
///
/// # Errors
/// [`Error::InvalidInput`] saying which rule the ticks break.
pub fn check_fire_ticks(ticks: &[Timestamp]) -> Result<()> {
    if ticks.len() > MAX_FIRE_TICKS as usize {
        return Err(Error::invalid(
            "schedule ticks",
            format!("are {}; the limit is {MAX_FIRE_TICKS}", ticks.len()),
        ));
    }
    for t in ticks {
        t.check("schedule tick")?;
    }
    if ticks.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::invalid(
            "schedule ticks",
            "must be strictly ascending",
        ));
    }
    Ok(())
}

/// The ticks a scheduler round at `now` fires for `info`, ascending: what it passes to
/// [`Spool::fire_schedule`](crate::spool::Spool::fire_schedule).
///
/// The candidates are the expression's ticks after the high-water mark and at or before
/// `now`. Of those:
/// - every tick at or after `watched_since` is *on time* and fired, whatever the catch-up
///   policy: the caller was watching when it came due. A [`Scheduler`](crate::spool::Scheduler)
///   passes the time its previous round began (so a round that woke late still fires the ticks
///   of the time it slept), and in its first round `now` minus its grace;
/// - the ticks before `watched_since` were *missed* (no scheduler fired them in time) and
///   follow [`CatchUp`]: [`CatchUp::None`] fires none of them, [`CatchUp::Latest`] the latest
///   one, [`CatchUp::All`] the latest `cap`.
///
/// So a scheduler restarted after five missed ticks of a running schedule enqueues none of
/// them (None), the fifth (Latest), or all five (All with a cap of 5 or more; the latest
/// `cap` with a smaller one), and every later tick as it comes due. At most [`MAX_CATCH_UP`]
/// missed and [`MAX_CATCH_UP`] on-time ticks are returned (the latest ones; a scheduler that
/// slept through more on-time ticks fires the latest). Missed ticks that are not fired stay
/// before the mark once a later tick is fired, so they are never considered again.
///
/// The search runs back from `now` and stops as soon as the policy is satisfied, so its cost
/// does not grow with the length of the gap.
///
/// # Errors
/// [`Error::InvalidInput`] when the stored expression or time zone does not parse in this
/// build (stored by another build: [`check_schedule`] refuses them before they are stored).
pub fn due_ticks(
    info: &ScheduleInfo,
    now: Timestamp,
    watched_since: Timestamp,
) -> Result<Vec<Timestamp>> {
    let ticks = CronTicks::parse(&info.schedule.cron, &info.schedule.time_zone)?;
    let missed_wanted = match info.schedule.catch_up {
        CatchUp::None => 0,
        CatchUp::Latest => 1,
        CatchUp::All { cap } => cap.min(MAX_CATCH_UP) as usize,
    };
    let mut fire = Vec::new();
    let (mut missed, mut on_time) = (0usize, 0usize);
    let mut at = ticks.latest_at_or_before(now);
    while let Some(t) = at {
        if t <= info.high_water {
            break;
        }
        if t < watched_since {
            if missed >= missed_wanted {
                break;
            }
            missed += 1;
        } else {
            if on_time >= MAX_CATCH_UP as usize {
                break;
            }
            on_time += 1;
        }
        fire.push(t);
        at = ticks.latest_before(t);
    }
    fire.reverse();
    Ok(fire)
}

/// The refusal of every schedule method on a store whose schema is older than revision
/// `0009_spool_flow`, which adds the schedule table (its upgrade stopped before it, e.g.
/// behind a deferred contract revision): [`Error::Incompatible`], the same words on every
/// backend.
pub fn schedules_need_revision() -> Error {
    Error::Incompatible {
        detail: "the store's schema is older than revision 0009_spool_flow, which adds stored \
                 schedules (table spool_schedule); nothing was read or written. Bring the \
                 store to 0009_spool_flow with `cairn migrate up` (an upgrade held back by a \
                 deferred contract revision gets there once that revision is applied)"
            .into(),
        blockers: Vec::new(),
    }
}

/// The first tick of `info` after `after` (and after its high-water mark): when a scheduler
/// must look again. `None` when the expression matches no later time or does not parse in this
/// build.
pub fn next_tick(info: &ScheduleInfo, after: Timestamp) -> Option<Timestamp> {
    let ticks = CronTicks::parse(&info.schedule.cron, &info.schedule.time_zone).ok()?;
    ticks.next_after(after.max(info.high_water))
}
