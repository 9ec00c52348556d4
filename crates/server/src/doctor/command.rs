//! `cairn doctor [--json]`: the report printed for an operator, and the application set the
//! command line names.

use std::io::Write;

use cairn::migrate::MigrationSet;
use cairn::DatabaseUrl;

use super::check::{Level, Limits};
use super::report::report;
use crate::error::CliError;

/// The application set named by `--set NAME --source DIR`, if any.
pub(crate) fn app_set(args: crate::cli::SetArgs) -> Result<Option<MigrationSet>, CliError> {
    match (args.set, args.source) {
        (Some(name), Some(dir)) if name != cairn::migrate::CAIRN_SET => Ok(Some(
            MigrationSet::from_dir(name, &dir).map_err(|e| CliError::Store(e.into()))?,
        )),
        _ => Ok(None),
    }
}

/// `cairn doctor`: prints the report (lines, or JSON with `--json`); unhealthy → exit 1 with
/// one stderr line (warnings leave it healthy: exit 0).
pub(crate) async fn run(
    target: &DatabaseUrl,
    app: Option<MigrationSet>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let config = crate::config::Config::load(None, crate::config::Overrides::default())
        .map_err(|p| CliError::Config(p.0.join("; ")))?;
    let limits = Limits {
        retention_cap: config.spool.retention_max_bytes,
        parked_threshold: config.doctor.parked_threshold,
    };
    let report = report(target, app, limits, None).await;
    if json {
        serde_json::to_writer_pretty(&mut *out, &report).map_err(|e| CliError::Output(e.into()))?;
        writeln!(out)?;
    } else {
        for c in &report.checks {
            let mark = match c.level {
                Level::Ok => "ok",
                Level::Warning => "WARNING",
                Level::Problem => "PROBLEM",
            };
            writeln!(out, "{mark} {}: {}", c.name, c.detail)?;
            if let Some(r) = &c.repair {
                writeln!(out, "  repair: {r}")?;
            }
        }
    }
    out.flush()?;
    if report.healthy {
        Ok(())
    } else {
        let n = report.checks.iter().filter(|c| !c.ok).count();
        Err(CliError::Config(format!(
            "{n} problem(s) found (listed on stdout, each with its repair when one exists)"
        )))
    }
}
