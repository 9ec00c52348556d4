//! Retention batches: each one write transaction that reads a window, lets the pass plan the
//! batch and deletes it, so the write lock is held for one bounded batch at a time.

use cairn_core::spool::{EventBatch, EventMeta, RetentionPass, RunMeta};
use cairn_core::Result;
use rusqlite::params;

use super::row::{micros, non_negative, run_id, ts};
use super::sql;
use crate::db::{Db, End};
use crate::error::corrupt;

/// One event batch of a retention pass: reads the oldest events and the total, lets `pass`
/// plan the batch and deletes it, all in one transaction.
pub(super) fn retention_events_tx(db: &Db<'_>, pass: &RetentionPass) -> Result<EventBatch> {
    let window = i64::try_from(pass.batch_size()).unwrap_or(i64::MAX);
    db.write_tx(|db| {
        let total: Vec<i64> = db.rows(sql::EVENT_BYTES, [], |r| r.get(0))?;
        let total = non_negative(total.first().copied().unwrap_or(0), "event size")?;
        let oldest = db
            .rows(sql::OLDEST_EVENTS, params![window], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?
            .into_iter()
            .map(|(run, seq, created_at, bytes)| {
                Ok(EventMeta {
                    run: run_id(&run)?,
                    seq: non_negative(seq, "event seq")?,
                    created_at: ts(created_at),
                    bytes: non_negative(bytes, "event size")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = pass.plan_events(total, &oldest);
        for (run, seq) in &batch.events {
            let seq = i64::try_from(*seq).map_err(|_| corrupt("an event seq is out of range"))?;
            db.exec(sql::DELETE_EVENT, params![run.as_bytes(), seq])?;
        }
        let end = if batch.events.is_empty() {
            End::Rollback
        } else {
            End::Commit
        };
        Ok((batch, end))
    })
}

/// One run batch of a retention pass: terminal runs without events finished before the
/// cutoff, with their facts, in one transaction. Returns how many were removed.
pub(super) fn retention_runs_tx(db: &Db<'_>, pass: &RetentionPass) -> Result<usize> {
    let window = i64::try_from(pass.batch_size()).unwrap_or(i64::MAX);
    let cutoff = micros(pass.cutoff());
    db.write_tx(|db| {
        let candidates = db
            .rows(sql::REMOVABLE_RUNS, params![cutoff, window], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
            })?
            .into_iter()
            .map(|(run, finished_at)| {
                Ok(RunMeta {
                    run: run_id(&run)?,
                    finished_at: ts(finished_at),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ids = pass.plan_runs(&candidates);
        for id in &ids {
            db.exec(sql::DELETE_FACTS, params![id.as_bytes()])?;
            db.exec(sql::DELETE_RUN, params![id.as_bytes()])?;
        }
        let end = if ids.is_empty() {
            End::Rollback
        } else {
            End::Commit
        };
        Ok((ids.len(), end))
    })
}
