//! The epoch log's reads: heads, one epoch, the event feed, the list of spaces, the recent
//! epochs. Each is one statement (the feed adds a second to tell an empty page from a missing
//! space).

use cairn_core::{
    Epoch, EpochId, EpochSummary, Error, Event, FeedCursor, FeedEvent, FeedPage, Head, Result, Seq,
    SpaceId,
};
use sqlx::Row;

use super::row::{corrupt, epoch_id_from, event_id_from, heads_from};
use crate::db::Db;
use crate::error::map;
use crate::sql;

/// The anti-join's heads, sorted by id bytes. O(history).
pub(crate) async fn anti_join(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    let rows = sqlx::query(sql::ANTI_JOIN_HEADS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    heads_from(&rows)
}

/// The space's heads ([`cairn_core::EpochStore::heads`]).
pub(crate) async fn heads_tx(db: &mut Db<'_>, space: &SpaceId) -> Result<Vec<Head>> {
    let rows = sqlx::query(sql::HEADS)
        .bind(space.as_bytes())
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    let heads = heads_from(&rows)?;
    if heads.is_empty() {
        return Err(Error::space_not_found(space));
    }
    Ok(heads)
}

/// One page of the space's event feed after seq `after`.
pub(crate) async fn events_since_tx(
    db: &mut Db<'_>,
    space: &SpaceId,
    after: Seq,
    limit: usize,
    max_bytes: usize,
) -> Result<FeedPage> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = sqlx::query(sql::FEED_PAGE)
        .bind(space.as_bytes())
        .bind(after.to_i64()?)
        .bind(limit)
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    if rows.is_empty() {
        let exists: bool = sqlx::query_scalar(sql::SPACE_EXISTS)
            .bind(space.as_bytes())
            .fetch_one(db.conn())
            .await
            .map_err(map)?;
        if !exists {
            return Err(Error::space_not_found(space));
        }
    }
    let mut events = Vec::with_capacity(rows.len());
    let mut last = after;
    for row in &rows {
        let seq = Seq::from_i64(row.try_get(0).map_err(map)?)?;
        let epoch: Vec<u8> = row.try_get(1).map_err(map)?;
        let epoch_seq: i32 = row.try_get(2).map_err(map)?;
        let event_id: Vec<u8> = row.try_get(3).map_err(map)?;
        let event = Event {
            kind: row.try_get(4).map_err(map)?,
            key: row.try_get(5).map_err(map)?,
            payload: row.try_get(6).map_err(map)?,
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

/// Epoch `id` of the space, with its parents and events, when the space has it.
pub(crate) async fn epoch_tx(
    db: &mut Db<'_>,
    space: &SpaceId,
    id: &EpochId,
) -> Result<Option<Epoch>> {
    let Some(row) = sqlx::query(sql::EPOCH)
        .bind(space.as_bytes())
        .bind(id.as_bytes().as_slice())
        .fetch_optional(db.conn())
        .await
        .map_err(map)?
    else {
        return Ok(None);
    };
    let seq = Seq::from_i64(row.try_get(0).map_err(map)?)?;
    let parents: Vec<Vec<u8>> = row.try_get(1).map_err(map)?;
    let kinds: Vec<String> = row.try_get(2).map_err(map)?;
    let keys: Vec<Option<Vec<u8>>> = row.try_get(3).map_err(map)?;
    let payloads: Vec<Vec<u8>> = row.try_get(4).map_err(map)?;
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

/// Up to `limit` (at least 1) space ids after `after`, in byte order.
pub(crate) async fn list_spaces_q(
    db: &mut Db<'_>,
    after: Option<&SpaceId>,
    limit: usize,
) -> Result<Vec<SpaceId>> {
    // Space ids are never empty, so the empty string sorts before every one of them.
    let after: &[u8] = after.map_or(&[], SpaceId::as_bytes);
    let rows: Vec<Vec<u8>> = sqlx::query_scalar(sql::LIST_SPACES)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    rows.into_iter()
        .map(|b| SpaceId::from_stored(b).map_err(|_| corrupt("an invalid space id")))
        .collect()
}

/// The newest epochs of the space below seq `before`, newest first. One statement
/// ([`sql::RECENT_EPOCHS`]), so one snapshot: the page, its parents and its counts at one
/// committed state, and whether the space exists at all.
pub(crate) async fn recent_epochs_q(
    db: &mut Db<'_>,
    space: &SpaceId,
    before: Option<Seq>,
    limit: usize,
) -> Result<Vec<EpochSummary>> {
    // A bound above every storable seq reads from the newest epoch.
    let before = before.map_or(i64::MAX, |b| i64::try_from(b.0).unwrap_or(i64::MAX));
    let rows = sqlx::query(sql::RECENT_EPOCHS)
        .bind(space.as_bytes())
        .bind(before)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(db.conn())
        .await
        .map_err(map)?;
    let exists = match rows.first() {
        Some(row) => row.try_get::<Option<i64>, _>(0).map_err(map)?.is_some(),
        None => false,
    };
    if !exists {
        return Err(Error::space_not_found(space));
    }
    let mut page = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(id) = row.try_get::<Option<Vec<u8>>, _>(1).map_err(map)? else {
            continue;
        };
        let seq: i64 = row.try_get(2).map_err(map)?;
        let events: i64 = row.try_get(3).map_err(map)?;
        let parents: Vec<Vec<u8>> = row.try_get(4).map_err(map)?;
        page.push(EpochSummary {
            id: epoch_id_from(&id)?,
            seq: Seq::from_i64(seq)?,
            parents: parents
                .iter()
                .map(|p| epoch_id_from(p))
                .collect::<Result<_>>()?,
            events: u64::try_from(events).map_err(|_| corrupt("a negative event count"))?,
        });
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use crate::sql;

    #[test]
    fn dropped_index_is_the_schema_parent_index() {
        #[cfg(feature = "testkit")]
        assert!(sql::DROP_PARENT_INDEX.ends_with(cairn_core::schema::PARENT_INDEX));
        assert!(sql::ANTI_JOIN_HEADS.contains("epoch_parent"));
    }
}
