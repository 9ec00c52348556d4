//! [`PgStore`]: the epoch log on PostgreSQL.
//!
//! Each step of an operation is a free function over a [`Db`] (one connection or open
//! transaction that counts the statements it sends), with the same names as the SQLite
//! backend's steps: [`probe`], [`working_heads`], [`anti_join`], [`insert_epoch`],
//! [`cache_exact`]. Where SQLite runs `insert_epoch` and `cache_sole_head` as separate
//! statements, Postgres folds the cache write into the one statement that inserts the epoch
//! ([`CacheWrite`]), which is what keeps a single-event append at 5 statements.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::{
    epoch_id, key64, next_seq, verify_epoch, Appended, Epoch, EpochDiagnostics, EpochId,
    EpochStore, EpochSummary, Error, Event, EventId, FeedCursor, FeedEvent, FeedPage, ForeignEpoch,
    Head, HeadProbe, ImportOutcome, RepairOutcome, Result, Seq, SpaceId,
};
use sqlx::postgres::{PgArguments, PgPoolOptions, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row, Transaction};

use cairn_migrate::{cairn_set, MigrationBackend, Opened, Runner};

use crate::config::{PgOptions, SchemaName};
use crate::error::{map, rolled_back};
use crate::migrate::PgMigrator;
use crate::pooler::Pooler;
use crate::sql;

/// The epoch log on PostgreSQL: a cloneable handle over one connection pool — the store's only
/// pool: the spool ([`crate::PgSpool::from_store`]) and the migrator
/// ([`PgMigrator::from_store`]: application sets, fleet registration and heartbeat) built from
/// it run on it too.
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
    /// this store ([`crate::PgSpool::from_store`], [`PgMigrator::from_store`]).
    pool: PgPool,
    /// The options the store was opened with.
    opts: PgOptions,
    schema: SchemaName,
    opened: Opened,
    statements: AtomicU64,
    /// Behind a transaction-mode pooler: the pool's checkouts, which closing waits for.
    checkouts: Option<Arc<crate::pooler::Checkouts>>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema.as_str())
            .finish_non_exhaustive()
    }
}

/// The key-derivation context of the space locks (part of the lock protocol every node shares:
/// changing it lets two builds write one space at once).
const SPACE_LOCK_CONTEXT: &str = "cairn 2026-11 postgres space lock v1";

/// The advisory-lock key of `space` in the store namespace `schema`.
pub(crate) fn space_lock_key(schema: &SchemaName, space: &SpaceId) -> i64 {
    key64(
        SPACE_LOCK_CONTEXT,
        &[schema.as_str().as_bytes(), space.as_bytes()],
    )
}

