//! Sync state on Postgres (revision `0010_epoch_sync`): the store's sync id
//! (`epoch_sync_self`), the cursors kept per sending store (`epoch_sync_peer`), the batch
//! import that writes epochs and their cursor in one transaction under the space's lock, and
//! the `need` list's one statement.
//!
//! A store whose upgrade stopped before the revision (a contract revision before it deferred
//! while older builds are live) has none of these tables: [`SyncSeen`] says whether the store
//! saw the revision applied; until then the store id, the batch import and the cursors refuse
//! with [`cairn_migrate::sync_revision_missing`]. [`missing_q`] reads the epoch log only and
//! works on every store.

use std::collections::HashSet;

use cairn_core::sync::{cursor_epoch_missing, StoreId, SyncCursor, SyncPeer};
use cairn_core::{EpochId, Error, ForeignEpoch, ImportOutcome, Result, Seq, SpaceId};
use sqlx::Row;

use super::batch::{write_batch, Written};
use super::import::epoch_seq;
use super::lock::lock_spaces;
use super::row::{corrupt, epoch_id_from, id_bytes};
use crate::config::SchemaName;
use crate::db::Db;
use crate::error::map;
use crate::sql;

/// Whether the store holds the revision, as far as this handle knows.
pub(crate) use cairn_migrate::RevisionSeen as SyncSeen;

/// The store's answer: whether `0010_epoch_sync` is in cairn's lineage.
pub(crate) async fn sync_applied_q(db: &mut Db<'_>) -> Result<bool> {
    sqlx::query_scalar(sql::SYNC_APPLIED)
        .fetch_one(db.conn())
        .await
        .map_err(map)
}

/// The stored sync id, when one was made.
pub(crate) async fn store_id_q(db: &mut Db<'_>) -> Result<Option<StoreId>> {
    let id: Option<String> = sqlx::query_scalar(sql::STORE_ID)
        .fetch_optional(db.conn())
        .await
        .map_err(map)?;
    id.map(|id| StoreId::parse(&id).map_err(|_| corrupt("a malformed sync id")))
        .transpose()
}

/// Makes the store's sync id unless another call made it already, then reads the one stored
/// (two statements outside a transaction: the read sees whichever insert won).
pub(crate) async fn make_store_id(db: &mut Db<'_>) -> Result<StoreId> {
    sqlx::query(sql::INSERT_STORE_ID)
        .bind(StoreId::random().as_str())
        .execute(db.conn())
        .await
        .map_err(map)?;
    store_id_q(db)
        .await?
        .ok_or_else(|| corrupt("a sync id that was not stored"))
}

/// Which of `ids` the space lacks, in the order given, with one statement.
pub(crate) async fn missing_q(
    db: &mut Db<'_>,
    space: &SpaceId,
    ids: &[EpochId],
) -> Result<Vec<EpochId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let known: Vec<Vec<u8>> = sqlx::query_scalar(sql::KNOWN_EPOCHS)
        .bind(space.as_bytes())
        .bind(id_bytes(ids))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    let known: HashSet<EpochId> = known
        .iter()
        .map(|k| epoch_id_from(k))
        .collect::<Result<_>>()?;
    Ok(ids
        .iter()
        .filter(|id| !known.contains(id))
        .copied()
        .collect())
}

/// Imports the checked batch `epochs` of `space` in order and records `cursor`, in the open
/// transaction `db`: the space's lock once, then the batch's reads and its one write
/// ([`write_batch`]); the caller
/// commits, or rolls everything back after an error.
pub(crate) async fn import_batch_tx(
    db: &mut Db<'_>,
    schema: &SchemaName,
    space: &SpaceId,
    epochs: Vec<ForeignEpoch>,
    cursor: Option<&SyncCursor>,
    at_us: i64,
) -> Result<Vec<ImportOutcome>> {
    lock_spaces(db, schema, &[space]).await?;
    let Written {
        outcomes,
        imported,
        bytes,
    } = write_batch(db, space, epochs).await?;
    if let Some(c) = cursor {
        if epoch_seq(db, space, &c.id).await?.is_none() {
            return Err(cursor_epoch_missing(c));
        }
        sqlx::query(sql::UPSERT_PEER)
            .bind(space.as_bytes())
            .bind(c.peer.as_str())
            .bind(c.seq.to_i64()?)
            .bind(c.id.as_bytes().as_slice())
            .bind(counter(imported)?)
            .bind(counter(bytes)?)
            .bind(at_us)
            .execute(db.conn())
            .await
            .map_err(map)?;
    }
    Ok(outcomes)
}

/// A counter as stored.
fn counter(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::invalid("sync counter", "out of range"))
}

/// The cursors kept for `space`, by peer id.
pub(crate) async fn sync_peers_q(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<SyncPeer>> {
    let rows = sqlx::query(sql::SYNC_PEERS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    let count = |n: i64| u64::try_from(n).map_err(|_| corrupt("a negative sync counter"));
    rows.iter()
        .map(|r| {
            let peer: String = r.try_get(0).map_err(map)?;
            let id: Vec<u8> = r.try_get(2).map_err(map)?;
            Ok(SyncPeer {
                cursor: SyncCursor {
                    peer: StoreId::parse(&peer).map_err(|_| corrupt("a malformed peer id"))?,
                    seq: Seq::from_i64(r.try_get(1).map_err(map)?)?,
                    id: epoch_id_from(&id)?,
                },
                epochs: count(r.try_get(3).map_err(map)?)?,
                bytes: count(r.try_get(4).map_err(map)?)?,
                updated_at_us: r.try_get(5).map_err(map)?,
            })
        })
        .collect()
}
