//! [`SqliteStore`]: the epoch log on one SQLite file.
//!
//! Concurrency model: each store instance owns one writer connection behind an async mutex and
//! a small set of read connections ([`SqliteOptions::read_connections`], [`crate::pool`]), each
//! used only inside `spawn_blocking`, so no rusqlite call runs on the async executor. The
//! writer mutex is the in-process writer guard: a writer waits for it without holding a
//! thread, and no longer than the busy timeout (then [`Error::Retryable`], as for SQLite's own
//! lock). `BEGIN IMMEDIATE` then takes SQLite's single writer lock, which serializes writers
//! across instances and processes. WAL lets every read connection read its own snapshot
//! meanwhile, so reads neither wait for the writer nor for each other. Seqs are assigned under
//! that lock, which is what makes the head-cache check sound. Appends (and the spool's hot
//! writes) go through `SqliteStore::with_writer_grouped`: concurrent ones share one
//! transaction and one fsync ([`crate::group`]).
//!
//! The handle, its state and its trait impls live here; each operation is a step function over
//! the connection wrapper [`Db`](crate::db::Db), in one module per job, named as in the
//! Postgres backend:
//! - `open`: the open (the file's checks, cairn's migration set, the connections, the identity
//!   watcher), and the writer (alone or grouped) and the read connections it lends;
//! - `append`: [`append_tx`], with [`append::insert_epoch`] and [`append::cache_sole_head`];
//! - `read`: [`read::probe`] (next seq and cache rows in one statement), [`read::working_heads`]
//!   (the cache when current, else the anti-join), [`anti_join`], [`max_seq`],
//!   [`read::epoch_seq`], and the reads [`heads_tx`], [`events_since_tx`], [`epoch_tx`],
//!   [`recent_epochs_q`], [`list_spaces_q`];
//! - `import`: [`import_tx`];
//! - `repair`: [`repair_tx`], with [`repair::cache_exact`], and the diagnostics'
//!   [`cached_heads`];
//! - `sync`: the sync state of revision `0010_epoch_sync` ([`sync::SyncSeen`], the store id,
//!   the cursors) and the batch import ([`sync::import_batch_tx`]) and `need` query
//!   ([`sync::missing_q`]);
//! - `row`: row conversions.
//!
//! Where Postgres keeps `probe` and `working_heads` in `append`, SQLite reads the heads through
//! them too (a current cache answers `heads_tx`), so they are reads here.

mod append;
mod import;
mod open;
mod read;
mod repair;
mod row;
mod sync;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::sync::{check_import_batch, check_missing_ids, StoreId, SyncCursor, SyncPeer};
use cairn_core::{
    next_seq, verify_epoch, Appended, Epoch, EpochDiagnostics, EpochId, EpochStore, EpochSummary,
    Error, Event, FeedCursor, FeedPage, ForeignEpoch, Head, ImportOutcome, RepairOutcome, Result,
    Seq, SpaceId,
};
use cairn_migrate::{sync_revision_missing, Opened};
use rusqlite::Connection;

pub(crate) use append::append_tx;
pub use append::APPEND_STATEMENT_BUDGET;
pub(crate) use import::import_tx;
pub(crate) use read::{
    anti_join, epoch_tx, events_since_tx, heads_tx, list_spaces_q, max_seq, recent_epochs_q,
};
pub(crate) use repair::{cached_heads, repair_tx};
// The legacy writer and the benchmark hooks (`crate::testkit`) write with the steps themselves.
#[cfg(feature = "testkit")]
pub(crate) use append::{cache_sole_head, insert_epoch};
#[cfg(feature = "testkit")]
pub(crate) use read::{epoch_seq, probe};

use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::files;
use crate::group::{GroupStats, Pending};
use crate::pool::ReadPool;
use sync::{
    import_batch_tx, make_store_id_tx, missing_q, store_id_q, sync_applied_q, sync_peers_q,
    SyncSeen,
};

/// The epoch log on one SQLite file. Cheap to clone (shared handle).
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    opts: SqliteOptions,
    /// What the open did for cairn's own set.
    cairn: cairn_migrate::SetOpened,
    writer: Arc<tokio::sync::Mutex<Connection>>,
    readers: Arc<ReadPool>,
    statements: AtomicU64,
    /// Write operations waiting for the writer's next group commit ([`crate::group`]).
    pending: std::sync::Mutex<Vec<Box<dyn Pending>>>,
    groups: GroupStats,
    /// The store file and `-wal` file this instance opened, checked before every write
    /// transaction (`open::check_files`) and every [`IDENTITY_WATCH_INTERVAL`] by the
    /// watcher thread (`open::watch`).
    identity: files::Identity,
    /// Set once the write-ahead log was checkpointed away after the store file was found
    /// replaced (`open::check_files`).
    wal_scrubbed: AtomicBool,
    /// Whether the store holds revision `0010_epoch_sync` (`sync`).
    sync: SyncSeen,
}

