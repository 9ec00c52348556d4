//! [`PgStore`]: the epoch log on PostgreSQL.
//!
//! The handle and its trait impls live here; each operation is a step function over a
//! [`Db`] (one connection or open transaction that counts the statements it sends), in one
//! module per job, with the same names as the SQLite backend's steps: `open` (the open
//! through the migration runner and the pool), `append` ([`append_tx`], with [`probe`],
//! [`working_heads`] and [`insert_epoch`]), `read` ([`heads_tx`], [`events_since_tx`],
//! [`epoch_tx`], [`list_spaces_q`], [`recent_epochs_q`], [`anti_join`]), `import`
//! ([`import_tx`]), `repair` ([`repair_tx`], [`cache_exact`] and the diagnostics' reads),
//! `sync` (revision `0010_epoch_sync`'s store id and cursors, the batch import
//! [`sync::import_batch_tx`] and the `need` query [`sync::missing_q`]); and,
//! Postgres only, `lock` (the space locks) and `row` (row conversions). Where SQLite runs
//! `insert_epoch` and `cache_sole_head` as separate statements, Postgres folds the cache write
//! into the one statement that inserts the epoch ([`CacheWrite`]), which is what keeps a
//! single-event append at 5 statements.

pub(crate) mod append;
mod batch;
pub(crate) mod import;
pub(crate) mod lock;
mod open;
pub(crate) mod read;
pub(crate) mod repair;
pub(crate) mod row;
mod sync;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::sync::{check_import_batch, check_missing_ids, StoreId, SyncCursor, SyncPeer};
use cairn_core::{
    next_seq, verify_epoch, Appended, Epoch, EpochDiagnostics, EpochId, EpochStore, EpochSummary,
    Error, Event, EventId, FeedCursor, FeedPage, ForeignEpoch, Head, ImportOutcome, RepairOutcome,
    Result, Seq, SpaceId,
};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Transaction};

use cairn_migrate::{sync_revision_missing, Opened};

use append::append_tx;
use import::import_tx;
use lock::{lock_spaces, space_lock_key};
use read::{anti_join, epoch_tx, events_since_tx, heads_tx, list_spaces_q, recent_epochs_q};
use repair::{cached_heads, max_seq, repair_tx};
use row::EventColumns;
use sync::{
    import_batch_tx, make_store_id, missing_q, store_id_q, sync_applied_q, sync_peers_q, SyncSeen,
};

use crate::config::{PgOptions, SchemaName};
use crate::db::Db;
use crate::error::{map, rolled_back};
use crate::sql;

