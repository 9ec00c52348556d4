//! The executed additivity check: the API shared by the backend engines.
//!
//! Every revision after a set's first must be *additive*: it may create tables; to a table that
//! already existed it may only add ordinary nullable or defaulted columns and plain
//! non-unique, non-partial indexes on plain columns. That is what lets an older build keep
//! using a store a newer build migrated.
//!
//! The check is executed, not parsed. For each revision, a backend engine builds a throwaway
//! store at the parent revision, seeds it through cairn's real write paths (appends, forks by
//! import, repairs), applies the revision inside the production transaction while recording
//! every statement the engine executes (SQLite: the trace callback; Postgres: an event trigger
//! on `ddl_command_end` plus statement-level triggers on every existing table), then compares
//! before and after and rolls everything back.
//!
//! It is a **guard, stricter than compatibility needs**: it refuses some harmless changes (an
//! identical table rebuild, replacing an index). It cannot see what rows *mean* to older code,
//! nor side effects a migration has outside SQL.

use async_trait::async_trait;
use cairn_core::schema::Dialect;

use crate::error::MigrateError;
use crate::revision::{MigrationSet, Revision};

mod seed;

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

/// A backend's engine for the check.
#[async_trait]
pub trait AdditivityEngine: Send + Sync {
    /// The dialect whose statements the engine runs.
    fn dialect(&self) -> Dialect;

    /// Checks `revision` on a throwaway store built at the end of `history` (base first; the
    /// revision's parent is `history`'s last entry) and seeded through cairn's write paths.
    /// Nothing outside the throwaway store is touched.
    ///
    /// # Errors
    /// When the throwaway store cannot be built (a broken `history`), not for violations.
    async fn check_revision(
        &self,
        history: &[Revision],
        revision: &Revision,
    ) -> Result<Vec<Violation>, MigrateError>;
}

/// Checks every revision after the first of `set`, in order.
///
/// # Errors
/// When the engine cannot build a store for some revision's parent.
pub async fn check_set(
    engine: &dyn AdditivityEngine,
    set: &MigrationSet,
) -> Result<Vec<RevisionReport>, MigrateError> {
    let revs = set.revisions();
    let mut out = Vec::new();
    for i in 1..revs.len() {
        let violations = engine.check_revision(&revs[..i], &revs[i]).await?;
        out.push(RevisionReport {
            revision: revs[i].id.clone(),
            violations,
        });
    }
    Ok(out)
}
