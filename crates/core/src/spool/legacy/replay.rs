//! Rebuilding the replaced system's state: the checkpoint, then the log records of its
//! generation, then the pending submissions; then mapping each run onto the spool's states.

use std::collections::{BTreeMap, HashMap};

use super::frame::{lines, open_record, Line};
use super::records::{
    event_id, event_payload, millis, parse, run_id, CheckpointRecord, LegacyState, Run,
    SubmissionRecord, WalRecord, CHECKPOINT_FORMAT,
};
use super::{
    LegacyError, LegacyReport, RecordProblem, SubmissionAlias, TornRecord, CHECKPOINT_FILE,
    SPOOL_FILE, WAL_FILE,
};
use crate::spool::{
    clip_reason, expired_park_reason, expiry_action, Action, DedupKey, ImportedEvent, ImportedRun,
    QueueName, RunEventId, RunId, RunState, Timestamp,
};

#[derive(Clone, Debug)]
struct Event {
    id: RunEventId,
    payload: Vec<u8>,
    at: Timestamp,
}

#[derive(Clone, Debug)]
struct Entry {
    run: Run,
    /// Undelivered events, in append order.
    events: Vec<Event>,
}

/// The state as rebuilt so far.
#[derive(Debug, Default)]
pub(super) struct Replay {
    runs: BTreeMap<RunId, Entry>,
    by_key: HashMap<DedupKey, RunId>,
    /// Bytes of `gate.spool` the daemon had drained into runs.
    drained: u64,
    report: LegacyReport,
}

fn ambiguous(s: String) -> RecordProblem {
    RecordProblem::Ambiguous(s)
}

impl Replay {
    /// Puts a run: a new one, or (`replace`) a new version of one already held.
    fn put(&mut self, run: Run, replace: bool) -> Result<(), RecordProblem> {
        if let Some(e) = self.runs.get_mut(&run.run_id) {
            if !replace {
                return Err(ambiguous(format!("run {} appears twice", run.run_id)));
            }
            if e.run.key != run.key {
                return Err(ambiguous(format!(
                    "run {} was submission {} and is now {}: one id names two submissions",
                    run.run_id, e.run.key, run.key
                )));
            }
            e.run = run;
            return Ok(());
        }
        if let Some(other) = self.by_key.get(&run.key) {
            return Err(ambiguous(format!(
                "submission {} is run {other} already and now also run {}: two ids for one \
                 submission",
                run.key, run.run_id
            )));
        }
        self.by_key.insert(run.key.clone(), run.run_id);
        self.runs.insert(
            run.run_id,
            Entry {
                run,
                events: Vec::new(),
            },
        );
        Ok(())
    }

    fn entry(&mut self, run: &str) -> Result<&mut Entry, RecordProblem> {
        let id = run_id("run_id", run)?;
        self.runs
            .get_mut(&id)
            .ok_or(RecordProblem::UnknownRun { run: id })
    }

    fn event(
        &mut self,
        run: &str,
        id: &str,
        payload: String,
        at_ms: i64,
    ) -> Result<(), RecordProblem> {
        let ev = Event {
            id: event_id(id)?,
            payload: event_payload(payload)?,
            at: millis("at_ms", at_ms)?,
        };
        let e = self.entry(run)?;
        match e.events.iter().find(|x| x.id == ev.id) {
            // Re-appending an event is a no-op, as in the spool.
            Some(x) if x.payload == ev.payload => Ok(()),
            Some(_) => Err(ambiguous(format!(
                "event {id} of run {run} appears twice with different payloads"
            ))),
            None => {
                e.events.push(ev);
                Ok(())
            }
        }
    }

