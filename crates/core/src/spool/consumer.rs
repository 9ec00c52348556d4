//! The consumer loop: the library's worker over any [`Spool`].
//!
//! A [`Consumer`] runs up to `concurrency` handlers of one queue at a time, calls a
//! [`Handler`] per run on its own task, heartbeats each lease every `lease / 3` while the
//! handler runs, and acks or nacks from the handler's [`Outcome`]. It claims again when a
//! handler returns, when [`Spool::subscribe`] says work may have arrived, when the earliest due
//! time of the queue ([`Spool::next_due`]) passes, and at least every `poll_interval`.
//!
//! The invariants the loop holds are documented on [`Consumer`]; `consumer/tests.rs` holds
//! the loop to them.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::checks::check_lease;
use super::contract::Spool;
use super::ids::{ConsumerId, QueueName, RunId};
use super::limits::MAX_BATCH;
use crate::error::{Error, Result};

mod ctx;
mod handler;
mod main_loop;
mod report;
mod run;
mod telemetry;

use ctx::{AbortOnDrop, Ctx, Shared, MIN_WAIT};
pub use handler::{Handler, Job, Outcome, StopReason, StopSignal};
use main_loop::{listen, main_loop};
pub use report::{ConsumerStats, ShutdownReport};
pub use telemetry::{
    CLAIMED_METRIC, HANDLED_METRIC, HANDLER_SECONDS_METRIC, OUTCOMES as CONSUMER_OUTCOMES,
};

/// Default lease a consumer claims with.
pub const DEFAULT_CONSUMER_LEASE: Duration = Duration::from_secs(30);
/// Default longest wait between two looks at the queue and the clock.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default window in which a partly free consumer waits for more runs to finish before it
/// claims (see [`ConsumerBuilder::claim_coalesce`]).
pub const DEFAULT_CLAIM_COALESCE: Duration = Duration::from_millis(2);
/// Default bound on [`Consumer::shutdown`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds and starts a [`Consumer`].
///
/// ```
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> cairn::Result<()> {
/// use std::sync::Arc;
/// use cairn::spool::{
///     ConsumerBuilder, ConsumerId, DedupKey, EnqueueOptions, Job, MemorySpool, Outcome,
///     QueueName, RunState, Spool,
/// };
///
/// let spool: Arc<dyn Spool> = Arc::new(MemorySpool::default());
/// let gate = QueueName::new("gate")?;
/// let key = DedupKey::from_parts(["gate", "refs/heads/main", "3f2a"])?;
/// let run = spool.enqueue(&gate, &key, b"{}".to_vec(), EnqueueOptions::default()).await?;
///
/// let consumer = ConsumerBuilder::new(spool.clone(), gate, ConsumerId::new("worker-1")?)
///     .concurrency(4)
///     .spawn(|job: Job| async move {
///         if job.stop().is_stopped() {
///             return Outcome::Retry("stopping".into());
///         }
///         // … the work, reporting through job.spool().append_event(job.run_id(), …) …
///         Outcome::Done
///     })
///     .await?;
///
/// while spool.run(run.run_id).await?.map(|r| r.state) != Some(RunState::Succeeded) {
///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
/// }
/// assert!(consumer.shutdown().await.is_clean());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ConsumerBuilder {
    spool: Arc<dyn Spool>,
    queue: QueueName,
    consumer: ConsumerId,
    concurrency: usize,
    prefetch: usize,
    claim_batch: Option<usize>,
    lease: Duration,
    poll_interval: Duration,
    claim_coalesce: Duration,
    shutdown_timeout: Duration,
    context: Option<handler::JobContext>,
}

impl ConsumerBuilder {
    /// A consumer of `queue` on `spool`, recorded on its leases as `consumer`, with the
    /// defaults: one run at a time, [`DEFAULT_CONSUMER_LEASE`], [`DEFAULT_POLL_INTERVAL`],
    /// [`DEFAULT_SHUTDOWN_TIMEOUT`].
    pub fn new(spool: Arc<dyn Spool>, queue: QueueName, consumer: ConsumerId) -> Self {
        Self {
            spool,
            queue,
            consumer,
            concurrency: 1,
            prefetch: 0,
            claim_batch: None,
            lease: DEFAULT_CONSUMER_LEASE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            claim_coalesce: DEFAULT_CLAIM_COALESCE,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            context: None,
        }
    }

    /// Shares `context` (the service's state: a database pool, a client, its settings) with
    /// every handler call, as [`Job::context`], so a handler need not clone it into its
    /// closure. One per consumer; a second call replaces the first.
    pub fn context<T: std::any::Any + Send + Sync>(mut self, context: Arc<T>) -> Self {
        self.context = Some(context);
        self
    }

