//! The executed lock check: what a revision blocks on a live store, and for how long.
//!
//! Beside the additivity verdict, `cairn migrate check` runs each revision against its
//! throwaway store (built and filled as for the additivity check) while a second, *probe*
//! session tries a read and a write on every table that existed before the revision. The engine
//! ([`super::AdditivityEngine::check_locks`]) measures, per statement and table
//! ([`StatementLocks`], [`TableEffect`]): the strongest lock the revision's session holds (or
//! waits for) on the table, whether the probe's read or write gave up waiting behind it and
//! after how long, whether the table was rewritten (its file node changed), whether an index
//! was built on it, and whether it was read in full. Nothing here is parsed from the SQL except
//! which advice a measured scan gets ([`judge`]).
//!
//! A **finding** ([`LockFinding`]) is a statement that did work proportional to a table's size
//! (a rewrite, an index build, a full scan) while the revision held a lock on it that blocks
//! writes: on a large live table that is an outage for as long as the work takes. A lock that
//! blocks but does no such work (`ADD COLUMN … NULL`, a `NOT VALID` constraint) is reported as
//! an observation, not a finding: it is held only as long as the revision's transaction, and
//! the lock timeout with retry keeps it from queueing traffic behind it. A finding is accepted
//! for one revision by a leading line `-- cairn:accept-lock NAME` in its up file
//! ([`crate::MigrationSet::with_accepted_lock`]); it is still listed, marked accepted.

use std::collections::BTreeSet;
use std::time::Duration;

/// A Postgres table lock mode, weakest first.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockMode {
    /// `ACCESS SHARE`: a read.
    AccessShare,
    /// `ROW SHARE`: `SELECT … FOR UPDATE`, a foreign key's referenced table.
    RowShare,
    /// `ROW EXCLUSIVE`: a write.
    RowExclusive,
    /// `SHARE UPDATE EXCLUSIVE`: `VACUUM`, `CREATE INDEX CONCURRENTLY`, `VALIDATE CONSTRAINT`.
    ShareUpdateExclusive,
    /// `SHARE`: `CREATE INDEX`; blocks writes.
    Share,
    /// `SHARE ROW EXCLUSIVE`: a foreign key, a trigger; blocks writes.
    ShareRowExclusive,
    /// `EXCLUSIVE`: blocks writes and `FOR UPDATE` reads.
    Exclusive,
    /// `ACCESS EXCLUSIVE`: most `ALTER TABLE` forms, `DROP`; blocks reads and writes.
    AccessExclusive,
}

impl LockMode {
    /// The mode from its `pg_locks.mode` name (`AccessExclusiveLock`).
    pub fn from_pg(name: &str) -> Option<Self> {
        Some(match name {
            "AccessShareLock" => Self::AccessShare,
            "RowShareLock" => Self::RowShare,
            "RowExclusiveLock" => Self::RowExclusive,
            "ShareUpdateExclusiveLock" => Self::ShareUpdateExclusive,
            "ShareLock" => Self::Share,
            "ShareRowExclusiveLock" => Self::ShareRowExclusive,
            "ExclusiveLock" => Self::Exclusive,
            "AccessExclusiveLock" => Self::AccessExclusive,
            _ => return None,
        })
    }