    /// Reads the checkpoint: a header, then exactly the runs and events it announces.
    pub(super) fn checkpoint(&mut self, data: &[u8]) -> Result<(), LegacyError> {
        let l = lines(data);
        let err = |line: u64, p| LegacyError::record(CHECKPOINT_FILE, line, p);
        if let Some(t) = l.tail {
            return Err(err(t.number, RecordProblem::Unterminated));
        }
        let Some(first) = l.lines.first() else {
            return Err(err(
                1,
                RecordProblem::Malformed("the checkpoint is empty".into()),
            ));
        };
        let body = open_record(first.bytes).map_err(|p| err(1, p))?;
        let (runs, events) = match parse(&body).map_err(|p| err(1, p))? {
            CheckpointRecord::Checkpoint {
                format,
                generation,
                runs,
                events,
                spool_drained,
                written_ms,
            } => {
                self.report.checkpoint_written_at =
                    Some(millis("written_ms", written_ms).map_err(|p| err(1, p))?);
                if format != CHECKPOINT_FORMAT {
                    return Err(err(
                        1,
                        RecordProblem::Field {
                            field: "format",
                            reason: format!(
                                "is {format}; this importer reads format {CHECKPOINT_FORMAT}"
                            ),
                        },
                    ));
                }
                self.report.generation = generation;
                self.drained = spool_drained;
                (runs, events)
            }
            _ => {
                return Err(err(
                    1,
                    RecordProblem::Malformed("the first record is not the header".into()),
                ))
            }
        };
        let count = |problem: String| RecordProblem::Count {
            runs,
            events,
            problem,
        };
        let body_lines = &l.lines[1..];
        for (i, line) in body_lines.iter().enumerate() {
            let i = i as u64;
            let body = open_record(line.bytes).map_err(|p| err(line.number, p))?;
            let rec: CheckpointRecord = parse(&body).map_err(|p| err(line.number, p))?;
            let step = match rec {
                CheckpointRecord::Run { run } if i < runs => {
                    (*run).check().and_then(|r| self.put(r, false))
                }
                CheckpointRecord::Event {
                    run_id,
                    event_id,
                    payload,
                    at_ms,
                } if i >= runs && i < runs + events => {
                    self.event(&run_id, &event_id, payload, at_ms)
                }
                _ => Err(count(format!("record {} does not fit that order", i + 1))),
            };
            step.map_err(|p| err(line.number, p))?;
        }
        if (body_lines.len() as u64) != runs.saturating_add(events) {
            return Err(err(
                1,
                count(format!("{} records follow it", body_lines.len())),
            ));
        }
        self.report.checkpoint_runs = self.runs.len() as u64;
        Ok(())
    }

    /// Replays the log; returns the bytes it accepted.
    pub(super) fn wal<'a>(&mut self, data: &'a [u8]) -> Result<&'a [u8], LegacyError> {
        let l = lines(data);
        let generation = self.report.generation;
        // (generation, next seq) of the record before.
        let mut at: Option<(u64, u64)> = None;
        for line in &l.lines {
            let err = |p| LegacyError::record(WAL_FILE, line.number, p);
            let body = open_record(line.bytes).map_err(err)?;
            let rec: WalRecord = parse(&body).map_err(err)?;
            let (gen, seq) = rec.position();
            let expected = match at {
                Some((g, next)) if g == gen => next,
                Some((g, _)) if gen < g => {
                    return Err(err(RecordProblem::GenerationBack {
                        found: gen,
                        previous: g,
                    }))
                }
                _ => 1,
            };
            if seq != expected {
                return Err(err(RecordProblem::Sequence {
                    expected,
                    found: seq,
                }));
            }
            at = Some((gen, seq + 1));
            if gen < generation {
                self.report.wal_stale += 1;
                continue;
            }
            if gen > generation {
                return Err(err(RecordProblem::FutureGeneration {
                    found: gen,
                    checkpoint: generation,
                }));
            }
            self.apply(rec).map_err(err)?;
            self.report.wal_applied += 1;
        }
        self.torn(WAL_FILE, l.tail);
        Ok(l.accepted)
    }

    fn apply(&mut self, rec: WalRecord) -> Result<(), RecordProblem> {
        match rec {
            WalRecord::Run { run, .. } => self.put((*run).check()?, true),
            WalRecord::Event {
                run_id,
                event_id,
                payload,
                at_ms,
                ..
            } => self.event(&run_id, &event_id, payload, at_ms),
            WalRecord::Ack {
                run_id, event_ids, ..
            } => {
                let ids = event_ids
                    .iter()
                    .map(|s| event_id(s))
                    .collect::<Result<Vec<_>, _>>()?;
                let e = self.entry(&run_id)?;
                // Ids the run does not hold are ignored, as in the spool.
                e.events.retain(|ev| !ids.contains(&ev.id));
                Ok(())
            }
            WalRecord::Drop { run_id, .. } => {
                let key = self.entry(&run_id)?.run.key.clone();
                let id = self.by_key.remove(&key);
                if let Some(id) = id {
                    self.runs.remove(&id);
                }
                Ok(())
            }
            WalRecord::Drain { through, .. } => {
                if through < self.drained {
                    return Err(ambiguous(format!(
                        "the drain offset goes back from {} to {through}",
                        self.drained
                    )));
                }
                self.drained = through;
                Ok(())
            }
        }
    }

    /// Reads the submission spool; returns the bytes it accepted.
    pub(super) fn spool<'a>(&mut self, data: &'a [u8]) -> Result<&'a [u8], LegacyError> {
        let l = lines(data);
        let drained = self.drained;
        // A line spans its bytes and its newline; the offset may only fall between lines.
        let inside = l
            .lines
            .iter()
            .find(|x| x.offset < drained && drained <= x.offset + x.bytes.len() as u64);
        if let Some(line) = inside {
            return Err(LegacyError::record(
                SPOOL_FILE,
                line.number,
                ambiguous(format!(
                    "the log's drain offset {drained} falls inside this record"
                )),
            ));
        }
        if drained > l.accepted.len() as u64 {
            return Err(LegacyError::record(
                SPOOL_FILE,
                l.lines.len() as u64 + 1,
                ambiguous(format!(
                    "the log says {drained} bytes were drained, but the spool holds {} \
                     complete bytes: it was truncated or replaced",
                    l.accepted.len()
                )),
            ));
        }
        for line in &l.lines {
            self.submission(line, drained)
                .map_err(|p| LegacyError::record(SPOOL_FILE, line.number, p))?;
        }
        self.torn(SPOOL_FILE, l.tail);
        Ok(l.accepted)
    }

    fn submission(&mut self, line: &Line<'_>, drained: u64) -> Result<(), RecordProblem> {
        let body = open_record(line.bytes)?;
        let run = parse::<SubmissionRecord>(&body)?.check()?;
        if let Some(e) = self.runs.get(&run.run_id) {
            if e.run.key != run.key {
                return Err(ambiguous(format!(
                    "run {} is submission {} in the state and {} here: one id names two \
                     submissions",
                    run.run_id, e.run.key, run.key
                )));
            }
            // The daemon made it a run (perhaps before recording the drain).
            self.report.submissions_drained += 1;
            return Ok(());
        }
        if line.offset < drained {
            // Drained, and since removed (retention): not brought back.
            self.report.submissions_drained += 1;
            return Ok(());
        }
        if let Some(kept) = self.by_key.get(&run.key) {
            self.report.aliases.push(SubmissionAlias {
                line: line.number,
                submitted: run.run_id,
                kept: *kept,
            });
            return Ok(());
        }
        // A new submission supersedes the older queued runs of its group, as draining it
        // would have.
        if let Some(g) = &run.group {
            for e in self.runs.values_mut() {
                if e.run.state == LegacyState::Queued && e.run.group.as_ref() == Some(g) {
                    e.run.state = LegacyState::Superseded;
                    e.run.finished = Some(run.created);
                    e.run.updated = run.created;
                }
            }
        }
        self.report.submissions_queued += 1;
        self.put(run, false)
    }

    fn torn(&mut self, file: &'static str, tail: Option<Line<'_>>) {
        if let Some(t) = tail {
            self.report.torn.push(TornRecord {
                file,
                line: t.number,
                offset: t.offset,
                bytes: t.bytes.len() as u64,
            });
        }
    }

    /// The runs, mapped onto the spool's states and ordered by enqueue time then id, and the
    /// report.
    pub(super) fn finish(mut self, queue: &QueueName) -> (Vec<ImportedRun>, LegacyReport) {
        let mut out: Vec<ImportedRun> = Vec::with_capacity(self.runs.len());
        for e in std::mem::take(&mut self.runs).into_values() {
            if e.run.state == LegacyState::Running {
                self.report.running_settled += 1;
            }
            out.push(imported(e, queue));
        }
        out.sort_by_key(|r| (r.enqueued_at, r.run_id));
        (out, self.report)
    }
}