    /// Most runs handled at once (1 to [`MAX_BATCH`]).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Most claimed runs that wait in the consumer for a free slot (default 0: a claim takes
    /// only as many runs as there are free slots). With a prefetch, one claim can take up to
    /// `concurrency + prefetch` runs and a slot that frees starts the next waiting run without
    /// a round trip to the spool: for many short runs, fewer and larger claims. A waiting run
    /// holds its lease without a heartbeat; one whose first heartbeat came due while it waited
    /// is heartbeaten before its handler starts, and one whose lease was lost meanwhile never
    /// starts. Prefetched runs are released to the queue at shutdown. `concurrency + prefetch`
    /// is at most [`MAX_BATCH`]. Keep it small for long runs: a waiting run is one no other
    /// consumer can take.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n;
        self
    }

    /// Most runs one claim takes (default: as many as there are free slots plus room in the
    /// prefetch; at most `concurrency + prefetch`).
    pub fn claim_batch(mut self, n: usize) -> Self {
        self.claim_batch = Some(n);
        self
    }

    /// The lease each claim and heartbeat asks for; heartbeats come every third of it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest the consumer waits between two looks at the queue and at the spool's clock
    /// (a safety net for wake-ups a backend cannot deliver, and the step at which a
    /// [`ManualClock`](super::ManualClock) is noticed).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// How long a consumer whose free slots are fewer than half its claim batch waits for more
    /// runs to finish before it claims (default [`DEFAULT_CLAIM_COALESCE`]), so that one claim
    /// fills several slots instead of one claim per finished run — on Postgres each claim is a
    /// transaction of its own. A free slot never waits longer than this for its claim; a wake-up
    /// or a finished run ends the wait early when it frees enough slots. Zero claims for every
    /// free slot at once.
    pub fn claim_coalesce(mut self, window: Duration) -> Self {
        self.claim_coalesce = window;
        self
    }

    /// The bound [`Consumer::shutdown`] keeps to.
    pub fn shutdown_timeout(mut self, bound: Duration) -> Self {
        self.shutdown_timeout = bound;
        self
    }

    fn check(&self) -> Result<usize> {
        if !(1..=MAX_BATCH).contains(&self.concurrency) {
            return Err(Error::invalid(
                "consumer concurrency",
                format!(
                    "is {}; it must be between 1 and {MAX_BATCH}",
                    self.concurrency
                ),
            ));
        }
        let held = self.concurrency.saturating_add(self.prefetch);
        if held > MAX_BATCH {
            return Err(Error::invalid(
                "consumer prefetch",
                format!(
                    "is {}; with the concurrency ({}) it must be at most {MAX_BATCH}",
                    self.prefetch, self.concurrency
                ),
            ));
        }
        let batch = self.claim_batch.unwrap_or(held);
        if !(1..=held).contains(&batch) {
            return Err(Error::invalid(
                "consumer claim batch",
                format!(
                    "is {batch}; it must be between 1 and the concurrency plus the prefetch ({held})"
                ),
            ));
        }
        check_lease(self.lease)?;
        if self.poll_interval < MIN_WAIT {
            return Err(Error::invalid(
                "consumer poll interval",
                format!(
                    "is {:?}; it must be at least {MIN_WAIT:?}",
                    self.poll_interval
                ),
            ));
        }
        Ok(batch)
    }

    /// Subscribes to the queue and starts the loop on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for invalid options; the spool's error when
    /// [`Spool::subscribe`] fails. Nothing was claimed.
    pub async fn spawn<H: Handler>(self, handler: H) -> Result<Consumer> {
        let batch = self.check()?;
        // Subscribe before the first claim, so an enqueue between the two is not missed.
        let wakeup = self.spool.subscribe(&self.queue).await?;
        let ctx = Arc::new(Ctx {
            spool: self.spool,
            queue: self.queue,
            consumer: self.consumer,
            concurrency: self.concurrency,
            prefetch: self.prefetch,
            batch,
            lease: self.lease,
            poll_interval: self.poll_interval,
            claim_coalesce: self.claim_coalesce,
            context: self.context,
            notify: Notify::new(),
            handling: AtomicUsize::new(0),
            shared: Mutex::new(Shared::default()),
        });
        let (stop_tx, stop_rx) = watch::channel(None);
        let listener = AbortOnDrop(tokio::spawn(listen(ctx.clone(), wakeup)));
        let main = tokio::spawn(main_loop(ctx.clone(), Arc::new(handler), stop_rx, listener));
        Ok(Consumer {
            ctx,
            stop: stop_tx,
            main: Some(AbortOnDrop(main)),
            shutdown_timeout: self.shutdown_timeout,
        })
    }
}

