//! [`PgSpool`]: the spool ([`cairn_core::Spool`]) on PostgreSQL.
//!
//! The spool lives in the store's schema (revision `0002_spool` of cairn's migration set:
//! `spool_run`, `spool_event`, `spool_fact`) and follows [`cairn_core::MemorySpool`] exactly:
//! every state change is decided by the core's pure functions (`transition`, `nack_action`,
//! `expiry_action`, `check_token`, the backoff with its per-run jitter) on values read from
//! the row, and written back in one statement that applies only if the row still holds what was
//! read (a compare-and-set), so concurrent writers from any process never lose an update.
//!
//! Statements per operation:
//! - enqueue: one (`INSERT … ON CONFLICT (queue, dedup_key) DO UPDATE … RETURNING run_id`, with
//!   the supersede and the `NOTIFY` in the same statement); with a supersede group, that
//!   statement runs after the group's advisory lock in one transaction, so enqueues of one group
//!   supersede each other in commit order;
//! - claim: one transaction of two statements — one read that locks (`FOR NO KEY UPDATE SKIP
//!   LOCKED`) both the expired leases to settle and the next `limit` due runs, and one `UPDATE
//!   … FROM unnest(…)` that writes every picked run. The backoff's jitter is BLAKE3 over the
//!   run's key, which SQL cannot compute, so the new `due_at`s come from Rust between the two;
//! - ack: one statement; concurrent acks of one instance share one (`ack_batch`);
//! - heartbeat, nack, cancel: one read and one compare-and-set write;
//! - append_event, acknowledge_events, set_fact: one statement each (a fact conflict reads the
//!   stored value with a second);
//! - retention: each batch is one transaction of one read and one `DELETE`.
//!
//! - import_runs (revision `0003_spool_import`): one transaction under the source's advisory
//!   lock.
//!
//! Wake-up: an enqueue that creates a run, a retryable nack and an import of queued runs
//! `NOTIFY` the queue's channel (`cairn_spool_` + 16 hex digits derived from schema and queue,
//! so stores in different schemas never wake each other) inside their own transaction;
//! [`cairn_core::Spool::subscribe`] `LISTEN`s on a dedicated connection that reconnects by
//! itself, and also returns every [`WAKE_POLL`] (see [`PgSpool::set_wake_poll`]) as a fallback
//! poll.
//!
//! Time comes from the spool's [`Clock`], never from the server's `now()`.

mod ack_batch;
mod batch;
mod claim;
mod import;
mod ops;
mod retention;
mod row;
mod sql;
#[cfg(feature = "testkit")]
pub mod testkit;
mod wake;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, QueueName, SpoolConfig, SupersedeGroup};
#[cfg(doc)]
use cairn_core::spool::SystemClock;
#[cfg(doc)]
use cairn_core::Error;
use cairn_core::{key64, Result};
use sqlx::PgPool;

use crate::config::SchemaName;
use crate::PgStore;

pub use wake::WAKE_POLL;

/// The key-derivation context of wake-up channel names (shared by every process of a store:
/// changing it makes two builds miss each other's enqueues).
const WAKE_CONTEXT: &str = "cairn 2026-11 postgres spool wake v1";

/// The key-derivation context of the supersede-group locks.
const GROUP_LOCK_CONTEXT: &str = "cairn 2026-11 postgres spool group lock v1";

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `NOTIFY` channel of `queue` in the store namespace `schema`: a plain lowercase
/// identifier of 28 bytes (Postgres allows 63), whatever the queue name.
pub(crate) fn wake_channel(schema: &SchemaName, queue: &QueueName) -> String {
    let key = key64(
        WAKE_CONTEXT,
        &[schema.as_str().as_bytes(), queue.as_str().as_bytes()],
    );
    format!("cairn_spool_{:016x}", key as u64)
}

