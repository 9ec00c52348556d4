//! The planner's inputs and outputs: a directory's files, the options, and the plan with its
//! report of what was tolerated.

use std::fmt;

use super::error::RecordProblem;
use crate::spool::{ImportSource, ImportedRun, QueueName, RunId, Timestamp};

/// The queue legacy runs go to unless [`LegacyOptions::queue`] says otherwise.
pub const DEFAULT_LEGACY_QUEUE: &str = "gate";

/// The bytes of a legacy directory's files (`None`: the file is absent).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyFiles {
    /// What the directory is called in the import's description (its path).
    pub label: String,
    /// `checkpoint`.
    pub checkpoint: Option<Vec<u8>>,
    /// `runs.wal`.
    pub wal: Option<Vec<u8>>,
    /// `gate.spool`.
    pub spool: Option<Vec<u8>>,
}

/// How legacy runs are mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyOptions {
    /// The queue every imported run goes to (default [`DEFAULT_LEGACY_QUEUE`]).
    pub queue: QueueName,
    /// Leave out each damaged or contradictory record instead of refusing the import, listing
    /// it in [`LegacyReport::quarantined`] (default false: any such record refuses the
    /// import). Problems of the files' order or counts — a log record missing, repeated or
    /// out of sequence, a checkpoint header that does not match its records, an unreadable
    /// checkpoint header, a drain offset inside a record — still refuse it: leaving a record
    /// out cannot mend them.
    pub quarantine: bool,
}

impl Default for LegacyOptions {
    fn default() -> Self {
        Self {
            queue: QueueName::new(DEFAULT_LEGACY_QUEUE).expect("a valid queue name"),
            quarantine: false,
        }
    }
}

/// A record left out because its write never finished: the bytes after the last newline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornRecord {
    /// The file.
    pub file: &'static str,
    /// The line it would have been.
    pub line: u64,
    /// Where it starts.
    pub offset: u64,
    /// How many bytes were written.
    pub bytes: u64,
}

/// A record a quarantine left out ([`LegacyOptions::quarantine`]): its bytes are
/// `bytes` bytes at `offset` of `file` (without the newline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuarantinedRecord {
    /// The file.
    pub file: &'static str,
    /// Its 1-based line.
    pub line: u64,
    /// Where it starts.
    pub offset: u64,
    /// Its length, without the newline.
    pub bytes: u64,
    /// Why it was left out.
    pub problem: RecordProblem,
}

/// A pending submission whose `(gate, ref, input_sha)` already had a run under another id
/// (the replaced system's split-brain): the existing run is kept; the submitted id is not
/// imported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmissionAlias {
    /// Its line in `gate.spool`.
    pub line: u64,
    /// The id the submission carried.
    pub submitted: RunId,
    /// The id of the run kept for its key.
    pub kept: RunId,
}

/// What a plan tolerated and did, for the importer to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyReport {
    /// The checkpoint's generation (0 without a checkpoint).
    pub generation: u64,
    /// When the checkpoint was written, by its header.
    pub checkpoint_written_at: Option<Timestamp>,
    /// Runs the checkpoint held.
    pub checkpoint_runs: u64,
    /// Log records applied.
    pub wal_applied: u64,
    /// Log records of older generations, skipped (already in the checkpoint).
    pub wal_stale: u64,
    /// Submissions the log had drained already.
    pub submissions_drained: u64,
    /// Pending submissions that became queued runs.
    pub submissions_queued: u64,
    /// Pending submissions whose key already had a run.
    pub aliases: Vec<SubmissionAlias>,
    /// Torn final records, left out.
    pub torn: Vec<TornRecord>,
    /// Runs that were running when the replaced system stopped: a lease cannot be carried
    /// over, so they were settled as an expired lease would be (queued again, parked when no
    /// attempt is left, canceled when a cancel was requested).
    pub running_settled: u64,
    /// Records a quarantine left out, in file order (checkpoint, log, spool); the import is
    /// partial exactly when this is not empty.
    pub quarantined: Vec<QuarantinedRecord>,
}

/// A validated import: the source marker, the runs, and the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportPlan {
    /// The completion marker's key and description.
    pub source: ImportSource,
    /// The runs, ordered by enqueue time, then run id.
    pub runs: Vec<ImportedRun>,
    /// What was tolerated.
    pub report: LegacyReport,
}

impl fmt::Display for QuarantinedRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A problem may quote the record (an unknown field's name): control characters are
        // escaped so that it cannot forge lines.
        let problem: String = self
            .problem
            .to_string()
            .chars()
            .flat_map(|c| {
                let esc: Vec<char> = if c.is_control() {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                esc
            })
            .collect();
        write!(
            f,
            "{} line {} ({} bytes at offset {}): {problem}",
            self.file, self.line, self.bytes, self.offset
        )
    }
}

impl fmt::Display for TornRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} line {}: a torn final record ({} bytes at offset {}) was left out",
            self.file, self.line, self.bytes, self.offset
        )
    }
}
