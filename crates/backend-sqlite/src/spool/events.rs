//! Run events and run facts: appends with per-run seqs, ordered reads, acknowledgements, and
//! write-once facts.

use std::collections::BTreeMap;

use cairn_core::spool::{
    check_append, CloseOutcome, EventAppended, EventStream, FactName, FactOutcome, RunEvent,
    RunEventId, RunId, Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::params;

use super::read::{facts_of, require_run};
use super::row::{len_i64, micros, non_negative, state, ts};
use super::sql;
use crate::db::{Db, End};
use crate::error::{corrupt, map};

pub(crate) fn append_event_tx(
    db: &Db<'_>,
    run: RunId,
    event_id: &RunEventId,
    payload: &[u8],
    now: Timestamp,
) -> Result<EventAppended> {
    db.write_tx(|db| {
        let heads: Vec<(i64, i64, String, Option<bool>)> =
            db.rows(sql::LAST_EVENT_SEQ, params![run.as_bytes()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        let Some((run_no, last, run_state, closed)) = heads.into_iter().next() else {
            return Err(Error::UnknownRun { run });
        };
        let held: Vec<i64> = db.rows(
            sql::EVENT_SEQ_BY_ID,
            params![run.as_bytes(), event_id.as_bytes()],
            |r| r.get(0),
        )?;
        if let Some(seq) = held.first() {
            let seq = non_negative(*seq, "event seq")?;
            return Ok((
                EventAppended {
                    seq,
                    created: false,
                },
                End::Rollback,
            ));
        }
        // Decided in the writer's transaction, so a close or a finish commits either before
        // this append (which is then refused) or after it (and the event is stored first).
        check_append(run, state(&run_state)?, EventStream::from_stored(closed))?;
        let seq = last
            .checked_add(1)
            .ok_or_else(|| corrupt("a run's event counter is exhausted"))?;
        db.exec(
            sql::INSERT_EVENT,
            params![
                run.as_bytes(),
                seq,
                event_id.as_bytes(),
                micros(now),
                len_i64(payload),
                payload
            ],
        )?;
        db.exec(sql::SET_LAST_EVENT_SEQ, params![run_no, seq])?;
        let appended = EventAppended {
            seq: non_negative(seq, "event seq")?,
            created: true,
        };
        Ok((appended, End::Commit))
    })
}

pub(crate) fn close_run_tx(db: &Db<'_>, run: RunId) -> Result<CloseOutcome> {
    db.write_tx(|db| {
        let rows: Vec<(i64, Option<bool>)> =
            db.rows(sql::RUN_STREAM, params![run.as_bytes()], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
        let Some((run_no, closed)) = rows.into_iter().next() else {
            return Err(Error::UnknownRun { run });
        };
        if EventStream::from_stored(closed).is_closed() {
            return Ok((CloseOutcome::AlreadyClosed, End::Rollback));
        }
        db.exec(sql::CLOSE_RUN, params![run_no])?;
        Ok((CloseOutcome::Closed, End::Commit))
    })
}

/// The run's events after `after`: at most `limit`, and at most `max_bytes` of payload after
/// the first. Rows are read one at a time, so an event that does not fit is the last one read.
pub(super) fn events_tx(
    db: &Db<'_>,
    run: RunId,
    after: u64,
    limit: usize,
    max_bytes: usize,
) -> Result<Vec<RunEvent>> {
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
    db.read_tx(|db| {
        require_run(db, run)?;
        db.count();
        let mut stmt = db.conn().prepare_cached(sql::EVENTS_AFTER).map_err(map)?;
        let mut rows = stmt
            .query(params![run.as_bytes(), after, limit_sql])
            .map_err(map)?;
        let mut events = Vec::new();
        let mut bytes = 0usize;
        while let Some(r) = rows.next().map_err(map)? {
            let payload: Vec<u8> = r.get(2).map_err(map)?;
            bytes = bytes.saturating_add(payload.len());
            if !events.is_empty() && bytes > max_bytes {
                break;
            }
            let id: Vec<u8> = r.get(1).map_err(map)?;
            events.push(RunEvent {
                seq: non_negative(r.get(0).map_err(map)?, "event seq")?,
                event_id: RunEventId::new(id)
                    .map_err(|_| corrupt("a stored event id is out of bounds"))?,
                payload,
                created_at: ts(r.get(3).map_err(map)?),
            });
        }
        Ok(events)
    })
}

pub(super) fn acknowledge_events_tx(
    db: &Db<'_>,
    run: RunId,
    event_ids: &[RunEventId],
) -> Result<u64> {
    db.write_tx(|db| {
        require_run(db, run)?;
        let mut removed = 0u64;
        for id in event_ids {
            removed += db.exec(
                sql::DELETE_EVENT_BY_ID,
                params![run.as_bytes(), id.as_bytes()],
            )? as u64;
        }
        let end = if removed > 0 {
            End::Commit
        } else {
            End::Rollback
        };
        Ok((removed, end))
    })
}

pub(crate) fn set_fact_tx(
    db: &Db<'_>,
    run: RunId,
    name: &FactName,
    value: &[u8],
    now: Timestamp,
) -> Result<FactOutcome> {
    db.write_tx(|db| {
        require_run(db, run)?;
        let inserted = db.exec(
            sql::INSERT_FACT,
            params![run.as_bytes(), name.as_str(), micros(now), value],
        )?;
        if inserted == 1 {
            return Ok((FactOutcome::Set, End::Commit));
        }
        let stored: Vec<Vec<u8>> = db.rows(
            sql::FACT_VALUE,
            params![run.as_bytes(), name.as_str()],
            |r| r.get(0),
        )?;
        let existing = stored
            .into_iter()
            .next()
            .ok_or_else(|| corrupt("a fact insert conflicted with a fact that is not there"))?;
        if existing == value {
            Ok((FactOutcome::AlreadySet, End::Rollback))
        } else {
            Err(Error::FactConflict {
                name: name.clone(),
                existing,
            })
        }
    })
}

pub(super) fn facts_tx(db: &Db<'_>, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
    db.read_tx(|db| {
        require_run(db, run)?;
        facts_of(db, run.as_bytes())
    })
}
