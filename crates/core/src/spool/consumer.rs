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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use super::checks::check_lease;
use super::contract::{Spool, Wakeup};
use super::dedup::DedupKey;
use super::ids::{ConsumerId, QueueName, RunId};
use super::limits::MAX_BATCH;
use super::state::RunState;
use super::timestamp::Timestamp;
use super::types::{Claimed, NackKind};
use crate::error::{Error, Result};

/// Default lease a consumer claims with.
pub const DEFAULT_CONSUMER_LEASE: Duration = Duration::from_secs(30);
/// Default longest wait between two looks at the queue and the clock.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Default window in which a partly free consumer waits for more runs to finish before it
/// claims (see [`ConsumerBuilder::claim_coalesce`]).
pub const DEFAULT_CLAIM_COALESCE: Duration = Duration::from_millis(2);
/// Default bound on [`Consumer::shutdown`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times a consumer tries an ack or nack that failed with a retryable error.
const SETTLE_TRIES: u32 = 4;
/// The shortest wait of the loop, so a backend that keeps reporting due work it then does not
/// hand out cannot make the consumer spin.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// What a handler decided about its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The work is done: ack the run (it becomes `succeeded`).
    Done,
    /// A transient failure: nack as [`NackKind::Retryable`] (retried after backoff while
    /// attempts remain, else parked).
    Retry(String),
    /// A failure retrying cannot fix: nack as [`NackKind::Permanent`] (parked with the reason
    /// for an operator).
    Fail(String),
    /// Any nack, e.g. [`NackKind::Failed`] for work that ran and whose result is failure.
    Nack(NackKind, String),
    /// Give the run back without spending an attempt ([`Spool::release`]): it is due again
    /// after the delay. For work that cannot go on for a reason that is not the run's fault
    /// (waiting for its producer to close it, refused credentials); it never parks a run.
    Release(Duration),
}

/// Why a running handler is asked to stop, in rising order of urgency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StopReason {
    /// The consumer is shutting down. Finish soon or return [`Outcome::Retry`]; a handler
    /// still running at the shutdown deadline is dropped and its run is claimed again later.
    Shutdown,
    /// Someone canceled the run ([`Spool::cancel`]). Stop and return any nack: the run ends
    /// `canceled` (an ack still records success).
    CancelRequested,
    /// The lease is gone (it expired and another claim took the run). Stop at once: nothing
    /// this handler returns is recorded.
    LeaseLost,
}

/// Tells a handler when to stop. Clones observe the same signal.
#[derive(Clone, Debug)]
pub struct StopSignal {
    rx: watch::Receiver<Option<StopReason>>,
}

impl StopSignal {
    /// The most urgent reason raised so far, if any.
    pub fn reason(&self) -> Option<StopReason> {
        *self.rx.borrow()
    }

    /// Whether any stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.reason().is_some()
    }

    /// Resolves once a stop is asked for (at once if it already was) with the most urgent
    /// reason at that moment. Cancel safe.
    pub async fn stopped(&self) -> StopReason {
        let mut rx = self.rx.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(r) => *r,
            // The consumer dropped the run's sender: it is gone, which is a shutdown.
            Err(_) => None,
        };
        reason.unwrap_or(StopReason::Shutdown)
    }
}

/// One claimed run, handed to a [`Handler`].
#[derive(Debug)]
pub struct Job {
    queue: QueueName,
    claimed: Claimed,
    spool: Arc<dyn Spool>,
    stop: StopSignal,
}

impl Job {
    /// The run.
    pub fn run_id(&self) -> RunId {
        self.claimed.run_id
    }

    /// The run's queue.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The run's dedup key.
    pub fn dedup_key(&self) -> &DedupKey {
        &self.claimed.dedup_key
    }

    /// The payload given at enqueue.
    pub fn payload(&self) -> &[u8] {
        &self.claimed.payload
    }

    /// Which delivery this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.claimed.attempt
    }

    /// The spool, for the run's events and facts ([`Spool::append_event`],
    /// [`Spool::set_fact`]). The consumer acks and nacks; a handler must not.
    pub fn spool(&self) -> &Arc<dyn Spool> {
        &self.spool
    }

    /// The signal that asks this handler to stop.
    pub fn stop(&self) -> &StopSignal {
        &self.stop
    }
}

