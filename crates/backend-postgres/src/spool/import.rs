//! Importing runs from another system ([`cairn_core::Spool::import_runs`]): one transaction
//! that takes the source's lock, looks for its completion marker, creates the runs whose keys
//! are absent (with their events and facts), records the marker and wakes the queues that
//! received queued runs.

use std::collections::{BTreeSet, HashMap, HashSet};

use cairn_core::spool::{
    check_import, ExistingRun, ImportMarker, ImportSource, ImportedRun, RunId, RunImportOutcome,
    RunState, Timestamp,
};
use cairn_core::{key64, Error, Result};

use super::handle::PgSpool;
use super::keys::wake_channel;
use super::row::{count, get, run_id, ts};
use super::sql;
use crate::error::map;

/// The key-derivation context of the per-source import locks.
const IMPORT_LOCK_CONTEXT: &str = "cairn 2026-11 postgres spool import lock v1";

fn n64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn i32_of(n: u32) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::invalid("imported run", "a count is too large"))
}

/// The imported runs as the columns of [`sql::IMPORT_RUNS`].
#[derive(Default)]
struct RunColumns {
    ids: Vec<Vec<u8>>,
    queues: Vec<String>,
    keys: Vec<Vec<u8>>,
    groups: Vec<Option<Vec<u8>>>,
    states: Vec<String>,
    attempts: Vec<i32>,
    max_attempts: Vec<i32>,
    priorities: Vec<i32>,
    enqueued: Vec<i64>,
    due: Vec<Option<i64>>,
    finished: Vec<Option<i64>>,
    reasons: Vec<Option<String>>,
    last_seqs: Vec<i64>,
    payload_bytes: Vec<i64>,
    payloads: Vec<Vec<u8>>,
}

impl RunColumns {
    fn push(&mut self, r: &ImportedRun) -> Result<()> {
        self.ids.push(r.run_id.as_bytes().to_vec());
        self.queues.push(r.queue.as_str().to_owned());
        self.keys.push(r.dedup_key.as_bytes().to_vec());
        self.groups
            .push(r.supersede_group.as_ref().map(|g| g.as_bytes().to_vec()));
        self.states.push(r.state.as_str().to_owned());
        self.attempts.push(i32_of(r.attempts)?);
        self.max_attempts.push(i32_of(r.max_attempts)?);
        self.priorities.push(r.priority);
        self.enqueued.push(r.enqueued_at.as_unix_micros());
        self.due.push(r.due_at.map(Timestamp::as_unix_micros));
        self.finished
            .push(r.finished_at.map(Timestamp::as_unix_micros));
        self.reasons.push(r.reason.clone());
        self.last_seqs.push(n64(r.events.len()));
        self.payload_bytes.push(n64(r.payload.len()));
        self.payloads.push(r.payload.clone());
        Ok(())
    }
}

