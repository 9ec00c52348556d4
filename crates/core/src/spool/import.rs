//! What an import carries into the spool ([`Spool::import_runs`](super::Spool::import_runs)):
//! its source, its runs with their events and facts, what it did, and the check every backend
//! makes before writing any of it ([`check_import`]).

use std::collections::BTreeMap;

use super::checks::check_payload;
use super::dedup::{DedupKey, SupersedeGroup};
use super::ids::{FactName, QueueName, RunEventId, RunId};
use super::limits::{
    MAX_ATTEMPTS_LIMIT, MAX_FACT_VALUE, MAX_REASON_LEN, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
};
use super::state::RunState;
use super::timestamp::Timestamp;
use crate::error::{Error, Result};

/// Where an import came from: the completion marker [`Spool::import_runs`] records, so that
/// importing the same source again is a no-op.
///
/// [`Spool::import_runs`]: super::Spool::import_runs
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportSource {
    /// BLAKE3 over the source's content (for a legacy directory: the bytes the import
    /// accepted, see `docs/LEGACY_FORMAT.md`). The marker's key.
    pub fingerprint: [u8; 32],
    /// What the source was, for operators (`legacy directory /var/lib/made, generation 7`):
    /// printable text of at most [`MAX_IMPORT_DESCRIPTION`] bytes.
    pub description: String,
}

/// Longest [`ImportSource::description`], in bytes.
pub const MAX_IMPORT_DESCRIPTION: usize = 4096;

/// One run event carried into the spool by an import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedEvent {
    /// The event's id (unique within its run).
    pub event_id: RunEventId,
    /// Its payload (at most [`MAX_RUN_EVENT_PAYLOAD`] bytes).
    pub payload: Vec<u8>,
    /// When it was appended at the source.
    pub created_at: Timestamp,
}

/// One run carried into the spool by an import, with its identity kept: its run id and its
/// `(queue, dedup_key)` are stored as given.
///
/// A lease cannot be carried over, so an imported run is never `Claimed`: the source's
/// running runs arrive `Queued` (or settled, as an expired lease would settle them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedRun {
    /// The run's id, kept.
    pub run_id: RunId,
    /// Its queue.
    pub queue: QueueName,
    /// Its dedup key, kept.
    pub dedup_key: DedupKey,
    /// Its supersede group.
    pub supersede_group: Option<SupersedeGroup>,
    /// The payload (at most [`MAX_RUN_PAYLOAD`] bytes).
    pub payload: Vec<u8>,
    /// Its state: anything but `Claimed`.
    pub state: RunState,
    /// Claims so far (at most `max_attempts`).
    pub attempts: u32,
    /// Claims allowed (1 to [`MAX_ATTEMPTS_LIMIT`]).
    pub max_attempts: u32,
    /// Its priority.
    pub priority: i32,
    /// When it was first submitted.
    pub enqueued_at: Timestamp,
    /// For a `Queued` run (and only then), the earliest time a claim may take it.
    pub due_at: Option<Timestamp>,
    /// For a terminal run (and only then), when it finished.
    pub finished_at: Option<Timestamp>,
    /// Why it was parked, failed or last retried (at most [`MAX_REASON_LEN`] bytes, without a
    /// NUL character).
    pub reason: Option<String>,
    /// Its facts (values at most [`MAX_FACT_VALUE`] bytes).
    pub facts: BTreeMap<FactName, Vec<u8>>,
    /// Its undelivered events in order; they get sequence numbers 1, 2, … as stored.
    pub events: Vec<ImportedEvent>,
}

/// When a source was imported and what that import did, as its completion marker records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportMarker {
    /// When the import committed (the spool's clock).
    pub imported_at: Timestamp,
    /// Runs it created.
    pub runs_created: u64,
    /// Runs it found already present (by `(queue, dedup_key)`) and left alone.
    pub runs_existing: u64,
}

/// An imported run whose `(queue, dedup_key)` the spool already held: the existing run was
/// left as it is and the imported one dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExistingRun {
    /// The imported run's id.
    pub imported: RunId,
    /// The id of the run already stored under its key (equal to `imported` when the same run
    /// came in before, e.g. from an earlier state of the same source).
    pub existing: RunId,
}

/// What [`Spool::import_runs`](super::Spool::import_runs) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunImportOutcome {
    /// The runs were imported and the source's completion marker recorded, in one
    /// transaction.
    Imported {
        /// Runs created, in the order given.
        created: Vec<RunId>,
        /// Runs not created because their key was present, in the order given.
        existing: Vec<ExistingRun>,
    },
    /// The source was imported before; nothing was written.
    AlreadyImported(ImportMarker),
}

