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
//! - any other damaged, unknown or contradictory record, anywhere, refuses the whole import
//!   — unless the import is a quarantine ([`LegacyOptions::quarantine`]): then each such
//!   record is left out and listed ([`QuarantinedRecord`]) with its file, line, place and
//!   problem, and the import is partial;
//! - counts and offsets read from a file are never trusted: no arithmetic on them can
//!   overflow, and files are read as a stream, one line of at most [`MAX_LEGACY_LINE`] bytes
//!   in memory at a time (a longer line, or tail, is damage, never a torn record);
//! - log records of a generation older than the checkpoint's were folded into it: skipped
//!   (a stale log never replays over newer state); a newer generation means the checkpoint
//!   is missing or stale: refused;
//! - submissions past the log's drain offset that the log does not know become queued runs,
//!   as the daemon would have made them.
//!
//! [`read_dir`] reads a directory (refusing symbolic links: [`open_file`] never follows
//! one) the way [`plan`] reads bytes; [`backup_files`] lists what an importer copies aside
//! before importing.

use std::fmt;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{ImportSource, ImportedRun, QueueName, MAX_IMPORT_DESCRIPTION};
use crate::error::Error;

mod backup;
mod frame;
mod records;
mod replay;

pub use backup::{back_up, backup_dir, quarantine_name, Backup, QUARANTINE_DIR, QUARANTINE_REPORT};
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
    /// The line is longer than [`MAX_LEGACY_LINE`], with or without its newline (a tail that
    /// long cannot be a torn record: no record is).
    #[error("the record is over the {MAX_LEGACY_LINE}-byte limit (at least {len} bytes)")]
    TooLong {
        /// Its length, or how much of it was read before reading stopped.
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
    /// A file's bytes changed between the two reads of an import (the validation, then the
    /// fingerprint): something is still writing to the directory.
    #[error(
        "{path} changed while it was being read; stop whatever writes to the directory \
         (the replaced daemon, its hook) and import again"
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The backup could not be made safely: its directory or a file in it is a symbolic link
    /// or not what it should be, or a copy left by an earlier run differs from its source.
    /// Nothing was written through it and nothing was imported.
    #[error("refusing the backup {path}: {reason}; nothing was imported")]
    UnsafeBackup {
        /// The backup directory or file.
        path: PathBuf,
        /// Why.
        reason: String,
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
                reason: format!(
                    "{reason}; a legacy file is never read through one: copy the real file \
                     into the directory and import again"
                ),
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

/// The files an importer backs up before importing `dir`, present or not (pure: it names
/// paths and reads nothing).
pub fn backup_files(dir: &Path) -> Vec<PathBuf> {
    [CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, WAL_FILE, SPOOL_FILE]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

/// Opens `dir`'s legacy file `name` for reading without following a symbolic link:
/// `None` when it is absent.
///
/// # Errors
/// [`LegacyError::UnsafePath`] when it is a symbolic link (dangling or not) or not a regular
/// file (a FIFO is not waited on); [`LegacyError::Io`].
pub fn open_file(dir: &Path, name: &str) -> Result<Option<std::fs::File>, LegacyError> {
    let path = dir.join(name);
    let link = |path: PathBuf| LegacyError::UnsafePath {
        path,
        reason: "it is a symbolic link",
    };
    #[cfg(unix)]
    let opened = {
        use rustix::fs::{Mode, OFlags};
        // The last component is never followed; a FIFO does not block the open.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match rustix::fs::open(&path, flags, Mode::empty()) {
            Err(rustix::io::Errno::LOOP) => return Err(link(path)),
            other => other.map(std::fs::File::from).map_err(std::io::Error::from),
        }
    };
    #[cfg(not(unix))]
    let opened = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => return Err(link(path)),
        _ => std::fs::File::open(&path),
    };
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LegacyError::Io { path, source }),
    };
    let meta = file.metadata().map_err(|source| LegacyError::Io {
        path: path.clone(),
        source,
    })?;
    if !meta.is_file() {
        return Err(LegacyError::UnsafePath {
            path,
            reason: "it is not a regular file",
        });
    }
    Ok(Some(file))
}

/// Reads `dir`'s legacy files as [`plan`] reads bytes — streamed, one line in memory at a
/// time, never through a symbolic link ([`open_file`]) — and plans the import.
///
/// # Errors
/// [`LegacyError::NotLegacy`] when none of the files is there; [`LegacyError::UnsafePath`],
/// [`LegacyError::Io`]; [`LegacyError::Changed`] when a file changed while it was read;
/// whatever [`plan`] refuses.
pub fn read_dir(dir: &Path, options: &LegacyOptions) -> Result<ImportPlan, LegacyError> {
    let sources = [
        open_file(dir, CHECKPOINT_FILE)?,
        open_file(dir, WAL_FILE)?,
        open_file(dir, SPOOL_FILE)?,
    ];
    if sources.iter().all(Option::is_none) {
        return Err(LegacyError::NotLegacy {
            dir: dir.to_path_buf(),
        });
    }
    plan_sources(&dir.display().to_string(), dir, sources, options)
}

