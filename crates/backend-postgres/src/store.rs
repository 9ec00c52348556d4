//! [`PgStore`]: the epoch log on PostgreSQL.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::{
    epoch_id, next_seq, verify_epoch, Appended, Epoch, EpochDiagnostics, EpochId, EpochStore,
    Error, Event, EventId, FeedCursor, FeedEvent, FeedPage, ForeignEpoch, Head, HeadProbe,
    ImportOutcome, RepairOutcome, Result, Seq, SpaceId,
};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgConnection, PgPool, Postgres, Row, Transaction};

use cairn_migrate::{cairn_set, Opened, Runner};

use crate::config::{PgOptions, SchemaName};
use crate::error::map_sqlx;
use crate::migrate::PgMigrator;
use crate::sql;

/// The epoch log on PostgreSQL: a cloneable handle over one connection pool.
///
/// Every separately connected `PgStore` is a separate "node": writers of one space are
/// serialized across nodes by a transaction-scoped advisory lock whose key is derived from
/// (schema, space), so spaces — and stores in different schemas — never wait on each other.
///
/// [`EpochDiagnostics::statements_executed`] counts every statement an operation sends,
/// BEGIN and COMMIT included; the per-connection session setup (`search_path`, `lock_timeout`)
/// is connection establishment, not part of any operation, and is not counted.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    schema: SchemaName,
    statements: AtomicU64,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.inner.schema.as_str())
            .finish_non_exhaustive()
    }
}

