//! [`PgSpool`]: the spool's handle — its store's pool, schema, clock and config, the wake-up
//! hub, the enqueue and ack lanes — and the plumbing every step runs through (the pool, a
//! pooled checkout and its commit, the clock, the backoff). The step modules take a
//! `&PgSpool`; the trait impl in `spool/mod.rs` calls them. This module imports no step.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use cairn_core::spool::SystemClock;
use cairn_core::spool::{jitter_seed, Clock, DedupKey, QueueName, SpoolConfig, Timestamp};
use cairn_core::Result;
use sqlx::PgPool;

use super::batched::{AckLane, EnqueueLane};
#[cfg(feature = "testkit")]
use super::hooks::TestHooks;
use super::keys::wake_channel;
use super::layout::Layout;
use super::wake::{self, WAKE_POLL};
use crate::config::SchemaName;
use crate::store::PgStore;

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
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The store's pool.
    pub(super) pool: PgPool,
    /// The store (a handle on the same pool), whose checkouts the spool's close waits for.
    pub(super) store: PgStore,
    /// Behind a transaction-mode pooler (`crate::pooler`).
    pub(super) pooled: bool,
    pub(super) schema: SchemaName,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: SpoolConfig,
    /// The fallback poll of new subscriptions, in milliseconds.
    pub(super) wake_poll_ms: AtomicU64,
    /// The one listening connection every subscription shares, apart from the pool that runs
    /// statements so that subscribers can never starve it.
    pub(super) wake: wake::Hub,
    /// Enqueues waiting for the next batch.
    pub(super) enqueues: EnqueueLane,
    /// Acks waiting for the next batch.
    pub(super) acks: AckLane,
    /// Whether claims go through `spool_ready` yet (`spool::layout`).
    pub(super) layout: Layout,
    /// Whether the store holds revision `0009_spool_flow` yet (`spool::flow`).
    pub(super) flow: Layout,
    /// Test support: forced run ids, the claim path counters and switch.
    #[cfg(feature = "testkit")]
    pub(super) hooks: TestHooks,
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
                enqueues: EnqueueLane::default(),
                acks: AckLane::default(),
                layout: Layout::default(),
                flow: Layout::default(),
                #[cfg(feature = "testkit")]
                hooks: TestHooks::default(),
            }),
        })
    }

    /// Whether claims find runs through `spool_ready` (the contract revision
    /// `0008_spool_ready_contract` is applied; `spool::layout`).
    pub(super) async fn ready_layout(&self) -> Result<bool> {
        // 0009 comes after the contract revision 0008: a store that holds it holds 0008.
        if self.inner.flow.seen() {
            return Ok(true);
        }
        self.inner
            .layout
            .ready(|| async {
                autocommit!(self, |on| sqlx::query_scalar(
                    super::sql_record::READY_LAYOUT
                )
                .fetch_one(on)
                .await
                .map_err(crate::error::map))
            })
            .await
    }

    /// Whether the store holds revision `0009_spool_flow` (flow control and partition keys;
    /// `spool::flow`), asked as [`Self::ready_layout`] asks.
    pub(super) async fn flow_layout(&self) -> Result<bool> {
        self.inner
            .flow
            .ready(|| async {
                autocommit!(self, |on| sqlx::query_scalar(super::sql_flow::FLOW_LAYOUT)
                    .fetch_one(on)
                    .await
                    .map_err(crate::error::map))
            })
            .await
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
    pub(super) fn retry_delay(&self, queue: &QueueName, key: &DedupKey, attempt: u32) -> Duration {
        self.inner
            .config
            .backoff
            .delay(attempt, jitter_seed(queue, key, attempt))
    }
}
