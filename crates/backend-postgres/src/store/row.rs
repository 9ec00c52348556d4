//! Conversions between the epoch log's rows and core's types: ids, heads, and the columns an
//! epoch's events are bound as.

use cairn_core::{EpochId, Error, Event, EventId, Head, Result, Seq};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::map;

pub(crate) fn corrupt(what: &str) -> Error {
    Error::corrupt(format!("{what} in the epoch log"))
}

pub(crate) fn epoch_id_from(bytes: &[u8]) -> Result<EpochId> {
    EpochId::from_slice(bytes).map_err(|_| corrupt("an epoch id that is not 32 bytes"))
}

pub(crate) fn event_id_from(bytes: &[u8]) -> Result<EventId> {
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

pub(crate) fn heads_from(rows: &[PgRow]) -> Result<Vec<Head>> {
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

pub(crate) fn head_columns(heads: &[Head]) -> Result<(Vec<Vec<u8>>, Vec<i64>)> {
    let ids = heads.iter().map(|h| h.id.as_bytes().to_vec()).collect();
    let seqs = heads
        .iter()
        .map(|h| h.seq.to_i64())
        .collect::<Result<Vec<_>>>()?;
    Ok((ids, seqs))
}