/// The work a [`Consumer`] does per run. Closures `Fn(Job) -> impl Future<Output = Outcome>`
/// are handlers.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Does the run's work and says how it went. Runs on its own task; a panic is reported as
    /// [`Outcome::Retry`].
    async fn handle(&self, job: Job) -> Outcome;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn handle(&self, job: Job) -> Outcome {
        (self)(job).await
    }
}

/// Counters of a consumer, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Runs handed to this consumer.
    pub claimed: u64,
    /// Claims this consumer sent to the spool (each may take several runs, or none).
    pub claims: u64,
    /// Runs settled by this consumer's acks and nacks, by the state the ack or nack left them
    /// in (`Succeeded`, `Queued` for a retry, `Parked`, `Failed`, `Canceled`). A release is not
    /// a settlement: it counts under [`ConsumerStats::released`].
    pub settled: BTreeMap<RunState, u64>,
    /// Heartbeats that extended a lease.
    pub heartbeats: u64,
    /// Runs whose lease was lost (a heartbeat, ack or nack found another claim had taken it).
    pub lease_lost: u64,
    /// Handlers that panicked (their runs were nacked as retryable).
    pub panics: u64,
    /// Runs given back to the queue with their attempt returned ([`Spool::release`]): by a
    /// handler's [`Outcome::Release`], and prefetched runs unstarted at shutdown. A release
    /// that found a cancel request (and so canceled the run) counts here too.
    pub released: u64,
    /// Spool calls that failed for another reason (the loop carries on).
    pub errors: u64,
    /// The latest such error's message.
    pub last_error: Option<String>,
}

/// What [`Consumer::shutdown`] leaves behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The consumer's counters at the end.
    pub stats: ConsumerStats,
    /// Runs whose handler (or whose ack or nack) had not finished by the deadline, and
    /// prefetched runs that could not be released by then. They were dropped without a word
    /// to the spool: each stays claimed until its lease expires and is then claimable again
    /// (or was settled by a write that raced the deadline).
    pub abandoned: Vec<RunId>,
}

impl ShutdownReport {
    /// Whether every run this consumer claimed was settled before the deadline.
    pub fn is_clean(&self) -> bool {
        self.abandoned.is_empty()
    }
}

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
        }
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

/// Aborts a task when dropped, so dropping the consumer (or a run) stops what it started.
#[derive(Debug)]
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Default)]
struct Shared {
    stats: ConsumerStats,
    /// Runs whose task has not finished, with the sender of their stop signal.
    running: HashMap<RunId, watch::Sender<Option<StopReason>>>,
    /// Prefetched runs not started (nor released) yet.
    held: HashSet<RunId>,
}

#[derive(Debug)]
struct Ctx {
    spool: Arc<dyn Spool>,
    queue: QueueName,
    consumer: ConsumerId,
    concurrency: usize,
    prefetch: usize,
    batch: usize,
    lease: Duration,
    poll_interval: Duration,
    claim_coalesce: Duration,
    /// Poked by the wake-up listener, by finished runs and by shutdown. One stored permit
    /// keeps a poke that arrives while the loop is busy.
    notify: Notify,
    /// Handlers running (a slot each): incremented when a run starts, decremented (before the
    /// poke of `notify`) when its handler returns or it is skipped.
    handling: AtomicUsize,
    shared: Mutex<Shared>,
}

impl Ctx {
    fn handling(&self) -> usize {
        self.handling.load(Ordering::Acquire)
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        // Every update under this lock is a plain counter or map change: a panic elsewhere
        // cannot leave it half done.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn error(&self, e: &Error) {
        let mut sh = self.shared();
        sh.stats.errors += 1;
        sh.stats.last_error = Some(e.to_string());
    }
}

/// Whether an error means the run is no longer this consumer's.
fn lease_gone(e: &Error) -> bool {
    matches!(
        e,
        Error::LeaseLost { .. } | Error::InvalidTransition { .. } | Error::UnknownRun { .. }
    )
}

/// Whether trying the same call again may succeed.
fn transient(e: &Error) -> bool {
    matches!(e, Error::Retryable { .. } | Error::Unavailable { .. })
}

