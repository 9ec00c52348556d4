//! [`PgSpool`]: the spool ([`cairn_core::Spool`]) on PostgreSQL.
//!
//! The spool lives in the store's schema (revisions `0002_spool`, `0003_spool_import` and
//! `0005` of cairn's migration set: `spool_run`, `spool_event`, `spool_fact`, the import
//! markers and the claim columns) and runs on the store's own pool ([`PgSpool::from_store`]).
//! It follows [`cairn_core::MemorySpool`] exactly: every state change is decided by the core's
//! pure functions (`transition`, `nack_action`, `expiry_action`, `check_token`, the backoff
//! with its per-run jitter), either in Rust on values read from the row and written back with
//! a compare-and-set (a statement that applies only if the row still holds what was read), or,
//! for the common claim, by the same function of the same inputs in SQL; so concurrent writers
//! from any process never lose an update.
//!
//! One module per step, the same files and function names as the SQLite spool: `enqueue`
//! (`enqueue_tx`), `claim` (`claim_tx`), `settle` (`heartbeat_tx`, `ack_tx`, `nack_tx`,
//! `release_tx`, `cancel_tx`), `events` (`append_event_tx`, `close_run_tx`, `events_tx`,
//! `acknowledge_events_tx`, `set_fact_tx`, `facts_tx`), `read` (`run_tx`, `runs_tx`,
//! `stats_tx`, `next_due_q`), `import` (`import_runs_tx`), `retention`
//! (`retention_events_tx`, `retention_runs_tx`), `row` (conversions), `sql` (statements),
//! `wake` (wake-up); and, Postgres only, `lane`: the batching lane enqueues and acks share.
//!
//! Statements per operation:
//! - enqueue: one. Without a supersede group, concurrent enqueues of one spool share one
//!   multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING` (the enqueue lane) and a lone one
//!   runs `INSERT … ON CONFLICT (queue, dedup_key) DO NOTHING` with the read of the key's
//!   existing run and the `NOTIFY` in the same statement (again on a new snapshot when the
//!   key's run committed after the statement's); with a supersede group, that statement also
//!   supersedes the group's queued runs and runs after the group's advisory lock in one
//!   transaction, so enqueues of one group supersede each other in commit order;
//! - claim: one statement when no expired lease of the queue is due and every run taken carries
//!   its next attempt's jitter (`claim_attempt`, `claim_jitter`, written by enqueue, nack and
//!   release): it locks (`FOR NO KEY UPDATE SKIP LOCKED`), writes and returns the runs and
//!   computes each new `due_at` (lease expiry plus backoff) in SQL. Otherwise one transaction
//!   of two statements — one read that locks both the expired leases to settle and the next
//!   `limit` due runs, and one `UPDATE … FROM unnest(…)` that writes every picked run, decided
//!   in Rust between the two;
//! - ack: one statement; concurrent acks of one spool share one (the ack lane);
//! - heartbeat, nack, cancel: one read and one compare-and-set write; release: one read and one
//!   compare-and-set write of its own;
//! - append_event, close_run, acknowledge_events, set_fact: one statement each (a fact conflict
//!   reads the stored value with a second);
//! - retention: each batch is one transaction of one read and one `DELETE`;
//! - import_runs: one transaction under the source's advisory lock.
//!
//! Wake-up: an enqueue that creates a run, a retryable nack, a release and an import of queued
//! runs `NOTIFY` the queue's channel (`cairn_spool_` + 16 hex digits derived from schema and
//! queue, so stores in different schemas never wake each other) inside their own statement or
//! transaction. [`cairn_core::Spool::subscribe`] registers with the spool's one listening
//! connection (`wake`), which `LISTEN`s on every subscribed queue's channel and reconnects by
//! itself; a subscription also returns every [`WAKE_POLL`] (see [`PgSpool::set_wake_poll`]) as
//! a fallback poll.
//!
//! Time comes from the spool's [`Clock`], never from the server's `now()`.

/// A write the spool sends outside a transaction of its own (`$on`: the executor it runs on),
/// committed before the operation goes on. On a direct connection `$on` is the pool, as always
/// (autocommit). Behind a transaction-mode pooler every checkout is a transaction
/// (`crate::pooler`) that would commit only when its connection is given back — after the
/// operation answered, so its caller's next read could miss the write; there `$on` is one
/// checkout, committed right after `$body`.
macro_rules! autocommit {
    ($s:expr, |$on:ident| $body:expr) => {{
        match $s.pooled_checkout().await {
            Err(e) => Err(e),
            Ok(Some(mut checkout)) => {
                let done = {
                    let $on = &mut *checkout;
                    $body
                };
                $s.finish(checkout, done).await
            }
            Ok(None) => {
                let $on = $s.pool();
                $body
            }
        }
    }};
}

