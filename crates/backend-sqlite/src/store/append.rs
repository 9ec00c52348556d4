//! The append: one epoch at the next seq on the heads the probe found, its parent edges and
//! events, and the head cache made its only head ([`append_tx`]).

use cairn_core::{epoch_id, Appended, EpochId, Event, EventId, Head, Result, Seq, SpaceId};
use rusqlite::params;

use super::read::{probe, working_heads};
use crate::db::{Db, End};
use crate::sql;

/// Statements a single-event append costs when the head cache is current and holds one row
/// (the steady state): `BEGIN IMMEDIATE`, the probe (next seq + cache rows), the epoch insert,
/// one parent edge, one event, the cache `UPDATE`, `COMMIT`. In general an append with a
/// current cache costs `5 + parents + events`, whatever the history's length.
pub const APPEND_STATEMENT_BUDGET: u64 = 7;

/// Inserts an epoch with its parent edges and events at `seq`; `parents` must be sorted and
/// already in the space. Returns its id.
pub(crate) fn insert_epoch(
    db: &Db<'_>,
    space: &SpaceId,
    seq: Seq,
    parents: &[EpochId],
    events: &[Event],
    event_ids: &[EventId],
) -> Result<EpochId> {
    let id = epoch_id(space, parents, event_ids);
    let s = space.as_bytes();
    let seq_i = seq.to_i64()?;
    db.exec(sql::INSERT_EPOCH, params![s, id.as_bytes(), seq_i])?;
    for p in parents {
        db.exec(sql::INSERT_PARENT, params![s, p.as_bytes(), id.as_bytes()])?;
    }
    for (i, (ev, ev_id)) in events.iter().zip(event_ids).enumerate() {
        db.exec(
            sql::INSERT_EVENT,
            params![
                s,
                seq_i,
                i as i64,
                id.as_bytes(),
                ev_id.as_bytes(),
                ev.kind,
                ev.key,
                ev.payload
            ],
        )?;
    }
    Ok(id)
}

/// Makes `head` the space's only cached row: one row → UPDATE, none → INSERT, several →
/// DELETE + INSERT (DESIGN §2 step 5).
pub(crate) fn cache_sole_head(
    db: &Db<'_>,
    space: &SpaceId,
    before: &[Head],
    head: Head,
) -> Result<()> {
    let s = space.as_bytes();
    let seq = head.seq.to_i64()?;
    match before.len() {
        1 => db.exec(sql::UPDATE_SOLE_HEAD, params![s, head.id.as_bytes(), seq])?,
        0 => db.exec(sql::INSERT_HEAD, params![s, head.id.as_bytes(), seq])?,
        _ => {
            db.exec(sql::DELETE_HEADS, params![s])?;
            db.exec(sql::INSERT_HEAD, params![s, head.id.as_bytes(), seq])?
        }
    };
    Ok(())
}

/// The ids of `events`, in order.
pub(crate) fn event_ids(events: &[Event]) -> Vec<EventId> {
    events.iter().map(Event::id).collect()
}

/// Appends `events` as one epoch on the space's heads, in one write transaction.
pub(crate) fn append_tx(db: &Db<'_>, space: &SpaceId, events: &[Event]) -> Result<Appended> {
    let ids = event_ids(events);
    db.write_tx(|db| {
        let probe = probe(db, space)?;
        let parents: Vec<EpochId> = working_heads(db, space, &probe)?
            .into_iter()
            .map(|h| h.id)
            .collect();
        let seq = probe.next();
        let id = insert_epoch(db, space, seq, &parents, events, &ids)?;
        cache_sole_head(db, space, &probe.cached, Head { id, seq })?;
        Ok((Appended { id, seq, parents }, End::Commit))
    })
}