/// How long to wait for the next due run: until `due` on the spool's clock, at most `poll`,
/// at least [`MIN_WAIT`].
pub(crate) fn idle_wait(
    now: super::Timestamp,
    due: Option<super::Timestamp>,
    poll: Duration,
) -> Duration {
    due.map_or(poll, |t| t.duration_since(now).min(poll))
        .max(MIN_WAIT)
}

/// Forwards the spool's wake-ups to the loop; re-subscribes after an error.
async fn listen(ctx: Arc<Ctx>, mut wakeup: Box<dyn Wakeup>) {
    loop {
        match wakeup.wait().await {
            Ok(()) => ctx.notify.notify_one(),
            Err(e) => {
                ctx.error(&e);
                ctx.notify.notify_one();
                tokio::time::sleep(ctx.poll_interval).await;
                match ctx.spool.subscribe(&ctx.queue).await {
                    Ok(w) => wakeup = w,
                    Err(e) => ctx.error(&e),
                }
            }
        }
    }
}

/// A claimed run waiting in the prefetch for a slot, with the spool-clock time of its claim.
struct Held {
    claimed: Claimed,
    at: Timestamp,
}

async fn main_loop(
    ctx: Arc<Ctx>,
    handler: Arc<dyn Handler>,
    stop: watch::Receiver<Option<Instant>>,
    _listener: AbortOnDrop<()>,
) {
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut held: VecDeque<Held> = VecDeque::new();
    // When the consumer first had room to claim for, but too little (claim coalescing).
    let mut partly_free_since: Option<tokio::time::Instant> = None;
    loop {
        if stop.borrow().is_some() {
            break;
        }
        while tasks.try_join_next().is_some() {}
        let free = fill(&ctx, &handler, &mut tasks, &mut held);
        // Runs whose handler returned and whose ack or nack is still on its way.
        let settling = tasks.len().saturating_sub(ctx.handling());
        let room = (free + ctx.prefetch).saturating_sub(held.len());
        let mut wait = ctx.poll_interval;
        if room > 0 && settling < ctx.concurrency + ctx.prefetch {
            if room < ctx.batch.div_ceil(2) && !ctx.claim_coalesce.is_zero() {
                // Runs are still going: give them the window to free more slots, so one claim
                // takes several runs (a returning handler or a wake-up pokes `notify`).
                let since = *partly_free_since.get_or_insert_with(tokio::time::Instant::now);
                let until = since + ctx.claim_coalesce;
                if tokio::time::Instant::now() < until {
                    wait_for_change(&ctx, &mut tasks, until).await;
                    continue;
                }
            }
            partly_free_since = None;
            let want = room.min(ctx.batch);
            ctx.shared().stats.claims += 1;
            match ctx
                .spool
                .claim(&ctx.queue, &ctx.consumer, ctx.lease, want)
                .await
            {
                Ok(runs) => {
                    let got = runs.len();
                    let at = ctx.spool.clock().now();
                    {
                        let mut sh = ctx.shared();
                        sh.stats.claimed += got as u64;
                        sh.held.extend(runs.iter().map(|c| c.run_id));
                    }
                    held.extend(runs.into_iter().map(|claimed| Held { claimed, at }));
                    fill(&ctx, &handler, &mut tasks, &mut held);
                    if got == want {
                        // The queue may hold more due runs: claim again without waiting.
                        continue;
                    }
                    // Nothing more is due now: wait for the earliest due time (or a wake-up).
                    match ctx.spool.next_due(&ctx.queue).await {
                        Ok(due) => {
                            wait = idle_wait(ctx.spool.clock().now(), due, ctx.poll_interval);
                        }
                        Err(e) => ctx.error(&e),
                    }
                }
                Err(e) => ctx.error(&e),
            }
        }
        wait_for_change(&ctx, &mut tasks, tokio::time::Instant::now() + wait).await;
    }

    // Shutdown: no more claims. Give the prefetched runs back, tell every handler, then give
    // them until the deadline.
    let deadline = (*stop.borrow()).unwrap_or_else(Instant::now);
    let _ = tokio::time::timeout_at(deadline, release_held(&ctx, &mut held)).await;
    for tx in ctx.shared().running.values() {
        raise(tx, StopReason::Shutdown);
    }
    let drained = tokio::time::timeout_at(deadline, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        // Abort the rest; their entries stay in `running`, which is what the report lists.
        tasks.shutdown().await;
    }
}