/// The keys to lock for `spaces`, in the one global order every writer uses (ascending,
/// without duplicates), so two writers locking overlapping sets cannot deadlock.
pub(crate) fn space_lock_keys<'a>(
    schema: &SchemaName,
    spaces: impl IntoIterator<Item = &'a SpaceId>,
) -> Vec<i64> {
    let mut keys: Vec<i64> = spaces
        .into_iter()
        .map(|s| space_lock_key(schema, s))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

fn corrupt(what: &str) -> Error {
    Error::corrupt(format!("{what} in the epoch log"))
}

pub(crate) fn epoch_id_from(bytes: &[u8]) -> Result<EpochId> {
    EpochId::from_slice(bytes).map_err(|_| corrupt("an epoch id that is not 32 bytes"))
}

fn event_id_from(bytes: &[u8]) -> Result<EventId> {
    EventId::from_slice(bytes).map_err(|_| corrupt("an event id that is not 32 bytes"))
}

fn head_from(row: &PgRow) -> Result<Head> {
    let id: Vec<u8> = row.try_get(0).map_err(map)?;
    let seq: i64 = row.try_get(1).map_err(map)?;
    Ok(Head {
        id: epoch_id_from(&id)?,
        seq: Seq::from_i64(seq)?,
    })
}

fn heads_from(rows: &[PgRow]) -> Result<Vec<Head>> {
    let mut heads = rows.iter().map(head_from).collect::<Result<Vec<_>>>()?;
    heads.sort();
    Ok(heads)
}

/// The columns of an epoch's events, as the write statements bind them.
pub(crate) struct EventColumns {
    pub(crate) ids: Vec<Vec<u8>>,
    pub(crate) kinds: Vec<String>,
    pub(crate) keys: Vec<Option<Vec<u8>>>,
    pub(crate) payloads: Vec<Vec<u8>>,
}

impl EventColumns {
    pub(crate) fn new(events: Vec<Event>, ids: &[EventId]) -> Self {
        let mut cols = Self {
            ids: ids.iter().map(|i| i.as_bytes().to_vec()).collect(),
            kinds: Vec::with_capacity(events.len()),
            keys: Vec::with_capacity(events.len()),
            payloads: Vec::with_capacity(events.len()),
        };
        for e in events {
            cols.kinds.push(e.kind);
            cols.keys.push(e.key);
            cols.payloads.push(e.payload);
        }
        cols
    }
}

pub(crate) fn id_bytes(ids: &[EpochId]) -> Vec<Vec<u8>> {
    ids.iter().map(|i| i.as_bytes().to_vec()).collect()
}

fn head_columns(heads: &[Head]) -> Result<(Vec<Vec<u8>>, Vec<i64>)> {
    let ids = heads.iter().map(|h| h.id.as_bytes().to_vec()).collect();
    let seqs = heads
        .iter()
        .map(|h| h.seq.to_i64())
        .collect::<Result<Vec<_>>>()?;
    Ok((ids, seqs))
}

/// One connection, or one open transaction, of a store: every statement sent through
/// [`Db::conn`] is counted.
pub(crate) struct Db<'c> {
    conn: &'c mut PgConnection,
    statements: &'c AtomicU64,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c mut PgConnection, statements: &'c AtomicU64) -> Self {
        Self { conn, statements }
    }

    /// The connection, for sending exactly one statement.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.statements.fetch_add(1, Ordering::Relaxed);
        self.conn
    }
}

/// Takes the write locks of `spaces` in the global key order (see [`space_lock_keys`]).
pub(crate) async fn lock_spaces(
    db: &mut Db<'_>,
    schema: &SchemaName,
    spaces: &[&SpaceId],
) -> Result<()> {
    for key in space_lock_keys(schema, spaces.iter().copied()) {
        sqlx::query(sql::LOCK)
            .bind(key)
            .execute(db.conn())
            .await
            .map_err(map)?;
    }
    Ok(())
}

/// One statement: the space's largest seq and the id there, next to its cache rows (see
/// [`sql::PROBE`]).
pub(crate) async fn probe(db: &mut Db<'_>, space: &SpaceId) -> Result<HeadProbe> {
    let rows = sqlx::query(sql::PROBE)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    let mut max_seq = None;
    let mut max_id = None;
    let mut cached = Vec::with_capacity(rows.len());
    for row in &rows {
        let max: Option<i64> = row.try_get(0).map_err(map)?;
        max_seq = max.map(Seq::from_i64).transpose()?;
        let newest: Option<Vec<u8>> = row.try_get(1).map_err(map)?;
        max_id = newest.as_deref().map(epoch_id_from).transpose()?;
        let id: Option<Vec<u8>> = row.try_get(2).map_err(map)?;
        let seq: Option<i64> = row.try_get(3).map_err(map)?;
        if let (Some(id), Some(seq)) = (id, seq) {
            cached.push(Head {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
            });
        }
    }
    cached.sort();
    Ok(HeadProbe {
        max_seq,
        max_id,
        cached,
    })
}