/// The epoch log on PostgreSQL: a cloneable handle over one connection pool — the store's only
/// pool: the spool ([`crate::PgSpool::from_store`]) and the migrator
/// ([`crate::PgMigrator::from_store`]: application sets, fleet registration and heartbeat)
/// built from it run on it too.
///
/// Every separately opened `PgStore` is a separate "node": writers of one space are
/// serialized across nodes by a transaction-scoped advisory lock whose key is derived from
/// (schema, space), so spaces — and stores in different schemas — never wait on each other.
///
/// [`EpochDiagnostics::statements_executed`] counts every statement an operation sends,
/// BEGIN and COMMIT included; the per-connection session setup (`search_path`, `lock_timeout`,
/// no bitmap scans)
/// is connection establishment, not part of any operation, and is not counted.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The store's one pool: the epoch log's, and the spool's and the migrator's built from
    /// this store ([`crate::PgSpool::from_store`], [`crate::PgMigrator::from_store`]).
    pool: PgPool,
    /// The options the store was opened with.
    opts: PgOptions,
    schema: SchemaName,
    /// What the open did for cairn's own set.
    cairn: cairn_migrate::SetOpened,
    statements: AtomicU64,
    /// Behind a transaction-mode pooler: the pool's checkouts, which closing waits for.
    checkouts: Option<Arc<crate::pooler::Checkouts>>,
    /// Whether the store holds revision `0010_epoch_sync` (`sync`).
    sync: SyncSeen,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema.as_str())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// What the migration runner did for cairn's own set when this store was opened (at head,
    /// upgraded, ahead, lineage repaired).
    pub fn opened(&self) -> &Opened {
        &self.inner.cairn.outcome
    }

    /// What the open did for cairn's own set, with the contract revisions it applied and the
    /// one it left pending because a live older build lacks it.
    pub fn cairn_opened(&self) -> &cairn_migrate::SetOpened {
        &self.inner.cairn
    }

    /// Closes the pool, waiting for the connections in use to come back: an orderly shutdown.
    /// Every later operation on this store (and its clones) fails with [`Error::Unavailable`].
    /// Behind a transaction-mode pooler, the wait for checkouts to commit is bounded by the
    /// acquire timeout ([`PgOptions::acquire_timeout`]).
    pub async fn close(&self) {
        self.drain().await;
        self.inner.pool.close().await;
    }

    /// Behind a transaction-mode pooler, refuses new checkouts and waits for those out to be
    /// given back (committed) before the pool may close (see [`crate::pooler::Checkouts`]),
    /// for at most the acquire timeout: a checkout that never comes back must not hold the
    /// close forever. Returns how many were still out then (0: all given back, or no pooler).
    pub(crate) async fn drain(&self) -> usize {
        match &self.inner.checkouts {
            Some(checkouts) => checkouts.drain(self.inner.opts.acquire_timeout).await,
            None => 0,
        }
    }

    /// The store's pool, which the spool and the migrator built from this store share.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The options the store was opened with.
    pub(crate) fn options(&self) -> &PgOptions {
        &self.inner.opts
    }

    /// The validated schema name.
    pub(crate) fn schema(&self) -> &SchemaName {
        &self.inner.schema
    }

    /// The statement counter, for a [`Db`] over a connection of this store.
    pub(crate) fn statements(&self) -> &AtomicU64 {
        &self.inner.statements
    }

    /// Counts one statement sent outside a [`Db`].
    pub(crate) fn tick(&self) {
        self.inner.statements.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens a write transaction (one counted statement).
    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        self.tick();
        self.inner
            .pool
            .begin_with(sql::BEGIN_READ_COMMITTED)
            .await
            .map_err(map)
    }

    /// The statement that opens a write transaction holding `space`'s write lock (pass it to
    /// `begin_with`): BEGIN and the lock, two counted statements sent together as one simple
    /// query, so one round trip. The key is a number cairn derives, sent as a literal. What
    /// the transaction reads must come in later statements: under READ COMMITTED each
    /// statement's snapshot is taken when it starts, so only a statement sent after the lock
    /// is held sees the previous holder's commit.
    pub(crate) fn begin_and_lock(&self, space: &SpaceId) -> String {
        self.tick();
        self.tick();
        sql::begin_and_lock(space_lock_key(self.schema(), space))
    }

    /// The rest of an append, in `tx` (which holds the space's lock): the probe, the write,
    /// the commit.
    async fn append_locked(
        &self,
        mut tx: Transaction<'_, Postgres>,
        space: &SpaceId,
        event_ids: &[EventId],
        cols: EventColumns,
    ) -> Result<Appended> {
        let mut db = Db::new(&mut tx, self.statements());
        let appended = append_tx(&mut db, space, event_ids, cols).await?;
        self.commit(tx).await?;
        Ok(appended)
    }

    /// [`EpochStore::append`] inside a transaction on `conn` (the caller's, or one cairn
    /// opened): the space's write lock is taken on `conn` and held until that transaction ends,
    /// so the seq is the commit order of the space's appends; other writers of the space wait
    /// for it (up to their `lock_timeout`).
    pub(crate) async fn append_on(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);
        let mut db = Db::new(conn, self.statements());
        lock_spaces(&mut db, self.schema(), &[space]).await?;
        append_tx(&mut db, space, &event_ids, cols).await
    }

    /// Commits (one counted statement).
    pub(crate) async fn commit(&self, tx: Transaction<'_, Postgres>) -> Result<()> {
        self.tick();
        tx.commit().await.map_err(map)
    }

    /// Ends the write transaction `tx` as its step `done` says: commits after a success, rolls
    /// back at once after an error (so a lock it holds is released before the error returns).
    async fn end<T>(&self, tx: Transaction<'_, Postgres>, done: Result<T>) -> Result<T> {
        match done {
            Ok(outcome) => {
                self.commit(tx).await?;
                Ok(outcome)
            }
            Err(e) => Err(rolled_back(tx, e).await),
        }
    }

    /// A connection of the pool, for a read.
    async fn reader(&self) -> Result<PoolConnection<Postgres>> {
        self.inner.pool.acquire().await.map_err(map)
    }

    /// Refuses `what` on a store without revision `0010_epoch_sync` (asked at most every 2 s
    /// until it is there; `sync`).
    async fn require_sync(&self, what: &str) -> Result<()> {
        let applied = self
            .inner
            .sync
            .applied(|| async {
                let mut conn = self.reader().await?;
                sync_applied_q(&mut Db::new(&mut conn, self.statements())).await
            })
            .await?;
        if applied {
            Ok(())
        } else {
            Err(sync_revision_missing(what))
        }
    }
}