/// Checks an import batch before anything is written: what every backend's
/// [`Spool::import_runs`](super::Spool::import_runs) refuses.
///
/// # Errors
/// [`Error::InvalidInput`] for a description that is empty, too long or holds control
/// characters; a `Claimed` run; `due_at` set other than on a `Queued` run (or missing on
/// one); `finished_at` set other than on a terminal run (or missing on one); attempts above
/// `max_attempts` or `max_attempts` outside 1..=[`MAX_ATTEMPTS_LIMIT`]; a time (enqueue, due,
/// finish, event) outside the range [`Timestamp::check`] accepts; an oversized payload,
/// event payload, fact value or reason; a reason holding a NUL character (U+0000, which
/// [`clip_reason`](super::clip_reason) would have replaced); two runs with one id or one `(queue, dedup_key)`; two
/// events of a run with one id.
pub fn check_import(source: &ImportSource, runs: &[ImportedRun]) -> Result<()> {
    let d = &source.description;
    if d.is_empty() || d.len() > MAX_IMPORT_DESCRIPTION || d.chars().any(char::is_control) {
        return Err(Error::invalid(
            "import source description",
            format!("must be 1 to {MAX_IMPORT_DESCRIPTION} bytes of printable text"),
        ));
    }
    let mut ids = std::collections::HashSet::new();
    let mut keys = std::collections::HashSet::new();
    for r in runs {
        let bad =
            |reason: String| Error::invalid("imported run", format!("{}: {reason}", r.run_id));
        if !ids.insert(r.run_id) {
            return Err(bad("appears twice in the batch".into()));
        }
        if !keys.insert((&r.queue, &r.dedup_key)) {
            return Err(bad(format!(
                "its key {} in queue {} is another imported run's too",
                r.dedup_key, r.queue
            )));
        }
        if r.state == RunState::Claimed {
            return Err(bad("a lease cannot be imported; import it queued".into()));
        }
        if r.due_at.is_some() != (r.state == RunState::Queued) {
            return Err(bad("a due time is set exactly on a queued run".into()));
        }
        if r.finished_at.is_some() != r.state.is_terminal() {
            return Err(bad("a finish time is set exactly on a terminal run".into()));
        }
        let times = [Some(r.enqueued_at), r.due_at, r.finished_at];
        let event_times = r.events.iter().map(|e| Some(e.created_at));
        for t in times.into_iter().chain(event_times).flatten() {
            t.check("imported run time")
                .map_err(|e| bad(e.to_string()))?;
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&r.max_attempts) || r.attempts > r.max_attempts {
            return Err(bad(format!(
                "attempts {} of {} (max attempts must be 1 to {MAX_ATTEMPTS_LIMIT})",
                r.attempts, r.max_attempts
            )));
        }
        check_payload("run payload", MAX_RUN_PAYLOAD, &r.payload)?;
        if r.reason.as_ref().is_some_and(|x| x.len() > MAX_REASON_LEN) {
            return Err(bad(format!("its reason is over {MAX_REASON_LEN} bytes")));
        }
        if r.reason.as_ref().is_some_and(|x| x.contains('\0')) {
            return Err(bad("its reason holds a NUL character (U+0000)".into()));
        }
        for v in r.facts.values() {
            check_payload("fact value", MAX_FACT_VALUE, v)?;
        }
        let mut event_ids = std::collections::HashSet::new();
        for e in &r.events {
            check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &e.payload)?;
            if !event_ids.insert(&e.event_id) {
                return Err(bad("two of its events share an id".into()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_imported_reason_holding_a_nul_is_refused() {
        let source = ImportSource {
            fingerprint: [7; 32],
            description: "a test source".into(),
        };
        let now = Timestamp::from_unix_micros(1_000_000);
        let run = |reason: &str| ImportedRun {
            run_id: RunId::generate(now),
            queue: QueueName::new("q").unwrap(),
            dedup_key: DedupKey::from_parts(["k"]).unwrap(),
            supersede_group: None,
            payload: vec![],
            state: RunState::Failed,
            attempts: 1,
            max_attempts: 1,
            priority: 0,
            enqueued_at: now,
            due_at: None,
            finished_at: Some(now),
            reason: Some(reason.into()),
            facts: BTreeMap::new(),
            events: vec![],
        };
        assert!(check_import(&source, &[run("a\u{FFFD}b")]).is_ok());
        let err = check_import(&source, &[run("a\0b")]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }) && err.to_string().contains("NUL"),
            "{err}"
        );
    }
}
