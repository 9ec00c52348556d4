//! Importing runs from another system ([`cairn_core::spool::Spool::import_runs`]): one
//! `BEGIN IMMEDIATE` transaction that decides every run first, then writes the created runs
//! with their events and facts and the source's completion marker.

use cairn_core::spool::{
    ExistingRun, ImportMarker, ImportSource, ImportedRun, QueueName, RunId, RunImportOutcome,
    RunState, SupersedeGroup, Timestamp,
};
use cairn_core::{Error, Result};
use rusqlite::params;

use super::sql;
use crate::db::{Db, End};
use crate::error::corrupt;

fn n64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn stored_count(n: i64) -> Result<u64> {
    u64::try_from(n).map_err(|_| corrupt("an import marker holds a negative count"))
}

/// Imports `runs` from `source` once; returns the outcome and the queues whose subscribers to
/// wake (those that received a queued run). `runs` passed `check_import`.
pub(super) fn import_runs_tx(
    db: &Db<'_>,
    source: &ImportSource,
    runs: &[ImportedRun],
    now: Timestamp,
) -> Result<(RunImportOutcome, Vec<QueueName>)> {
    db.write_tx(|db| {
        let markers: Vec<(i64, i64, i64)> =
            db.rows(sql::IMPORT_MARKER, params![&source.fingerprint[..]], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        if let Some((at, created, existing)) = markers.into_iter().next() {
            let marker = ImportMarker {
                imported_at: Timestamp::from_unix_micros(at),
                runs_created: stored_count(created)?,
                runs_existing: stored_count(existing)?,
            };
            return Ok((
                (RunImportOutcome::AlreadyImported(marker), Vec::new()),
                End::Rollback,
            ));
        }
        // Decide every run before the first write, so that a refusal writes nothing.
        let mut create = Vec::new();
        let mut existing = Vec::new();
        for r in runs {
            let by_key: Vec<Vec<u8>> = db.rows(
                sql::RUN_ID_BY_KEY,
                params![r.queue.as_str(), r.dedup_key.as_bytes()],
                |row| row.get(0),
            )?;
            if let Some(id) = by_key.first() {
                existing.push(ExistingRun {
                    imported: r.run_id,
                    existing: RunId::from_slice(id)
                        .map_err(|_| corrupt("a stored run id is not 16 bytes"))?,
                });
                continue;
            }
            let taken: Vec<i64> =
                db.rows(sql::RUN_EXISTS, params![r.run_id.as_bytes()], |row| {
                    row.get(0)
                })?;
            if !taken.is_empty() {
                return Err(Error::conflict(format!(
                    "run id {} is stored already under another key; nothing was imported",
                    r.run_id
                )));
            }
            create.push(r);
        }
        let mut woken: Vec<QueueName> = Vec::new();
        for r in &create {
            insert_run(db, r, now)?;
            if r.state == RunState::Queued && !woken.contains(&r.queue) {
                woken.push(r.queue.clone());
            }
        }
        db.exec(
            sql::RECORD_IMPORT,
            params![
                &source.fingerprint[..],
                source.description,
                now.as_unix_micros(),
                n64(create.len()),
                n64(existing.len())
            ],
        )?;
        let outcome = RunImportOutcome::Imported {
            created: create.iter().map(|r| r.run_id).collect(),
            existing,
        };
        Ok(((outcome, woken), End::Commit))
    })
}

/// Writes one imported run, its events (seq 1, 2, … in the order given) and its facts.
fn insert_run(db: &Db<'_>, r: &ImportedRun, now: Timestamp) -> Result<()> {
    let id = r.run_id.as_bytes();
    db.exec(
        sql::IMPORT_RUN,
        params![
            id,
            r.queue.as_str(),
            r.dedup_key.as_bytes(),
            r.supersede_group.as_ref().map(SupersedeGroup::as_bytes),
            r.state.as_str(),
            r.attempts,
            r.max_attempts,
            r.priority,
            r.enqueued_at.as_unix_micros(),
            now.as_unix_micros(),
            r.due_at.map(Timestamp::as_unix_micros),
            r.finished_at.map(Timestamp::as_unix_micros),
            r.reason,
            n64(r.events.len()),
            n64(r.payload.len()),
            r.payload
        ],
    )?;
    for (i, e) in r.events.iter().enumerate() {
        db.exec(
            sql::INSERT_EVENT,
            params![
                id,
                n64(i + 1),
                e.event_id.as_bytes(),
                e.created_at.as_unix_micros(),
                n64(e.payload.len()),
                e.payload
            ],
        )?;
    }
    for (name, value) in &r.facts {
        db.exec(
            sql::IMPORT_FACT,
            params![id, name.as_str(), now.as_unix_micros(), value],
        )?;
    }
    Ok(())
}
