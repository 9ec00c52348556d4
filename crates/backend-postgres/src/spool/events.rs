//! Run events and facts: append_event, close_run, events, acknowledge_events, set_fact, facts.
//! Each is one statement (a fact conflict reads the stored value with a second); a statement
//! that found its run changed after its snapshot runs again.

use std::collections::BTreeMap;

use cairn_core::spool::{
    check_append, check_limit, check_payload, check_producer_event_id, CloseOutcome, EventAppended,
    EventStream, FactName, FactOutcome, RunEvent, RunEventId, RunId, Timestamp, MAX_ACK_IDS,
    MAX_FACT_VALUE, MAX_RUN_EVENT_PAYLOAD,
};
use cairn_core::{Error, Result};
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::handle::PgSpool;
use super::keys::{changed_too_often, CAS_ROUNDS};
use super::row::{bytes_len, count, get, micros, state, ts};
use super::sql;
use crate::error::map;

fn event_from(row: &PgRow) -> Result<Option<RunEvent>> {
    let Some(seq) = get::<Option<i64>>(row, 0)? else {
        return Ok(None);
    };
    let id: Vec<u8> = get(row, 1)?;
    Ok(Some(RunEvent {
        seq: count(seq)?,
        event_id: RunEventId::new(id)
            .map_err(|_| Error::corrupt("an invalid run event id in the spool tables"))?,
        payload: get(row, 2)?,
        created_at: ts(get(row, 3)?),
    }))
}

pub(super) async fn append_event_tx(
    s: &PgSpool,
    run: RunId,
    event_id: &RunEventId,
    payload: Vec<u8>,
    now: Timestamp,
) -> Result<EventAppended> {
    let mut conn = s.pool().acquire().await.map_err(map)?;
    // Behind a transaction-mode pooler the statement runs in the checkout's transaction, which
    // a lost race for a new id (a unique violation) aborts: the next round needs a new one.
    let restart = s.restart_sql();
    let done = append_rounds(&mut conn, run, event_id, payload, now, restart.as_deref()).await;
    s.finish(conn, done).await
}

/// [`append_event_tx`] on `conn` (its input checked first, before any statement): on a pooled
/// connection in autocommit, or inside a transaction (the caller's), which then holds the run
/// row's lock until it ends.
pub(crate) async fn append_event_on(
    conn: &mut PgConnection,
    run: RunId,
    event_id: &RunEventId,
    payload: Vec<u8>,
    now: Timestamp,
) -> Result<EventAppended> {
    append_rounds(conn, run, event_id, payload, now, None).await
}

