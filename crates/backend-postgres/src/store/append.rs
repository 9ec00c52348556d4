//! The append: the one probe every write makes, the heads it works from, and the one statement
//! that inserts an epoch with its edges, events and head-cache write.

use cairn_core::{epoch_id, Appended, EpochId, EventId, Head, HeadProbe, Result, Seq, SpaceId};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use super::read::anti_join;
use super::row::{epoch_id_from, head_columns, id_bytes, EventColumns};
use crate::db::Db;
use crate::error::map;
use crate::sql;

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

/// An append's probe and write on `db`, inside a transaction that holds the space's lock.
pub(crate) async fn append_tx(
    db: &mut Db<'_>,
    space: &SpaceId,
    event_ids: &[EventId],
    cols: EventColumns,
) -> Result<Appended> {
    let probe = probe(db, space).await?;
    let seq = probe.next();
    let parents: Vec<EpochId> = working_heads(db, space, &probe)
        .await?
        .into_iter()
        .map(|h| h.id)
        .collect();
    let id = epoch_id(space, &parents, event_ids);
    let cache = CacheWrite::SoleHead {
        before_rows: probe.cached.len(),
    };
    insert_epoch(db, space, &id, seq, &parents, cols, cache).await?;
    Ok(Appended { id, seq, parents })
}