#[async_trait]
impl EpochStore for PgStore {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);

        let mut conn = self.inner.pool.acquire().await.map_err(map)?;
        let begin = self.begin_and_lock(space);
        let began = match Connection::begin_with(&mut *conn, begin).await {
            Ok(tx) => Ok(self.append_locked(tx, space, &event_ids, cols).await),
            Err(e) => Err(map(e)),
        };
        match began {
            Ok(appended) => appended,
            Err(e) => {
                // BEGIN may have run and the lock failed (a lock timeout): the connection is
                // then in an aborted transaction the driver does not track, so it is closed,
                // never returned to the pool that way. Behind a transaction-mode pooler it is
                // given back as every checkout is: that rolls the aborted transaction back
                // (`crate::pooler::end`), and a checkout closed without being given back would
                // stay counted out, so closing the store would wait for it forever.
                if self.inner.checkouts.is_none() {
                    conn.close_on_drop();
                }
                Err(e)
            }
        }
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.reader().await?;
        heads_tx(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let mut tx = self.begin().await?;
        // The space's lock is held from the first statement: an error rolls back at once.
        let done = repair_tx(
            &mut Db::new(&mut tx, self.statements()),
            self.schema(),
            space,
        )
        .await;
        self.end(tx, done).await
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        let mut tx = self.begin().await?;
        // The space's lock is held from the first statement: an error (an unknown parent, say)
        // rolls back at once, so the next append to the space does not wait for it.
        let done = import_tx(
            &mut Db::new(&mut tx, self.statements()),
            self.schema(),
            epoch,
        )
        .await;
        self.end(tx, done).await
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        self.events_since_within(space, cursor, limit, usize::MAX)
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
        let mut conn = self.reader().await?;
        let mut db = Db::new(&mut conn, self.statements());
        events_since_tx(&mut db, space, after, limit, max_bytes).await
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        let mut conn = self.reader().await?;
        epoch_tx(&mut Db::new(&mut conn, self.statements()), space, id).await
    }

    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        check_missing_ids(ids)?;
        let mut conn = self.reader().await?;
        missing_q(&mut Db::new(&mut conn, self.statements()), space, ids).await
    }

    async fn store_id(&self) -> Result<StoreId> {
        self.require_sync("the store's sync id").await?;
        let mut conn = self.reader().await?;
        let mut db = Db::new(&mut conn, self.statements());
        // Read first: only the first call ever writes.
        match store_id_q(&mut db).await? {
            Some(id) => Ok(id),
            None => make_store_id(&mut db).await,
        }
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
        let mut tx = self.begin().await?;
        // The space's lock is held from the first statement: an error rolls back at once.
        let done = import_batch_tx(
            &mut Db::new(&mut tx, self.statements()),
            self.schema(),
            space,
            epochs,
            cursor,
            at_us,
        )
        .await;
        self.end(tx, done).await
    }

    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.require_sync("the store's sync cursors").await?;
        let mut conn = self.reader().await?;
        sync_peers_q(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        if limit == 0 {
            return Err(Error::invalid("page limit", "must be at least 1"));
        }
        let mut conn = self.reader().await?;
        list_spaces_q(&mut Db::new(&mut conn, self.statements()), after, limit).await
    }
}

#[async_trait]
impl EpochDiagnostics for PgStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.reader().await?;
        cached_heads(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.reader().await?;
        anti_join(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        let mut conn = self.reader().await?;
        let max = max_seq(&mut Db::new(&mut conn, self.statements()), space).await?;
        Ok(next_seq(max))
    }

    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        EpochSummary::check_limit(limit)?;
        let mut conn = self.reader().await?;
        let mut db = Db::new(&mut conn, self.statements());
        recent_epochs_q(&mut db, space, before, limit).await
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
