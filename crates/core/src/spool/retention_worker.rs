//! The retention loop a service runs beside its consumers ([`RetentionWorker`]), so a service
//! that embeds cairn bounds what finished work leaves behind the way `cairn serve` does (which
//! runs this same loop).
//!
//! It runs [`Spool::retention_pass`] at start and then every interval; a pass its time budget
//! cut short is followed by the next one soon after ([`RETENTION_CATCH_UP`]), until one
//! completes. Each pass starts no batch after its budget, so stopping waits at most about that
//! long. Every pass is counted through the `metrics` facade ([`RETENTION_PASSES_METRIC`] by
//! outcome, [`RETENTION_REMOVED_METRIC`] by kind) and reported to an optional callback.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::contract::Spool;
use super::retention::{RetentionBudget, RetentionPolicy, RetentionReport};
use crate::error::Result;

/// Default time between two complete passes.
pub const DEFAULT_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
/// Default time one pass may start batches.
pub const DEFAULT_RETENTION_PASS_BUDGET: Duration = Duration::from_secs(2);
/// After a pass its budget cut short, the next starts this soon (or at the interval, when that
/// is shorter).
pub const RETENTION_CATCH_UP: Duration = Duration::from_secs(1);
/// Passes by outcome (`complete`, `partial`: the budget ran out, `failed`).
pub const RETENTION_PASSES_METRIC: &str = "cairn_spool_retention_passes_total";
/// What passes removed, by kind (`events_expired`, `events_over_cap`, `runs`).
pub const RETENTION_REMOVED_METRIC: &str = "cairn_spool_retention_removed_total";

type OnPass = Arc<dyn Fn(&Result<RetentionReport>) + Send + Sync>;

/// Runs retention passes over a spool until stopped: [`RetentionWorker::spawn`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> cairn_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cairn_core::spool::{ManualClock, MemorySpool, RetentionPolicy, RetentionWorker, Spool};
///
/// let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(ManualClock::default())));
/// let policy = RetentionPolicy {
///     max_age: Duration::from_secs(7 * 24 * 3600),
///     max_bytes: 1 << 30,
/// };
/// let worker = RetentionWorker::new(spool, policy)
///     .interval(Duration::from_secs(300))
///     .spawn();
/// // … the service runs; a pass at start, then one every five minutes …
/// let passes = worker.shutdown().await;
/// println!("{passes} retention passes");
/// # Ok(())
/// # }
/// ```
pub struct RetentionWorker {
    spool: Arc<dyn Spool>,
    policy: RetentionPolicy,
    interval: Duration,
    budget: Duration,
    on_pass: Option<OnPass>,
}

impl fmt::Debug for RetentionWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetentionWorker")
            .field("policy", &self.policy)
            .field("interval", &self.interval)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl RetentionWorker {
    /// A worker keeping `policy` on `spool`, every [`DEFAULT_RETENTION_INTERVAL`], each pass
    /// within [`DEFAULT_RETENTION_PASS_BUDGET`].
    pub fn new(spool: Arc<dyn Spool>, policy: RetentionPolicy) -> Self {
        Self {
            spool,
            policy,
            interval: DEFAULT_RETENTION_INTERVAL,
            budget: DEFAULT_RETENTION_PASS_BUDGET,
            on_pass: None,
        }
    }

    /// Time between two complete passes (at least 1 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(1));
        self
    }

    /// How long one pass may start batches (each batch is one short transaction).
    pub fn pass_budget(mut self, budget: Duration) -> Self {
        self.budget = budget;
        self
    }

    /// Calls `f` with each pass's report or error (to log it, or count it elsewhere).
    pub fn on_pass(mut self, f: impl Fn(&Result<RetentionReport>) + Send + Sync + 'static) -> Self {
        self.on_pass = Some(Arc::new(f));
        self
    }

    /// Starts the loop on the current Tokio runtime.
    pub fn spawn(self) -> RetentionHandle {
        let (stop, mut stopping) = watch::channel(false);
        let task = tokio::spawn(async move {
            let budget = RetentionBudget {
                max_duration: self.budget,
                ..RetentionBudget::default()
            };
            let mut passes = 0u64;
            loop {
                if *stopping.borrow() {
                    return passes;
                }
                let result = self.spool.retention_pass(&self.policy, &budget).await;
                passes += 1;
                record(&result);
                if let Some(f) = &self.on_pass {
                    f(&result);
                }
                let next = match &result {
                    Ok(report) if !report.complete => RETENTION_CATCH_UP.min(self.interval),
                    _ => self.interval,
                };
                tokio::select! {
                    () = tokio::time::sleep(next) => {}
                    _ = stopping.wait_for(|s| *s) => return passes,
                }
            }
        });
        RetentionHandle {
            stop,
            task: Some(task),
        }
    }
}