/// Starts prefetched runs in the free slots, oldest claim first; returns the slots still free.
fn fill(
    ctx: &Arc<Ctx>,
    handler: &Arc<dyn Handler>,
    tasks: &mut JoinSet<()>,
    held: &mut VecDeque<Held>,
) -> usize {
    let mut free = ctx.concurrency.saturating_sub(ctx.handling());
    while free > 0 {
        let Some(next) = held.pop_front() else { break };
        start_run(ctx, handler, tasks, next);
        free -= 1;
    }
    free
}

/// Releases every prefetched run that never started (its attempt is given back); a run that
/// cannot be released stays in `held` (the report lists it) and its lease runs out.
async fn release_held(ctx: &Ctx, held: &mut VecDeque<Held>) {
    while let Some(h) = held.front() {
        let run = h.claimed.run_id;
        match ctx
            .spool
            .release(run, h.claimed.token, Duration::ZERO)
            .await
        {
            Ok(_) => ctx.shared().stats.released += 1,
            Err(e) if lease_gone(&e) => ctx.shared().stats.lease_lost += 1,
            Err(e) => {
                ctx.error(&e);
                held.pop_front();
                continue;
            }
        }
        ctx.shared().held.remove(&run);
        held.pop_front();
    }
}

/// Waits until `deadline`, a poke of `notify` (a wake-up, a stop) or, while runs are going, the
/// end of one of them. A run's task pokes `notify` as its last step, so the loop can wake while
/// that task still counts as running (on another worker thread it has not returned yet), take
/// the permit, count one slot too few and wait again; waiting on the task set as well means a
/// run's end is never missed (it cost up to the coalescing window or the poll interval).
async fn wait_for_change(ctx: &Ctx, tasks: &mut JoinSet<()>, deadline: tokio::time::Instant) {
    if tasks.is_empty() {
        let _ = tokio::time::timeout_at(deadline, ctx.notify.notified()).await;
        return;
    }
    tokio::select! {
        () = tokio::time::sleep_until(deadline) => {}
        () = ctx.notify.notified() => {}
        _ = tasks.join_next() => {}
    }
}

/// Raises a stop reason unless a more urgent one is already raised.
fn raise(tx: &watch::Sender<Option<StopReason>>, reason: StopReason) {
    tx.send_if_modified(|cur| {
        if cur.is_none_or(|c| c < reason) {
            *cur = Some(reason);
            true
        } else {
            false
        }
    });
}

fn start_run(ctx: &Arc<Ctx>, handler: &Arc<dyn Handler>, tasks: &mut JoinSet<()>, held: Held) {
    let (stop_tx, stop_rx) = watch::channel(None);
    {
        let mut sh = ctx.shared();
        sh.held.remove(&held.claimed.run_id);
        sh.running.insert(held.claimed.run_id, stop_tx);
    }
    let job = Job {
        queue: ctx.queue.clone(),
        claimed: held.claimed,
        spool: ctx.spool.clone(),
        stop: StopSignal { rx: stop_rx },
    };
    let slot = Slot::take(ctx.clone());
    tasks.spawn(run_one(ctx.clone(), handler.clone(), job, held.at, slot));
}

/// A handler's slot: counted in [`Ctx::handling`] from the run's start until the handler
/// returns (or the run's task is dropped); giving it back pokes the loop.
struct Slot(Arc<Ctx>);

impl Slot {
    fn take(ctx: Arc<Ctx>) -> Self {
        ctx.handling.fetch_add(1, Ordering::AcqRel);
        Self(ctx)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::AcqRel);
        self.0.notify.notify_one();
    }
}