/// Plans the import of a legacy directory's files: every record checked, the state rebuilt,
/// the runs mapped. Pure.
///
/// # Errors
/// [`LegacyError::Record`] for the first record (in checkpoint, log, spool order) that is
/// damaged, malformed or contradicts the state (in a quarantine: the first problem a
/// quarantine cannot set aside); nothing is planned.
pub fn plan(files: &LegacyFiles, options: &LegacyOptions) -> Result<ImportPlan, LegacyError> {
    let sources = [&files.checkpoint, &files.wal, &files.spool]
        .map(|f| f.as_deref().map(std::io::Cursor::new));
    plan_sources(&files.label, Path::new(&files.label), sources, options)
}

/// How much of a file a read buffers at once.
const READ_BUFFER: usize = 64 * 1024;

/// [`plan`] over readers: checkpoint, log, spool (`None`: absent).
fn plan_sources<R: Read + Seek>(
    label: &str,
    dir: &Path,
    mut sources: [Option<R>; 3],
    options: &LegacyOptions,
) -> Result<ImportPlan, LegacyError> {
    let mut r = replay::Replay::new(dir.to_path_buf(), options.quarantine);
    let mut accepted: [Option<frame::Accepted>; 3] = [None; 3];
    for (i, source) in sources.iter_mut().enumerate() {
        let Some(source) = source else { continue };
        let mut lines = frame::LineReader::new(BufReader::with_capacity(READ_BUFFER, &mut *source));
        match i {
            0 => r.checkpoint(&mut lines)?,
            1 => r.wal(&mut lines)?,
            _ => r.spool(&mut lines)?,
        }
        accepted[i] = Some(lines.accepted());
    }
    let (runs, report) = r.finish(&options.queue);
    let fingerprint = fingerprint(dir, &mut sources, &accepted, &report.quarantined)?;
    let description = describe(label, report.generation, report.quarantined.len());
    Ok(ImportPlan {
        source: ImportSource {
            fingerprint,
            description,
        },
        runs,
        report,
    })
}

/// Writes to two hashers.
struct Tee<'a>(&'a mut blake3::Hasher, &'a mut blake3::Hasher);

impl Write for Tee<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        self.1.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// BLAKE3 over the accepted bytes of the three files (a torn tail is not part of it, so
/// truncating one away later does not make the directory a new source), each framed by its
/// name, presence and length; then, for a partial import, the records left out.
///
/// The accepted bytes are read a second time (their length comes before them) and must hash
/// as they did when they were validated.
fn fingerprint<R: Read + Seek>(
    dir: &Path,
    sources: &mut [Option<R>; 3],
    accepted: &[Option<frame::Accepted>; 3],
    quarantined: &[QuarantinedRecord],
) -> Result<[u8; 32], LegacyError> {
    let mut h = blake3::Hasher::new();
    h.update(b"cairn legacy import v1\0");
    let names = [CHECKPOINT_FILE, WAL_FILE, SPOOL_FILE];
    for ((name, source), acc) in names.iter().zip(sources.iter_mut()).zip(accepted) {
        h.update(name.as_bytes());
        h.update(&[0, u8::from(acc.is_some())]);
        h.update(&acc.map_or(0, |a| a.len).to_le_bytes());
        let (Some(source), Some(acc)) = (source, acc) else {
            continue;
        };
        let path = || dir.join(name);
        let io = |source| LegacyError::Io {
            path: path(),
            source,
        };
        source.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut again = blake3::Hasher::new();
        let copied =
            std::io::copy(&mut source.take(acc.len), &mut Tee(&mut h, &mut again)).map_err(io)?;
        if copied != acc.len || again.finalize() != acc.hash {
            return Err(LegacyError::Changed { path: path() });
        }
    }
    if !quarantined.is_empty() {
        h.update(b"quarantined\0");
        for q in quarantined {
            h.update(q.file.as_bytes());
            h.update(&[0]);
            h.update(&q.line.to_le_bytes());
        }
    }
    Ok(*h.finalize().as_bytes())
}

/// The marker's description: printable, bounded; a partial import says so first (where a
/// long label cannot cut it off).
fn describe(label: &str, generation: u64, quarantined: usize) -> String {
    let label: String = label
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let partial = if quarantined == 0 {
        String::new()
    } else {
        format!("partial import, {quarantined} corrupt record(s) quarantined: ")
    };
    let mut d = format!("{partial}legacy directory {label}, checkpoint generation {generation}");
    if d.len() > MAX_IMPORT_DESCRIPTION {
        let mut end = MAX_IMPORT_DESCRIPTION;
        while !d.is_char_boundary(end) {
            end -= 1;
        }
        d.truncate(end);
    }
    d
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

#[cfg(test)]
mod tests;
