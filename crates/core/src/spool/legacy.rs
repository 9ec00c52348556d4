//! Reading the replaced system's state directory into an import plan.
//!
//! The format (`checkpoint`, `runs.wal`, `gate.spool`) is documented in
//! `docs/LEGACY_FORMAT.md`; this module is its executable form. [`plan`] is pure: it turns
//! the three files' bytes into an [`ImportPlan`] — the runs to hand to
//! [`Spool::import_runs`](super::Spool::import_runs) with their run ids, dedup keys, states,
//! attempts, undelivered events and facts, plus a [`LegacyReport`] of what was tolerated — or
//! refuses with a [`LegacyError`] naming the file and line, producing nothing.
//!
//! Rules, in short:
//! - every record is one line carrying a BLAKE3 checksum ([`seal_record`]); a record counts
//!   once its newline is written, so bytes after the last newline of `runs.wal` or
//!   `gate.spool` are a torn tail: left out and reported ([`TornRecord`]);
//! - any other damaged, unknown or contradictory record, anywhere, refuses the whole import;
//! - log records of a generation older than the checkpoint's were folded into it: skipped
//!   (a stale log never replays over newer state); a newer generation means the checkpoint
//!   is missing or stale: refused;
//! - submissions past the log's drain offset that the log does not know become queued runs,
//!   as the daemon would have made them.
//!
//! [`read_dir`] reads a directory (refusing symbolic links) and calls [`plan`];
//! [`backup_files`] lists what an importer copies aside before importing.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{ImportSource, ImportedRun, QueueName, MAX_IMPORT_DESCRIPTION};
use crate::error::Error;

mod frame;
mod records;
mod replay;

pub use frame::{seal_record, MAX_LEGACY_LINE};

/// The installed checkpoint.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// A checkpoint being written when the daemon stopped; never read, only backed up.
pub const CHECKPOINT_TMP_FILE: &str = "checkpoint.tmp";
/// The run log.
pub const WAL_FILE: &str = "runs.wal";
/// The submission spool the offline hook appends to.
pub const SPOOL_FILE: &str = "gate.spool";
/// The queue legacy runs go to unless [`LegacyOptions::queue`] says otherwise.
pub const DEFAULT_LEGACY_QUEUE: &str = "gate";

/// What is wrong with one record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordProblem {
    /// The line is longer than [`MAX_LEGACY_LINE`].
    #[error("the record is {len} bytes; the limit is {MAX_LEGACY_LINE}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// The line is not UTF-8.
    #[error("the record is not UTF-8 text")]
    NotUtf8,
    /// The line does not end with a `"sum"` member of 64 lowercase hex digits.
    #[error("the record does not end with its checksum (,\"sum\":\"<64 hex digits>\"}})")]
    NoChecksum,
    /// The checksum does not match the record's bytes.
    #[error(
        "the record's checksum does not match its content: it was damaged after it was written"
    )]
    Checksum,
    /// Not a record of this file: bad JSON, an unknown kind or field, a field twice.
    #[error("the record is malformed: {0}")]
    Malformed(String),
    /// A field's value is out of range or contradicts another field.
    #[error("field {field} {reason}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The checkpoint's last record has no newline: an installed checkpoint is written whole.
    #[error("the checkpoint ends without a newline; an installed checkpoint is never torn")]
    Unterminated,
    /// The checkpoint header's counts do not match the records that follow it.
    #[error("the checkpoint header promises {runs} runs then {events} events; {problem}")]
    Count {
        /// Runs promised.
        runs: u64,
        /// Events promised.
        events: u64,
        /// What was found instead.
        problem: String,
    },
    /// A log record of a generation newer than the checkpoint's.
    #[error("generation {found} is newer than the checkpoint's generation {checkpoint}: the checkpoint is missing or older than the log")]
    FutureGeneration {
        /// The record's generation.
        found: u64,
        /// The checkpoint's.
        checkpoint: u64,
    },
    /// A log record whose generation is lower than the record before it.
    #[error("generation {found} follows generation {previous}; generations never go back")]
    GenerationBack {
        /// The record's generation.
        found: u64,
        /// The previous record's.
        previous: u64,
    },
    /// A log record out of sequence: one is missing or repeated.
    #[error("sequence number {found} where {expected} was due: a record is missing or repeated")]
    Sequence {
        /// What was due.
        expected: u64,
        /// What was found.
        found: u64,
    },
    /// A record about a run the state does not hold.
    #[error("run {run} is not known at this point (not in the checkpoint, created earlier in the log, or submitted)")]
    UnknownRun {
        /// The run.
        run: super::RunId,
    },
    /// A record that contradicts the state built so far (two ids for one submission, one id
    /// for two submissions, an event id with two payloads, a drain offset going back).
    #[error("{0}")]
    Ambiguous(String),
}

/// Why a legacy directory cannot be imported. Nothing was imported and the files are
/// unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LegacyError {
    /// One record is damaged or contradicts the others.
    #[error(
        "{file} line {line}: {problem}. Nothing was imported and the files are unchanged; \
         see docs/LEGACY_FORMAT.md, restore the file from a backup or remove the damaged \
         record deliberately, then import again"
    )]
    Record {
        /// The file (`checkpoint`, `runs.wal`, `gate.spool`).
        file: &'static str,
        /// The 1-based line.
        line: u64,
        /// What is wrong.
        problem: RecordProblem,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A legacy file is a symbolic link or not a regular file.
    #[error("refusing {path}: {reason}; copy the real file into the directory and import again")]
    UnsafePath {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// None of the legacy files is in the directory.
    #[error(
        "{dir} holds no legacy state (none of checkpoint, runs.wal, gate.spool); check the path"
    )]
    NotLegacy {
        /// The directory.
        dir: PathBuf,
    },
}