/// Runs one handler with heartbeats (the first a third of the lease after the claim, before
/// the handler starts if the run waited that long in the prefetch), gives its slot back, then
/// settles the run.
async fn run_one(
    ctx: Arc<Ctx>,
    handler: Arc<dyn Handler>,
    job: Job,
    claimed_at: Timestamp,
    slot: Slot,
) {
    let run = job.claimed.run_id;
    let token = job.claimed.token;
    let spool = ctx.spool.clone();
    let clock = spool.clock();
    let every = ctx.lease / 3;
    let mut next_beat = claimed_at.saturating_add(every);
    let mut lost = false;
    if clock.now() >= next_beat {
        lost = beat(&ctx, run, token).await;
        next_beat = clock.now().saturating_add(every);
    }
    let outcome = if lost {
        None
    } else {
        // The handler runs on its own task so that a panic is caught; dropping this run's
        // task (shutdown deadline) aborts it.
        let mut work = AbortOnDrop(tokio::spawn(async move { handler.handle(job).await }));
        Some(loop {
            if !lost && clock.now() >= next_beat {
                lost = beat(&ctx, run, token).await;
                next_beat = clock.now().saturating_add(every);
            }
            let wait = idle_wait(clock.now(), Some(next_beat), ctx.poll_interval);
            match tokio::time::timeout(wait, &mut work.0).await {
                Ok(Ok(outcome)) => break outcome,
                Ok(Err(join)) => {
                    ctx.shared().stats.panics += 1;
                    break Outcome::Retry(if join.is_panic() {
                        "the handler panicked".to_owned()
                    } else {
                        "the handler was aborted".to_owned()
                    });
                }
                Err(_elapsed) => {}
            }
        })
    };
    // The slot takes its next run while this one's ack or nack is on its way.
    drop(slot);
    match outcome {
        Some(outcome) if !lost => settle(&ctx, run, token, outcome).await,
        _ => ctx.shared().stats.lease_lost += 1,
    }
    ctx.shared().running.remove(&run);
    ctx.notify.notify_one();
}

/// One heartbeat of a running (or about to start) run; `true` when its lease is gone.
async fn beat(ctx: &Ctx, run: RunId, token: super::LeaseToken) -> bool {
    match ctx.spool.heartbeat(run, token, ctx.lease).await {
        Ok(hb) => {
            ctx.shared().stats.heartbeats += 1;
            if hb.cancel_requested {
                signal(ctx, run, StopReason::CancelRequested);
            }
            false
        }
        Err(e) if lease_gone(&e) => {
            signal(ctx, run, StopReason::LeaseLost);
            true
        }
        // Tried again at the next beat; a lease outlives two missed beats.
        Err(e) => {
            ctx.error(&e);
            false
        }
    }
}

fn signal(ctx: &Ctx, run: RunId, reason: StopReason) {
    if let Some(tx) = ctx.shared().running.get(&run) {
        raise(tx, reason);
    }
}

/// Acks or nacks from the outcome, retrying transient failures a few times while the lease
/// lasts; a run that cannot be settled is left to its lease expiry (and redelivered).
async fn settle(ctx: &Ctx, run: RunId, token: super::LeaseToken, outcome: Outcome) {
    let mut pause = Duration::from_millis(20);
    for attempt in 1..=SETTLE_TRIES {
        // `None`: released, which is not a settlement (`ConsumerStats::released`).
        let result = match &outcome {
            Outcome::Done => ctx
                .spool
                .ack(run, token)
                .await
                .map(|()| Some(RunState::Succeeded)),
            Outcome::Retry(why) => nack(ctx, run, token, NackKind::Retryable, why).await,
            Outcome::Fail(why) => nack(ctx, run, token, NackKind::Permanent, why).await,
            Outcome::Nack(kind, why) => nack(ctx, run, token, *kind, why).await,
            Outcome::Release(delay) => ctx.spool.release(run, token, *delay).await.map(|_| None),
        };
        match result {
            Ok(Some(state)) => {
                *ctx.shared().stats.settled.entry(state).or_default() += 1;
                return;
            }
            Ok(None) => {
                ctx.shared().stats.released += 1;
                return;
            }
            Err(e) if lease_gone(&e) => {
                ctx.shared().stats.lease_lost += 1;
                return;
            }
            Err(e) => {
                ctx.error(&e);
                if !transient(&e) || attempt == SETTLE_TRIES {
                    return;
                }
                tokio::time::sleep(pause.min(ctx.poll_interval)).await;
                pause *= 2;
            }
        }
    }
}

async fn nack(
    ctx: &Ctx,
    run: RunId,
    token: super::LeaseToken,
    kind: NackKind,
    why: &str,
) -> Result<Option<RunState>> {
    ctx.spool
        .nack(run, token, kind, why)
        .await
        .map(|n| Some(n.state))
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Shutdown => "the consumer is shutting down",
            StopReason::CancelRequested => "the run was canceled",
            StopReason::LeaseLost => "the lease on the run is lost",
        })
    }
}

#[cfg(test)]
mod tests;