/// A running consumer loop, started by [`ConsumerBuilder::spawn`].
///
/// It runs up to `concurrency` handlers of one queue at a time, calls the [`Handler`] per run
/// on its own task, heartbeats each lease every `lease / 3` while the handler runs, and acks or
/// nacks from the handler's [`Outcome`]. It claims again when a handler returns, when
/// [`Spool::subscribe`] says work may have arrived, when the earliest due time of the queue
/// ([`Spool::next_due`]) passes, and at least every `poll_interval`.
///
/// Slots and leases:
/// - **At most `concurrency` handlers run at once.** A handler's slot frees when the handler
///   returns; its ack or nack then completes on the run's task while the slot takes the next
///   run, so a slot never waits for a commit. A run counts as settled
///   ([`ConsumerStats::settled`]) only once the spool answered its ack or nack, i.e. after its
///   commit.
/// - **Runs held but not running are bounded.** At most `prefetch` claimed runs wait in the
///   consumer for a slot ([`ConsumerBuilder::prefetch`], default 0), and no claim goes out
///   while `concurrency + prefetch` runs are still being settled, so the runs this consumer
///   holds a lease on never exceed `2 × (concurrency + prefetch)`.
/// - **A waiting run's lease is checked before its handler starts.** A prefetched run whose
///   first heartbeat came due while it waited (a third of its lease since the claim) is
///   heartbeaten before its handler starts; if its lease is gone the handler never runs
///   ([`ConsumerStats::lease_lost`]).
/// - **Shutdown gives prefetched runs back.** A run that never started is released to its
///   queue ([`Spool::release`], its attempt given back) before the consumer waits for its
///   handlers; one it could not release by the deadline is listed in
///   [`ShutdownReport::abandoned`].
///
/// Lease and heartbeat times are read from the spool's clock; waiting is done on the Tokio
/// timer in slices of at most `poll_interval`, so a spool on a
/// [`ManualClock`](super::ManualClock) is driven by advancing that clock (the consumer notices
/// within one slice).
///
/// [`Consumer::shutdown`] is bounded: the consumer stops claiming, tells every running handler
/// ([`StopReason::Shutdown`]), lets them finish and settles their runs until the deadline, then
/// drops what is left. A dropped run is not lost: it stays claimed until its lease expires and
/// is then claimable again, like any run whose consumer died. Dropping the `Consumer` stops
/// the loop at once, like a shutdown with a zero bound.
#[derive(Debug)]
pub struct Consumer {
    ctx: Arc<Ctx>,
    stop: watch::Sender<Option<Instant>>,
    main: Option<AbortOnDrop<()>>,
    shutdown_timeout: Duration,
}

impl Consumer {
    /// The counters so far.
    pub fn stats(&self) -> ConsumerStats {
        self.ctx.shared().stats.clone()
    }

    /// How many claimed runs have started and not yet been settled (handlers running, and
    /// runs whose ack or nack is on its way).
    pub fn in_flight(&self) -> usize {
        self.ctx.shared().running.len()
    }

    /// Stops within the builder's shutdown timeout; see [`Consumer::shutdown_within`].
    pub async fn shutdown(self) -> ShutdownReport {
        let bound = self.shutdown_timeout;
        self.shutdown_within(bound).await
    }

    /// Stops claiming at once, asks running handlers to stop ([`StopReason::Shutdown`]), lets
    /// them finish and settles their runs until `bound` has passed, then drops the rest
    /// (their runs stay claimable once their leases expire). Returns within `bound` plus the
    /// time a spool call already in progress takes to return.
    pub async fn shutdown_within(mut self, bound: Duration) -> ShutdownReport {
        let deadline = Instant::now() + bound;
        self.stop.send_replace(Some(deadline));
        self.ctx.notify.notify_one();
        if let Some(mut main) = self.main.take() {
            // The loop honours the deadline itself; this outer bound only covers a spool call
            // that hangs, after which dropping the loop aborts every task it owns.
            let slack = self.ctx.poll_interval.max(Duration::from_millis(100));
            let _ = tokio::time::timeout_at(deadline + slack, &mut main.0).await;
        }
        let sh = self.ctx.shared();
        let mut abandoned: Vec<RunId> = sh.running.keys().chain(&sh.held).copied().collect();
        abandoned.sort();
        ShutdownReport {
            stats: sh.stats.clone(),
            abandoned,
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.send_replace(Some(Instant::now()));
        self.ctx.notify.notify_one();
    }
}

#[cfg(test)]
mod tests;
