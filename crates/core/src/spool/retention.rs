//! Retention: which run events and finished runs a retention pass removes, in what order, and
//! when it stops.
//!
//! The order is fixed by [`RetentionPolicy`]: expired events first, then the oldest events while
//! the total payload is over the cap, then terminal runs that hold no event and finished longer
//! than `max_age` ago. Events are taken in *age order* — `(created_at, store insertion order)` —
//! so expired events always come first, and both kinds of deletion take a prefix of that order:
//! one batch is one prefix, one `DELETE`. Every batch is its own transaction, so a pass never
//! holds the write lock for long and a failure between batches leaves a consistent store.
//!
//! A backend drives a pass with [`RetentionPass`]: it asks [`RetentionPass::next_step`] what to
//! do, reads a window (the oldest events, or the candidate runs), lets the pass plan the batch,
//! deletes it in one transaction, and reports back. The in-memory model uses the same driver, so
//! batch boundaries and reports agree across backends.

use std::time::Duration;

use super::ids::RunId;
use super::limits::MAX_BATCH;
use super::timestamp::Timestamp;
use crate::error::{Error, Result};

/// What retention keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Events older than this are removed; terminal runs without events are removed this long
    /// after they finished (which is also how long a finished key keeps deduplicating).
    pub max_age: Duration,
    /// The cap on the total payload bytes of stored run events.
    pub max_bytes: u64,
}

impl Default for RetentionPolicy {
    /// 7 days, 100 MiB.
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(7 * 24 * 60 * 60),
            max_bytes: 100 * 1024 * 1024,
        }
    }
}

/// How much one retention pass may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionBudget {
    /// Most rows one batch (one transaction) deletes: 1 to [`MAX_BATCH`].
    pub batch_size: usize,
    /// Most batches in the pass.
    pub max_batches: u32,
    /// No batch starts this long (by the spool's clock) after the pass started.
    pub max_duration: Duration,
}

impl Default for RetentionBudget {
    /// 500 rows per batch, at most 1,000 batches, at most 10 s.
    fn default() -> Self {
        Self {
            batch_size: 500,
            max_batches: 1000,
            max_duration: Duration::from_secs(10),
        }
    }
}

/// What a retention pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Batches (transactions) that deleted something or found the phase finished.
    pub batches: u32,
    /// Events removed for age.
    pub events_expired: u64,
    /// Events removed to get under the byte cap.
    pub events_over_cap: u64,
    /// Their payload bytes.
    pub bytes_freed: u64,
    /// Terminal runs without events removed.
    pub runs_removed: u64,
    /// Whether the pass finished everything due (false: the budget ran out first; run it
    /// again).
    pub complete: bool,
}

/// An event as retention sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventMeta {
    /// Its run.
    pub run: RunId,
    /// Its sequence number in the run.
    pub seq: u64,
    /// When it was appended.
    pub created_at: Timestamp,
    /// Its payload size.
    pub bytes: u64,
}

/// A terminal run without events, as retention sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunMeta {
    /// The run.
    pub run: RunId,
    /// When it reached its terminal state.
    pub finished_at: Timestamp,
}

/// One batch of events to delete: a prefix of the age order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventBatch {
    /// `(run, seq)` of each event to delete, oldest first.
    pub events: Vec<(RunId, u64)>,
    /// How many of them are expired (the first ones).
    pub expired: u64,
    /// How many are removed for the cap.
    pub over_cap: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// Plans one event batch.
///
/// `oldest` is the beginning of the age order (at least `batch_size` events, or all of them),
/// `total_bytes` the payload bytes of *all* stored events. The batch is the longest prefix of
/// `oldest`, at most `batch_size` long, whose every event is either created before `cutoff` or
/// still needed to bring the remaining total to at most `max_bytes`.
pub fn plan_event_batch(
    cutoff: Timestamp,
    max_bytes: u64,
    total_bytes: u64,
    oldest: &[EventMeta],
    batch_size: usize,
) -> EventBatch {
    let mut batch = EventBatch::default();
    let mut remaining = total_bytes;
    for e in oldest.iter().take(batch_size) {
        if e.created_at < cutoff {
            batch.expired += 1;
        } else if remaining > max_bytes {
            batch.over_cap += 1;
        } else {
            break;
        }
        remaining = remaining.saturating_sub(e.bytes);
        batch.bytes += e.bytes;
        batch.events.push((e.run, e.seq));
    }
    batch
}

