//! The executed additivity check: the API shared by the backend engines.
//!
//! Every revision after a set's first must be *additive*: it may create tables; to a table that
//! already existed it may only add ordinary nullable or defaulted columns and plain
//! non-unique, non-partial indexes on plain columns. That is what lets an older build keep
//! using a store a newer build migrated.
//!
//! The check is executed, not parsed. For each revision, a backend engine builds a throwaway
//! store at the parent revision ([`CheckTarget`]: after cairn's own set when the revision is an
//! application's), seeds the epoch log through cairn's real write paths ([`seed_epoch_log`]:
//! appends, forks by import, repairs) and every other table with one synthesized row
//! ([`synth`]), applies the revision inside the production transaction while recording
//! every statement the engine executes (SQLite: the trace callback; Postgres: an event trigger
//! on `ddl_command_end` plus statement-level triggers on every existing table), then compares
//! before and after and rolls everything back.
//!
//! It is a **guard, stricter than compatibility needs**: it refuses some harmless changes (an
//! identical table rebuild, replacing an index). It cannot see what rows *mean* to older code,
//! nor side effects a migration has outside SQL.
//!
//! Beside it runs the executed **lock check** ([`check_set_locks`], [`LockReport`]): each
//! revision runs on its own throwaway store while a probe session tries a read and a write on
//! every existing table, and what the revision blocked, rewrote, indexed or read in full under
//! a blocking lock is reported per table, with the way around it.

use async_trait::async_trait;
use cairn_core::schema::Dialect;

use crate::cairn_set::cairn_set;
use crate::error::MigrateError;
use crate::identity::CAIRN_SET;
use crate::revision::{MigrationSet, Revision};

pub mod hints;
mod locks;
mod multiset;
mod seed;
pub mod synth;

pub use locks::{
    judge, lock_report, LockFinding, LockMeasurement, LockMode, LockReport, LockRule,
    StatementLocks, TableEffect, TableLocks,
};
pub use multiset::difference;
pub use seed::seed_epoch_log;

/// Which rule a violation breaks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Rule {
    /// A statement of a forbidden kind touched an existing table (INSERT, UPDATE, DELETE,
    /// TRUNCATE, DROP, RENAME, a trigger, an ALTER other than ADD COLUMN).
    StatementKind,
    /// A statement the engine does not recognise; flagged for review.
    Unrecognised,
    /// An existing table's definition is not the old one plus inserted plain column
    /// definitions (a rebuild, a changed collation, constraint or option).
    Definition,
    /// A new column on an existing table is generated, in the key, NOT NULL without a default,
    /// or carries CHECK, UNIQUE, REFERENCES or an expression default that can fail.
    NewColumn,
    /// An existing index or trigger changed or disappeared, or a new index on an existing table
    /// is unique, partial or on an expression.
    Index,
    /// A trigger was created on an existing table.
    Trigger,
    /// Seeded rows changed.
    Rows,
    /// An INSERT, UPDATE or DELETE naming only the old columns failed afterwards.
    OldWrites,
    /// The revision failed inside the transaction (or cannot run in one, e.g. VACUUM).
    Failed,
    /// A statement reached past the store being migrated: it touched, or locked, an object
    /// outside the throwaway store the check runs in (another schema's table, say).
    OutsideStore,
    /// The revision's down SQL, run right after its up SQL, does not bring the schema and the
    /// rows of the tables that existed before back exactly (a column or table left behind or
    /// lost, an index changed, rows lost or changed), or fails.
    Down,
}

impl Rule {
    /// A short, stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Rule::StatementKind => "statement-kind",
            Rule::Unrecognised => "unrecognised-statement",
            Rule::Definition => "table-definition",
            Rule::NewColumn => "new-column",
            Rule::Index => "index",
            Rule::Trigger => "trigger",
            Rule::Rows => "rows-changed",
            Rule::OldWrites => "old-writes",
            Rule::Failed => "migration-failed",
            Rule::OutsideStore => "outside-store",
            Rule::Down => "down-not-faithful",
        }
    }
}

/// One problem found in a revision.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// The existing table involved, when there is one.
    pub table: Option<String>,
    /// What was seen, in one line.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.table {
            Some(t) => write!(f, "{} on {t}: {}", self.rule.name(), self.detail),
            None => write!(f, "{}: {}", self.rule.name(), self.detail),
        }
    }
}

/// The check's verdict on one revision.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RevisionReport {
    /// The revision checked.
    pub revision: String,
    /// Every violation found; empty means additive.
    pub violations: Vec<Violation>,
}

/// What the throwaway store for checking one revision is built from: the `prelude` sets, each
/// to its head, then `history`, the checked set up to the revision's parent.
///
/// An application's revisions are checked on a store that holds cairn's own schema first,
/// the way a service opens (cairn's set, then its own), so the prelude of an application set
/// is this build's cairn set; cairn's own set has no prelude.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CheckTarget {
    prelude: Vec<MigrationSet>,
    history: MigrationSet,
    /// Whether the checked revision is marked no-transaction on Postgres.
    no_transaction: bool,
}

