//! The import of a foreign epoch: under the space's lock, present already, or its parents
//! checked and the epoch written with the head cache it leaves (which may fork the space).

use cairn_core::{
    EpochId, Error, Event, EventId, ForeignEpoch, Head, ImportOutcome, Result, Seq, SpaceId,
};

use super::append::{insert_epoch, probe, working_heads, CacheWrite};
use super::lock::lock_spaces;
use super::row::{id_bytes, EventColumns};
use crate::config::SchemaName;
use crate::db::Db;
use crate::error::map;
use crate::sql;

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

/// Imports the verified `epoch` in the open transaction `db`, taking its space's lock first.
pub(crate) async fn import_tx(
    db: &mut Db<'_>,
    schema: &SchemaName,
    epoch: ForeignEpoch,
) -> Result<ImportOutcome> {
    lock_spaces(db, schema, &[&epoch.space]).await?;
    import_locked(db, epoch).await
}

/// Imports the verified `epoch` in the open transaction `db`, which holds its space's lock:
/// nothing is written when it is present already; an unknown parent refuses it (the caller
/// rolls back).
pub(crate) async fn import_locked(db: &mut Db<'_>, epoch: ForeignEpoch) -> Result<ImportOutcome> {
    let space = &epoch.space;
    if let Some(seq) = epoch_seq(db, space, &epoch.id).await? {
        return Ok(ImportOutcome::AlreadyPresent(seq));
    }
    check_parents(db, space, &epoch.parents).await?;
    let probe = probe(db, space).await?;
    let seq = probe.next();
    let before = working_heads(db, space, &probe).await?;
    let heads = cairn_core::heads_after_import(&before, &epoch.parents, Head { id: epoch.id, seq });
    let event_ids: Vec<EventId> = epoch.events.iter().map(Event::id).collect();
    let cols = EventColumns::new(epoch.events, &event_ids);
    let cache = CacheWrite::Exact(&heads);
    insert_epoch(db, space, &epoch.id, seq, &epoch.parents, cols, cache).await?;
    Ok(ImportOutcome::Imported(seq))
}
