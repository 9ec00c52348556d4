//! Rebuilding the replaced system's state: the checkpoint, then the log records of its
//! generation, then the pending submissions; then mapping each run onto the spool's states.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::PathBuf;

use super::error::{LegacyError, RecordProblem};
use super::format::{CHECKPOINT_FILE, SPOOL_FILE, WAL_FILE};
use super::frame::{LineReader, RawLine};
use super::records::{
    event_id, event_payload, millis, parse, run_id, CheckpointRecord, LegacyState, Run,
    SubmissionRecord, WalRecord, CHECKPOINT_FORMAT,
};
use super::types::{LegacyReport, QuarantinedRecord, SubmissionAlias, TornRecord};
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
    /// The directory, for I/O errors.
    dir: PathBuf,
    /// Keep damaged or contradictory records aside ([`QuarantinedRecord`]) instead of
    /// refusing the import.
    quarantine: bool,
    runs: BTreeMap<RunId, Entry>,
    by_key: HashMap<DedupKey, RunId>,
    /// Bytes of `gate.spool` the daemon had drained into runs.
    drained: u64,
    report: LegacyReport,
}

impl Replay {
    /// An empty state reading files of `dir`.
    pub(super) fn new(dir: PathBuf, quarantine: bool) -> Self {
        Self {
            dir,
            quarantine,
            ..Self::default()
        }
    }
}

fn ambiguous(s: String) -> RecordProblem {
    RecordProblem::Ambiguous(s)
}

/// Whether a problem is one record's own (damaged, malformed, contradicting the state), so
/// that a quarantine can keep the record aside; the others say the file's order or counts are
/// broken (a record missing, repeated or out of place), which setting a record aside cannot
/// mend.
fn quarantinable(p: &RecordProblem) -> bool {
    !matches!(
        p,
        RecordProblem::Count { .. }
            | RecordProblem::FutureGeneration { .. }
            | RecordProblem::GenerationBack { .. }
            | RecordProblem::Sequence { .. }
    )
}

/// A line's record body: complete, within the limit, its checksum right.
fn body(line: &RawLine) -> Result<String, RecordProblem> {
    if line.bytes.is_some() && !line.terminated {
        return Err(RecordProblem::Unterminated);
    }
    line.open()
}