/// The anti-join's heads, sorted by id bytes. O(history).
pub(crate) async fn anti_join(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    let rows = sqlx::query(sql::ANTI_JOIN_HEADS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    heads_from(&rows)
}

/// The head cache's rows, sorted by id bytes.
pub(crate) async fn cached_heads(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    let rows = sqlx::query(sql::CACHED_HEADS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    heads_from(&rows)
}

/// The space's largest seq.
pub(crate) async fn max_seq(db: &mut Db<'_>, space: &SpaceId) -> Result<Option<Seq>> {
    let max: Option<i64> = sqlx::query_scalar(sql::MAX_SEQ)
        .bind(space.as_bytes())
        .fetch_one(db.conn())
        .await
        .map_err(map)?;
    max.map(Seq::from_i64).transpose()
}

/// The seq of epoch `id`, when the space has it.
pub(crate) async fn epoch_seq(
    db: &mut Db<'_>,
    space: &SpaceId,
    id: &EpochId,
) -> Result<Option<Seq>> {
    let seq: Option<i64> = sqlx::query_scalar(sql::EPOCH_SEQ)
        .bind(space.as_bytes())
        .bind(id.as_bytes().as_slice())
        .fetch_optional(db.conn())
        .await
        .map_err(map)?;
    seq.map(Seq::from_i64).transpose()
}

/// Refuses the first of `parents` (sorted) that is not an epoch of the space, in one statement.
pub(crate) async fn check_parents(
    db: &mut Db<'_>,
    space: &SpaceId,
    parents: &[EpochId],
) -> Result<()> {
    if parents.is_empty() {
        return Ok(());
    }
    let known: Vec<Vec<u8>> = sqlx::query_scalar(sql::KNOWN_EPOCHS)
        .bind(space.as_bytes())
        .bind(id_bytes(parents))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    match parents
        .iter()
        .find(|p| !known.iter().any(|k| k.as_slice() == p.as_bytes()))
    {
        Some(missing) => Err(Error::UnknownParent { parent: *missing }),
        None => Ok(()),
    }
}

/// The heads the write path works from, under the lock: the cache when current, else the
/// anti-join (once).
pub(crate) async fn working_heads(
    db: &mut Db<'_>,
    space: &SpaceId,
    probe: &HeadProbe,
) -> Result<Vec<Head>> {
    if probe.cache_is_current() {
        Ok(probe.cached.clone())
    } else {
        anti_join(db, space).await
    }
}

/// What the statement that inserts an epoch also does to the head cache.
pub(crate) enum CacheWrite<'a> {
    /// The new epoch becomes the only cached head (an append, DESIGN §2 step 5): the cache held
    /// `before_rows` rows, which picks UPDATE (one), INSERT (none) or DELETE + INSERT.
    SoleHead { before_rows: usize },
    /// The cache becomes exactly these heads (an import, which may fork the space).
    Exact(&'a [Head]),
    /// The cache is left alone (a writer that predates the cache; test support).
    #[cfg(feature = "testkit")]
    Untouched,
}

/// Inserts an epoch with its parent edges and events at `seq`, and writes the cache as `cache`
/// says, in one statement. `parents` must be sorted and already in the space.
pub(crate) async fn insert_epoch(
    db: &mut Db<'_>,
    space: &SpaceId,
    id: &EpochId,
    seq: Seq,
    parents: &[EpochId],
    cols: EventColumns,
    cache: CacheWrite<'_>,
) -> Result<()> {
    let write = match &cache {
        CacheWrite::SoleHead { before_rows: 0 } => sql::APPEND_INSERT_HEAD,
        CacheWrite::SoleHead { before_rows: 1 } => sql::APPEND_UPDATE_HEAD,
        CacheWrite::SoleHead { .. } => sql::APPEND_REPLACE_HEADS,
        CacheWrite::Exact(_) => sql::IMPORT_WRITE,
        #[cfg(feature = "testkit")]
        CacheWrite::Untouched => sql::LEGACY_WRITE,
    };
    let mut query = bind_epoch(sqlx::query(write), space, id, seq, parents, cols)?;
    if let CacheWrite::Exact(heads) = cache {
        let (ids, seqs) = head_columns(heads)?;
        query = query.bind(ids).bind(seqs);
    }
    query.execute(db.conn()).await.map_err(map)?;
    Ok(())
}

/// Binds `$1`–`$8` of the epoch-writing statements, which share one parameter layout: space,
/// id, seq, parent ids, then the event columns.
fn bind_epoch<'q>(
    query: Query<'q, Postgres, PgArguments>,
    space: &SpaceId,
    id: &EpochId,
    seq: Seq,
    parents: &[EpochId],
    cols: EventColumns,
) -> Result<Query<'q, Postgres, PgArguments>> {
    Ok(query
        .bind(space.as_bytes().to_vec())
        .bind(id.as_bytes().to_vec())
        .bind(seq.to_i64()?)
        .bind(id_bytes(parents))
        .bind(cols.ids)
        .bind(cols.kinds)
        .bind(cols.keys)
        .bind(cols.payloads))
}

