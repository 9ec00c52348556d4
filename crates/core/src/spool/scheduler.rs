//! The scheduler loop: fires the stored schedules of a spool ([`Scheduler`]).
//!
//! Each round reads every schedule ([`Spool::schedules`]), computes each one's due ticks with
//! [`due_ticks`] and hands them to [`Spool::fire_schedule`], which enqueues each tick once
//! across all processes; a schedule edited meanwhile answers [`ScheduleFired::Stale`] and is
//! read again. Between rounds the loop sleeps until the earliest next tick of any schedule,
//! but at most its poll interval, so a schedule created, edited or removed by another process
//! takes effect at its next tick (or within one poll interval for a new, earlier tick). Any
//! number of schedulers may run over one store: no leader, no lock held between rounds.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::contract::Spool;
use super::ids::{QueueName, ScheduleName};
use super::schedule::{due_ticks, next_tick, ScheduleFired, ScheduleInfo};
use super::timestamp::Timestamp;
use super::types::Enqueued;
use crate::error::Result;

/// Default longest sleep of a [`Scheduler`] between two rounds.
pub const DEFAULT_SCHEDULER_POLL: Duration = Duration::from_secs(1);
/// Default grace of a [`Scheduler`]'s first round: ticks at most this old when it starts are
/// on time, not missed (see [`due_ticks`]).
pub const DEFAULT_SCHEDULER_GRACE: Duration = Duration::from_secs(1);
/// How often one round reads a schedule again after [`ScheduleFired::Stale`].
const STALE_RETRIES: usize = 3;
/// The shortest sleep between rounds.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// What one round fired for one schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleFiring {
    /// The schedule.
    pub name: ScheduleName,
    /// The queue its runs went to.
    pub queue: QueueName,
    /// Each tick this round enqueued (ascending) with its run; ticks another scheduler fired
    /// first are not listed.
    pub runs: Vec<(Timestamp, Enqueued)>,
    /// How many of `runs` were missed ticks, enqueued by the catch-up policy.
    pub missed: usize,
    /// The schedule's high-water mark after the round.
    pub high_water: Timestamp,
}

/// What one [`Scheduler::round`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerRound {
    /// The spool-clock time the round computed its ticks at.
    pub at: Timestamp,
    /// The schedules that got runs, by name.
    pub fired: Vec<ScheduleFiring>,
    /// Fires answered [`ScheduleFired::Stale`] (the schedule was read again).
    pub stale: u64,
    /// Schedules this round could not fire, with the error (the round went on with the
    /// others).
    pub errors: Vec<(ScheduleName, String)>,
    /// The earliest tick of any schedule after the round: when the next round is due.
    pub next_tick: Option<Timestamp>,
}

/// Counters of a scheduler, for logs, metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Rounds run (failed ones included).
    pub rounds: u64,
    /// Ticks this scheduler enqueued (each run it listed in a [`ScheduleFiring`]).
    pub ticks: u64,
    /// Of those, runs that were new (a tick whose key already had a run counts in `ticks`
    /// only).
    pub runs_created: u64,
    /// Fires answered [`ScheduleFired::Stale`].
    pub stale: u64,
    /// Spool calls that failed (the loop carries on).
    pub errors: u64,
    /// The latest such error's message.
    pub last_error: Option<String>,
}

type OnFire = Arc<dyn Fn(&ScheduleFiring) + Send + Sync>;