/// The advisory-lock key of `space` in the store namespace `schema`: 64 bits of a keyed BLAKE3
/// over the length-prefixed schema name and the space id.
pub(crate) fn space_lock_key(schema: &SchemaName, space: &SpaceId) -> i64 {
    let mut h = blake3::Hasher::new_derive_key("cairn 2026-11 postgres space lock v1");
    let name = schema.as_str().as_bytes();
    h.update(&(name.len() as u64).to_le_bytes());
    h.update(name);
    h.update(space.as_bytes());
    let mut out = [0u8; 8];
    out.copy_from_slice(&h.finalize().as_bytes()[..8]);
    i64::from_le_bytes(out)
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

/// The key serializing schema creation of every cairn store in the database.
fn corrupt(what: &str) -> Error {
    Error::corrupt(format!("{what} in the epoch log"))
}

pub(crate) fn epoch_id_from(bytes: &[u8]) -> Result<EpochId> {
    EpochId::from_slice(bytes).map_err(|_| corrupt("an epoch id that is not 32 bytes"))
}

fn event_id_from(bytes: &[u8]) -> Result<EventId> {
    EventId::from_slice(bytes).map_err(|_| corrupt("an event id that is not 32 bytes"))
}

pub(crate) fn head_from(row: &PgRow) -> Result<Head> {
    let id: Vec<u8> = row.try_get(0).map_err(map_sqlx)?;
    let seq: i64 = row.try_get(1).map_err(map_sqlx)?;
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

/// Binds `$1`–`$8` of the epoch-writing statements (append, import, the legacy writer), which
/// share one parameter layout: space, id, seq, parent ids, then the event columns.
pub(crate) fn bind_epoch<'q>(
    query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    space: &SpaceId,
    id: &EpochId,
    seq: Seq,
    parents: &[EpochId],
    cols: EventColumns,
) -> Result<sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>> {
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

pub(crate) fn id_bytes(ids: &[EpochId]) -> Vec<Vec<u8>> {
    ids.iter().map(|i| i.as_bytes().to_vec()).collect()
}

impl PgStore {
    /// Connects to `url` with the store in schema `public`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, [`Error::Unavailable`] when the server cannot
    /// be reached, [`Error::Backend`] when the schema cannot be created.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(PgOptions::new(url)).await
    }

    /// Connects with `opts` as a build that knows cairn's own migration set: opens the store
    /// through the lineage-aware runner (creating the schema and tables when missing, upgrading
    /// an older store, using a newer compatible one as is), then builds the pool.
    ///
    /// # Errors
    /// As [`PgStore::connect`], plus [`Error::InvalidInput`] for a schema name outside
    /// `[a-z_][a-z0-9_]{0,62}` or a zero `max_connections`, and [`Error::Incompatible`] for a
    /// store whose migration history this build must not use.
    pub async fn connect_with(opts: PgOptions) -> Result<Self> {
        let runner = Runner::new(cairn_set())
            .with_lock_timeout(opts.lock_timeout.max(std::time::Duration::from_secs(30)));
        Ok(Self::connect_migrated(opts, &runner).await?.0)
    }

    /// Connects with `opts`, opening the store through `runner` (a build's own view of cairn's
    /// migration set), and says what the open did.
    ///
    /// # Errors
    /// As [`PgStore::connect_with`].
    pub async fn connect_migrated(opts: PgOptions, runner: &Runner) -> Result<(Self, Opened)> {
        let schema = SchemaName::parse(&opts.schema)?;
        if opts.max_connections == 0 {
            return Err(Error::invalid("max_connections", "must be at least 1"));
        }
        let connect = PgConnectOptions::from_str(&opts.url).map_err(map_sqlx)?;
        let opened = runner.open(&PgMigrator::new(opts.clone())?).await?;
        let search_path = schema.as_str().to_owned();
        let lock_timeout_ms = opts.lock_timeout.as_millis().max(1).to_string();
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            .acquire_timeout(opts.acquire_timeout)
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
            .map_err(map_sqlx)?;
        let store = Self {
            inner: Arc::new(Inner {
                pool,
                schema,
                statements: AtomicU64::new(0),
            }),
        };
        Ok((store, opened))
    }

    /// The pool (test support and benchmarks).
    #[cfg(feature = "testkit")]
    pub(crate) fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The validated schema name.
    #[cfg(feature = "testkit")]
    pub(crate) fn schema(&self) -> &SchemaName {
        &self.inner.schema
    }

    /// Counts one statement sent to the server.
    pub(crate) fn tick(&self) {
        self.inner.statements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) async fn begin(&self) -> Result<Transaction<'static, Postgres>> {
        self.tick();
        self.inner
            .pool
            .begin_with(sql::BEGIN_READ_COMMITTED)
            .await
            .map_err(map_sqlx)
    }

    pub(crate) async fn commit(&self, tx: Transaction<'static, Postgres>) -> Result<()> {
        self.tick();
        tx.commit().await.map_err(map_sqlx)
    }

    /// Takes the write locks of `spaces` in the global key order (see [`space_lock_keys`]).
    pub(crate) async fn lock_spaces(
        &self,
        conn: &mut PgConnection,
        spaces: &[&SpaceId],
    ) -> Result<()> {
        for key in space_lock_keys(&self.inner.schema, spaces.iter().copied()) {
            self.tick();
            sqlx::query(sql::LOCK)
                .bind(key)
                .execute(&mut *conn)
                .await
                .map_err(map_sqlx)?;
        }
        Ok(())
    }

    /// The space's largest seq and cache rows, in one statement.
    pub(crate) async fn read_state(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
    ) -> Result<HeadProbe> {
        self.tick();
        let rows = sqlx::query(sql::READ_STATE)
            .bind(space.as_bytes())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        let mut max_seq = None;
        let mut cached = Vec::with_capacity(rows.len());
        for row in &rows {
            let max: Option<i64> = row.try_get(0).map_err(map_sqlx)?;
            max_seq = max.map(Seq::from_i64).transpose()?;
            let id: Option<Vec<u8>> = row.try_get(1).map_err(map_sqlx)?;
            let seq: Option<i64> = row.try_get(2).map_err(map_sqlx)?;
            if let (Some(id), Some(seq)) = (id, seq) {
                cached.push(Head {
                    id: epoch_id_from(&id)?,
                    seq: Seq::from_i64(seq)?,
                });
            }
        }
        cached.sort();
        Ok(HeadProbe { max_seq, cached })
    }

    /// The anti-join's heads, sorted by id bytes.
    pub(crate) async fn anti_join(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
    ) -> Result<Vec<Head>> {
        self.tick();
        let rows = sqlx::query(sql::COMPUTED_HEADS)
            .bind(space.as_bytes())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        heads_from(&rows)
    }

    async fn cache_rows(&self, conn: &mut PgConnection, space: &SpaceId) -> Result<Vec<Head>> {
        self.tick();
        let rows = sqlx::query(sql::CACHED_HEADS)
            .bind(space.as_bytes())
            .fetch_all(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        heads_from(&rows)
    }

    /// Heads as the write path finds them under the lock: the cache when current, else the
    /// anti-join (once).
    pub(crate) async fn current_heads(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
        state: &HeadProbe,
    ) -> Result<Vec<Head>> {
        if state.cache_is_current() {
            Ok(state.cached.clone())
        } else {
            self.anti_join(conn, space).await
        }
    }
}

#[async_trait]
impl EpochStore for PgStore {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);

        let mut tx = self.begin().await?;
        self.lock_spaces(&mut tx, &[space]).await?;
        let state = self.read_state(&mut tx, space).await?;
        let seq = state.next();
        let parents: Vec<EpochId> = self
            .current_heads(&mut tx, space, &state)
            .await?
            .into_iter()
            .map(|h| h.id)
            .collect();
        let id = epoch_id(space, &parents, &event_ids);
        let write = match state.cached.len() {
            0 => sql::APPEND_INSERT_HEAD,
            1 => sql::APPEND_UPDATE_HEAD,
            _ => sql::APPEND_REPLACE_HEADS,
        };
        self.tick();
        bind_epoch(sqlx::query(write), space, &id, seq, &parents, cols)?
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        self.commit(tx).await?;
        Ok(Appended { id, seq, parents })
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.tick();
        let rows = sqlx::query(sql::HEADS)
            .bind(space.as_bytes())
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_sqlx)?;
        let heads = heads_from(&rows)?;
        if heads.is_empty() {
            return Err(Error::space_not_found(space));
        }
        Ok(heads)
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        let mut tx = self.begin().await?;
        self.lock_spaces(&mut tx, &[space]).await?;
        let before = self.cache_rows(&mut tx, space).await?;
        let after = self.anti_join(&mut tx, space).await?;
        if after.is_empty() {
            return Err(Error::space_not_found(space));
        }
        if before == after {
            self.commit(tx).await?;
            return Ok(RepairOutcome::Unchanged);
        }
        let seqs = after
            .iter()
            .map(|h| h.seq.to_i64())
            .collect::<Result<Vec<_>>>()?;
        self.tick();
        sqlx::query(sql::REPLACE_HEADS)
            .bind(space.as_bytes())
            .bind(
                after
                    .iter()
                    .map(|h| h.id.as_bytes().to_vec())
                    .collect::<Vec<_>>(),
            )
            .bind(seqs)
            .execute(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        self.commit(tx).await?;
        Ok(RepairOutcome::Rewritten { before, after })
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        verify_epoch(&epoch)?;
        let space = &epoch.space;
        let mut tx = self.begin().await?;
        self.lock_spaces(&mut tx, &[space]).await?;

        self.tick();
        let present: Option<i64> = sqlx::query_scalar(sql::EPOCH_SEQ)
            .bind(space.as_bytes())
            .bind(epoch.id.as_bytes().as_slice())
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_sqlx)?;
        if let Some(seq) = present {
            self.commit(tx).await?;
            return Ok(ImportOutcome::AlreadyPresent(Seq::from_i64(seq)?));
        }
        if !epoch.parents.is_empty() {
            self.tick();
            let known: Vec<Vec<u8>> = sqlx::query_scalar(sql::KNOWN_EPOCHS)
                .bind(space.as_bytes())
                .bind(id_bytes(&epoch.parents))
                .fetch_all(&mut *tx)
                .await
                .map_err(map_sqlx)?;
            if let Some(missing) = epoch
                .parents
                .iter()
                .find(|p| !known.iter().any(|k| k.as_slice() == p.as_bytes()))
            {
                return Err(Error::UnknownParent { parent: *missing });
            }
        }

        let state = self.read_state(&mut tx, space).await?;
        let seq = state.next();
        let mut heads = self.current_heads(&mut tx, space, &state).await?;
        heads.retain(|h| !epoch.parents.contains(&h.id));
        heads.push(Head { id: epoch.id, seq });
        heads.sort();
        let head_seqs = heads
            .iter()
            .map(|h| h.seq.to_i64())
            .collect::<Result<Vec<_>>>()?;

        let event_ids: Vec<EventId> = epoch.events.iter().map(Event::id).collect();
        let cols = EventColumns::new(epoch.events, &event_ids);
        self.tick();
        bind_epoch(
            sqlx::query(sql::IMPORT_WRITE),
            space,
            &epoch.id,
            seq,
            &epoch.parents,
            cols,
        )?
        .bind(
            heads
                .iter()
                .map(|h| h.id.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .bind(head_seqs)
        .execute(&mut *tx)
        .await
        .map_err(map_sqlx)?;
        self.commit(tx).await?;
        Ok(ImportOutcome::Imported(seq))
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        let after = FeedCursor::start_after(space, cursor, limit)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.tick();
        let rows = sqlx::query(sql::FEED_PAGE)
            .bind(space.as_bytes())
            .bind(after.to_i64()?)
            .bind(limit)
            .fetch_all(&self.inner.pool)
            .await
            .map_err(map_sqlx)?;
        if rows.is_empty() {
            self.tick();
            let exists: bool = sqlx::query_scalar(sql::SPACE_EXISTS)
                .bind(space.as_bytes())
                .fetch_one(&self.inner.pool)
                .await
                .map_err(map_sqlx)?;
            if !exists {
                return Err(Error::space_not_found(space));
            }
        }
        let mut events = Vec::with_capacity(rows.len());
        let mut last = after;
        for row in &rows {
            let seq = Seq::from_i64(row.try_get(0).map_err(map_sqlx)?)?;
            let epoch: Vec<u8> = row.try_get(1).map_err(map_sqlx)?;
            let epoch_seq: i32 = row.try_get(2).map_err(map_sqlx)?;
            let event_id: Vec<u8> = row.try_get(3).map_err(map_sqlx)?;
            let event = Event {
                kind: row.try_get(4).map_err(map_sqlx)?,
                key: row.try_get(5).map_err(map_sqlx)?,
                payload: row.try_get(6).map_err(map_sqlx)?,
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
            .map_err(map_sqlx)?
        else {
            return Ok(None);
        };
        let seq = Seq::from_i64(row.try_get(0).map_err(map_sqlx)?)?;
        let parents: Vec<Vec<u8>> = row.try_get(1).map_err(map_sqlx)?;
        let kinds: Vec<String> = row.try_get(2).map_err(map_sqlx)?;
        let keys: Vec<Option<Vec<u8>>> = row.try_get(3).map_err(map_sqlx)?;
        let payloads: Vec<Vec<u8>> = row.try_get(4).map_err(map_sqlx)?;
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
            .map_err(map_sqlx)?;
        rows.into_iter()
            .map(|b| SpaceId::new(b).map_err(|_| corrupt("an invalid space id")))
            .collect()
    }
}

#[async_trait]
impl EpochDiagnostics for PgStore {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.inner.pool.acquire().await.map_err(map_sqlx)?;
        self.cache_rows(&mut conn, space).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        let mut conn = self.inner.pool.acquire().await.map_err(map_sqlx)?;
        self.anti_join(&mut conn, space).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        self.tick();
        let max: Option<i64> = sqlx::query_scalar(sql::MAX_SEQ)
            .bind(space.as_bytes())
            .fetch_one(&self.inner.pool)
            .await
            .map_err(map_sqlx)?;
        Ok(next_seq(max.map(Seq::from_i64).transpose()?))
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
    fn cache_currency_follows_the_core_rule() {
        let h = |seq| Head {
            id: EpochId([seq as u8; 32]),
            seq: Seq(seq),
        };
        let empty = HeadProbe {
            max_seq: None,
            cached: vec![],
        };
        assert!(empty.cache_is_current());
        let stale = HeadProbe {
            max_seq: Some(Seq(3)),
            cached: vec![h(2)],
        };
        assert!(!stale.cache_is_current());
        let current = HeadProbe {
            max_seq: Some(Seq(3)),
            cached: vec![h(1), h(3)],
        };
        assert!(current.cache_is_current());
    }

    #[test]
    fn dropped_index_is_the_schema_parent_index() {
        #[cfg(feature = "testkit")]
        assert!(sql::DROP_PARENT_INDEX.ends_with(cairn_core::schema::PARENT_INDEX));
        assert!(sql::COMPUTED_HEADS.contains("epoch_parent"));
    }
}
