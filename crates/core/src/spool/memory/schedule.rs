//! The model's schedules: stored by name beside the runs, fired under the one lock, so the
//! runs of a fire and its high-water mark change together.

use super::super::ids::ScheduleName;
use super::super::schedule::{schedule_tick_key, Schedule, ScheduleFired, ScheduleInfo};
use super::super::timestamp::Timestamp;
use super::state::State;
use crate::error::Result;

impl State {
    /// Stores `schedule` (checked by the caller) at `now`: a new one with the mark at `now`
    /// and revision 1, an edit with the revision bumped and the creation time kept, and the
    /// mark kept unless the expression or zone changed (then moved up to `now`).
    pub(super) fn put_schedule(&mut self, schedule: &Schedule, now: Timestamp) -> ScheduleInfo {
        let info = match self.schedules.get(&schedule.name) {
            Some(old) => ScheduleInfo {
                schedule: schedule.clone(),
                // A new expression (or zone) starts from the edit: none of its earlier ticks
                // are caught up.
                high_water: if old.schedule.cron != schedule.cron
                    || old.schedule.time_zone != schedule.time_zone
                {
                    old.high_water.max(now)
                } else {
                    old.high_water
                },
                revision: old.revision + 1,
                created_at: old.created_at,
                updated_at: now,
            },
            None => ScheduleInfo {
                schedule: schedule.clone(),
                high_water: now,
                revision: 1,
                created_at: now,
                updated_at: now,
            },
        };
        self.schedules.insert(schedule.name.clone(), info.clone());
        info
    }

    /// Enqueues `ticks` (checked by the caller) after the mark of `name` at `revision`, moves
    /// the mark to the latest, and wakes the queue when a run was created.
    pub(super) fn fire_schedule(
        &mut self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
        now: Timestamp,
    ) -> Result<ScheduleFired> {
        let Some(info) = self.schedules.get(name).filter(|i| i.revision == revision) else {
            return Ok(ScheduleFired::Stale);
        };
        let (schedule, mark) = (info.schedule.clone(), info.high_water);
        let max_attempts = schedule.options.effective_max_attempts()?;
        // Every key first: a refusal writes nothing.
        let due = ticks
            .iter()
            .filter(|t| **t > mark)
            .map(|t| Ok((*t, schedule_tick_key(name, *t)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut runs = Vec::with_capacity(due.len());
        for (tick, key) in due {
            let done = self.enqueue(
                &schedule.queue,
                &key,
                schedule.payload.clone(),
                schedule.options.clone(),
                max_attempts,
                now,
            );
            runs.push((tick, done));
        }
        let high_water = runs.last().map_or(mark, |(t, _)| *t);
        if let Some(info) = self.schedules.get_mut(name) {
            info.high_water = high_water;
        }
        if runs.iter().any(|(_, e)| e.created) {
            self.notify(&schedule.queue);
        }
        Ok(ScheduleFired::Fired { runs, high_water })
    }
}
