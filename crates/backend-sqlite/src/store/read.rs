//! The epoch log's reads: the probe every write makes and the heads it works from, the anti-join,
//! the largest seq and an epoch's seq, the heads, the event feed, one epoch, the recent epochs
//! and the list of spaces. Each runs on a [`Db`] (a read connection's snapshot, or the writer's
//! transaction when a write calls it).

use cairn_core::{
    Epoch, EpochId, EpochSummary, Error, Event, EventId, FeedCursor, FeedEvent, FeedPage, Head,
    HeadProbe, Result, Seq, SpaceId,
};
use rusqlite::params;

use super::row::{epoch_id_from, heads_from};
use crate::db::Db;
use crate::error::{corrupt, map};
use crate::sql;

type ProbeRow = (Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>, Option<i64>);

/// One statement: the largest seq and the id there, next to the cache rows (see
/// [`sql::PROBE`]).
pub(crate) fn probe(db: &Db<'_>, space: &SpaceId) -> Result<HeadProbe> {
    let rows: Vec<ProbeRow> = db.rows(sql::PROBE, params![space.as_bytes()], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })?;
    let max_seq = match rows.first().and_then(|r| r.0) {
        Some(s) => Some(Seq::from_i64(s)?),
        None => None,
    };
    let max_id = match rows.first().and_then(|r| r.1.as_deref()) {
        Some(id) => Some(epoch_id_from(id)?),
        None => None,
    };
    let mut cached = Vec::with_capacity(rows.len());
    for (_, _, id, seq) in rows {
        if let (Some(id), Some(seq)) = (id, seq) {
            cached.push(Head {
                id: epoch_id_from(&id)?,
                seq: Seq::from_i64(seq)?,
            });
        }
    }
    Ok(HeadProbe {
        max_seq,
        max_id,
        cached,
    })
}