/// Fires the stored schedules of a spool: one round at a time ([`Scheduler::round`]), or as a
/// loop ([`Scheduler::run_until`], [`Scheduler::spawn`]).
///
/// Time is the spool's clock; the loop sleeps on the Tokio timer until the earliest next tick
/// on that clock, at most [`Scheduler::poll_interval`], so a spool on a
/// [`ManualClock`](super::ManualClock) is driven by advancing the clock (the loop notices within
/// one poll interval).
///
/// On time and missed ticks ([`due_ticks`]): a round passes the time its previous successful
/// round began as `watched_since` (ticks since then came due while this scheduler watched and
/// are always fired), and its first round `now` minus [`Scheduler::grace`]. A round in which
/// a spool call failed does not move that time, so ticks of a store that was unreachable
/// while the scheduler ran are still fired once it answers (at most
/// [`MAX_CATCH_UP`](super::MAX_CATCH_UP) per schedule and round); only ticks that passed
/// while no scheduler ran follow the schedule's catch-up policy.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> cairn_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cairn_core::spool::{
///     CatchUp, EnqueueOptions, ManualClock, MemorySpool, QueueName, Schedule, ScheduleName,
///     Scheduler, Spool,
/// };
///
/// let clock = ManualClock::default();
/// let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(clock.clone())));
/// spool
///     .put_schedule(&Schedule {
///         name: ScheduleName::new("hourly-report")?,
///         cron: "0 * * * *".into(),
///         time_zone: "Europe/Berlin".into(),
///         queue: QueueName::new("reports")?,
///         payload: b"{}".to_vec(),
///         options: EnqueueOptions::default(),
///         catch_up: CatchUp::Latest,
///     })
///     .await?;
/// let mut scheduler = Scheduler::new(spool.clone());
/// assert!(scheduler.round().await?.fired.is_empty());
/// clock.advance(Duration::from_secs(3600));
/// let round = scheduler.round().await?;
/// assert_eq!(round.fired[0].runs.len(), 1);
/// # Ok(())
/// # }
/// ```
pub struct Scheduler {
    spool: Arc<dyn Spool>,
    poll_interval: Duration,
    grace: Duration,
    on_fire: Option<OnFire>,
    /// When the previous successful round began.
    last_round: Option<Timestamp>,
    stats: Arc<Mutex<SchedulerStats>>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("poll_interval", &self.poll_interval)
            .field("grace", &self.grace)
            .field("last_round", &self.last_round)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler of `spool`'s schedules with [`DEFAULT_SCHEDULER_POLL`] and
    /// [`DEFAULT_SCHEDULER_GRACE`].
    pub fn new(spool: Arc<dyn Spool>) -> Self {
        Self {
            spool,
            poll_interval: DEFAULT_SCHEDULER_POLL,
            grace: DEFAULT_SCHEDULER_GRACE,
            on_fire: None,
            last_round: None,
            stats: Arc::new(Mutex::new(SchedulerStats::default())),
        }
    }