/// Plans one run batch: of `candidates` (terminal runs holding no event, ordered by
/// `(finished_at, enqueue order)` so every backend removes the same runs first), those finished
/// before `cutoff`, at most `batch_size`.
pub fn plan_run_batch(cutoff: Timestamp, candidates: &[RunMeta], batch_size: usize) -> Vec<RunId> {
    candidates
        .iter()
        .take_while(|r| r.finished_at < cutoff)
        .take(batch_size)
        .map(|r| r.run)
        .collect()
}

/// What a retention pass does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetentionStep {
    /// Plan and delete one event batch ([`RetentionPass::plan_events`]).
    Events,
    /// Plan and delete one run batch ([`RetentionPass::plan_runs`]).
    Runs,
}

/// The driver of one retention pass (see the module docs); the same loop on every backend.
#[derive(Clone, Debug)]
pub struct RetentionPass {
    policy: RetentionPolicy,
    budget: RetentionBudget,
    started: Timestamp,
    phase: Option<RetentionStep>,
    report: RetentionReport,
}

impl RetentionPass {
    /// Starts a pass at `now`. Ages are measured from `now` for the whole pass.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a batch size outside 1..=[`MAX_BATCH`] or zero batches.
    pub fn new(policy: RetentionPolicy, budget: RetentionBudget, now: Timestamp) -> Result<Self> {
        if !(1..=MAX_BATCH).contains(&budget.batch_size) {
            return Err(Error::invalid(
                "retention batch size",
                format!(
                    "is {}; it must be between 1 and {MAX_BATCH}",
                    budget.batch_size
                ),
            ));
        }
        if budget.max_batches == 0 {
            return Err(Error::invalid("retention budget", "allows no batch"));
        }
        Ok(Self {
            policy,
            budget,
            started: now,
            phase: Some(RetentionStep::Events),
            report: RetentionReport::default(),
        })
    }

    /// Events created before this are expired; terminal runs finished before it are removable.
    pub fn cutoff(&self) -> Timestamp {
        self.started.saturating_sub(self.policy.max_age)
    }

    /// The batch size (how many events or runs to read into the window).
    pub fn batch_size(&self) -> usize {
        self.budget.batch_size
    }

    /// The next step, or `None` when the pass is finished or its budget is spent.
    pub fn next_step(&self, now: Timestamp) -> Option<RetentionStep> {
        let phase = self.phase?;
        let out_of_budget = self.report.batches >= self.budget.max_batches
            || now.duration_since(self.started) >= self.budget.max_duration;
        (!out_of_budget).then_some(phase)
    }

    /// Plans the next event batch from the window (see [`plan_event_batch`]).
    pub fn plan_events(&self, total_bytes: u64, oldest: &[EventMeta]) -> EventBatch {
        plan_event_batch(
            self.cutoff(),
            self.policy.max_bytes,
            total_bytes,
            oldest,
            self.budget.batch_size,
        )
    }

    /// Plans the next run batch from the candidates (see [`plan_run_batch`]).
    pub fn plan_runs(&self, candidates: &[RunMeta]) -> Vec<RunId> {
        plan_run_batch(self.cutoff(), candidates, self.budget.batch_size)
    }

    /// Records a committed event batch. A batch shorter than the batch size ends the event
    /// phase: nothing later in the age order can be due.
    pub fn events_deleted(&mut self, batch: &EventBatch) {
        self.report.batches += 1;
        self.report.events_expired += batch.expired;
        self.report.events_over_cap += batch.over_cap;
        self.report.bytes_freed += batch.bytes;
        if batch.events.len() < self.budget.batch_size {
            self.phase = Some(RetentionStep::Runs);
        }
    }

    /// Records a committed run batch of `removed` runs; a short batch ends the pass.
    pub fn runs_deleted(&mut self, removed: usize) {
        self.report.batches += 1;
        self.report.runs_removed += removed as u64;
        if removed < self.budget.batch_size {
            self.phase = None;
        }
    }