pub(super) async fn import_runs_tx(
    s: &PgSpool,
    source: &ImportSource,
    runs: Vec<ImportedRun>,
    now: Timestamp,
) -> Result<RunImportOutcome> {
    check_import(source, &runs)?;
    let schema = &s.inner.schema;
    let mut tx = s.pool().begin().await.map_err(map)?;
    sqlx::query(sql::LOCK_IMPORT)
        .bind(key64(
            IMPORT_LOCK_CONTEXT,
            &[schema.as_str().as_bytes(), &source.fingerprint[..]],
        ))
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    let marker = sqlx::query(sql::IMPORT_MARKER)
        .bind(&source.fingerprint[..])
        .fetch_optional(&mut *tx)
        .await
        .map_err(map)?;
    if let Some(row) = marker {
        return Ok(RunImportOutcome::AlreadyImported(ImportMarker {
            imported_at: ts(get(&row, 0)?),
            runs_created: count(get(&row, 1)?)?,
            runs_existing: count(get(&row, 2)?)?,
        }));
    }

    let mut cols = RunColumns::default();
    for r in &runs {
        cols.push(r)?;
    }
    // A key present already (or committed by a concurrent enqueue meanwhile) is skipped by
    // the insert; a run id stored under another key is a unique violation that rolls the
    // whole import back.
    let created_rows = sqlx::query(sql::IMPORT_RUNS)
        .bind(now.as_unix_micros())
        .bind(cols.ids)
        .bind(&cols.queues)
        .bind(&cols.keys)
        .bind(cols.groups)
        .bind(cols.states)
        .bind(cols.attempts)
        .bind(cols.max_attempts)
        .bind(cols.priorities)
        .bind(cols.enqueued)
        .bind(cols.due)
        .bind(cols.finished)
        .bind(cols.reasons)
        .bind(cols.last_seqs)
        .bind(cols.payload_bytes)
        .bind(cols.payloads)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| match map(e) {
            e if e.is_conflict() => Error::conflict(
                "an imported run id is stored already under another key; nothing was imported",
            )
            .with_source(e),
            e => e,
        })?;
    let created_ids: HashSet<RunId> = created_rows
        .iter()
        .map(|row| run_id(&get::<Vec<u8>>(row, 0)?))
        .collect::<Result<_>>()?;

    let present = sqlx::query(sql::RUN_IDS_BY_KEY)
        .bind(&cols.queues)
        .bind(&cols.keys)
        .fetch_all(&mut *tx)
        .await
        .map_err(map)?;
    let mut by_key: HashMap<(String, Vec<u8>), RunId> = HashMap::new();
    for row in &present {
        by_key.insert(
            (get(row, 0)?, get(row, 1)?),
            run_id(&get::<Vec<u8>>(row, 2)?)?,
        );
    }

    let mut created = Vec::new();
    let mut existing = Vec::new();
    let mut events = (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut facts = (vec![], vec![], vec![]);
    let mut woken = BTreeSet::new();
    for r in runs {
        if !created_ids.contains(&r.run_id) {
            let key = (r.queue.as_str().to_owned(), r.dedup_key.as_bytes().to_vec());
            let stored = by_key.get(&key).copied().ok_or_else(|| {
                Error::corrupt("an imported run was neither created nor found by its key")
            })?;
            existing.push(ExistingRun {
                imported: r.run_id,
                existing: stored,
            });
            continue;
        }
        created.push(r.run_id);
        if r.state == RunState::Queued {
            woken.insert(wake_channel(schema, &r.queue));
        }
        let id = r.run_id.as_bytes().to_vec();
        for (i, e) in r.events.into_iter().enumerate() {
            events.0.push(id.clone());
            events.1.push(n64(i + 1));
            events.2.push(e.event_id.as_bytes().to_vec());
            events.3.push(e.created_at.as_unix_micros());
            events.4.push(n64(e.payload.len()));
            events.5.push(e.payload);
        }
        for (name, value) in r.facts {
            facts.0.push(id.clone());
            facts.1.push(name.as_str().to_owned());
            facts.2.push(value);
        }
    }
    if !events.0.is_empty() {
        sqlx::query(sql::IMPORT_EVENTS)
            .bind(events.0)
            .bind(events.1)
            .bind(events.2)
            .bind(events.3)
            .bind(events.4)
            .bind(events.5)
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    if !facts.0.is_empty() {
        sqlx::query(sql::IMPORT_FACTS)
            .bind(now.as_unix_micros())
            .bind(facts.0)
            .bind(facts.1)
            .bind(facts.2)
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    sqlx::query(sql::INSERT_IMPORT_MARKER)
        .bind(&source.fingerprint[..])
        .bind(source.description.as_str())
        .bind(now.as_unix_micros())
        .bind(n64(created.len()))
        .bind(n64(existing.len()))
        .execute(&mut *tx)
        .await
        .map_err(map)?;
    if !woken.is_empty() {
        sqlx::query(sql::WAKE_CHANNELS)
            .bind(woken.into_iter().collect::<Vec<_>>())
            .execute(&mut *tx)
            .await
            .map_err(map)?;
    }
    tx.commit().await.map_err(map)?;
    Ok(RunImportOutcome::Imported { created, existing })
}