/// The advisory-lock key that serializes enqueues of one supersede group.
pub(crate) fn group_lock_key(
    schema: &SchemaName,
    queue: &QueueName,
    group: &SupersedeGroup,
) -> i64 {
    key64(
        GROUP_LOCK_CONTEXT,
        &[
            schema.as_str().as_bytes(),
            queue.as_str().as_bytes(),
            group.as_bytes(),
        ],
    )
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
    schema: SchemaName,
    clock: Arc<dyn Clock>,
    config: SpoolConfig,
    /// The fallback poll of new subscriptions, in milliseconds.
    wake_poll_ms: AtomicU64,
    /// The one listening connection every subscription shares, apart from the pool that runs
    /// statements so that subscribers can never starve it.
    wake: wake::Hub,
    /// Enqueues waiting for the next batch ([`batch`]).
    batcher: batch::Batcher,
    /// Acks waiting for the next batch ([`ack_batch`]).
    acks: ack_batch::AckLane,
    /// Ids the next unbatched enqueue attempts take before generating fresh ones: always empty
    /// outside tests (`testkit_force_next_run_ids`), which use it to make a new id collide.
    forced_ids: std::sync::Mutex<std::collections::VecDeque<cairn_core::RunId>>,
    /// Claims answered by the one-statement path ([`sql::CLAIM_QUEUED`]) and by the
    /// transaction ([`sql::CLAIM_PICK`] + [`sql::CLAIM_APPLY`]), for tests and diagnostics.
    claim_paths: [AtomicU64; 2],
    /// Whether a claim tries [`sql::CLAIM_QUEUED`] first: always, outside tests
    /// (`testkit_one_statement_claims`).
    one_statement_claims: std::sync::atomic::AtomicBool,
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
        let wake = wake::Hub::new(
            (*pool.connect_options()).clone(),
            store.options().acquire_timeout,
        );
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                schema: store.schema().clone(),
                clock,
                config,
                wake_poll_ms: AtomicU64::new(millis(WAKE_POLL)),
                wake,
                batcher: batch::Batcher::default(),
                acks: ack_batch::AckLane::default(),
                forced_ids: std::sync::Mutex::default(),
                claim_paths: [AtomicU64::new(0), AtomicU64::new(0)],
                one_statement_claims: std::sync::atomic::AtomicBool::new(true),
            }),
        })
    }

    /// Opens the store with `opts` ([`PgStore::open_with`]) and returns its spool
    /// ([`PgSpool::from_store`]): one pool for both.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn connect_with_config(
        opts: crate::PgOptions,
        clock: Arc<dyn Clock>,
        config: SpoolConfig,
    ) -> Result<Self> {
        let store = PgStore::open_with(opts).await?;
        Self::from_store(&store, clock, config)
    }

    /// Closes the spool's connections — the listening one, and the pool it shares with its
    /// store, so the store closes too — waiting for those in use: an orderly shutdown. Every
    /// later operation fails with [`Error::Unavailable`], and waiting subscribers return it.
    pub async fn close(&self) {
        self.inner.wake.close();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_channels_are_short_identifiers_per_schema_and_queue() {
        let a = SchemaName::parse("a").unwrap();
        let b = SchemaName::parse("b").unwrap();
        let q = QueueName::new("q".repeat(128)).unwrap();
        let ch = wake_channel(&a, &q);
        assert!(ch.len() <= 63 && ch.starts_with("cairn_spool_"));
        assert!(ch
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'));
        assert_ne!(ch, wake_channel(&b, &q), "schemas never share a channel");
        assert_ne!(ch, wake_channel(&a, &QueueName::new("r").unwrap()));
        assert_eq!(
            ch,
            wake_channel(&a, &q),
            "every process derives the same name"
        );
    }

    #[test]
    fn wake_channel_and_group_lock_are_pinned() {
        // Every process and build of a store must derive the same names, or enqueues stop
        // waking consumers of another build.
        let public = SchemaName::parse("public").unwrap();
        let gate = QueueName::new("gate").unwrap();
        assert_eq!(wake_channel(&public, &gate), "cairn_spool_c26351f57aa5a75d");
        let group = SupersedeGroup::from_parts(["repo", "main"]).unwrap();
        assert_eq!(
            group_lock_key(&public, &gate, &group),
            5_378_766_527_718_916_394
        );
    }
}
