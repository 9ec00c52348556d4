//! Sync state on SQLite (revision `0010_epoch_sync`): the store's sync id
//! (`epoch_sync_self`), the cursors kept per sending store (`epoch_sync_peer`), the batch
//! import that writes epochs and their cursor in one transaction, and the `need` list's one
//! query.
//!
//! A store whose upgrade stopped before the revision (a contract revision before it deferred
//! while older builds are live) has none of these tables: [`SyncSeen`] says whether the store
//! saw the revision applied; until then the store id, the batch import and the cursors refuse
//! with [`cairn_migrate::sync_revision_missing`]. [`missing_q`] reads the epoch log only and
//! works on every store.

use std::collections::HashSet;

use cairn_core::sync::{cursor_epoch_missing, epoch_bytes, StoreId, SyncCursor, SyncPeer};
use cairn_core::{EpochId, Error, ForeignEpoch, ImportOutcome, Result, Seq, SpaceId};
use rusqlite::params;

use super::import::import_batch_in;
use super::read::epoch_seq;
use super::row::epoch_id_from;
use crate::db::{Db, End};
use crate::error::corrupt;
use crate::sql;

/// Whether the store holds the revision, as far as this handle knows.
pub(crate) use cairn_migrate::RevisionSeen as SyncSeen;

/// The store's answer: whether `0010_epoch_sync` is in cairn's lineage.
pub(crate) fn sync_applied_q(db: &Db<'_>) -> Result<bool> {
    let n: Vec<i64> = db.rows(sql::SYNC_APPLIED, [], |r| r.get(0))?;
    Ok(n.first().is_some_and(|n| *n > 0))
}

/// The stored sync id, when one was made.
pub(crate) fn store_id_q(db: &Db<'_>) -> Result<Option<StoreId>> {
    let ids: Vec<String> = db.rows(sql::STORE_ID, [], |r| r.get(0))?;
    ids.first()
        .map(|id| StoreId::parse(id).map_err(|_| corrupt("the stored sync id is malformed")))
        .transpose()
}

/// Makes the store's sync id unless a concurrent first call made it already, and reads the one
/// stored, in one write transaction.
pub(crate) fn make_store_id_tx(db: &Db<'_>) -> Result<StoreId> {
    db.write_tx(|db| {
        db.exec(sql::INSERT_STORE_ID, params![StoreId::random().as_str()])?;
        let id = store_id_q(db)?.ok_or_else(|| corrupt("the sync id was not stored"))?;
        Ok((id, End::Commit))
    })
}

/// Which of `ids` the space lacks, in the order given, with one query.
pub(crate) fn missing_q(db: &Db<'_>, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let packed: Vec<u8> = ids.iter().flat_map(|id| *id.as_bytes()).collect();
    let count = i64::try_from(ids.len()).map_err(|_| Error::invalid("epoch ids", "too many"))?;
    let known: Vec<Vec<u8>> = db.rows(
        sql::KNOWN_EPOCHS,
        params![space.as_bytes(), packed, count],
        |r| r.get(0),
    )?;
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

/// Imports the checked batch `epochs` of `space` in order and records `cursor`, all in one
/// write transaction: an epoch refused rolls back the whole batch.
pub(crate) fn import_batch_tx(
    db: &Db<'_>,
    space: &SpaceId,
    epochs: &[ForeignEpoch],
    cursor: Option<&SyncCursor>,
    at_us: i64,
) -> Result<Vec<ImportOutcome>> {
    db.write_tx(|db| {
        let outcomes = import_batch_in(db, space, epochs)?;
        let (mut imported, mut bytes) = (0u64, 0u64);
        for (epoch, outcome) in epochs.iter().zip(&outcomes) {
            if let ImportOutcome::Imported(_) = outcome {
                imported += 1;
                bytes += epoch_bytes(epoch);
            }
        }
        if let Some(c) = cursor {
            if epoch_seq(db, space, &c.id)?.is_none() {
                return Err(cursor_epoch_missing(c));
            }
            db.exec(
                sql::UPSERT_PEER,
                params![
                    space.as_bytes(),
                    c.peer.as_str(),
                    c.seq.to_i64()?,
                    c.id.as_bytes(),
                    counter(imported)?,
                    counter(bytes)?,
                    at_us
                ],
            )?;
        }
        let end = if imported == 0 && cursor.is_none() {
            End::Rollback
        } else {
            End::Commit
        };
        Ok((outcomes, end))
    })
}

/// A counter as stored.
fn counter(n: u64) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::invalid("sync counter", "out of range"))
}

type PeerRow = (String, i64, Vec<u8>, i64, i64, i64);

/// The cursors kept for `space`, by peer id.
pub(crate) fn sync_peers_q(db: &Db<'_>, space: &SpaceId) -> Result<Vec<SyncPeer>> {
    let rows: Vec<PeerRow> = db.rows(sql::SYNC_PEERS, params![space.as_bytes()], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })?;
    rows.into_iter()
        .map(|(peer, seq, id, epochs, bytes, updated_at_us)| {
            let count =
                |n: i64| u64::try_from(n).map_err(|_| corrupt("a stored sync counter is negative"));
            Ok(SyncPeer {
                cursor: SyncCursor {
                    peer: StoreId::parse(&peer)
                        .map_err(|_| corrupt("a stored peer id is malformed"))?,
                    seq: Seq::from_i64(seq)?,
                    id: epoch_id_from(&id)?,
                },
                epochs: count(epochs)?,
                bytes: count(bytes)?,
                updated_at_us,
            })
        })
        .collect()
}