/// A bytes-after-the-last-newline line that may be a torn record: one within the limit
/// (a longer one cannot be a record at all).
fn torn_tail(line: &RawLine) -> bool {
    !line.terminated && line.bytes.is_some()
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

    fn next<R: BufRead>(
        &self,
        file: &'static str,
        r: &mut LineReader<R>,
    ) -> Result<Option<RawLine>, LegacyError> {
        r.next_line(self.quarantine)
            .map_err(|source| LegacyError::Io {
                path: self.dir.join(file),
                source,
            })
    }

    /// Refuses the import at `line`, or, in a quarantine and when the problem is the
    /// record's own, keeps the record aside and goes on.
    fn reject(
        &mut self,
        file: &'static str,
        line: &RawLine,
        problem: RecordProblem,
    ) -> Result<(), LegacyError> {
        if self.quarantine && quarantinable(&problem) {
            self.report.quarantined.push(QuarantinedRecord {
                file,
                line: line.number,
                offset: line.offset,
                bytes: line.len,
                problem,
            });
            return Ok(());
        }
        Err(LegacyError::record(file, line.number, problem))
    }

    /// Reads the checkpoint: a header, then exactly the runs and events it announces. The
    /// header is never quarantined: without it nothing after it can be placed.
    pub(super) fn checkpoint<R: BufRead>(
        &mut self,
        r: &mut LineReader<R>,
    ) -> Result<(), LegacyError> {
        let err = |line: u64, p| LegacyError::record(CHECKPOINT_FILE, line, p);
        let Some(first) = self.next(CHECKPOINT_FILE, r)? else {
            return Err(err(
                1,
                RecordProblem::Malformed("the checkpoint is empty".into()),
            ));
        };
        let header = body(&first)
            .and_then(|b| parse(&b))
            .map_err(|p| err(1, p))?;
        let (runs, events) = match header {
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
        // The records after the header, counted; record `i` (0-based) is a run while
        // `i < runs`, then an event while `i - runs < events` (no sum of counts is formed: a
        // header may announce u64::MAX of each).
        let mut i: u64 = 0;
        while let Some(line) = self.next(CHECKPOINT_FILE, r)? {
            let rec: CheckpointRecord = match body(&line).and_then(|b| parse(&b)) {
                Ok(rec) => rec,
                Err(p) => {
                    // Kept aside in a quarantine, it still takes its place in the order.
                    self.reject(CHECKPOINT_FILE, &line, p)?;
                    i += 1;
                    continue;
                }
            };
            let is_run = i < runs;
            let is_event = !is_run && i - runs < events;
            let step = match rec {
                CheckpointRecord::Run { run } if is_run => {
                    (*run).check().and_then(|r| self.put(r, false))
                }
                CheckpointRecord::Event {
                    run_id,
                    event_id,
                    payload,
                    at_ms,
                } if is_event => self.event(&run_id, &event_id, payload, at_ms),
                _ => {
                    return Err(err(
                        line.number,
                        count(format!("record {} does not fit that order", i + 1)),
                    ))
                }
            };
            if let Err(p) = step {
                self.reject(CHECKPOINT_FILE, &line, p)?;
            }
            i += 1;
        }
        if runs.checked_add(events) != Some(i) {
            return Err(err(1, count(format!("{i} records follow it"))));
        }
        self.report.checkpoint_runs = self.runs.len() as u64;
        Ok(())
    }

    /// Replays the log.
    ///
    /// In a quarantine, a record that cannot be read at all may have held the next sequence
    /// number: after `n` such records, the next record's number may run up to `n` ahead.
    pub(super) fn wal<R: BufRead>(&mut self, r: &mut LineReader<R>) -> Result<(), LegacyError> {
        let generation = self.report.generation;
        // (generation, seq) of the last record read whole.
        let mut at: Option<(u64, u64)> = None;
        // Records kept aside unread since then.
        let mut unread: u64 = 0;
        while let Some(line) = self.next(WAL_FILE, r)? {
            if torn_tail(&line) {
                self.torn(WAL_FILE, &line);
                break;
            }
            let err = |p| LegacyError::record(WAL_FILE, line.number, p);
            let rec: WalRecord = match line.open().and_then(|b| parse(&b)) {
                Ok(rec) => rec,
                Err(p) => {
                    self.reject(WAL_FILE, &line, p)?;
                    unread += 1;
                    continue;
                }
            };
            let (gen, seq) = rec.position();
            let first = match at {
                Some((g, last)) if g == gen => last.checked_add(1).ok_or_else(|| {
                    err(RecordProblem::Field {
                        field: "seq",
                        reason: format!("follows sequence number {last}, the largest there is"),
                    })
                })?,
                Some((g, _)) if gen < g => {
                    return Err(err(RecordProblem::GenerationBack {
                        found: gen,
                        previous: g,
                    }))
                }
                _ => 1,
            };
            if seq < first || seq > first.saturating_add(unread) {
                return Err(err(RecordProblem::Sequence {
                    expected: first,
                    found: seq,
                }));
            }
            at = Some((gen, seq));
            unread = 0;
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
            match self.apply(rec) {
                Ok(()) => self.report.wal_applied += 1,
                Err(p) => self.reject(WAL_FILE, &line, p)?,
            }
        }
        Ok(())
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

    /// Reads the submission spool.
    pub(super) fn spool<R: BufRead>(&mut self, r: &mut LineReader<R>) -> Result<(), LegacyError> {
        let drained = self.drained;
        let mut complete: u64 = 0;
        while let Some(line) = self.next(SPOOL_FILE, r)? {
            if torn_tail(&line) {
                self.torn(SPOOL_FILE, &line);
                break;
            }
            // A line spans its bytes and its newline; the offset may only fall between lines.
            if line.offset < drained && drained <= line.offset.saturating_add(line.len) {
                return Err(LegacyError::record(
                    SPOOL_FILE,
                    line.number,
                    ambiguous(format!(
                        "the log's drain offset {drained} falls inside this record"
                    )),
                ));
            }
            complete += u64::from(line.terminated);
            if let Err(p) = self.submission(&line, drained) {
                self.reject(SPOOL_FILE, &line, p)?;
            }
        }
        let accepted = r.accepted().len;
        if drained > accepted {
            return Err(LegacyError::record(
                SPOOL_FILE,
                complete + 1,
                ambiguous(format!(
                    "the log says {drained} bytes were drained, but the spool holds \
                     {accepted} complete bytes: it was truncated or replaced"
                )),
            ));
        }
        Ok(())
    }

    fn submission(&mut self, line: &RawLine, drained: u64) -> Result<(), RecordProblem> {
        let body = body(line)?;
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

    fn torn(&mut self, file: &'static str, t: &RawLine) {
        self.report.torn.push(TornRecord {
            file,
            line: t.number,
            offset: t.offset,
            bytes: t.len,
        });
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