    /// The mode as the Postgres documentation names it (`ACCESS EXCLUSIVE`).
    pub fn name(self) -> &'static str {
        match self {
            Self::AccessShare => "ACCESS SHARE",
            Self::RowShare => "ROW SHARE",
            Self::RowExclusive => "ROW EXCLUSIVE",
            Self::ShareUpdateExclusive => "SHARE UPDATE EXCLUSIVE",
            Self::Share => "SHARE",
            Self::ShareRowExclusive => "SHARE ROW EXCLUSIVE",
            Self::Exclusive => "EXCLUSIVE",
            Self::AccessExclusive => "ACCESS EXCLUSIVE",
        }
    }
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the engine measured on one table that existed before the revision, for one statement.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct TableEffect {
    /// The table's name.
    pub table: String,
    /// The strongest lock the revision's session held, or waited for, on the table once the
    /// statement ran (or, outside a transaction, while it ran); `None`: no lock.
    pub mode: Option<LockMode>,
    /// The probe's read (`SELECT 1 FROM t LIMIT 1`) gave up waiting for its lock after this
    /// long; `None`: it was not blocked.
    pub reads_blocked: Option<Duration>,
    /// The probe's write (a `DELETE … WHERE false`, which takes a writer's lock and changes
    /// nothing) gave up waiting after this long; `None`: it was not blocked.
    pub writes_blocked: Option<Duration>,
    /// The statement gave the table a new file node: it was rewritten.
    pub rewritten: bool,
    /// The statement built (or rebuilt) an index on the table.
    pub index_built: bool,
    /// The statement read the table in full (a sequential or index scan counted on it).
    pub scanned: bool,
}

/// What the engine measured for one statement of a revision.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct StatementLocks {
    /// The statement's position in the revision, from 1.
    pub statement: usize,
    /// The statement as it ran.
    pub sql: String,
    /// How long it ran on the throwaway store (a few rows: says nothing about production).
    pub took: Duration,
    /// The tables it locked or changed, in the order they were created.
    pub tables: Vec<TableEffect>,
}

/// The engine's measurements of one revision.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct LockMeasurement {
    /// The statements measured, in order (up to a failed one).
    pub statements: Vec<StatementLocks>,
    /// The statement that failed and why; the statements after it were not measured.
    pub failed: Option<(usize, String)>,
    /// The revision ran outside a transaction (no-transaction): each statement was measured
    /// while it ran, not after.
    pub outside_transaction: bool,
}

/// The kind of a lock finding; its [`LockRule::name`] is what an accept marker names.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockRule {
    /// An index was built on the table while its writes were blocked: `CREATE INDEX` without
    /// `CONCURRENTLY`, a `UNIQUE` or `PRIMARY KEY` constraint added, a `REINDEX`.
    IndexBuild,
    /// The table was rewritten while its writes were blocked: a column type change, a volatile
    /// default, `VACUUM FULL`, `CLUSTER`.
    Rewrite,
    /// `SET NOT NULL` read the table in full under `ACCESS EXCLUSIVE`.
    SetNotNull,
    /// A `CHECK` or foreign key was validated as it was added (without `NOT VALID`), reading
    /// the table in full under a lock that blocks writes.
    ValidatedConstraint,
    /// The table was read in full while the revision held a lock on it that blocks writes, for
    /// another reason (a `VALIDATE CONSTRAINT` after an earlier statement's `ALTER TABLE`, a
    /// backfill, a domain constraint).
    ScanUnderLock,
}

impl LockRule {
    /// Every rule, in the order reports list them.
    pub const ALL: [LockRule; 5] = [
        LockRule::IndexBuild,
        LockRule::Rewrite,
        LockRule::SetNotNull,
        LockRule::ValidatedConstraint,
        LockRule::ScanUnderLock,
    ];

    /// The short, stable name reports and accept markers use.
    pub fn name(self) -> &'static str {
        match self {
            LockRule::IndexBuild => "index-build",
            LockRule::Rewrite => "table-rewrite",
            LockRule::SetNotNull => "set-not-null",
            LockRule::ValidatedConstraint => "constraint-validated",
            LockRule::ScanUnderLock => "scan-under-lock",
        }
    }

    /// The rule named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The way around it, in one line.
    pub fn advice(self) -> &'static str {
        match self {
            LockRule::IndexBuild => "build the index with CREATE INDEX CONCURRENTLY in a revision of its own marked `-- cairn:no-transaction` (for a UNIQUE or PRIMARY KEY constraint: build a unique index that way, then ADD CONSTRAINT … USING INDEX)",
            LockRule::Rewrite => "do not rewrite a live table: add a new column, backfill it in batches, move readers to it (a binary-compatible change such as varchar(n) to text does not rewrite)",
            LockRule::SetNotNull => "add CHECK (col IS NOT NULL) NOT VALID, VALIDATE CONSTRAINT it in a later revision, then SET NOT NULL (the valid CHECK spares the scan) and drop the CHECK",
            LockRule::ValidatedConstraint => "add the constraint NOT VALID, then VALIDATE CONSTRAINT in a later revision (SHARE UPDATE EXCLUSIVE: reads and writes go on)",
            LockRule::ScanUnderLock => "move the statement that reads the table to a revision of its own: VALIDATE CONSTRAINT after the NOT VALID add committed, a backfill in batches outside the ALTER's transaction",
        }
    }
}

