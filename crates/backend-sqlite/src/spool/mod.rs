//! [`SqliteSpool`]: the spool (DESIGN §3) on the tables of revisions `0002_spool` and
//! `0003_spool_import`.
//!
//! A spool works over an opened [`SqliteStore`] and shares its connections: writes go through
//! the store's one writer connection (`BEGIN IMMEDIATE`, `synchronous=FULL`, on tokio's
//! blocking pool), reads through its read-only read connections, so the epoch log and the spool
//! of one process queue behind one writer lock instead of contending for SQLite's. Every
//! operation is one transaction — or, for enqueue, claim, heartbeat, ack, nack and release, one
//! savepoint of a group commit shared with the other writes queued at the same moment
//! (`crate::group`: one fsync for the group, each caller answered after it committed); every
//! time comes from the spool's [`Clock`].
//!
//! One module per step, the same files and function names as the Postgres spool's: `enqueue`,
//! `claim` (with the expired-lease settle), `settle` (heartbeat, ack, nack, release, cancel),
//! `events` (run events, close, facts), `read` (run, runs, stats, next due), `import`,
//! `retention`, `schedule` (stored schedules and their fire); `row` converts columns, `sql`
//! holds the statements, `wake` the wake-up.
//!
//! Hot paths: a duplicate enqueue is one indexed `SELECT` on a read connection, which never waits
//! for the writer; a new enqueue is one `INSERT … ON CONFLICT (queue, dedup_key) DO NOTHING
//! RETURNING run_id` (a key that appeared meanwhile adds one indexed `SELECT` and commits nothing);
//! a claim is one range of the partial index `spool_run_claim` in claim order, `LIMIT n`, then one
//! `UPDATE` by primary key per run handed out (the lease's backoff margin is computed in Rust by
//! [`cairn_core::spool::backoff`], which SQL cannot call).

mod claim;
pub(crate) mod enqueue;
pub(crate) mod events;
mod flow;
mod import;
mod read;
mod retention;
mod row;
mod schedule;
pub(crate) mod settle;
mod sql;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(test)]
mod tests;
mod wake;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::spool::{
    check_enqueue, check_enqueue_batch, check_import, check_lease, check_limit, check_limits,
    check_payload, check_producer_event_id, check_release_delay, check_retry_delay,
    flow_revision_missing, Action, CancelOutcome, CheckedEnqueue, Claimed, Clock, CloseOutcome,
    ConsumerId, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, EventAppended, FactName,
    FactOutcome, Heartbeat, ImportSource, ImportedRun, LeaseToken, NackKind, Nacked, QueueFlow,
    QueueLimits, QueueName, RetentionBudget, RetentionPass, RetentionPolicy, RetentionReport,
    RetentionStep, RunEvent, RunEventId, RunFilter, RunId, RunImportOutcome, RunInfo, Spool,
    SpoolConfig, SpoolStats, Timestamp, Unparked, Wakeup, MAX_ACK_IDS, MAX_FACT_VALUE,
    MAX_RUN_EVENT_PAYLOAD,
};
use cairn_core::spool::{
    check_fire_ticks, check_schedule, Schedule, ScheduleFired, ScheduleInfo, ScheduleName,
};
use cairn_core::{Error, Result};

use crate::config::SqliteOptions;
use crate::error::map;
use crate::SqliteStore;

pub use wake::DEFAULT_WAKE_POLL;

/// The spool on a SQLite store. Cheap to clone (clones share the store and the subscribers).
///
/// ```no_run
/// # async fn demo() -> cairn_core::Result<()> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, QueueName, Spool, SystemClock};
/// let spool = cairn_sqlite::SqliteSpool::open(
///     "/tmp/cairn-demo/store.db",
///     cairn_sqlite::SqliteOptions::default(),
///     Arc::new(SystemClock),
/// )
/// .await?;
/// let queue = QueueName::new("gate")?;
/// let key = DedupKey::from_parts(["gate", "refs/heads/main", "3f2a"])?;
/// let run = spool.enqueue(&queue, &key, b"build".to_vec(), EnqueueOptions::default()).await?;
/// let me = ConsumerId::new("host/1234/worker-0")?;
/// for claimed in spool.claim(&queue, &me, Duration::from_secs(30), 10).await? {
///     spool.ack(claimed.run_id, claimed.token).await?;
/// }
/// # let _ = run; Ok(()) }
/// ```
#[derive(Clone)]
pub struct SqliteSpool {
    store: SqliteStore,
    clock: Arc<dyn Clock>,
    config: SpoolConfig,
    wake: Arc<wake::WakeHub>,
    /// Whether the store holds revision `0009_spool_flow` (`spool::flow`).
    flow: Arc<flow::FlowSeen>,
}