    /// The report.
    pub fn finish(self) -> RetentionReport {
        RetentionReport {
            complete: self.phase.is_none(),
            ..self.report
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(i: u64, created: i64, bytes: u64) -> EventMeta {
        EventMeta {
            run: RunId([i as u8; 16]),
            seq: i,
            created_at: Timestamp::from_unix_micros(created),
            bytes,
        }
    }

    #[test]
    fn expired_first_then_oldest_over_cap() {
        let events = [
            ev(1, 1, 10),
            ev(2, 2, 10),
            ev(3, 50, 10),
            ev(4, 60, 10),
            ev(5, 70, 10),
        ];
        // Cutoff 10: two expired; the cap of 15 then needs 30 - 15 = 15 more bytes, i.e. two
        // more events.
        let b = plan_event_batch(Timestamp::from_unix_micros(10), 15, 50, &events, 100);
        assert_eq!(b.expired, 2);
        assert_eq!(b.over_cap, 2);
        assert_eq!(b.bytes, 40);
        assert_eq!(b.events.len(), 4);
        // Batches are bounded.
        let b = plan_event_batch(Timestamp::from_unix_micros(10), 15, 50, &events, 3);
        assert_eq!((b.expired, b.over_cap), (2, 1));
        // Nothing due.
        let b = plan_event_batch(Timestamp::from_unix_micros(0), 50, 50, &events, 3);
        assert!(b.events.is_empty());
    }

    #[test]
    fn runs_finished_before_the_cutoff() {
        let runs: Vec<RunMeta> = (0..5)
            .map(|i| RunMeta {
                run: RunId([i; 16]),
                finished_at: Timestamp::from_unix_micros(i64::from(i) * 10),
            })
            .collect();
        let ids = plan_run_batch(Timestamp::from_unix_micros(25), &runs, 10);
        assert_eq!(ids, vec![RunId([0; 16]), RunId([1; 16]), RunId([2; 16])]);
        assert_eq!(
            plan_run_batch(Timestamp::from_unix_micros(25), &runs, 2).len(),
            2
        );
        // A run finished exactly at the cutoff is not older than max_age: kept.
        assert_eq!(
            plan_run_batch(Timestamp::from_unix_micros(20), &runs, 10),
            vec![RunId([0; 16]), RunId([1; 16])]
        );
    }

    #[test]
    fn pass_budget_and_phases() {
        let t0 = Timestamp::from_unix_micros(1_000_000_000);
        let budget = RetentionBudget {
            batch_size: 2,
            max_batches: 3,
            max_duration: Duration::from_secs(5),
        };
        let mut pass = RetentionPass::new(RetentionPolicy::default(), budget, t0).unwrap();
        assert_eq!(pass.next_step(t0), Some(RetentionStep::Events));
        assert_eq!(
            pass.next_step(t0.saturating_add(Duration::from_secs(5))),
            None
        );
        let full = EventBatch {
            events: vec![(RunId([0; 16]), 1), (RunId([0; 16]), 2)],
            expired: 2,
            ..EventBatch::default()
        };
        pass.events_deleted(&full);
        assert_eq!(pass.next_step(t0), Some(RetentionStep::Events));
        pass.events_deleted(&EventBatch::default());
        assert_eq!(pass.next_step(t0), Some(RetentionStep::Runs));
        pass.runs_deleted(2);
        assert_eq!(pass.next_step(t0), None, "three batches spent");
        let r = pass.finish();
        assert!(!r.complete);
        assert_eq!((r.batches, r.events_expired, r.runs_removed), (3, 2, 2));
        assert!(RetentionPass::new(
            RetentionPolicy::default(),
            RetentionBudget {
                batch_size: 0,
                ..budget
            },
            t0
        )
        .is_err());
    }

    fn histories() -> impl Strategy<Value = Vec<(i64, u64)>> {
        // (age step, bytes) per event: creation times never decrease, as in age order.
        prop::collection::vec((0i64..5, 0u64..100), 0..60)
    }

    proptest! {
        /// Batching a whole history to completion leaves no expired event, stays under the cap,
        /// and deletes nothing that was neither expired nor needed for the cap.
        #[test]
        fn batches_reach_a_minimal_bounded_state(
            steps in histories(), cutoff in 0i64..200, max_bytes in 0u64..2000, batch in 1usize..7
        ) {
            let mut t = 0;
            let mut events: Vec<EventMeta> = Vec::new();
            for (i, (step, bytes)) in steps.iter().enumerate() {
                t += step;
                events.push(ev(i as u64, t, *bytes));
            }
            let cutoff = Timestamp::from_unix_micros(cutoff);
            let mut rest = events.clone();
            loop {
                let total: u64 = rest.iter().map(|e| e.bytes).sum();
                let b = plan_event_batch(cutoff, max_bytes, total, &rest, batch);
                prop_assert!(b.events.len() <= batch);
                let n = b.events.len();
                rest.drain(..n);
                if n < batch { break; }
            }
            let total: u64 = rest.iter().map(|e| e.bytes).sum();
            prop_assert!(total <= max_bytes);
            prop_assert!(rest.iter().all(|e| e.created_at >= cutoff));
            // Minimal: putting back the youngest deleted event would break a bound.
            let deleted = events.len() - rest.len();
            if deleted > 0 {
                let last = events[deleted - 1];
                prop_assert!(last.created_at < cutoff || total + last.bytes > max_bytes);
            }
        }
    }
}