/// One finding: a statement that did size-proportional work on a table while the revision
/// blocked its writes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockFinding {
    /// What kind.
    pub rule: LockRule,
    /// The table.
    pub table: String,
    /// The statement's position in the revision, from 1.
    pub statement: usize,
    /// The statement, on one line.
    pub sql: String,
    /// The lock held on the table.
    pub mode: LockMode,
    /// Reads were blocked too.
    pub reads_blocked: bool,
    /// Accepted by the revision's `-- cairn:accept-lock` marker.
    pub accepted: bool,
}

impl std::fmt::Display for LockFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let blocked = if self.reads_blocked {
            "reads and writes"
        } else {
            "writes"
        };
        let what = match self.rule {
            LockRule::IndexBuild => "built an index",
            LockRule::Rewrite => "rewrote the table",
            _ => "read the table in full",
        };
        write!(
            f,
            "{} on {}: statement {} `{}` {what} under {} ({blocked} blocked); instead: {}",
            self.rule.name(),
            self.table,
            self.statement,
            self.sql,
            self.mode,
            self.rule.advice()
        )
    }
}

/// One table's summary over the whole revision.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TableLocks {
    /// The table.
    pub table: String,
    /// The strongest lock the revision took on it.
    pub mode: LockMode,
    /// How long the probe's read waited before giving up, when it was blocked.
    pub reads_blocked: Option<Duration>,
    /// How long the probe's write waited before giving up, when it was blocked.
    pub writes_blocked: Option<Duration>,
    /// The table was rewritten.
    pub rewritten: bool,
    /// The table was read in full while its writes were blocked.
    pub scanned_under_lock: bool,
}

/// The lock check's verdict on one revision.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LockReport {
    /// The revision checked.
    pub revision: String,
    /// Every table that existed before and that the revision locked, in creation order.
    pub tables: Vec<TableLocks>,
    /// The findings, accepted ones included.
    pub findings: Vec<LockFinding>,
    /// The statement that failed and why (the additivity check reports it too).
    pub failed: Option<(usize, String)>,
    /// The revision ran outside a transaction (no-transaction).
    pub outside_transaction: bool,
}

impl LockReport {
    /// The findings not accepted by a marker: what fails the check.
    pub fn open_findings(&self) -> impl Iterator<Item = &LockFinding> {
        self.findings.iter().filter(|f| !f.accepted)
    }
}

/// The upper-case words of `sql`, string literals, quoted identifiers and comments left out.
fn words(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            word.extend(c.to_uppercase());
            continue;
        }
        if !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        match c {
            '\'' | '"' => {
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
            }
            _ => {}
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether `words` holds `seq` in a row.
fn holds(words: &[String], seq: &[&str]) -> bool {
    words
        .windows(seq.len())
        .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
}

/// The rule a measured effect on a table breaks, if any: work proportional to the table's size
/// (a rewrite, an index build, a full read) while the probe's write was blocked. Which rule a
/// full read is depends on what statement `sql` asked for.
pub fn judge(sql: &str, effect: &TableEffect) -> Option<LockRule> {
    effect.writes_blocked?;
    if effect.rewritten {
        return Some(LockRule::Rewrite);
    }
    if effect.index_built {
        return Some(LockRule::IndexBuild);
    }
    if !effect.scanned {
        return None;
    }
    let w = words(sql);
    Some(if holds(&w, &["SET", "NOT", "NULL"]) {
        LockRule::SetNotNull
    } else if holds(&w, &["VALIDATE", "CONSTRAINT"]) {
        LockRule::ScanUnderLock
    } else if w.iter().any(|x| x == "ADD")
        && w.iter().any(|x| {
            matches!(
                x.as_str(),
                "CHECK" | "FOREIGN" | "REFERENCES" | "CONSTRAINT"
            )
        })
        && !holds(&w, &["NOT", "VALID"])
    {
        LockRule::ValidatedConstraint
    } else {
        LockRule::ScanUnderLock
    })
}

/// `sql` on one line, at most 120 characters.
fn one_line(sql: &str) -> String {
    let folded = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let folded = crate::text::escape_control(&folded).into_owned();
    match folded.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &folded[..at]),
        None => folded,
    }
}