impl CheckTarget {
    /// A target from its parts.
    pub fn new(prelude: Vec<MigrationSet>, history: MigrationSet) -> Self {
        Self {
            prelude,
            history,
            no_transaction: false,
        }
    }

    /// Whether the checked revision is marked no-transaction on Postgres
    /// ([`MigrationSet::with_no_transaction`]): the Postgres engine then runs each statement's
    /// [`crate::outside::in_transaction_form`] in its checked transaction.
    pub fn no_transaction(&self) -> bool {
        self.no_transaction
    }

    /// The target for revision `index` (from 1; the base is exempt) of `set`: `set` up to
    /// `index - 1`, after cairn's own set when `set` is an application's.
    ///
    /// # Errors
    /// [`MigrateError::InvalidSet`] when `index` is 0 or past the set's head.
    pub fn for_revision(set: &MigrationSet, index: usize) -> Result<Self, MigrateError> {
        if index == 0 || index >= set.revisions().len() {
            return Err(MigrateError::InvalidSet {
                set: set.name().into(),
                reason: format!("no revision after the base at position {index}"),
            });
        }
        // `up_to` keeps the marks: an earlier no-transaction revision builds the same way.
        let history = set.up_to(&set.revisions()[index - 1].id)?;
        let no_transaction = set.is_no_transaction(
            &set.revisions()[index].id,
            cairn_core::schema::Dialect::Postgres,
        );
        let prelude = if set.name() == CAIRN_SET {
            Vec::new()
        } else {
            vec![cairn_set()]
        };
        Ok(Self {
            prelude,
            history,
            no_transaction,
        })
    }

    /// The sets applied before the checked one, in order, each to its head.
    pub fn prelude(&self) -> &[MigrationSet] {
        &self.prelude
    }

    /// The checked set up to the revision's parent (its name is the checked set's).
    pub fn history(&self) -> &MigrationSet {
        &self.history
    }

    /// Every set to apply, in order: the prelude, then the history.
    pub fn sets(&self) -> impl Iterator<Item = &MigrationSet> {
        self.prelude.iter().chain(std::iter::once(&self.history))
    }

    /// Whether the throwaway store holds cairn's epoch log (some set is cairn's own), so the
    /// engine must seed it with [`seed_epoch_log`].
    pub fn holds_epoch_log(&self) -> bool {
        self.sets().any(|s| s.name() == CAIRN_SET)
    }
}

/// A backend's engine for the check.
///
/// # Contract
/// For [`AdditivityEngine::check`], on a throwaway store nothing else uses:
/// 1. apply every set of [`CheckTarget::sets`] in order through the lineage-aware [`Runner`]
///    (cairn's own through the backend's store open, so the engine holds an epoch store);
/// 2. when [`CheckTarget::holds_epoch_log`], seed it with [`seed_epoch_log`] (the one seeding
///    routine; engines do not write the epoch log any other way);
/// 3. give every table that is still empty, leaving out the
///    [`BOOKKEEPING_TABLES`](crate::BOOKKEEPING_TABLES), one row: the first of
///    [`synth::candidate_rows`] over its catalog columns the table accepts, in creation order;
///    a table that refuses them all (a CHECK the hints cannot satisfy, a foreign key) stays
///    empty;
/// 4. apply `revision` inside the production transaction, judge, and roll back. The old writes
///    ([`Rule::OldWrites`]: an UPDATE, a DELETE and an INSERT naming only the old columns)
///    name the old columns an older writer names, never a generated column nor a
///    `GENERATED ALWAYS AS IDENTITY` one.
///
/// [`Runner`]: crate::Runner
#[async_trait]
pub trait AdditivityEngine: Send + Sync {
    /// The dialect whose statements the engine runs.
    fn dialect(&self) -> Dialect;

