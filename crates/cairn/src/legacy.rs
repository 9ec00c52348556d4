//! Importing the replaced system's state directory into the spool, once (`cairn import
//! --legacy DIR`).
//!
//! An import goes through three steps, each a type, so that they cannot be taken out of order:
//!
//! 1. [`LegacyImport::read`] reads and validates the directory in full (format:
//!    `docs/LEGACY_FORMAT.md`), never through a symbolic link. A damaged, unknown or
//!    contradictory record refuses the whole import before anything else happens — unless
//!    [`LegacyOptions::quarantine`] asks to leave such records out and list them in the
//!    [`LegacyReport`]. A torn final record (bytes after the last newline) is left out and
//!    reported.
//! 2. [`LegacyImport::back_up`] copies the source files aside, beside the directory (with a
//!    quarantine's records and report); a backup left by an earlier run of the same import is
//!    verified byte for byte, never written into.
//! 3. [`BackedUp::import_into`] hands the runs to [`Spool::import_runs`]: one transaction that
//!    also records the source's fingerprint, so a second import of the same directory is a
//!    no-op ([`RunImportOutcome::AlreadyImported`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> cairn::Result<()> {
//! use std::sync::Arc;
//! use cairn::legacy::{LegacyImport, LegacyOptions};
//! use cairn::spool::{ManualClock, MemorySpool, RunImportOutcome};
//!
//! # let parent = tempfile::tempdir().unwrap();
//! # let dir = parent.path().join("state");
//! # std::fs::create_dir(&dir).unwrap();
//! # std::fs::write(dir.join("gate.spool"), b"").unwrap();
//! let import = LegacyImport::read(&dir, &LegacyOptions::default())?;
//! println!("{} run(s) to import", import.runs());
//! let backed_up = import.back_up()?;
//! println!("backup in {}", backed_up.backup().dir.display());
//! let spool = MemorySpool::new(Arc::new(ManualClock::default()));
//! assert!(matches!(backed_up.import_into(&spool).await?, RunImportOutcome::Imported { .. }));
//! # Ok(())
//! # }
//! ```

use std::path::Path;

use cairn_core::spool::legacy::{self, ImportPlan};
use cairn_core::spool::{ImportSource, RunImportOutcome, Spool};
use cairn_core::{Error, Result};

pub use cairn_core::spool::legacy::{
    Backup, LegacyOptions, LegacyReport, QuarantinedRecord, RecordProblem, SubmissionAlias,
    TornRecord, DEFAULT_LEGACY_QUEUE, QUARANTINE_DIR, QUARANTINE_REPORT,
};

/// A legacy directory read and validated in full: the runs an import would bring in and what
/// was tolerated. Nothing was written anywhere.
#[derive(Clone, Debug)]
pub struct LegacyImport {
    dir: std::path::PathBuf,
    plan: ImportPlan,
}

impl LegacyImport {
    /// Reads `dir`'s legacy files (streamed, one line in memory at a time, never through a
    /// symbolic link) and plans the import.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the directory holds none of the files, or for the first
    /// record that refuses the import (naming its file and line); [`Error::UnsafePath`] for a
    /// file that is a symbolic link or not a regular file; [`Error::Io`].
    pub fn read(dir: &Path, options: &LegacyOptions) -> Result<Self> {
        let plan = legacy::read_dir(dir, options).map_err(Error::from)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            plan,
        })
    }

    /// What the import is of (its description) and its fingerprint, the key that makes a
    /// second import a no-op.
    pub fn source(&self) -> &ImportSource {
        &self.plan.source
    }

    /// What was tolerated: torn final records, quarantined records, stale log records,
    /// duplicate submissions.
    pub fn report(&self) -> &LegacyReport {
        &self.plan.report
    }

    /// How many runs the import brings in.
    pub fn runs(&self) -> usize {
        self.plan.runs.len()
    }

    /// Copies the source files aside, beside the directory (`<dir>.cairn-backup-<fingerprint>`),
    /// each synced; for a quarantine, each left-out record's bytes too, with a report.
    ///
    /// # Errors
    /// [`Error::UnsafePath`] when a source file or the backup directory is a symbolic link or
    /// not what it should be; [`Error::InvalidInput`] when an existing backup differs from what
    /// it would hold; [`Error::Io`].
    pub fn back_up(self) -> Result<BackedUp> {
        let backup = legacy::back_up(&self.dir, &self.plan).map_err(Error::from)?;
        Ok(BackedUp {
            plan: self.plan,
            backup,
        })
    }
}

/// A validated legacy directory whose files were copied aside: ready to import.
#[derive(Clone, Debug)]
pub struct BackedUp {
    plan: ImportPlan,
    backup: Backup,
}

impl BackedUp {
    /// Where the copies are.
    pub fn backup(&self) -> &Backup {
        &self.backup
    }

    /// The import's source (see [`LegacyImport::source`]).
    pub fn source(&self) -> &ImportSource {
        &self.plan.source
    }

    /// Imports the runs into `spool` ([`Spool::import_runs`]), in one transaction with the
    /// source's completion marker.
    ///
    /// # Errors
    /// What [`Spool::import_runs`] fails with; nothing was imported.
    pub async fn import_into(self, spool: &dyn Spool) -> Result<RunImportOutcome> {
        spool.import_runs(&self.plan.source, self.plan.runs).await
    }
}