/// [`append_event_on`]; `restart`, when given, is sent after a lost race for a new id before
/// the next round (behind a transaction-mode pooler: it rolls the aborted checkout
/// transaction back and opens a new one, see [`PgSpool::restart_sql`]).
async fn append_rounds(
    conn: &mut PgConnection,
    run: RunId,
    event_id: &RunEventId,
    payload: Vec<u8>,
    now: Timestamp,
    restart: Option<&str>,
) -> Result<EventAppended> {
    check_producer_event_id(event_id)?;
    check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &payload)?;
    for _ in 0..CAS_ROUNDS {
        let row = sqlx::query(sql::APPEND_EVENT)
            .bind(run.as_bytes().as_slice())
            .bind(event_id.as_bytes())
            .bind(micros(now))
            .bind(bytes_len(payload.len()))
            .bind(payload.as_slice())
            .fetch_one(&mut *conn)
            .await
            .map_err(map);
        let row = match row {
            Ok(row) => row,
            // Another append of the same new id won the race; its seq is read next round.
            Err(e) if e.is_conflict() => {
                if let Some(restart) = restart {
                    use sqlx::Executor;
                    conn.execute(sqlx::raw_sql(restart)).await.map_err(map)?;
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        if !get::<bool>(&row, 0)? {
            return Err(Error::UnknownRun { run });
        }
        if let Some(seq) = get::<Option<i64>>(&row, 1)? {
            return Ok(EventAppended {
                seq: count(seq)?,
                created: false,
            });
        }
        if let Some(seq) = get::<Option<i64>>(&row, 2)? {
            return Ok(EventAppended {
                seq: count(seq)?,
                created: true,
            });
        }
        // Nothing written: refused if the run is finished or closed; else it changed
        // after this statement's snapshot (a close or finish the bump saw, or a competing
        // append) and the next round decides on a new snapshot.
        if let Some(name) = get::<Option<String>>(&row, 3)? {
            let stream = EventStream::from_stored(get(&row, 4)?);
            check_append(run, state(&name)?, stream)?;
        }
    }
    Err(changed_too_often(run))
}

pub(super) async fn close_run_tx(s: &PgSpool, run: RunId) -> Result<CloseOutcome> {
    let mut conn = s.pool().acquire().await.map_err(map)?;
    let done = close_run_on(&mut conn, run).await;
    s.finish(conn, done).await
}

/// [`close_run_tx`] on `conn`: in autocommit, or inside a transaction (the caller's), which
/// then holds the run row's lock until it ends.
pub(crate) async fn close_run_on(conn: &mut PgConnection, run: RunId) -> Result<CloseOutcome> {
    let row = sqlx::query(sql::CLOSE_RUN)
        .bind(run.as_bytes().as_slice())
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !get::<bool>(&row, 0)? {
        return Err(Error::UnknownRun { run });
    }
    Ok(if get::<bool>(&row, 1)? {
        CloseOutcome::Closed
    } else {
        CloseOutcome::AlreadyClosed
    })
}

pub(super) async fn events_tx(
    s: &PgSpool,
    run: RunId,
    after: u64,
    limit: usize,
    max_bytes: usize,
) -> Result<Vec<RunEvent>> {
    check_limit(limit)?;
    let rows = sqlx::query(sql::EVENTS)
        .bind(run.as_bytes().as_slice())
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .fetch_all(s.pool())
        .await
        .map_err(map)?;
    if rows.is_empty() {
        return Err(Error::UnknownRun { run });
    }
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(e) = event_from(row)? {
            out.push(e);
        }
    }
    Ok(out)
}

pub(super) async fn acknowledge_events_tx(
    s: &PgSpool,
    run: RunId,
    event_ids: &[RunEventId],
) -> Result<u64> {
    if event_ids.len() > MAX_ACK_IDS {
        return Err(Error::invalid(
            "event ids",
            format!("{} ids; the limit is {MAX_ACK_IDS}", event_ids.len()),
        ));
    }
    let ids: Vec<Vec<u8>> = event_ids.iter().map(|e| e.as_bytes().to_vec()).collect();
    let row = autocommit!(s, |on| sqlx::query(sql::ACK_EVENTS)
        .bind(run.as_bytes().as_slice())
        .bind(ids)
        .fetch_one(on)
        .await
        .map_err(map))?;
    if !get::<bool>(&row, 0)? {
        return Err(Error::UnknownRun { run });
    }
    count(get(&row, 1)?)
}

pub(super) async fn set_fact_tx(
    s: &PgSpool,
    run: RunId,
    name: &FactName,
    value: Vec<u8>,
    now: Timestamp,
) -> Result<FactOutcome> {
    let mut conn = s.pool().acquire().await.map_err(map)?;
    let done = set_fact_on(&mut conn, run, name, value, now).await;
    s.finish(conn, done).await
}

/// [`set_fact_tx`] on `conn` (its input checked first): in autocommit, or inside a transaction
/// (the caller's), whose uncommitted fact makes other writers of the same fact wait for it.
pub(crate) async fn set_fact_on(
    conn: &mut PgConnection,
    run: RunId,
    name: &FactName,
    value: Vec<u8>,
    now: Timestamp,
) -> Result<FactOutcome> {
    check_payload("fact value", MAX_FACT_VALUE, &value)?;
    for _ in 0..CAS_ROUNDS {
        let row = sqlx::query(sql::SET_FACT)
            .bind(run.as_bytes().as_slice())
            .bind(name.as_str())
            .bind(micros(now))
            .bind(value.as_slice())
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if !get::<bool>(&row, 0)? {
            return Err(Error::UnknownRun { run });
        }
        if get::<bool>(&row, 1)? {
            return Ok(FactOutcome::Set);
        }
        // Set before (possibly by a writer that committed after this statement's snapshot):
        // a new statement sees it.
        let stored: Option<Vec<u8>> = sqlx::query_scalar(sql::FACT_VALUE)
            .bind(run.as_bytes().as_slice())
            .bind(name.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?;
        match stored {
            Some(existing) if existing == value => return Ok(FactOutcome::AlreadySet),
            Some(existing) => {
                return Err(Error::FactConflict {
                    name: name.clone(),
                    existing,
                })
            }
            // Removed with its run by retention meanwhile: the next round says so.
            None => continue,
        }
    }
    Err(changed_too_often(run))
}

pub(super) async fn facts_tx(s: &PgSpool, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
    let rows = sqlx::query(sql::FACTS)
        .bind(run.as_bytes().as_slice())
        .fetch_all(s.pool())
        .await
        .map_err(map)?;
    if rows.is_empty() {
        return Err(Error::UnknownRun { run });
    }
    let mut out = BTreeMap::new();
    for row in &rows {
        if let Some(name) = get::<Option<String>>(row, 0)? {
            let name = FactName::new(name)
                .map_err(|_| Error::corrupt("an invalid fact name in the spool tables"))?;
            out.insert(name, get::<Vec<u8>>(row, 1)?);
        }
    }
    Ok(out)
}