impl fmt::Debug for SqliteSpool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteSpool")
            .field("path", &self.store.path())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SqliteSpool {
    /// Opens the store at `path` ([`SqliteStore::open_with`]: file checks, cairn's migrations,
    /// which create the spool's tables) and a spool over it reading time from `clock`, with
    /// the default [`SpoolConfig`].
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`] and [`SqliteSpool::from_store`].
    pub async fn open(
        path: impl AsRef<Path>,
        opts: SqliteOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let store = SqliteStore::open_with(path, opts).await?;
        Self::from_store(&store, clock, SpoolConfig::default()).await
    }

    /// The spool of the open `store`, sharing its writer and read connections (the migration
    /// runner does not run again: the store's open brought cairn's set to the revision this
    /// build needs), reading time from `clock` (production: [`cairn_core::SystemClock`]) with
    /// `config` (the retry backoff). Every process of one store should use the same config:
    /// the backoff decides when a run is due again.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the store's spool tables are missing or do not match this
    /// build's statements (a store opened by a build older than revision `0002_spool`).
    pub async fn from_store(
        store: &SqliteStore,
        clock: Arc<dyn Clock>,
        config: SpoolConfig,
    ) -> Result<Self> {
        store
            .with_reader(|db| {
                for q in sql::ALL {
                    db.conn().prepare_cached(q).map_err(|e| match map(e) {
                        Error::Backend { detail, source, .. } => Error::Corrupt {
                            detail: format!(
                                "its spool tables (revisions 0002_spool and 0003_spool_import) \
                                 are missing or differ ({detail}); open it with this build's \
                                 SqliteStore::open first"
                            ),
                            source,
                        },
                        other => other,
                    })?;
                }
                Ok(())
            })
            .await?;
        Ok(Self {
            wake: wake::WakeHub::new(store.path(), store.options().clone(), DEFAULT_WAKE_POLL),
            store: store.clone(),
            clock,
            config,
            flow: Arc::default(),
        })
    }

    /// Sets how often this spool (and its clones) polls for commits of other connections while
    /// it has subscribers (default [`DEFAULT_WAKE_POLL`], at least 1 ms). Takes effect at once,
    /// for the subscriptions made before this call too. Longer polls cost fewer wake-ups but
    /// find work written by another connection later; work enqueued through this spool wakes
    /// its subscribers at once either way.
    pub fn set_wake_poll(&self, interval: Duration) {
        self.wake.set_interval(interval);
    }

    /// The store this spool works on.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// Wakes `queue`'s subscribers of this instance (after a commit that created a run).
    pub(crate) fn notify(&self, queue: &QueueName) {
        self.wake.notify(queue);
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Whether the store holds revision `0009_spool_flow` (asked at most every 2 s until it
    /// does; `spool::flow`).
    async fn flow_applied(&self) -> Result<bool> {
        let store = self.store.clone();
        self.flow
            .applied(|| async move { store.with_reader(flow::applied_q).await })
            .await
    }

    /// Refuses `what` on a store without revision `0009_spool_flow`.
    async fn require_flow(&self, what: &str) -> Result<()> {
        if self.flow_applied().await? {
            Ok(())
        } else {
            Err(flow_revision_missing(what))
        }
    }

    /// An operator's retry or discard ([`settle::unpark_tx`]); a retry wakes the queue's
    /// subscribers once it committed.
    async fn unpark(&self, run: RunId, action: Action, by: &str) -> Result<Unparked> {
        let now = self.now();
        let by = by.to_owned();
        let (unparked, woken) = self
            .store
            .with_writer(move |db| settle::unpark_tx(db, run, action, &by, now))
            .await?;
        if let Some(queue) = woken {
            self.wake.notify(&queue);
        }
        Ok(unparked)
    }

    /// A nack ([`settle::nack_tx`]); a run queued again wakes the queue's subscribers once it
    /// committed.
    async fn nack_with(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
        retry_in: Option<Duration>,
    ) -> Result<Nacked> {
        let now = self.now();
        let wait = match retry_in {
            Some(d) => settle::RetryWait::Fixed(d),
            None => settle::RetryWait::Backoff(self.config.backoff),
        };
        let reason = reason.to_owned();
        let (nacked, retry_queue) = self
            .store
            .with_writer_grouped(move |db| {
                settle::nack_tx(db, run, token, kind, &reason, now, wait)
            })
            .await?;
        if let Some(queue) = retry_queue {
            self.wake.notify(&queue);
        }
        Ok(nacked)
    }
}

#[async_trait]
impl Spool for SqliteSpool {
    fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let CheckedEnqueue { max_attempts, now } =
            check_enqueue(key, &payload, &options, self.clock())?;
        let (q, k) = (queue.clone(), key.clone());
        if let Some(run_id) = self
            .store
            .with_reader(move |db| enqueue::existing_run_q(db, &q, &k))
            .await?
        {
            return Ok(Enqueued {
                run_id,
                created: false,
            });
        }
        let (q, key) = (queue.clone(), key.clone());
        let enqueued = self
            .store
            .with_writer_grouped(move |db| {
                enqueue::enqueue_tx(db, &q, &key, &payload, &options, max_attempts, now)
            })
            .await?;
        if enqueued.created {
            self.wake.notify(queue);
        }
        Ok(enqueued)
    }

    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let attempts = check_enqueue_batch(&items)?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now();
        let q = queue.clone();
        let done = self
            .store
            .with_writer_grouped(move |db| enqueue::enqueue_many_tx(db, &q, &items, &attempts, now))
            .await?;
        if done.iter().any(|e| e.created) {
            self.wake.notify(queue);
        }
        Ok(done)
    }

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        check_limit(limit)?;
        check_lease(lease)?;
        let flow = self.flow_applied().await?;
        let now = self.now();
        let backoff = self.config.backoff;
        let (queue, consumer) = (queue.clone(), consumer.clone());
        self.store
            .with_writer_grouped(move |db| {
                claim::claim_tx(db, &queue, &consumer, lease, limit, now, &backoff, flow)
            })
            .await
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        check_lease(lease)?;
        let now = self.now();
        let backoff = self.config.backoff;
        self.store
            .with_writer_grouped(move |db| {
                settle::heartbeat_tx(db, run, token, lease, now, &backoff)
            })
            .await
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        let now = self.now();
        self.store
            .with_writer_grouped(move |db| settle::ack_tx(db, run, token, now))
            .await
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        self.nack_with(run, token, kind, reason, None).await
    }

    async fn retry_after(
        &self,
        run: RunId,
        token: LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<Nacked> {
        check_retry_delay(delay)?;
        self.nack_with(run, token, NackKind::Retryable, reason, Some(delay))
            .await
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        let now = self.now();
        self.store
            .with_writer(move |db| settle::cancel_tx(db, run, now))
            .await
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        self.store
            .with_writer(move |db| events::close_run_tx(db, run))
            .await
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        check_release_delay(delay)?;
        let now = self.now();
        self.store
            .with_writer_grouped(move |db| settle::release_tx(db, run, token, delay, now))
            .await
    }

    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.unpark(run, Action::Requeue, by).await
    }

    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.unpark(run, Action::Discard, by).await
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        let flow = self.flow_applied().await?;
        self.store
            .with_reader(move |db| read::run_tx(db, run, flow))
            .await
    }

    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        self.store
            .with_reader(move |db| read::payload_tx(db, run))
            .await
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        check_limit(limit)?;
        let filter = filter.clone();
        let flow = self.flow_applied().await?;
        self.store
            .with_reader(move |db| read::runs_tx(db, &filter, limit, flow))
            .await
    }

    async fn stats(&self) -> Result<SpoolStats> {
        let now = self.clock().now();
        self.store
            .with_reader(move |db| read::stats_tx(db, now))
            .await
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        check_producer_event_id(event_id)?;
        check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &payload)?;
        let now = self.now();
        let event_id = event_id.clone();
        self.store
            .with_writer(move |db| events::append_event_tx(db, run, &event_id, &payload, now))
            .await
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        check_limit(limit)?;
        self.store
            .with_reader(move |db| events::events_tx(db, run, after, limit, usize::MAX))
            .await
    }

    async fn events_within(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<RunEvent>> {
        check_limit(limit)?;
        self.store
            .with_reader(move |db| events::events_tx(db, run, after, limit, max_bytes))
            .await
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        if event_ids.len() > MAX_ACK_IDS {
            return Err(Error::invalid(
                "event ids",
                format!("{} ids; the limit is {MAX_ACK_IDS}", event_ids.len()),
            ));
        }
        let ids = event_ids.to_vec();
        self.store
            .with_writer(move |db| events::acknowledge_events_tx(db, run, &ids))
            .await
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        check_payload("fact value", MAX_FACT_VALUE, &value)?;
        let now = self.now();
        let name = name.clone();
        self.store
            .with_writer(move |db| events::set_fact_tx(db, run, &name, &value, now))
            .await
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        self.store
            .with_reader(move |db| events::facts_tx(db, run))
            .await
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        let mut pass = RetentionPass::new(*policy, *budget, self.now())?;
        // Each batch is its own transaction: the writer lock is free between batches.
        while let Some(step) = pass.next_step(self.now()) {
            let planner = pass.clone();
            match step {
                RetentionStep::Events => {
                    let batch = self
                        .store
                        .with_writer(move |db| retention::retention_events_tx(db, &planner))
                        .await?;
                    pass.events_deleted(&batch);
                }
                RetentionStep::Runs => {
                    let removed = self
                        .store
                        .with_writer(move |db| retention::retention_runs_tx(db, &planner))
                        .await?;
                    pass.runs_deleted(removed);
                }
            }
        }
        Ok(pass.finish())
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        Ok(Box::new(self.wake.subscribe(queue).await?))
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        check_import(source, &runs)?;
        let now = self.now();
        let source = source.clone();
        let (outcome, woken) = self
            .store
            .with_writer(move |db| import::import_runs_tx(db, &source, &runs, now))
            .await?;
        for queue in &woken {
            self.wake.notify(queue);
        }
        Ok(outcome)
    }

    async fn put_schedule(&self, schedule: &Schedule) -> Result<ScheduleInfo> {
        let now = self.now();
        check_schedule(schedule, now)?;
        let schedule = schedule.clone();
        self.store
            .with_writer(move |db| schedule::put_schedule_tx(db, &schedule, now))
            .await
    }

    async fn schedule(&self, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
        let name = name.clone();
        self.store
            .with_reader(move |db| schedule::schedule_q(db, &name))
            .await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.store.with_reader(schedule::schedules_q).await
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool> {
        let name = name.clone();
        self.store
            .with_writer(move |db| schedule::remove_schedule_tx(db, &name))
            .await
    }

    async fn fire_schedule(
        &self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
    ) -> Result<ScheduleFired> {
        check_fire_ticks(ticks)?;
        let now = self.now();
        let (name, ticks) = (name.clone(), ticks.to_vec());
        let (fired, woken) = self
            .store
            .with_writer(move |db| schedule::fire_schedule_tx(db, &name, revision, &ticks, now))
            .await?;
        if let Some(queue) = woken {
            self.wake.notify(&queue);
        }
        Ok(fired)
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        let queue = queue.clone();
        self.store
            .with_reader(move |db| read::next_due_q(db, &queue))
            .await
    }

    async fn set_queue_paused(&self, queue: &QueueName, paused: bool) -> Result<QueueFlow> {
        self.require_flow("pausing or resuming a queue").await?;
        let now = self.now();
        let q = queue.clone();
        let flow = self
            .store
            .with_writer(move |db| flow::set_paused_tx(db, &q, paused, now))
            .await?;
        if !paused {
            // This instance's subscribers at once; other processes see the commit through
            // `data_version`.
            self.wake.notify(queue);
        }
        Ok(flow)
    }

    async fn set_queue_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<QueueFlow> {
        check_limits(limits)?;
        self.require_flow("setting a queue's limits").await?;
        let now = self.now();
        let (q, limits) = (queue.clone(), *limits);
        let flow = self
            .store
            .with_writer(move |db| flow::set_limits_tx(db, &q, &limits, now))
            .await?;
        self.wake.notify(queue);
        Ok(flow)
    }

    async fn queue_flow(&self, queue: &QueueName) -> Result<QueueFlow> {
        self.require_flow("reading a queue's flow").await?;
        let q = queue.clone();
        self.store.with_reader(move |db| flow::flow_q(db, &q)).await
    }

    async fn queue_flows(&self) -> Result<Vec<(QueueName, QueueFlow)>> {
        self.require_flow("listing queue flows").await?;
        self.store.with_reader(flow::flows_q).await
    }
}