    /// The longest sleep between two rounds (at least 1 ms): how late a schedule created or
    /// edited in another process with an earlier tick than any known can fire, and the step at
    /// which a [`ManualClock`](super::ManualClock) is noticed.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every.max(MIN_WAIT);
        self
    }

    /// How old a tick may be at the first round and still count as on time rather than missed.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Calls `f` with every schedule a round fired (after its commit), e.g. to log it.
    pub fn on_fire(mut self, f: impl Fn(&ScheduleFiring) + Send + Sync + 'static) -> Self {
        self.on_fire = Some(Arc::new(f));
        self
    }

    /// The counters so far.
    pub fn stats(&self) -> SchedulerStats {
        lock(&self.stats).clone()
    }

    /// One round at the spool clock's `now`: reads every schedule and fires its due ticks.
    ///
    /// # Errors
    /// The spool's error when the schedules cannot be read; an error firing one schedule is
    /// listed in [`SchedulerRound::errors`] instead, and the round goes on.
    pub async fn round(&mut self) -> Result<SchedulerRound> {
        let now = self.spool.clock().now();
        let first = now.saturating_sub(self.grace);
        let watched_since = self.last_round.map_or(first, |p| p.min(first));
        lock(&self.stats).rounds += 1;
        let infos = match self.spool.schedules().await {
            Ok(infos) => infos,
            Err(e) => {
                self.error(&e.to_string());
                return Err(e);
            }
        };
        let mut round = SchedulerRound {
            at: now,
            fired: Vec::new(),
            stale: 0,
            errors: Vec::new(),
            next_tick: None,
        };
        for info in infos {
            let name = info.schedule.name.clone();
            match self.fire(info, now, watched_since, &mut round).await {
                Ok(Some(next)) => {
                    round.next_tick = Some(round.next_tick.map_or(next, |t| t.min(next)));
                }
                Ok(None) => {}
                Err(e) => {
                    self.error(&e.to_string());
                    round.errors.push((name, e.to_string()));
                }
            }
        }
        if round.errors.is_empty() {
            self.last_round = Some(now);
        }
        Ok(round)
    }

    /// Fires one schedule's due ticks, reading it again after `Stale`; returns its next tick.
    async fn fire(
        &self,
        mut info: ScheduleInfo,
        now: Timestamp,
        watched_since: Timestamp,
        round: &mut SchedulerRound,
    ) -> Result<Option<Timestamp>> {
        for _ in 0..STALE_RETRIES {
            let ticks = due_ticks(&info, now, watched_since)?;
            if ticks.is_empty() {
                return Ok(next_tick(&info, now));
            }
            let name = &info.schedule.name;
            match self
                .spool
                .fire_schedule(name, info.revision, &ticks)
                .await?
            {
                ScheduleFired::Fired { runs, high_water } => {
                    info.high_water = high_water;
                    if !runs.is_empty() {
                        let firing = ScheduleFiring {
                            name: name.clone(),
                            queue: info.schedule.queue.clone(),
                            missed: runs.iter().filter(|(t, _)| *t < watched_since).count(),
                            runs,
                            high_water,
                        };
                        {
                            let mut stats = lock(&self.stats);
                            stats.ticks += firing.runs.len() as u64;
                            stats.runs_created +=
                                firing.runs.iter().filter(|(_, e)| e.created).count() as u64;
                        }
                        if let Some(f) = &self.on_fire {
                            f(&firing);
                        }
                        round.fired.push(firing);
                    }
                    return Ok(next_tick(&info, now));
                }
                ScheduleFired::Stale => {
                    round.stale += 1;
                    lock(&self.stats).stale += 1;
                    match self.spool.schedule(name).await? {
                        Some(fresh) => info = fresh,
                        None => return Ok(None),
                    }
                }
            }
        }
        // Edited again and again while this round read it: the next round tries again.
        Ok(next_tick(&info, now))
    }

    fn error(&self, message: &str) {
        let mut stats = lock(&self.stats);
        stats.errors += 1;
        stats.last_error = Some(message.to_owned());
    }

    /// Runs rounds until `stop` resolves; returns the counters. A failed round is counted
    /// ([`SchedulerStats::errors`]) and the loop tries again after the poll interval.
    pub async fn run_until<F: Future<Output = ()>>(mut self, stop: F) -> SchedulerStats {
        tokio::pin!(stop);
        loop {
            let next = match self.round().await {
                Ok(round) => round.next_tick,
                Err(_) => None,
            };
            let now = self.spool.clock().now();
            let wait = next
                .map_or(self.poll_interval, |t| {
                    t.duration_since(now).min(self.poll_interval)
                })
                .max(MIN_WAIT);
            tokio::select! {
                biased;
                () = &mut stop => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.stats()
    }

    /// Starts [`Scheduler::run_until`] on the current Tokio runtime; the handle stops it.
    pub fn spawn(self) -> SchedulerHandle {
        let (tx, rx) = oneshot::channel::<()>();
        let stats = self.stats.clone();
        let task = tokio::spawn(self.run_until(async move {
            // A dropped handle stops the loop as a shutdown does.
            let _ = rx.await;
        }));
        SchedulerHandle {
            stop: Some(tx),
            task: Some(task),
            stats,
        }
    }
}

/// A running [`Scheduler`] loop, started by [`Scheduler::spawn`]. Dropping it stops the loop
/// at its next wait (a round in progress finishes).
#[derive(Debug)]
pub struct SchedulerHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<SchedulerStats>>,
    stats: Arc<Mutex<SchedulerStats>>,
}

impl SchedulerHandle {
    /// The counters so far.
    pub fn stats(&self) -> SchedulerStats {
        lock(&self.stats).clone()
    }

    /// Stops the loop after the round in progress (if any) and returns its counters.
    pub async fn shutdown(mut self) -> SchedulerStats {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            if let Ok(stats) = task.await {
                return stats;
            }
        }
        self.stats()
    }
}

fn lock(stats: &Mutex<SchedulerStats>) -> MutexGuard<'_, SchedulerStats> {
    // Every update under this lock is a plain counter change: a panic elsewhere cannot leave
    // it half done.
    stats.lock().unwrap_or_else(|p| p.into_inner())
}
