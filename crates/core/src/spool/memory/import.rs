//! The model's [`Spool::import_runs`](super::super::Spool::import_runs): every run decided
//! before the first change, then written with its events, facts and the source's marker.

use std::collections::{BTreeMap, HashMap};

use super::super::ids::RunId;
use super::super::import::{
    ExistingRun, ImportMarker, ImportSource, ImportedRun, RunImportOutcome,
};
use super::super::state::{EventStream, RunState};
use super::super::timestamp::Timestamp;
use super::state::{Run, State, StoredEvent};
use crate::error::{Error, Result};

impl State {
    /// Imports `runs` from `source` (checked by [`check_import`](super::super::check_import))
    /// at `now`, once per source, waking the queues that got a queued run.
    pub(super) fn import(
        &mut self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
        now: Timestamp,
    ) -> Result<RunImportOutcome> {
        if let Some(marker) = self.imports.get(&source.fingerprint) {
            return Ok(RunImportOutcome::AlreadyImported(*marker));
        }
        // Decide every run before the first change, so that a refusal writes nothing.
        let mut create = Vec::new();
        let mut existing = Vec::new();
        for r in runs {
            if let Some(id) = self.by_key.get(&(r.queue.clone(), r.dedup_key.clone())) {
                existing.push(ExistingRun {
                    imported: r.run_id,
                    existing: *id,
                });
            } else if self.runs.contains_key(&r.run_id) {
                return Err(Error::conflict(format!(
                    "run id {} is stored already under another key; nothing was imported",
                    r.run_id
                )));
            } else {
                create.push(r);
            }
        }
        let created: Vec<RunId> = create.iter().map(|r| r.run_id).collect();
        let mut woken = Vec::new();
        for r in create {
            let serial = self.next_run_serial;
            self.next_run_serial += 1;
            let mut events = BTreeMap::new();
            let mut event_ids = HashMap::new();
            for (i, e) in r.events.into_iter().enumerate() {
                let seq = i as u64 + 1;
                let ev_serial = self.next_event_serial;
                self.next_event_serial += 1;
                self.by_age
                    .insert((e.created_at, ev_serial), (r.run_id, seq));
                self.event_bytes += e.payload.len() as u64;
                event_ids.insert(e.event_id.clone(), seq);
                events.insert(
                    seq,
                    StoredEvent {
                        id: e.event_id,
                        payload: e.payload,
                        created_at: e.created_at,
                        serial: ev_serial,
                    },
                );
            }
            if r.state == RunState::Queued {
                woken.push(r.queue.clone());
            }
            self.by_key
                .insert((r.queue.clone(), r.dedup_key.clone()), r.run_id);
            self.runs.insert(
                r.run_id,
                Run {
                    id: r.run_id,
                    serial,
                    queue: r.queue,
                    key: r.dedup_key,
                    group: r.supersede_group,
                    payload: r.payload,
                    state: r.state,
                    attempts: r.attempts,
                    max_attempts: r.max_attempts,
                    priority: r.priority,
                    enqueued_at: r.enqueued_at,
                    updated_at: now,
                    due_at: r.due_at,
                    finished_at: r.finished_at,
                    lease: None,
                    token: None,
                    cancel_requested: false,
                    reason: r.reason,
                    facts: r.facts,
                    last_event_seq: events.len() as u64,
                    events,
                    event_ids,
                    stream: EventStream::Unmarked,
                    partition: None,
                    traceparent: None,
                },
            );
        }
        self.imports.insert(
            source.fingerprint,
            ImportMarker {
                imported_at: now,
                runs_created: created.len() as u64,
                runs_existing: existing.len() as u64,
            },
        );
        woken.dedup();
        for q in &woken {
            self.notify(q);
        }
        Ok(RunImportOutcome::Imported { created, existing })
    }
}
