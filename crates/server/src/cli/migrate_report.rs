//! How `cairn migrate check` prints one engine's verdicts: the additivity violations and the
//! lock check's tables and findings, as lines or as a JSON value, and the exit verdict.

use std::io::Write;
use std::time::Duration;

use cairn::migrate::{
    escape_control, LockReport, MigrationSet, RevisionReport, TableLocks, ACCEPT_LOCK_MARKER,
};
use cairn::Scheme;
use serde_json::{json, Value};

use crate::error::CliError;

/// What SQLite's lock check would say, once per run: nothing is measured there.
const SQLITE_LOCKS: &str = "lock check not run: every SQLite migration holds the database's one write lock for its whole transaction (readers go on in WAL mode)";

/// What fails the check, counted over every engine.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) violations: usize,
    pub(super) findings: usize,
}

impl Tally {
    /// Exit 0 with nothing counted, else the error (exit 1) that says what was.
    pub(super) fn verdict(&self) -> Result<(), CliError> {
        let mut parts = Vec::new();
        if self.violations > 0 {
            parts.push(format!(
                "{} additivity violation(s); a revision after the first may only add tables, nullable or defaulted columns and plain indexes",
                self.violations
            ));
        }
        if self.findings > 0 {
            parts.push(format!(
                "{} lock finding(s); each says the way around it, or accept one with a leading `{ACCEPT_LOCK_MARKER} NAME` line in the revision's file",
                self.findings
            ));
        }
        match parts.is_empty() {
            true => Ok(()),
            false => Err(CliError::Config(parts.join("; "))),
        }
    }
}

/// One engine's results over a set.
pub(super) struct Checked<'a> {
    pub(super) engine: Scheme,
    pub(super) set: &'a MigrationSet,
    pub(super) reports: &'a [RevisionReport],
    /// `None`: the engine does not measure locks.
    pub(super) locks: Option<&'a [LockReport]>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What the probe could do on a table, in words.
fn blocked(t: &TableLocks) -> String {
    match (t.reads_blocked, t.writes_blocked) {
        (Some(r), _) => format!(
            "reads and writes blocked (probe gave up after {} ms)",
            ms(r)
        ),
        (None, Some(w)) => format!(
            "writes blocked (probe gave up after {} ms), reads go on",
            ms(w)
        ),
        (None, None) => "reads and writes go on".into(),
    }
}

impl Checked<'_> {
    fn lock_report(&self, revision: &str) -> Option<&LockReport> {
        self.locks?.iter().find(|l| l.revision == revision)
    }

    /// Prints the lines: the additivity verdict per revision (as before the lock check), then
    /// its locks and findings.
    pub(super) fn print(&self, tally: &mut Tally, out: &mut impl Write) -> Result<(), CliError> {
        let name = self.engine;
        writeln!(out, "{name} {}: base revision, exempt", self.set.base().id)?;
        if self.locks.is_none() {
            writeln!(out, "{name}: {SQLITE_LOCKS}")?;
        }
        for report in self.reports {
            let rev = escape_control(&report.revision);
            if report.violations.is_empty() {
                writeln!(out, "{name} {rev}: ok")?;
            }
            // A contract revision breaks older builds by design: the fleet registry gates it,
            // so its findings are listed as what it contracts, not counted as violations.
            let contract = self.set.is_contract(&report.revision);
            for v in &report.violations {
                if contract {
                    writeln!(
                        out,
                        "{name} {rev}: contract (applied once no live build lacks it): {v}"
                    )?;
                } else {
                    tally.violations += 1;
                    writeln!(out, "{name} {rev}: {v}")?;
                }
            }
            let Some(locks) = self.lock_report(&report.revision) else {
                continue;
            };
            let how = if locks.outside_transaction {
                ", measured while it ran outside a transaction"
            } else {
                ""
            };
            for t in &locks.tables {
                let mut extra = String::new();
                if t.rewritten {
                    extra.push_str(", rewritten");
                }
                if t.scanned_under_lock {
                    extra.push_str(", read in full under the lock");
                }
                writeln!(
                    out,
                    "{name} {rev}: locks {}: {}, {}{extra}{how}",
                    escape_control(&t.table),
                    t.mode,
                    blocked(t)
                )?;
            }
            for f in &locks.findings {
                if f.accepted {
                    writeln!(
                        out,
                        "{name} {rev}: lock finding accepted ({ACCEPT_LOCK_MARKER} {}): {}",
                        f.rule.name(),
                        escape_control(&f.to_string())
                    )?;
                } else {
                    tally.findings += 1;
                    writeln!(
                        out,
                        "{name} {rev}: lock finding {}",
                        escape_control(&f.to_string())
                    )?;
                }
            }
            if let Some((n, why)) = &locks.failed {
                writeln!(
                    out,
                    "{name} {rev}: lock check stopped at statement {n}, which failed: {}",
                    escape_control(why)
                )?;
            }
        }
        Ok(())
    }

    /// The engine's results as one JSON value.
    pub(super) fn json(&self, tally: &mut Tally) -> Value {
        let revisions: Vec<Value> = self
            .reports
            .iter()
            .map(|report| {
                let contract = self.set.is_contract(&report.revision);
                if !contract {
                    tally.violations += report.violations.len();
                }
                let violations: Vec<Value> = report
                    .violations
                    .iter()
                    .map(|v| json!({"rule": v.rule.name(), "table": v.table, "detail": v.detail}))
                    .collect();
                let locks = self.lock_report(&report.revision).map(|l| {
                    tally.findings += l.open_findings().count();
                    lock_json(l)
                });
                json!({
                    "revision": report.revision,
                    "contract": contract,
                    "violations": violations,
                    "locks": locks,
                })
            })
            .collect();
        json!({
            "engine": self.engine.to_string(),
            "base": self.set.base().id,
            "lock_check": self.locks.is_some(),
            "lock_note": if self.locks.is_none() { Some(SQLITE_LOCKS) } else { None },
            "revisions": revisions,
        })
    }
}

fn lock_json(l: &LockReport) -> Value {
    let tables: Vec<Value> = l
        .tables
        .iter()
        .map(|t| {
            json!({
                "table": t.table,
                "mode": t.mode.name(),
                "reads_blocked_ms": t.reads_blocked.map(ms),
                "writes_blocked_ms": t.writes_blocked.map(ms),
                "rewritten": t.rewritten,
                "scanned_under_lock": t.scanned_under_lock,
            })
        })
        .collect();
    let findings: Vec<Value> = l
        .findings
        .iter()
        .map(|f| {
            json!({
                "name": f.rule.name(),
                "table": f.table,
                "statement": f.statement,
                "sql": f.sql,
                "mode": f.mode.name(),
                "reads_blocked": f.reads_blocked,
                "accepted": f.accepted,
                "advice": f.rule.advice(),
            })
        })
        .collect();
    json!({
        "outside_transaction": l.outside_transaction,
        "failed": l.failed.as_ref().map(|(n, why)| json!({"statement": n, "error": why})),
        "tables": tables,
        "findings": findings,
    })
}
