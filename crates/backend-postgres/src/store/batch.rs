//! A batch import's decisions and its one write: which epochs are present (one statement),
//! whether every parent is in the space or earlier in the batch (one statement for the
//! parents outside it), the seqs and head cache the new epochs leave (from one probe, in
//! Rust), then every row in one statement ([`sql::IMPORT_BATCH_WRITE`]). So a batch of any
//! size costs four statements after the space's lock, where importing its epochs one by one
//! costs five each.

use std::collections::{HashMap, HashSet};

use cairn_core::sync::{batch_item_error, epoch_bytes};
use cairn_core::{
    heads_after_import, EpochId, Error, Event, ForeignEpoch, Head, ImportOutcome, Result, Seq,
    SpaceId,
};
use sqlx::Row;

use super::append::{probe, working_heads};
use super::row::{epoch_id_from, head_columns, id_bytes};
use crate::db::Db;
use crate::error::map;
use crate::sql;

/// What a batch imported: one outcome per epoch, and the count and stored bytes of the new
/// ones.
pub(crate) struct Written {
    pub(crate) outcomes: Vec<ImportOutcome>,
    pub(crate) imported: u64,
    pub(crate) bytes: u64,
}

/// The seqs of those of `ids` the space holds.
async fn known_seqs(
    db: &mut Db<'_>,
    space: &SpaceId,
    ids: &[EpochId],
) -> Result<HashMap<EpochId, Seq>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(sql::KNOWN_EPOCH_SEQS)
        .bind(space.as_bytes())
        .bind(id_bytes(ids))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    rows.iter()
        .map(|r| {
            let id: Vec<u8> = r.try_get(0).map_err(map)?;
            let seq: i64 = r.try_get(1).map_err(map)?;
            Ok((epoch_id_from(&id)?, Seq::from_i64(seq)?))
        })
        .collect()
}

/// The columns of [`sql::IMPORT_BATCH_WRITE`].
#[derive(Default)]
struct Columns {
    ids: Vec<Vec<u8>>,
    seqs: Vec<i64>,
    children: Vec<Vec<u8>>,
    parents: Vec<Vec<u8>>,
    ev_seqs: Vec<i64>,
    ev_pos: Vec<i32>,
    ev_epochs: Vec<Vec<u8>>,
    ev_ids: Vec<Vec<u8>>,
    kinds: Vec<String>,
    keys: Vec<Option<Vec<u8>>>,
    payloads: Vec<Vec<u8>>,
}

impl Columns {
    fn push(&mut self, epoch: ForeignEpoch, seq: Seq) -> Result<()> {
        let id = epoch.id.as_bytes().to_vec();
        let seq = seq.to_i64()?;
        for p in &epoch.parents {
            self.children.push(id.clone());
            self.parents.push(p.as_bytes().to_vec());
        }
        for (pos, e) in epoch.events.into_iter().enumerate() {
            self.ev_seqs.push(seq);
            self.ev_pos
                .push(i32::try_from(pos).map_err(|_| Error::invalid("epoch events", "too many"))?);
            self.ev_epochs.push(id.clone());
            self.ev_ids.push(Event::id(&e).as_bytes().to_vec());
            self.kinds.push(e.kind);
            self.keys.push(e.key);
            self.payloads.push(e.payload);
        }
        self.ids.push(id);
        self.seqs.push(seq);
        Ok(())
    }
}

/// Imports the checked batch `epochs` of `space` in the open transaction `db`, which holds the
/// space's lock: all of it, or an error and nothing (the caller rolls back).
pub(crate) async fn write_batch(
    db: &mut Db<'_>,
    space: &SpaceId,
    epochs: Vec<ForeignEpoch>,
) -> Result<Written> {
    let ids: Vec<EpochId> = epochs.iter().map(|e| e.id).collect();
    let present = known_seqs(db, space, &ids).await?;
    // Parents named from outside the batch's new epochs: they must be in the space.
    let mut in_batch: HashSet<EpochId> = HashSet::new();
    let mut outside: Vec<EpochId> = Vec::new();
    for e in &epochs {
        if present.contains_key(&e.id) || in_batch.contains(&e.id) {
            continue;
        }
        outside.extend(
            e.parents
                .iter()
                .filter(|p| !in_batch.contains(p) && !present.contains_key(p)),
        );
        in_batch.insert(e.id);
    }
    outside.sort();
    outside.dedup();
    let known_outside = known_seqs(db, space, &outside).await?;
    let probe = probe(db, space).await?;
    let mut heads = working_heads(db, space, &probe).await?;
    let mut next = probe.next();
    let mut assigned: HashMap<EpochId, Seq> = HashMap::new();
    let mut cols = Columns::default();
    let mut written = Written {
        outcomes: Vec::with_capacity(epochs.len()),
        imported: 0,
        bytes: 0,
    };
    for (index, epoch) in epochs.into_iter().enumerate() {
        if let Some(seq) = present.get(&epoch.id).or_else(|| assigned.get(&epoch.id)) {
            written.outcomes.push(ImportOutcome::AlreadyPresent(*seq));
            continue;
        }
        let unknown = epoch.parents.iter().find(|p| {
            !present.contains_key(p) && !assigned.contains_key(p) && !known_outside.contains_key(p)
        });
        if let Some(parent) = unknown {
            return Err(batch_item_error(
                index,
                Error::UnknownParent { parent: *parent },
            ));
        }
        let seq = next;
        next = Seq(next.0 + 1);
        heads = heads_after_import(&heads, &epoch.parents, Head { id: epoch.id, seq });
        assigned.insert(epoch.id, seq);
        written.imported += 1;
        written.bytes += epoch_bytes(&epoch);
        written.outcomes.push(ImportOutcome::Imported(seq));
        cols.push(epoch, seq)?;
    }
    if cols.ids.is_empty() {
        return Ok(written);
    }
    let (head_ids, head_seqs) = head_columns(&heads)?;
    sqlx::query(sql::IMPORT_BATCH_WRITE)
        .bind(space.as_bytes())
        .bind(cols.ids)
        .bind(cols.seqs)
        .bind(cols.children)
        .bind(cols.parents)
        .bind(cols.ev_seqs)
        .bind(cols.ev_pos)
        .bind(cols.ev_epochs)
        .bind(cols.ev_ids)
        .bind(cols.kinds)
        .bind(cols.keys)
        .bind(cols.payloads)
        .bind(head_ids)
        .bind(head_seqs)
        .execute(db.conn())
        .await
        .map_err(map)?;
    Ok(written)
}