impl LegacyError {
    pub(crate) fn record(file: &'static str, line: u64, problem: RecordProblem) -> Self {
        Self::Record {
            file,
            line,
            problem,
        }
    }
}

impl From<LegacyError> for Error {
    fn from(e: LegacyError) -> Self {
        match e {
            LegacyError::Io { path, source } => Error::Io {
                path: path.display().to_string(),
                source,
            },
            LegacyError::UnsafePath { ref path, reason } => Error::UnsafePath {
                path: path.display().to_string(),
                reason: reason.into(),
            },
            other => Error::invalid("legacy import", other.to_string()),
        }
    }
}

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
}

impl Default for LegacyOptions {
    fn default() -> Self {
        Self {
            queue: QueueName::new(DEFAULT_LEGACY_QUEUE).expect("a valid queue name"),
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

/// A pending submission whose `(gate, ref, input_sha)` already had a run under another id
/// (the replaced system's split-brain): the existing run is kept; the submitted id is not
/// imported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubmissionAlias {
    /// Its line in `gate.spool`.
    pub line: u64,
    /// The id the submission carried.
    pub submitted: super::RunId,
    /// The id of the run kept for its key.
    pub kept: super::RunId,
}

/// What a plan tolerated and did, for the importer to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyReport {
    /// The checkpoint's generation (0 without a checkpoint).
    pub generation: u64,
    /// When the checkpoint was written, by its header.
    pub checkpoint_written_at: Option<super::Timestamp>,
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

/// The files an importer backs up before importing `dir`, present or not (pure: it names
/// paths and reads nothing).
pub fn backup_files(dir: &Path) -> Vec<PathBuf> {
    [CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, WAL_FILE, SPOOL_FILE]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

/// Reads `dir`'s legacy files, refusing symbolic links and non-files, and plans the import.
///
/// # Errors
/// [`LegacyError::NotLegacy`] when none of the files is there; [`LegacyError::UnsafePath`],
/// [`LegacyError::Io`]; whatever [`plan`] refuses.
pub fn read_dir(dir: &Path, options: &LegacyOptions) -> Result<ImportPlan, LegacyError> {
    let read = |name: &str| -> Result<Option<Vec<u8>>, LegacyError> {
        let path = dir.join(name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LegacyError::Io { path, source }),
        };
        if meta.file_type().is_symlink() {
            return Err(LegacyError::UnsafePath {
                path,
                reason: "it is a symbolic link",
            });
        }
        if !meta.is_file() {
            return Err(LegacyError::UnsafePath {
                path,
                reason: "it is not a regular file",
            });
        }
        std::fs::read(&path)
            .map(Some)
            .map_err(|source| LegacyError::Io { path, source })
    };
    let files = LegacyFiles {
        label: dir.display().to_string(),
        checkpoint: read(CHECKPOINT_FILE)?,
        wal: read(WAL_FILE)?,
        spool: read(SPOOL_FILE)?,
    };
    if files.checkpoint.is_none() && files.wal.is_none() && files.spool.is_none() {
        return Err(LegacyError::NotLegacy {
            dir: dir.to_path_buf(),
        });
    }
    plan(&files, options)
}

/// Plans the import of a legacy directory's files: every record checked, the state rebuilt,
/// the runs mapped. Pure.
///
/// # Errors
/// [`LegacyError::Record`] for the first record (in checkpoint, log, spool order) that is
/// damaged, malformed or contradicts the state; nothing is planned.
pub fn plan(files: &LegacyFiles, options: &LegacyOptions) -> Result<ImportPlan, LegacyError> {
    let mut r = replay::Replay::default();
    let mut accepted: [Option<&[u8]>; 3] = [None; 3];
    if let Some(data) = &files.checkpoint {
        r.checkpoint(data)?;
        accepted[0] = Some(data);
    }
    if let Some(data) = &files.wal {
        accepted[1] = Some(r.wal(data)?);
    }
    if let Some(data) = &files.spool {
        accepted[2] = Some(r.spool(data)?);
    }
    let (runs, report) = r.finish(&options.queue);
    let description = describe(&files.label, report.generation);
    Ok(ImportPlan {
        source: ImportSource {
            fingerprint: fingerprint(&accepted),
            description,
        },
        runs,
        report,
    })
}

/// BLAKE3 over the accepted bytes of the three files (a torn tail is not part of it, so
/// truncating one away later does not make the directory a new source), each framed by its
/// name, presence and length.
fn fingerprint(accepted: &[Option<&[u8]>; 3]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(b"cairn legacy import v1\0");
    for (name, data) in [CHECKPOINT_FILE, WAL_FILE, SPOOL_FILE].iter().zip(accepted) {
        h.update(name.as_bytes());
        h.update(&[0, u8::from(data.is_some())]);
        let bytes = data.unwrap_or_default();
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    *h.finalize().as_bytes()
}

/// The marker's description: printable, bounded.
fn describe(label: &str, generation: u64) -> String {
    let label: String = label
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let mut d = format!("legacy directory {label}, checkpoint generation {generation}");
    if d.len() > MAX_IMPORT_DESCRIPTION {
        let mut end = MAX_IMPORT_DESCRIPTION;
        while !d.is_char_boundary(end) {
            end -= 1;
        }
        d.truncate(end);
    }
    d
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

#[cfg(test)]
mod tests;
