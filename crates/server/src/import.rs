//! `cairn import --legacy DIR`: brings the replaced system's runs into the spool, once.
//!
//! Order matters for "nothing lost, nothing changed on bad input": the directory is read and
//! validated in full first (a corrupt record refuses the whole import before the store is
//! touched); then the source files are copied aside; only then is the plan imported, in one
//! transaction that also records the source's fingerprint, so a second run is a no-op.

use std::io::Write;
use std::path::{Path, PathBuf};

use cairn::spool::legacy::{backup_files, read_dir, ImportPlan, LegacyOptions};
use cairn::spool::RunImportOutcome;
use cairn::{DatabaseUrl, Error, QueueName};

use crate::error::CliError;
use crate::open::{open, IfMissing};

/// Runs the import and prints what it found and did.
pub(crate) async fn run(
    target: &DatabaseUrl,
    dir: &Path,
    queue: Option<String>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let mut options = LegacyOptions::default();
    if let Some(q) = queue {
        options.queue = QueueName::new(q)?;
    }
    let plan = read_dir(dir, &options).map_err(Error::from)?;
    print_report(&plan, out)?;
    let backup = back_up(dir, &plan)?;
    writeln!(out, "backup {}", backup.display())?;
    let store = open(target, IfMissing::Create).await?;
    match store.spool().import_runs(&plan.source, plan.runs).await? {
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

fn print_report(plan: &ImportPlan, out: &mut impl Write) -> std::io::Result<()> {
    let r = &plan.report;
    writeln!(out, "source {}", plan.source.description)?;
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
    for a in &r.aliases {
        writeln!(
            out,
            "submission at line {} ({}) duplicates run {}: kept the latter",
            a.line, a.submitted, a.kept
        )?;
    }
    writeln!(out, "runs to import {}", plan.runs.len())
}

/// Copies the source files into a sibling directory named after the source's fingerprint
/// (`<dir>.cairn-backup-<16 hex>`), so rerunning an import of the same files reuses one backup.
/// Each copy is synced before the import starts.
fn back_up(dir: &Path, plan: &ImportPlan) -> Result<PathBuf, CliError> {
    let io = |path: &Path, source: std::io::Error| -> CliError {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
        .into()
    };
    let fp: String = plan.source.fingerprint[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let name = dir
        .file_name()
        .map_or_else(|| "legacy".into(), |n| n.to_string_lossy().into_owned());
    let parent = dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let backup = parent.join(format!("{name}.cairn-backup-{fp}"));
    std::fs::create_dir_all(&backup).map_err(|e| io(&backup, e))?;
    for file in backup_files(dir) {
        if !file.is_file() {
            continue;
        }
        let Some(base) = file.file_name() else {
            continue;
        };
        let to = backup.join(base);
        std::fs::copy(&file, &to).map_err(|e| io(&to, e))?;
        std::fs::File::open(&to)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&to, e))?;
    }
    std::fs::File::open(&backup)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(&backup, e))?;
    Ok(backup)
}