/// How often an open store's identity watcher looks at the store file and its `-wal` file
/// (one `lstat` of each).
///
/// Writes and readiness check the files themselves, but a store that writes nothing after
/// its file was replaced (`mv other.db store.db`) would otherwise leave its log at
/// `store.db-wal` until it closes, and the next process to open `store.db` would apply that
/// log to the replacement — reading the old store's pages in the new file. The watcher finds
/// the replacement within this interval and runs the same step as a write (checkpoint the
/// log into the file this store opened, truncate the `-wal`); writes and readiness go on
/// refusing with [`Error::StoreReplaced`].
///
/// **Remaining window:** SQLite cannot bind a `-wal` file to its database file. A process
/// that opens the new file at the path within this interval of the replacement (before the
/// watcher's checkpoint) still reads this store's log over it; so does one that opens it
/// while the writer is busy past the interval, or when the checkpoint cannot finish (a
/// reader holding an old snapshot; the watcher retries every interval). Stop the process
/// owning a store before replacing its file.
pub const IDENTITY_WATCH_INTERVAL: Duration = Duration::from_millis(250);

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("busy_timeout", &self.inner.opts.busy_timeout)
            .field("read_connections", &self.inner.opts.read_connections)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// What cairn's migration runner did to the store's schema when this instance opened it
    /// (at head, upgraded, ahead of this build, lineage repaired).
    pub fn opened(&self) -> &Opened {
        &self.inner.cairn.outcome
    }

    /// What the open did for cairn's own set, with the contract revisions it applied and the
    /// one it left pending because a live older build lacks it.
    pub fn cairn_opened(&self) -> &cairn_migrate::SetOpened {
        &self.inner.cairn
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &SqliteOptions {
        &self.inner.opts
    }

    /// Refuses `what` on a store without revision `0010_epoch_sync` (asked at most every 2 s
    /// until it is there; `sync`).
    async fn require_sync(&self, what: &str) -> Result<()> {
        let store = self.clone();
        let applied = self
            .inner
            .sync
            .applied(|| async move { store.with_reader(sync_applied_q).await })
            .await?;
        if applied {
            Ok(())
        } else {
            Err(sync_revision_missing(what))
        }
    }
}

#[async_trait]
impl EpochStore for SqliteStore {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let space = space.clone();
        self.with_writer_grouped(move |db| append_tx(db, &space, &events))
            .await
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| heads_tx(db, &space)).await
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let space = space.clone();
        self.with_writer(move |db| repair_tx(db, &space)).await
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        self.with_writer(move |db| import_tx(db, &epoch)).await
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let space = space.clone();
        self.with_reader(move |db| events_since_tx(db, &space, after, limit, usize::MAX))
            .await
    }

    async fn events_since_within(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
        max_bytes: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let space = space.clone();
        self.with_reader(move |db| events_since_tx(db, &space, after, limit, max_bytes))
            .await
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        let (space, id) = (space.clone(), *id);
        self.with_reader(move |db| epoch_tx(db, &space, &id)).await
    }

    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        check_missing_ids(ids)?;
        let (space, ids) = (space.clone(), ids.to_vec());
        self.with_reader(move |db| missing_q(db, &space, &ids))
            .await
    }

    async fn store_id(&self) -> Result<StoreId> {
        self.require_sync("the store's sync id").await?;
        // Read first: only the first call ever writes.
        if let Some(id) = self.with_reader(store_id_q).await? {
            return Ok(id);
        }
        self.with_writer(make_store_id_tx).await
    }

    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        check_import_batch(space, &epochs, cursor)?;
        self.require_sync("a sync's batch import").await?;
        let (space, cursor) = (space.clone(), cursor.cloned());
        self.with_writer(move |db| import_batch_tx(db, &space, &epochs, cursor.as_ref(), at_us))
            .await
    }

    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.require_sync("the store's sync cursors").await?;
        let space = space.clone();
        self.with_reader(move |db| sync_peers_q(db, &space)).await
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        if limit == 0 {
            return Err(Error::invalid("page limit", "must be at least 1"));
        }
        let after = after.cloned();
        self.with_reader(move |db| list_spaces_q(db, after.as_ref(), limit))
            .await
    }
}

#[async_trait]
impl EpochDiagnostics for SqliteStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| cached_heads(db, &space)).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let space = space.clone();
        self.with_reader(move |db| anti_join(db, &space)).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        let space = space.clone();
        self.with_reader(move |db| max_seq(db, &space).map(next_seq))
            .await
    }

    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        EpochSummary::check_limit(limit)?;
        let space = space.clone();
        self.with_reader(move |db| recent_epochs_q(db, &space, before, limit))
            .await
    }

    async fn check_ready(&self) -> Result<()> {
        let inner = self.inner.clone();
        blocking(move || inner.identity.check()).await
    }

    fn statements_executed(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }
}

/// What cairn's set's open did, as the session reports it: the runner's report and the
/// contract revision it deferred ([`Runner::open_deferring`](cairn_migrate::Runner::open_deferring)).
pub(crate) fn cairn_set_opened(
    (report, deferred): (
        cairn_migrate::OpenReport,
        Option<cairn_migrate::DeferredContract>,
    ),
) -> cairn_migrate::SetOpened {
    cairn_migrate::SetOpened {
        set: cairn_migrate::CAIRN_SET.into(),
        outcome: report.opened,
        contracts: report.contracts,
        deferred,
    }
}
