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

use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::spool::{ImportSource, MAX_IMPORT_DESCRIPTION};

mod backup;
mod error;
mod files;
mod format;
mod frame;
mod records;
mod replay;
mod types;

pub use backup::{back_up, backup_dir, quarantine_name, Backup, QUARANTINE_DIR, QUARANTINE_REPORT};
pub use error::{LegacyError, RecordProblem};
pub use files::{backup_files, open_file};
pub use format::{CHECKPOINT_FILE, CHECKPOINT_TMP_FILE, MAX_LEGACY_LINE, SPOOL_FILE, WAL_FILE};
pub use frame::seal_record;
pub use types::{
    ImportPlan, LegacyFiles, LegacyOptions, LegacyReport, QuarantinedRecord, SubmissionAlias,
    TornRecord, DEFAULT_LEGACY_QUEUE,
};

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

#[cfg(test)]
mod tests;