/// Maps one legacy run onto the spool's states. A running run's lease died with the daemon:
/// it is settled as [`expiry_action`] settles an expired lease. A queued run with no attempt
/// left is parked, as its next expiry would park it.
fn imported(e: Entry, queue: &QueueName) -> ImportedRun {
    let r = e.run;
    let mut reason = r.last_error.as_deref().map(clip_reason);
    let (state, due_at, finished_at) = match r.state {
        LegacyState::Queued if r.attempts >= r.max_attempts => {
            reason = Some(format!(
                "imported queued with no attempts left ({} of {})",
                r.attempts, r.max_attempts
            ));
            (RunState::Parked, None, Some(r.updated))
        }
        LegacyState::Queued => (
            RunState::Queued,
            Some(r.not_before.unwrap_or(r.created)),
            None,
        ),
        LegacyState::Running => {
            match expiry_action(r.attempts, r.max_attempts, r.cancel_requested) {
                Action::ConfirmCancel => (RunState::Canceled, None, Some(r.updated)),
                Action::Park => {
                    reason = Some(expired_park_reason(r.attempts));
                    (RunState::Parked, None, Some(r.updated))
                }
                _ => (RunState::Queued, Some(r.updated), None),
            }
        }
        terminal => {
            let state = match terminal {
                LegacyState::Succeeded => RunState::Succeeded,
                LegacyState::Failed => RunState::Failed,
                LegacyState::Canceled => RunState::Canceled,
                LegacyState::Superseded => RunState::Superseded,
                _ => RunState::Parked,
            };
            (state, None, Some(r.finished.unwrap_or(r.updated)))
        }
    };
    ImportedRun {
        run_id: r.run_id,
        queue: queue.clone(),
        dedup_key: r.key,
        supersede_group: r.group,
        payload: r.payload,
        state,
        attempts: r.attempts,
        max_attempts: r.max_attempts,
        priority: 0,
        enqueued_at: r.created,
        due_at,
        finished_at,
        reason,
        facts: r.facts,
        events: e
            .events
            .into_iter()
            .map(|ev| ImportedEvent {
                event_id: ev.id,
                payload: ev.payload,
                created_at: ev.at,
            })
            .collect(),
    }
}