/// The report of revision `revision` from its measurements, the findings whose rule `accepted`
/// names marked accepted.
pub fn lock_report(
    revision: &str,
    measured: &LockMeasurement,
    accepted: &BTreeSet<String>,
) -> LockReport {
    let mut tables: Vec<TableLocks> = Vec::new();
    let mut findings = Vec::new();
    for st in &measured.statements {
        for e in &st.tables {
            let Some(mode) = e.mode else { continue };
            let rule = judge(&st.sql, e);
            if let Some(rule) = rule {
                findings.push(LockFinding {
                    rule,
                    table: e.table.clone(),
                    statement: st.statement,
                    sql: one_line(&st.sql),
                    mode,
                    reads_blocked: e.reads_blocked.is_some(),
                    accepted: accepted.contains(rule.name()),
                });
            }
            let at = match tables.iter().position(|t| t.table == e.table) {
                Some(at) => at,
                None => {
                    tables.push(TableLocks {
                        table: e.table.clone(),
                        mode,
                        reads_blocked: None,
                        writes_blocked: None,
                        rewritten: false,
                        scanned_under_lock: false,
                    });
                    tables.len() - 1
                }
            };
            let t = &mut tables[at];
            t.mode = t.mode.max(mode);
            t.reads_blocked = t.reads_blocked.or(e.reads_blocked);
            t.writes_blocked = t.writes_blocked.or(e.writes_blocked);
            t.rewritten |= e.rewritten;
            t.scanned_under_lock |= e.scanned && e.writes_blocked.is_some();
        }
    }
    LockReport {
        revision: revision.to_owned(),
        tables,
        findings,
        failed: measured.failed.clone(),
        outside_transaction: measured.outside_transaction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effect(writes: bool, rewritten: bool, index: bool, scanned: bool) -> TableEffect {
        TableEffect {
            table: "items".into(),
            mode: Some(LockMode::AccessExclusive),
            reads_blocked: None,
            writes_blocked: writes.then_some(Duration::from_millis(100)),
            rewritten,
            index_built: index,
            scanned,
        }
    }

    #[test]
    fn only_size_proportional_work_under_a_write_blocking_lock_is_a_finding() {
        let sql = "ALTER TABLE items ADD COLUMN note text NULL";
        assert_eq!(judge(sql, &effect(true, false, false, false)), None);
        assert_eq!(judge(sql, &effect(false, true, true, true)), None);
        assert_eq!(
            judge(sql, &effect(true, true, true, true)),
            Some(LockRule::Rewrite)
        );
        assert_eq!(
            judge(
                "CREATE INDEX i ON items (name)",
                &effect(true, false, true, true)
            ),
            Some(LockRule::IndexBuild)
        );
        let scan = effect(true, false, false, true);
        for (sql, rule) in [
            (
                "ALTER TABLE items ALTER COLUMN name SET NOT NULL",
                LockRule::SetNotNull,
            ),
            (
                "ALTER TABLE items ADD CONSTRAINT c CHECK (id > 0)",
                LockRule::ValidatedConstraint,
            ),
            (
                "alter table items add foreign key (p) references parents (id)",
                LockRule::ValidatedConstraint,
            ),
            (
                "ALTER TABLE items ADD CONSTRAINT c CHECK (name <> 'NOT VALID') NOT VALID",
                LockRule::ScanUnderLock,
            ),
            (
                "ALTER TABLE items VALIDATE CONSTRAINT c",
                LockRule::ScanUnderLock,
            ),
            (
                "ALTER TABLE items ADD CONSTRAINT c CHECK (name <> 'SET NOT NULL') -- NOT VALID",
                LockRule::ValidatedConstraint,
            ),
        ] {
            assert_eq!(judge(sql, &scan), Some(rule), "{sql}");
        }
    }

    #[test]
    fn a_report_merges_tables_and_marks_accepted_findings() {
        let measured = LockMeasurement {
            statements: vec![
                StatementLocks {
                    statement: 1,
                    sql: "CREATE INDEX i ON items (name)".into(),
                    tables: vec![TableEffect {
                        mode: Some(LockMode::Share),
                        ..effect(true, false, true, true)
                    }],
                    ..StatementLocks::default()
                },
                StatementLocks {
                    statement: 2,
                    sql: "ALTER TABLE items ADD COLUMN n int".into(),
                    tables: vec![TableEffect {
                        reads_blocked: Some(Duration::from_millis(100)),
                        ..effect(true, false, false, false)
                    }],
                    ..StatementLocks::default()
                },
            ],
            ..LockMeasurement::default()
        };
        let accepted: BTreeSet<String> = ["index-build".to_owned()].into();
        let report = lock_report("0002_x", &measured, &accepted);
        assert_eq!(report.tables.len(), 1);
        assert_eq!(report.tables[0].mode, LockMode::AccessExclusive);
        assert!(report.tables[0].reads_blocked.is_some());
        assert!(report.tables[0].scanned_under_lock);
        assert_eq!(report.findings.len(), 1);
        assert!(report.findings[0].accepted);
        assert_eq!(report.open_findings().count(), 0);
        let open = lock_report("0002_x", &measured, &BTreeSet::new());
        assert_eq!(open.open_findings().count(), 1);
        assert!(open.findings[0]
            .to_string()
            .starts_with("index-build on items: statement 1"));
    }

    #[test]
    fn an_accept_marker_names_a_known_finding_and_marks_its_revision() {
        use crate::MigrationSet;
        let set = MigrationSet::from_files(
            "app",
            [
                ("0001_a.sql", "CREATE TABLE a (id BIGINT, name TEXT);"),
                (
                    "0002_i.sql",
                    "-- cairn:accept-lock index-build\n-- cairn:accept-lock   set-not-null\n-- an index\nCREATE INDEX ai ON a (name);",
                ),
            ],
        )
        .unwrap();
        let names: Vec<String> = set.accepted_locks("0002_i").into_iter().collect();
        assert_eq!(names, ["index-build", "set-not-null"]);
        assert!(set.accepted_locks("0001_a").is_empty());
        assert_eq!(set.revisions()[1].description, "an index");
        // `up_to` keeps the marks of the revisions it keeps.
        assert_eq!(
            set.up_to("0002_i").unwrap().accepted_locks("0002_i").len(),
            2
        );
        for bad in [
            "-- cairn:accept-lock index\nCREATE INDEX ai ON a (name);",
            "-- cairn:accept-lockindex-build\nCREATE INDEX ai ON a (name);",
        ] {
            let err = MigrationSet::from_files(
                "app",
                [
                    ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
                    ("0002_i.sql", bad),
                ],
            )
            .unwrap_err();
            assert!(err.to_string().contains("0002_i.sql"), "{err}");
        }
    }

    #[test]
    fn names_round_trip_and_modes_parse() {
        for rule in LockRule::ALL {
            assert_eq!(LockRule::from_name(rule.name()), Some(rule));
        }
        assert_eq!(LockRule::from_name("index"), None);
        assert_eq!(
            LockMode::from_pg("ShareRowExclusiveLock"),
            Some(LockMode::ShareRowExclusive)
        );
        assert!(LockMode::AccessExclusive > LockMode::Share);
        assert_eq!(LockMode::from_pg("SIReadLock"), None);
    }
}
