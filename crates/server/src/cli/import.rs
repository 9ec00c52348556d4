//! `cairn import --legacy DIR [--quarantine]`: brings the replaced system's runs into the
//! spool, once.
//!
//! Order matters for "nothing lost, nothing changed on bad input": the directory is read and
//! validated in full first (a corrupt record refuses the whole import before the store is
//! touched — unless `--quarantine` asks to leave such records out); then the store is opened,
//! so that a store this binary must not use (behind it, say) is refused before anything is
//! printed or copied; then the source files are copied aside, never through a symbolic link
//! (with a quarantine's records and report); only then is the plan imported, in one
//! transaction that also records the source's fingerprint (and, for a partial import, that
//! it was partial), so a second run is a no-op.

use std::io::Write;
use std::path::Path;

use cairn::legacy::{LegacyImport, LegacyOptions};
use cairn::spool::RunImportOutcome;
use cairn::{DatabaseUrl, QueueName};

use crate::error::CliError;
use crate::open::{open, IfMissing};

/// Runs the import and prints what it found and did.
pub(crate) async fn run(
    target: &DatabaseUrl,
    dir: &Path,
    queue: Option<String>,
    quarantine: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let mut options = LegacyOptions {
        quarantine,
        ..LegacyOptions::default()
    };
    if let Some(q) = queue {
        options.queue = QueueName::new(q)?;
    }
    let import = LegacyImport::read(dir, &options)?;
    let store = open(target, IfMissing::Create).await?;
    print_report(&import, out)?;
    let quarantined = import.report().quarantined.len();
    let backed_up = import.back_up()?;
    let backup = backed_up.backup();
    writeln!(out, "backup {}", backup.dir.display())?;
    if let Some(report) = &backup.quarantine_report {
        writeln!(
            out,
            "partial import: {quarantined} corrupt record(s) left out, kept verbatim with a report at {}",
            report.display()
        )?;
    }
    match backed_up.import_into(store.spool().as_ref()).await? {
        RunImportOutcome::Imported { created, existing } => {
            writeln!(
                out,
                "imported {} run(s); {} already present under their dedup keys, left as they were",
                created.len(),
                existing.len()
            )?;
            for e in existing {
                writeln!(out, "existing {} kept {}", e.imported, e.existing)?;
            }
        }
        RunImportOutcome::AlreadyImported(marker) => writeln!(
            out,
            "already imported at {} ({} run(s) created, {} existing); nothing to do",
            marker.imported_at, marker.runs_created, marker.runs_existing
        )?,
    }
    Ok(())
}

fn print_report(import: &LegacyImport, out: &mut impl Write) -> std::io::Result<()> {
    let r = import.report();
    writeln!(out, "source {}", import.source().description)?;
    writeln!(
        out,
        "checkpoint generation {} with {} run(s); log: {} record(s) applied, {} older than the checkpoint skipped",
        r.generation, r.checkpoint_runs, r.wal_applied, r.wal_stale
    )?;
    writeln!(
        out,
        "submissions: {} already drained, {} queued; {} running run(s) settled as an expired lease",
        r.submissions_drained, r.submissions_queued, r.running_settled
    )?;
    for t in &r.torn {
        writeln!(
            out,
            "torn final record in {} at line {} (byte {}): left out",
            t.file, t.line, t.offset
        )?;
    }
    for q in &r.quarantined {
        writeln!(out, "quarantined {q}")?;
    }
    for a in &r.aliases {
        writeln!(
            out,
            "submission at line {} ({}) duplicates run {}: kept the latter",
            a.line, a.submitted, a.kept
        )?;
    }
    writeln!(out, "runs to import {}", import.runs())
}