    /// Checks `revision` on a throwaway store built from `target` (see the trait's contract).
    /// Nothing outside the throwaway store is touched.
    ///
    /// # Errors
    /// When the throwaway store cannot be built (a broken history), not for violations.
    async fn check(
        &self,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError>;

    /// The executed up-then-down check of `revision`'s down SQL `down`: on a throwaway store
    /// built and filled from `target` exactly as for [`AdditivityEngine::check`], apply the
    /// revision's up statements, then `down`, in one transaction, and require the schema and
    /// the rows of every table that existed before to be exactly what they were: each
    /// difference is a [`Rule::Down`] violation naming the table and the column, object or
    /// rows that differ. Everything is rolled back. An up that fails is left to
    /// [`AdditivityEngine::check`] (no violation here); a down that fails is one.
    ///
    /// # Errors
    /// When the throwaway store cannot be built.
    async fn check_down(
        &self,
        target: &CheckTarget,
        revision: &Revision,
        down: &[String],
    ) -> Result<Vec<Violation>, MigrateError>;

    /// The executed lock check of `revision` (what it blocks: see [`LockReport`]): on a throwaway
    /// store built and filled from `target` exactly as for [`AdditivityEngine::check`], run
    /// the revision as the runner would (in one transaction, or statement by statement outside
    /// one when [`CheckTarget::no_transaction`]) while a probe session tries a read and a write
    /// on every table that existed before, and measure per statement and table the lock held,
    /// what the probe could not do, and whether the table was rewritten, indexed or read in
    /// full. Nothing is kept. `None`: the engine does not measure locks (SQLite, whose every
    /// migration transaction holds the database's one write lock).
    ///
    /// # Errors
    /// When the throwaway store cannot be built, or a session of the check fails.
    async fn check_locks(
        &self,
        target: &CheckTarget,
        revision: &Revision,
    ) -> Result<Option<LockMeasurement>, MigrateError> {
        let _ = (target, revision);
        Ok(None)
    }

    /// Checks `revision` of cairn's own set on a throwaway store built at the end of `history`
    /// (base first; the revision's parent is `history`'s last entry): [`AdditivityEngine::check`]
    /// with no prelude. Engines need not implement it.
    ///
    /// # Errors
    /// As [`AdditivityEngine::check`].
    async fn check_revision(
        &self,
        history: &[Revision],
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError> {
        let history = MigrationSet::new(CAIRN_SET, history.to_vec())?;
        self.check(&CheckTarget::new(Vec::new(), history), revision)
            .await
    }
}

/// Checks every revision after the first of `set`, in order, each on a store built by
/// [`CheckTarget::for_revision`]: cairn's own set on its own, an application's set after
/// cairn's. A revision carrying down SQL for the engine's dialect is also checked up-then-down
/// ([`AdditivityEngine::check_down`]); its violations join the revision's report.
///
/// # Errors
/// When the engine cannot build a store for some revision's parent.
pub async fn check_set(
    engine: &dyn AdditivityEngine,
    set: &MigrationSet,
) -> Result<Vec<RevisionReport>, MigrateError> {
    let revs = set.revisions();
    let mut out = Vec::new();
    for (i, revision) in revs.iter().enumerate().skip(1) {
        let target = CheckTarget::for_revision(set, i)?;
        let mut violations = engine.check(&target, revision).await?;
        if let Some(down) = set.down(&revision.id, engine.dialect()) {
            violations.extend(engine.check_down(&target, revision, down).await?);
        }
        out.push(RevisionReport {
            revision: revision.id.clone(),
            violations,
        });
    }
    Ok(out)
}

/// The executed lock check of every revision after the first of `set`, in order, each on a
/// store built by [`CheckTarget::for_revision`] ([`AdditivityEngine::check_locks`]); a
/// finding a revision accepts ([`MigrationSet::accepted_locks`]) is marked so. `None` when the
/// engine does not measure locks.
///
/// # Errors
/// When the engine cannot build a store for some revision's parent.
pub async fn check_set_locks(
    engine: &dyn AdditivityEngine,
    set: &MigrationSet,
) -> Result<Option<Vec<LockReport>>, MigrateError> {
    let mut out = Vec::new();
    for (i, revision) in set.revisions().iter().enumerate().skip(1) {
        let target = CheckTarget::for_revision(set, i)?;
        let Some(measured) = engine.check_locks(&target, revision).await? else {
            return Ok(None);
        };
        out.push(lock_report(
            &revision.id,
            &measured,
            &set.accepted_locks(&revision.id),
        ));
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_application_target_holds_cairns_set_first() {
        let app = MigrationSet::from_files(
            "app",
            [
                ("0001_a.sql", "CREATE TABLE a (id BIGINT);"),
                ("0002_b.sql", "CREATE TABLE b (id BIGINT);"),
                ("0003_c.sql", "CREATE TABLE c (id BIGINT);"),
            ],
        )
        .unwrap();
        let t = CheckTarget::for_revision(&app, 2).unwrap();
        assert_eq!(t.prelude(), [cairn_set()]);
        assert_eq!(t.history().name(), "app");
        assert_eq!(t.history().head().id, "0002_b");
        let names: Vec<&str> = t.sets().map(MigrationSet::name).collect();
        assert_eq!(names, [CAIRN_SET, "app"]);
        assert!(t.holds_epoch_log());
        assert!(CheckTarget::for_revision(&app, 0).is_err());
        assert!(CheckTarget::for_revision(&app, 3).is_err());

        let mut revs = crate::cairn_revisions();
        let head = revs.last().expect("cairn has revisions").id.clone();
        revs.push(Revision {
            id: "t2".into(),
            parent: Some(head),
            up_sqlite: vec!["CREATE TABLE t2 (id BIGINT)".into()],
            up_postgres: vec!["CREATE TABLE t2 (id BIGINT)".into()],
            description: String::new(),
        });
        let own = MigrationSet::new(CAIRN_SET, revs).unwrap();
        let t = CheckTarget::for_revision(&own, 1).unwrap();
        assert!(t.prelude().is_empty());
        assert!(t.holds_epoch_log());
    }
}