/// The heads computed from the epochs: those no epoch names as a parent (see
/// [`sql::ANTI_JOIN_HEADS`]).
pub(crate) fn anti_join(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    heads_from(
        db.rows(sql::ANTI_JOIN_HEADS, params![space.as_bytes()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?,
    )
}

/// The space's largest seq; `None` when the space has no epoch.
pub(crate) fn max_seq(db: &Db<'_>, space: &SpaceId) -> Result<Option<Seq>> {
    let rows: Vec<i64> = db.rows(sql::MAX_SEQ, params![space.as_bytes()], |r| r.get(0))?;
    rows.first().map(|s| Seq::from_i64(*s)).transpose()
}

/// The seq of epoch `id` in the space; `None` when it is not there.
pub(crate) fn epoch_seq(db: &Db<'_>, space: &SpaceId, id: &EpochId) -> Result<Option<Seq>> {
    let rows: Vec<i64> = db.rows(
        sql::EPOCH_SEQ,
        params![space.as_bytes(), id.as_bytes()],
        |r| r.get(0),
    )?;
    rows.first().map(|s| Seq::from_i64(*s)).transpose()
}

/// The heads the append path works from: the cache when current, else the anti-join (once).
pub(crate) fn working_heads(db: &Db<'_>, space: &SpaceId, probe: &HeadProbe) -> Result<Vec<Head>> {
    if probe.cache_is_current() {
        Ok(probe.cached.clone())
    } else {
        anti_join(db, space)
    }
}

/// The space's heads, from one snapshot: the cache when current, else the anti-join.
pub(crate) fn heads_tx(db: &Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    db.read_tx(|db| {
        let probe = probe(db, space)?;
        if probe.max_seq.is_none() {
            return Err(Error::space_not_found(space));
        }
        working_heads(db, space, &probe)
    })
}

type FeedRow = (i64, i64, Vec<u8>, Vec<u8>, String, Option<Vec<u8>>, Vec<u8>);

fn feed_event(row: FeedRow) -> Result<FeedEvent> {
    let (seq, epoch_seq, epoch, event_id, kind, key, payload) = row;
    Ok(FeedEvent {
        seq: Seq::from_i64(seq)?,
        epoch: epoch_id_from(&epoch)?,
        epoch_seq: u32::try_from(epoch_seq)
            .map_err(|_| corrupt("a stored event position is out of range"))?,
        event_id: EventId::from_slice(&event_id)
            .map_err(|_| corrupt("a stored event id is not 32 bytes"))?,
        event: Event { kind, key, payload },
    })
}

/// The feed page after `after`: whole epochs, at most `limit` events and `max_bytes` of their
/// stored bytes ([`Event::stored_bytes`]), at least one epoch. Rows are read one at a time, so
/// an epoch that does not fit is read no further than its first event that does not.
pub(crate) fn events_since_tx(
    db: &Db<'_>,
    space: &SpaceId,
    after: Seq,
    limit: usize,
    max_bytes: usize,
) -> Result<FeedPage> {
    db.read_tx(|db| {
        if max_seq(db, space)?.is_none() {
            return Err(Error::space_not_found(space));
        }
        db.count();
        let mut stmt = db.conn().prepare_cached(sql::EVENTS_AFTER).map_err(map)?;
        let mut rows = stmt
            .query(params![space.as_bytes(), after.to_i64()?])
            .map_err(map)?;
        let mut page: Vec<FeedEvent> = Vec::new();
        // The epoch being read; it joins the page only once complete and only if it fits.
        let mut current: Vec<FeedEvent> = Vec::new();
        // Stored bytes of `page` and `current` together.
        let mut bytes = 0usize;
        let mut last = after;
        loop {
            let Some(row) = rows.next().map_err(map)? else {
                if let Some(first) = current.first() {
                    last = first.seq;
                    page.append(&mut current);
                }
                break;
            };
            let fe = feed_event((
                row.get(0).map_err(map)?,
                row.get(1).map_err(map)?,
                row.get(2).map_err(map)?,
                row.get(3).map_err(map)?,
                row.get(4).map_err(map)?,
                row.get(5).map_err(map)?,
                row.get(6).map_err(map)?,
            ))?;
            if let Some(first) = current.first() {
                if first.seq != fe.seq {
                    last = first.seq;
                    page.append(&mut current);
                }
            }
            // Stop before an epoch that would take the page past `limit` events or
            // `max_bytes`, unless the page would otherwise be empty.
            bytes = bytes.saturating_add(fe.event.stored_bytes());
            if !page.is_empty() && (page.len() + current.len() + 1 > limit || bytes > max_bytes) {
                break;
            }
            current.push(fe);
        }
        Ok(FeedPage {
            events: page,
            next: FeedCursor::new(space, last),
        })
    })
}

/// Epoch `id` of the space with its parents and events, from one snapshot.
pub(crate) fn epoch_tx(db: &Db<'_>, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
    db.read_tx(|db| {
        let Some(seq) = epoch_seq(db, space, id)? else {
            return Ok(None);
        };
        let s = space.as_bytes();
        let parents = db
            .rows(sql::EPOCH_PARENTS, params![s, id.as_bytes()], |r| {
                r.get::<_, Vec<u8>>(0)
            })?
            .iter()
            .map(|p| epoch_id_from(p))
            .collect::<Result<Vec<_>>>()?;
        let events = db.rows(sql::EPOCH_EVENTS, params![s, seq.to_i64()?], |r| {
            Ok(Event {
                kind: r.get(0)?,
                key: r.get(1)?,
                payload: r.get(2)?,
            })
        })?;
        Ok(Some(Epoch {
            space: space.clone(),
            id: *id,
            seq,
            parents,
            events,
        }))
    })
}

type RecentRow = (
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<Vec<u8>>,
);

/// One statement ([`sql::RECENT_EPOCHS`]), so one snapshot: the page, its parents and its
/// counts at one committed state, and whether the space exists at all.
pub(crate) fn recent_epochs_q(
    db: &Db<'_>,
    space: &SpaceId,
    before: Option<Seq>,
    limit: usize,
) -> Result<Vec<EpochSummary>> {
    // A bound above every storable seq reads from the newest epoch.
    let before = before.map_or(i64::MAX, |b| i64::try_from(b.0).unwrap_or(i64::MAX));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows: Vec<RecentRow> = db.rows(
        sql::RECENT_EPOCHS,
        params![space.as_bytes(), before, limit],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )?;
    if rows.first().is_none_or(|r| r.0.is_none()) {
        return Err(Error::space_not_found(space));
    }
    let mut page: Vec<EpochSummary> = Vec::new();
    for (_, id, seq, events, parent) in rows {
        let (Some(id), Some(seq), Some(events)) = (id, seq, events) else {
            continue;
        };
        let seq = Seq::from_i64(seq)?;
        if page.last().is_none_or(|e| e.seq != seq) {
            page.push(EpochSummary {
                id: epoch_id_from(&id)?,
                seq,
                parents: Vec::new(),
                events: u64::try_from(events).map_err(|_| corrupt("a negative event count"))?,
            });
        }
        if let (Some(parent), Some(e)) = (parent, page.last_mut()) {
            e.parents.push(epoch_id_from(&parent)?);
        }
    }
    Ok(page)
}

/// Up to `limit` space ids after `after`, in byte order.
pub(crate) fn list_spaces_q(
    db: &Db<'_>,
    after: Option<&SpaceId>,
    limit: usize,
) -> Result<Vec<SpaceId>> {
    let start: &[u8] = after.map_or(&[], SpaceId::as_bytes);
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    db.rows(sql::SPACES_AFTER, params![start, limit], |r| {
        r.get::<_, Vec<u8>>(0)
    })?
    .into_iter()
    .map(|s| SpaceId::from_stored(s).map_err(|_| corrupt("a stored space id is out of bounds")))
    .collect()
}