mod claim;
pub(crate) mod enqueue;
pub(crate) mod events;
mod import;
mod keys;
mod lane;
mod read;
mod retention;
mod row;
pub(crate) mod settle;
mod sql;
#[cfg(feature = "testkit")]
pub mod testkit;
mod wake;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
#[cfg(doc)]
use cairn_core::spool::SystemClock;
use cairn_core::spool::{
    jitter_seed, Action, CancelOutcome, Claimed, Clock, CloseOutcome, ConsumerId, DedupKey,
    EnqueueItem, EnqueueOptions, Enqueued, EventAppended, FactName, FactOutcome, Heartbeat,
    ImportSource, ImportedRun, LeaseToken, NackKind, Nacked, QueueName, RetentionBudget,
    RetentionPass, RetentionPolicy, RetentionReport, RetentionStep, RunEvent, RunEventId,
    RunFilter, RunId, RunImportOutcome, RunInfo, Spool, SpoolConfig, SpoolStats, Timestamp,
    Unparked, Wakeup,
};
use cairn_core::Result;
use sqlx::PgPool;

use crate::config::SchemaName;
use crate::PgStore;

use keys::wake_channel;
pub use wake::WAKE_POLL;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The spool on PostgreSQL: a cloneable handle over its store's connection pool, in the
/// store's schema. Spools of separately opened stores (in one process or many) share the
/// tables safely.
///
/// ```no_run
/// # async fn f() -> cairn_core::Result<()> {
/// use std::sync::Arc;
/// let store = cairn_postgres::PgStore::open_with(
///     cairn_postgres::PgOptions::new("postgres://app@db.internal/app").schema("cairn"),
/// )
/// .await?;
/// let spool = cairn_postgres::PgSpool::from_store(
///     &store,
///     Arc::new(cairn_core::SystemClock),
///     cairn_core::spool::SpoolConfig::default(),
/// )?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PgSpool {
    inner: Arc<Inner>,
}

struct Inner {
    /// The store's pool.
    pool: PgPool,
    /// The store (a handle on the same pool), whose checkouts the spool's close waits for.
    store: PgStore,
    /// Behind a transaction-mode pooler (`crate::pooler`).
    pooled: bool,
    schema: SchemaName,
    clock: Arc<dyn Clock>,
    config: SpoolConfig,
    /// The fallback poll of new subscriptions, in milliseconds.
    wake_poll_ms: AtomicU64,
    /// The one listening connection every subscription shares, apart from the pool that runs
    /// statements so that subscribers can never starve it.
    wake: wake::Hub,
    /// Enqueues waiting for the next batch.
    enqueues: enqueue::EnqueueLane,
    /// Acks waiting for the next batch.
    acks: settle::AckLane,
    /// Test support: forced run ids, the claim path counters and switch.
    #[cfg(feature = "testkit")]
    hooks: testkit::TestHooks,
}