/// Sets the cache to exactly `after` (sorted), in one statement that deletes the rows not in
/// it and upserts the rest (a repair).
pub(crate) async fn cache_exact(db: &mut Db<'_>, space: &SpaceId, after: &[Head]) -> Result<()> {
    let (ids, seqs) = head_columns(after)?;
    sqlx::query(sql::REPLACE_HEADS)
        .bind(space.as_bytes())
        .bind(ids)
        .bind(seqs)
        .execute(db.conn())
        .await
        .map_err(map)?;
    Ok(())
}

impl PgStore {
    /// Opens the store at `url` in schema `public`.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(PgOptions::new(url)).await
    }

    /// Opens with `opts` as a build that knows cairn's own migration set: opens the store
    /// through the lineage-aware runner (creating the schema and tables when missing, unless
    /// [`PgOptions::create_if_missing`] says not to; upgrading an older store; using a newer
    /// compatible one as is), then builds the pool. [`PgStore::opened`] says what the open did.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, a schema name outside
    /// `[a-z_][a-z0-9_]{0,62}` or a zero `max_connections`; [`Error::Unavailable`] when the
    /// server cannot be reached; [`Error::NotFound`] when `create_if_missing(false)` and the
    /// schema holds no cairn store; [`Error::Incompatible`] for a store whose migration history
    /// this build must not use; [`Error::Migration`] when an upgrade failed (and was rolled
    /// back); [`Error::Backend`] when the schema cannot be created.
    pub async fn open_with(opts: PgOptions) -> Result<Self> {
        let runner = Runner::new(cairn_set())
            .with_lock_timeout(opts.lock_timeout.max(std::time::Duration::from_secs(30)));
        Self::open_through(opts, &runner).await
    }

    /// Opens with `opts` through `runner` (a build's own view of cairn's
    /// migration set), and says what the open did.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    #[cfg(feature = "testkit")]
    pub async fn open_migrated(opts: PgOptions, runner: &Runner) -> Result<(Self, Opened)> {
        let store = Self::open_through(opts, runner).await?;
        let opened = store.opened().clone();
        Ok((store, opened))
    }

    /// Opens the store through `runner`, then builds the pool.
    pub(crate) async fn open_through(opts: PgOptions, runner: &Runner) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        if opts.max_connections == 0 {
            return Err(Error::invalid("max_connections", "must be at least 1"));
        }
        let connect = opts.connect_options()?;
        if opts.pooler_mode()? == Pooler::None {
            let shared = tokio::time::timeout(
                opts.acquire_timeout,
                crate::pooler::sessions_are_shared(&connect),
            )
            .await
            .map_err(|_| crate::error::connect_timed_out())?
            .map_err(map)?;
            if shared {
                return Err(Error::invalid(
                    "postgres connection options",
                    crate::error::UNDECLARED_POOLER,
                ));
            }
        }
        let migrator = PgMigrator::new(opts.clone())?;
        if !opts.create_if_missing {
            // The look without the lock writes nothing, and a missing schema reads as a store
            // without a stamp, so this refuses before anything could be created.
            let state = migrator.read_state(runner.set().name()).await?;
            if state.stamp.is_none() {
                return Err(Error::NotFound {
                    what: format!("cairn store in schema {}", schema.as_str()),
                });
            }
        }
        let opened = runner.open(&migrator).await?;
        let search_path = schema.as_str().to_owned();
        let lock_timeout_ms = opts.lock_timeout.as_millis().max(1).to_string();
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            .acquire_timeout(opts.acquire_timeout);
        let checkouts = (opts.pooler_mode()? == Pooler::Transaction)
            .then(|| Arc::new(crate::pooler::Checkouts::default()));
        let pool = match &checkouts {
            // Behind a transaction-mode pooler every checkout is one transaction that sets
            // what it needs (crate::pooler), and no statement is cached.
            Some(checkouts) => {
                crate::pooler::connect(
                    crate::pooler::with_checkout_transactions(
                        pool,
                        &search_path,
                        &lock_timeout_ms,
                        checkouts.clone(),
                    ),
                    connect.statement_cache_capacity(0),
                )
                .await
            }
            None => {
                crate::config::with_liveness_check(pool)
                    .after_connect(move |conn, _meta| {
                        let search_path = search_path.clone();
                        let lock_timeout_ms = lock_timeout_ms.clone();
                        Box::pin(async move {
                            sqlx::query(sql::SESSION_SETUP)
                                .bind(search_path)
                                .bind(lock_timeout_ms)
                                .execute(conn)
                                .await
                                .map(|_| ())
                        })
                    })
                    .connect_with(connect)
                    .await
            }
        }
        .map_err(map)?;
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                opts,
                schema,
                opened,
                statements: AtomicU64::new(0),
                checkouts,
            }),
        })
    }

    /// What the migration runner did for cairn's own set when this store was opened (at head,
    /// upgraded, ahead, lineage repaired).
    pub fn opened(&self) -> &Opened {
        &self.inner.opened
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
        let appended = self
            .append_under_lock(&mut tx, space, event_ids, cols)
            .await?;
        self.commit(tx).await?;
        Ok(appended)
    }

    /// An append's probe and write on `conn`, inside a transaction that holds the space's
    /// lock.
    async fn append_under_lock(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
        event_ids: &[EventId],
        cols: EventColumns,
    ) -> Result<Appended> {
        let mut db = Db::new(conn, self.statements());
        let probe = probe(&mut db, space).await?;
        let seq = probe.next();
        let parents: Vec<EpochId> = working_heads(&mut db, space, &probe)
            .await?
            .into_iter()
            .map(|h| h.id)
            .collect();
        let id = epoch_id(space, &parents, event_ids);
        let cache = CacheWrite::SoleHead {
            before_rows: probe.cached.len(),
        };
        insert_epoch(&mut db, space, &id, seq, &parents, cols, cache).await?;
        Ok(Appended { id, seq, parents })
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
        self.append_under_lock(conn, space, &event_ids, cols).await
    }

    /// Commits (one counted statement).
    pub(crate) async fn commit(&self, tx: Transaction<'_, Postgres>) -> Result<()> {
        self.tick();
        tx.commit().await.map_err(map)
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
        self.tick();
        let rows = sqlx::query(sql::HEADS)
            .bind(space.as_bytes())
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map)?;
        let heads = heads_from(&rows)?;
        if heads.is_empty() {
            return Err(Error::space_not_found(space));
        }
        Ok(heads)
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let mut tx = self.begin().await?;
        // The space's lock is held from the first statement: an error rolls back at once.
        let done = async {
            let mut db = Db::new(&mut tx, self.statements());
            lock_spaces(&mut db, self.schema(), &[space]).await?;
            let before = cached_heads(&mut db, space).await?;
            let after = anti_join(&mut db, space).await?;
            if after.is_empty() {
                return Err(Error::space_not_found(space));
            }
            if before == after {
                return Ok(RepairOutcome::Unchanged);
            }
            cache_exact(&mut db, space, &after).await?;
            Ok(RepairOutcome::Rewritten { before, after })
        }
        .await;
        match done {
            Ok(outcome) => {
                self.commit(tx).await?;
                Ok(outcome)
            }
            Err(e) => Err(rolled_back(tx, e).await),
        }
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        let space = &epoch.space;
        let mut tx = self.begin().await?;
        // The space's lock is held from the first statement: an error (an unknown parent, say)
        // rolls back at once, so the next append to the space does not wait for it.
        let done = async {
            let mut db = Db::new(&mut tx, self.statements());
            lock_spaces(&mut db, self.schema(), &[space]).await?;
            if let Some(seq) = epoch_seq(&mut db, space, &epoch.id).await? {
                return Ok(ImportOutcome::AlreadyPresent(seq));
            }
            check_parents(&mut db, space, &epoch.parents).await?;
            let probe = probe(&mut db, space).await?;
            let seq = probe.next();
            let before = working_heads(&mut db, space, &probe).await?;
            let heads =
                cairn_core::heads_after_import(&before, &epoch.parents, Head { id: epoch.id, seq });
            let event_ids: Vec<EventId> = epoch.events.iter().map(Event::id).collect();
            let cols = EventColumns::new(epoch.events, &event_ids);
            let cache = CacheWrite::Exact(&heads);
            insert_epoch(&mut db, space, &epoch.id, seq, &epoch.parents, cols, cache).await?;
            Ok(ImportOutcome::Imported(seq))
        }
        .await;
        match done {
            Ok(outcome) => {
                self.commit(tx).await?;
                Ok(outcome)
            }
            Err(e) => Err(rolled_back(tx, e).await),
        }
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
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.tick();
        let rows = sqlx::query(sql::FEED_PAGE)
            .bind(space.as_bytes())
            .bind(after.to_i64()?)
            .bind(limit)
            .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map)?;
        if rows.is_empty() {
            self.tick();
            let exists: bool = sqlx::query_scalar(sql::SPACE_EXISTS)
                .bind(space.as_bytes())
                .fetch_one(&self.inner.pool)
                .await
                .map_err(map)?;
            if !exists {
                return Err(Error::space_not_found(space));
            }
        }
        let mut events = Vec::with_capacity(rows.len());
        let mut last = after;
        for row in &rows {
            let seq = Seq::from_i64(row.try_get(0).map_err(map)?)?;
            let epoch: Vec<u8> = row.try_get(1).map_err(map)?;
            let epoch_seq: i32 = row.try_get(2).map_err(map)?;
            let event_id: Vec<u8> = row.try_get(3).map_err(map)?;
            let event = Event {
                kind: row.try_get(4).map_err(map)?,
                key: row.try_get(5).map_err(map)?,
                payload: row.try_get(6).map_err(map)?,
            };
            events.push(FeedEvent {
                seq,
                epoch: epoch_id_from(&epoch)?,
                epoch_seq: u32::try_from(epoch_seq).map_err(|_| corrupt("a negative epoch_seq"))?,
                event_id: event_id_from(&event_id)?,
                event,
            });
            last = seq;
        }
        Ok(FeedPage {
            events,
            next: FeedCursor::new(space, last),
        })
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        self.tick();
        let Some(row) = sqlx::query(sql::EPOCH)
            .bind(space.as_bytes())
            .bind(id.as_bytes().as_slice())
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map)?
        else {
            return Ok(None);
        };
        let seq = Seq::from_i64(row.try_get(0).map_err(map)?)?;
        let parents: Vec<Vec<u8>> = row.try_get(1).map_err(map)?;
        let kinds: Vec<String> = row.try_get(2).map_err(map)?;
        let keys: Vec<Option<Vec<u8>>> = row.try_get(3).map_err(map)?;
        let payloads: Vec<Vec<u8>> = row.try_get(4).map_err(map)?;
        if kinds.len() != keys.len() || kinds.len() != payloads.len() {
            return Err(corrupt("an epoch whose events changed while read"));
        }
        let events = kinds
            .into_iter()
            .zip(keys)
            .zip(payloads)
            .map(|((kind, key), payload)| Event { kind, key, payload })
            .collect();
        Ok(Some(Epoch {
            space: space.clone(),
            id: *id,
            seq,
            parents: parents
                .iter()
                .map(|p| epoch_id_from(p))
                .collect::<Result<_>>()?,
            events,
        }))
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        if limit == 0 {
            return Err(Error::invalid("page limit", "must be at least 1"));
        }
        // Space ids are never empty, so the empty string sorts before every one of them.
        let after: &[u8] = after.map_or(&[], SpaceId::as_bytes);
        self.tick();
        let rows: Vec<Vec<u8>> = sqlx::query_scalar(sql::LIST_SPACES)
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map)?;
        rows.into_iter()
            .map(|b| SpaceId::from_stored(b).map_err(|_| corrupt("an invalid space id")))
            .collect()
    }
}

