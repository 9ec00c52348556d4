//! What a legacy import refuses: a [`RecordProblem`] with one record, a [`LegacyError`] with
//! the whole import (and how it reads as a [`crate::Error`]).

use std::path::PathBuf;

use super::format::MAX_LEGACY_LINE;
use crate::error::Error;
use crate::spool::RunId;

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
        run: RunId,
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
