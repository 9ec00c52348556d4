//! The import of a foreign epoch: present already, or its parents checked and the epoch
//! written with the head cache it leaves (which may fork the space).

use std::collections::HashMap;

use cairn_core::sync::batch_item_error;
use cairn_core::{
    heads_after_import, EpochId, Error, ForeignEpoch, Head, ImportOutcome, Result, Seq, SpaceId,
};

use super::append::{event_ids, insert_epoch};
use super::read::{epoch_seq, probe, working_heads};
use super::repair::cache_exact;
use crate::db::{Db, End};

/// Imports `epoch` (its hash verified by the caller) in one write transaction; nothing is
/// written when it is present already.
pub(crate) fn import_tx(db: &Db<'_>, epoch: &ForeignEpoch) -> Result<ImportOutcome> {
    db.write_tx(|db| {
        let outcome = import_in(db, epoch)?;
        let end = match outcome {
            ImportOutcome::Imported(_) => End::Commit,
            ImportOutcome::AlreadyPresent(_) => End::Rollback,
        };
        Ok((outcome, end))
    })
}

/// Imports `epoch` (its hash verified by the caller) inside the open write transaction `db`:
/// nothing is written when it is present already; an unknown parent refuses it (the caller
/// rolls back).
pub(crate) fn import_in(db: &Db<'_>, epoch: &ForeignEpoch) -> Result<ImportOutcome> {
    let space = &epoch.space;
    if let Some(seq) = epoch_seq(db, space, &epoch.id)? {
        return Ok(ImportOutcome::AlreadyPresent(seq));
    }
    for p in &epoch.parents {
        if epoch_seq(db, space, p)?.is_none() {
            return Err(Error::UnknownParent { parent: *p });
        }
    }
    let ids = event_ids(&epoch.events);
    let probe = probe(db, space)?;
    let before = working_heads(db, space, &probe)?;
    let seq = probe.next();
    let id = insert_epoch(db, space, seq, &epoch.parents, &epoch.events, &ids)?;
    if id != epoch.id {
        // verify_epoch ran before the transaction; this would be a bug, not bad input.
        return Err(Error::HashMismatch {
            claimed: epoch.id,
            actual: id,
        });
    }
    let heads = heads_after_import(&before, &epoch.parents, Head { id, seq });
    cache_exact(db, space, &probe.cached, &heads)?;
    Ok(ImportOutcome::Imported(seq))
}

/// Imports the checked batch `epochs` of `space` in order inside the open write transaction
/// `db`: one probe and one head-cache write for the whole batch (an epoch's parents may be
/// earlier in it), so a batch costs O(epochs + heads), not O(epochs × heads). An epoch refused
/// is returned as its batch item's error (the caller rolls back).
pub(crate) fn import_batch_in(
    db: &Db<'_>,
    space: &SpaceId,
    epochs: &[ForeignEpoch],
) -> Result<Vec<ImportOutcome>> {
    let probe = probe(db, space)?;
    let mut heads = working_heads(db, space, &probe)?;
    let mut next = probe.next();
    let mut assigned: HashMap<EpochId, Seq> = HashMap::new();
    let mut outcomes = Vec::with_capacity(epochs.len());
    for (index, epoch) in epochs.iter().enumerate() {
        let present = match assigned.get(&epoch.id) {
            Some(seq) => Some(*seq),
            None => epoch_seq(db, space, &epoch.id)?,
        };
        if let Some(seq) = present {
            outcomes.push(ImportOutcome::AlreadyPresent(seq));
            continue;
        }
        for p in &epoch.parents {
            if !assigned.contains_key(p) && epoch_seq(db, space, p)?.is_none() {
                return Err(batch_item_error(index, Error::UnknownParent { parent: *p }));
            }
        }
        let ids = event_ids(&epoch.events);
        let id = insert_epoch(db, space, next, &epoch.parents, &epoch.events, &ids)?;
        if id != epoch.id {
            // check_import_batch ran before the transaction; this would be a bug.
            return Err(Error::HashMismatch {
                claimed: epoch.id,
                actual: id,
            });
        }
        heads = heads_after_import(&heads, &epoch.parents, Head { id, seq: next });
        assigned.insert(id, next);
        outcomes.push(ImportOutcome::Imported(next));
        next = Seq(next.0 + 1);
    }
    if !assigned.is_empty() {
        cache_exact(db, space, &probe.cached, &heads)?;
    }
    Ok(outcomes)
}