#[async_trait]
impl EpochDiagnostics for PgStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.inner.pool.acquire().await.map_err(map)?;
        cached_heads(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.inner.pool.acquire().await.map_err(map)?;
        anti_join(&mut Db::new(&mut conn, self.statements()), space).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        let mut conn = self.inner.pool.acquire().await.map_err(map)?;
        let max = max_seq(&mut Db::new(&mut conn, self.statements()), space).await?;
        Ok(next_seq(max))
    }

    // One statement (`sql::RECENT_EPOCHS`), so one snapshot: the page, its parents and its
    // counts at one committed state, and whether the space exists at all.
    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        EpochSummary::check_limit(limit)?;
        // A bound above every storable seq reads from the newest epoch.
        let before = before.map_or(i64::MAX, |b| i64::try_from(b.0).unwrap_or(i64::MAX));
        self.tick();
        let rows = sqlx::query(sql::RECENT_EPOCHS)
            .bind(space.as_bytes())
            .bind(before)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map)?;
        let exists = match rows.first() {
            Some(row) => row.try_get::<Option<i64>, _>(0).map_err(map)?.is_some(),
            None => false,
        };
        if !exists {
            return Err(Error::space_not_found(space));
        }
        let mut page = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(id) = row.try_get::<Option<Vec<u8>>, _>(1).map_err(map)? else {
                continue;
            };
            let seq: i64 = row.try_get(2).map_err(map)?;
            let events: i64 = row.try_get(3).map_err(map)?;
            let parents: Vec<Vec<u8>> = row.try_get(4).map_err(map)?;
            page.push(EpochSummary {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
                parents: parents
                    .iter()
                    .map(|p| epoch_id_from(p))
                    .collect::<Result<_>>()?,
                events: u64::try_from(events).map_err(|_| corrupt("a negative event count"))?,
            });
        }
        Ok(page)
    }

    fn statements_executed(&self) -> u64 {
        self.inner.statements.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(s: &str) -> SpaceId {
        SpaceId::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn lock_keys_are_sorted_and_deduplicated() {
        let schema = SchemaName::parse("public").unwrap();
        let (a, b, c) = (space("a"), space("b"), space("c"));
        let keys = space_lock_keys(&schema, [&c, &a, &b, &a, &c]);
        assert_eq!(keys.len(), 3);
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        let mut expected: Vec<i64> = [&a, &b, &c]
            .iter()
            .map(|s| space_lock_key(&schema, s))
            .collect();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        // Same set, any order: same lock sequence.
        assert_eq!(space_lock_keys(&schema, [&b, &c, &a]), keys);
    }

    #[test]
    fn lock_keys_depend_on_schema_and_space() {
        let s1 = SchemaName::parse("one").unwrap();
        let s2 = SchemaName::parse("two").unwrap();
        let a = space("a");
        assert_ne!(space_lock_key(&s1, &a), space_lock_key(&s2, &a));
        assert_ne!(space_lock_key(&s1, &a), space_lock_key(&s1, &space("b")));
        assert_eq!(space_lock_key(&s1, &a), space_lock_key(&s1, &a));
        // Length prefix: ("ab", "c") and ("a", "bc") must differ.
        let ab = SchemaName::parse("ab").unwrap();
        let a_ = SchemaName::parse("a").unwrap();
        assert_ne!(
            space_lock_key(&ab, &space("c")),
            space_lock_key(&a_, &space("bc"))
        );
    }

    #[test]
    fn the_space_lock_key_is_the_one_every_earlier_build_takes() {
        // Nodes of different builds serialize on this key: it must not move.
        let public = SchemaName::parse("public").unwrap();
        assert_eq!(
            space_lock_key(&public, &space("s")),
            7_856_939_167_008_013_709
        );
    }

    #[test]
    fn dropped_index_is_the_schema_parent_index() {
        #[cfg(feature = "testkit")]
        assert!(sql::DROP_PARENT_INDEX.ends_with(cairn_core::schema::PARENT_INDEX));
        assert!(sql::ANTI_JOIN_HEADS.contains("epoch_parent"));
    }
}