/// A running [`RetentionWorker`]. Dropped without [`RetentionHandle::shutdown`], it stops the
/// loop at once (a pass in flight is abandoned between its batches' transactions).
#[derive(Debug)]
pub struct RetentionHandle {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<u64>>,
}

impl RetentionHandle {
    /// Stops the loop after the pass in flight (if any) and answers how many passes ran.
    pub async fn shutdown(mut self) -> u64 {
        let _ = self.stop.send(true);
        match self.task.take() {
            Some(task) => task.await.unwrap_or(0),
            None => 0,
        }
    }
}

impl Drop for RetentionHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Counts a pass through the `metrics` facade.
fn record(result: &Result<RetentionReport>) {
    let outcome = match result {
        Ok(r) if r.complete => "complete",
        Ok(_) => "partial",
        Err(_) => "failed",
    };
    metrics::counter!(RETENTION_PASSES_METRIC, "outcome" => outcome).increment(1);
    if let Ok(r) = result {
        for (kind, n) in [
            ("events_expired", r.events_expired),
            ("events_over_cap", r.events_over_cap),
            ("runs", r.runs_removed),
        ] {
            if n > 0 {
                metrics::counter!(RETENTION_REMOVED_METRIC, "kind" => kind).increment(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::spool::{
        ConsumerId, DedupKey, EnqueueOptions, ManualClock, MemorySpool, QueueName, RunState,
    };

    /// Finished runs older than the policy are removed by the worker's passes, every interval,
    /// with each pass reported; shutdown stops the loop.
    #[tokio::test(start_paused = true)]
    async fn passes_run_at_start_and_every_interval_and_remove_old_finished_runs() {
        let clock = ManualClock::default();
        let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(clock.clone())));
        let q = QueueName::new("q").unwrap();
        let key = DedupKey::from_parts(["old"]).unwrap();
        let run = spool
            .enqueue(&q, &key, b"p".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        let me = ConsumerId::new("w").unwrap();
        let c = spool
            .claim(&q, &me, Duration::from_secs(30), 1)
            .await
            .unwrap();
        spool.ack(c[0].run_id, c[0].token).await.unwrap();
        let reports = Arc::new(Mutex::new(Vec::new()));
        let seen = reports.clone();
        let policy = RetentionPolicy {
            max_age: Duration::from_secs(3600),
            max_bytes: 1 << 20,
        };
        let worker = RetentionWorker::new(spool.clone(), policy)
            .interval(Duration::from_secs(60))
            .on_pass(move |r| {
                seen.lock()
                    .unwrap()
                    .push(r.as_ref().map(|r| r.runs_removed).ok())
            })
            .spawn();
        // The first pass at start finds the run too young.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(*reports.lock().unwrap(), [Some(0)]);
        assert_eq!(
            spool.run(run.run_id).await.unwrap().unwrap().state,
            RunState::Succeeded
        );
        // Two hours later (the spool's clock), the next pass, one interval on, removes it.
        clock.advance(Duration::from_secs(7200));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(*reports.lock().unwrap(), [Some(0), Some(1)]);
        assert!(spool.run(run.run_id).await.unwrap().is_none());
        assert_eq!(worker.shutdown().await, 2);
    }
}