impl fmt::Debug for PgSpool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgSpool")
            .field("schema", &self.inner.schema.as_str())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl PgSpool {
    /// The spool of the open `store`, on the store's own pool (no second pool, and the
    /// migration runner does not run again: the store's open brought cairn's set to the
    /// revision this build needs), reading time from `clock` (production: [`SystemClock`])
    /// with `config` (the retry backoff). Every process of one store should use the same
    /// config: the backoff decides when a run is due again.
    ///
    /// Subscriptions share one more connection, opened by the first one
    /// ([`cairn_core::Spool::subscribe`]).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for a check of the store.
    pub fn from_store(store: &PgStore, clock: Arc<dyn Clock>, config: SpoolConfig) -> Result<Self> {
        let pool = store.pool().clone();
        let wake = match store.options().pooler_mode()? {
            crate::Pooler::Transaction => wake::Hub::polling(
                (*pool.connect_options()).clone(),
                store.options().acquire_timeout,
            ),
            _ => wake::Hub::new(
                (*pool.connect_options()).clone(),
                store.options().acquire_timeout,
            ),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                store: store.clone(),
                pooled: store.options().pooler_mode()? == crate::Pooler::Transaction,
                schema: store.schema().clone(),
                clock,
                config,
                wake_poll_ms: AtomicU64::new(millis(WAKE_POLL)),
                wake,
                enqueues: enqueue::EnqueueLane::default(),
                acks: settle::AckLane::default(),
                #[cfg(feature = "testkit")]
                hooks: testkit::TestHooks::default(),
            }),
        })
    }

    /// Closes the spool's connections — the listening one, and the pool it shares with its
    /// store, so the store closes too — waiting for those in use: an orderly shutdown. Every
    /// later operation fails with [`cairn_core::Error::Unavailable`], and waiting subscribers return it.
    pub async fn close(&self) {
        self.inner.wake.close();
        self.inner.store.drain().await;
        self.inner.pool.close().await;
    }

    /// Sets the fallback poll of subscriptions made after this call (default [`WAKE_POLL`],
    /// at least 1 ms): a waiting subscriber returns at least this often even without a
    /// notification. Longer polls cost fewer idle claims but find work written without a
    /// `NOTIFY` later.
    pub fn set_wake_poll(&self, poll: Duration) {
        self.inner
            .wake_poll_ms
            .store(millis(poll).max(1), Ordering::Relaxed);
    }

    pub(crate) fn wake_poll(&self) -> Duration {
        Duration::from_millis(self.inner.wake_poll_ms.load(Ordering::Relaxed))
    }

    /// The wake-up channel of `queue` (what an enqueue `NOTIFY`s).
    pub fn wake_channel(&self, queue: &QueueName) -> String {
        wake_channel(&self.inner.schema, queue)
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// Behind a transaction-mode pooler, a checkout for one write (see `autocommit!`); `None`
    /// on a direct connection.
    pub(crate) async fn pooled_checkout(
        &self,
    ) -> Result<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>> {
        if !self.inner.pooled {
            return Ok(None);
        }
        Ok(Some(
            self.inner.pool.acquire().await.map_err(crate::error::map)?,
        ))
    }

    /// Ends the write `done` on `conn` (a connection of the pool the spool's operation ran in
    /// autocommit): behind a transaction-mode pooler, commits its checkout before the operation
    /// answers (see `autocommit!`); on a direct connection there is nothing to do.
    pub(crate) async fn finish<T>(
        &self,
        mut conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
        done: Result<T>,
    ) -> Result<T> {
        if self.inner.pooled {
            let ended = crate::pooler::end(&mut conn).await;
            if let (Ok(_), Err(e)) = (&done, ended) {
                return Err(crate::error::map(e));
            }
        }
        done
    }

    /// Behind a transaction-mode pooler, what starts a checkout's transaction over on its
    /// connection after a statement aborted it (a lost race the operation retries): rolls it
    /// back and opens a new one as a checkout does (`crate::pooler::begin_sql`), in one simple
    /// query, so the server connection stays the same. `None` on a direct connection, where
    /// the failed statement rolled back alone.
    pub(crate) fn restart_sql(&self) -> Option<String> {
        self.inner.pooled.then(|| {
            let lock_timeout_ms = self.inner.store.options().lock_timeout.as_millis().max(1);
            format!(
                "{}; {}",
                crate::pooler::ABORT,
                crate::pooler::begin_sql(self.inner.schema.as_str(), &lock_timeout_ms.to_string())
            )
        })
    }

    /// The store's schema, which the spool's tables live in.
    pub(crate) fn schema(&self) -> &SchemaName {
        &self.inner.schema
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The backoff after `attempt` of the run `(queue, key)`, as every backend computes it.
    fn retry_delay(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.inner
            .config
            .backoff
            .delay(attempt, jitter_seed(queue, key, attempt))
    }
}

#[async_trait]
impl Spool for PgSpool {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        enqueue::enqueue_tx(self, queue, key, payload, options).await
    }

    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        enqueue::enqueue_many_tx(self, queue, items).await
    }

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        claim::claim_tx(self, queue, consumer, lease, limit).await
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        settle::heartbeat_tx(self, run, token, lease).await
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        settle::ack_tx(self, run, token).await
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        settle::nack_tx(self, run, token, kind, reason).await
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        settle::cancel_tx(self, run).await
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        events::close_run_tx(self, run).await
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        settle::release_tx(self, run, token, delay).await
    }

    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked> {
        settle::unpark_tx(self, run, Action::Requeue, by).await
    }

    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked> {
        settle::unpark_tx(self, run, Action::Discard, by).await
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        read::run_tx(self, run).await
    }

    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        read::payload_tx(self, run).await
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        read::runs_tx(self, filter, limit).await
    }

    async fn stats(&self) -> Result<SpoolStats> {
        read::stats_tx(self).await
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        events::append_event_tx(self, run, event_id, payload).await
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        events::events_tx(self, run, after, limit, usize::MAX).await
    }

    async fn events_within(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<RunEvent>> {
        events::events_tx(self, run, after, limit, max_bytes).await
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        events::acknowledge_events_tx(self, run, event_ids).await
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        events::set_fact_tx(self, run, name, value).await
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        events::facts_tx(self, run).await
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        let mut pass = RetentionPass::new(*policy, *budget, self.now())?;
        while let Some(step) = pass.next_step(self.now()) {
            match step {
                RetentionStep::Events => retention::retention_events_tx(self, &mut pass).await?,
                RetentionStep::Runs => retention::retention_runs_tx(self, &mut pass).await?,
            }
        }
        Ok(pass.finish())
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        import::import_runs_tx(self, source, runs).await
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        read::next_due_q(self, queue).await
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        let channel = wake_channel(&self.inner.schema, queue);
        Ok(Box::new(
            self.inner.wake.subscribe(channel, self.wake_poll()).await?,
        ))
    }
}
