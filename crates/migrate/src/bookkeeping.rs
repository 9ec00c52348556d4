//! The runner's bookkeeping, defined once: the stamp and lineage tables, their DDL and every
//! statement that reads or writes them, per [`Dialect`].
//!
//! A [`MigrationBackend`](crate::MigrationBackend) runs these statements and nothing else on
//! the bookkeeping tables, so both backends store stamps and lineages in one shape. The shapes
//! are those every existing store already has; changing one strands those stores.
//!
//! - `cairn_migration_stamp (set_name PRIMARY KEY, revision)`: one row per migration set, the
//!   revision the store is at.
//! - `cairn_migration_lineage (set_name, position, revision, checksum, PRIMARY KEY (set_name,
//!   position))`: per set, the chain of the build that last migrated the store, base at
//!   position 0, checksums as 64 lowercase hex digits.
//! - `cairn_migration_down (set_name, revision, position, statement, PRIMARY KEY (set_name,
//!   revision, position))`: per set and applied revision, its compensating down SQL in the
//!   store's dialect, stored in the transaction that applied it, so that any build can run it
//!   ([`crate::Runner::down`]). A revision without rows has no down SQL.

use cairn_core::schema::Dialect;

use crate::checksum::{Checksum, LineageEntry};
use crate::classify::StoredState;
use crate::error::MigrateError;

/// The table holding each set's stamp.
pub const STAMP_TABLE: &str = "cairn_migration_stamp";

/// The table holding each set's lineage.
pub const LINEAGE_TABLE: &str = "cairn_migration_lineage";

/// The table holding each applied revision's stored down SQL.
pub const DOWN_TABLE: &str = "cairn_migration_down";

/// Names of the runner's bookkeeping tables. Schema comparisons (the additivity check, the
/// conformance suite's schema probe) leave them out: they are not part of any set's schema.
pub const BOOKKEEPING_TABLES: [&str; 3] = [STAMP_TABLE, LINEAGE_TABLE, DOWN_TABLE];

/// Every bookkeeping statement in one dialect. Parameters are positional (`?N` on SQLite, `$N`
/// on Postgres); each field documents its parameters and result columns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct BookkeepingSql {
    /// One row, one boolean-ish column (SQLite: a count, 0 or 1; Postgres: a `bool`): whether
    /// the stamp table exists (on Postgres: on the session's `search_path`). A missing table
    /// reads as an empty state and is never created by a read.
    pub has_stamp_table: &'static str,
    /// As [`BookkeepingSql::has_stamp_table`], for the lineage table. A lineage table without
    /// the stamp table (or the reverse) is inconsistent bookkeeping, which the runner refuses
    /// rather than reading it as a new store.
    pub has_lineage_table: &'static str,
    /// Creates the stamp table when missing (inside the upgrade transaction).
    pub create_stamp: &'static str,
    /// Creates the lineage table when missing (inside the upgrade transaction).
    pub create_lineage: &'static str,
    /// `1 = set` → zero or one row: `revision`.
    pub read_stamp: &'static str,
    /// `1 = set` → the lineage rows, base first: `revision, checksum`.
    pub read_lineage: &'static str,
    /// `1 = set, 2 = revision`: records the stamp, inserting or replacing it.
    pub upsert_stamp: &'static str,
    /// `1 = set`: deletes the set's lineage (before a new one is inserted).
    pub delete_lineage: &'static str,
    /// Inserts a lineage. SQLite: one row per execution, `1 = set, 2 = position, 3 = revision,
    /// 4 = checksum hex`. Postgres: the whole lineage in one execution, `$1 = set, $2 = text[]
    /// of revisions, $3 = text[] of checksum hexes`, positions from 0 in array order.
    pub insert_lineage: &'static str,
    /// Whether [`BookkeepingSql::insert_lineage`] takes the whole lineage as two arrays (one
    /// execution) rather than one row per execution.
    pub insert_lineage_is_bulk: bool,
    /// Creates the down-SQL table when missing (inside the locked transaction).
    pub create_down: &'static str,
    /// `1 = set, 2 = revision` → the revision's stored down statements in order: `statement`.
    pub read_down: &'static str,
    /// `1 = set, 2 = revision, 3 = position, 4 = statement`: stores one down statement.
    pub insert_down: &'static str,
    /// `1 = set, 2 = revision`: deletes the revision's stored down SQL.
    pub delete_down: &'static str,
}

const SQLITE: BookkeepingSql = BookkeepingSql {
    has_stamp_table: "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'cairn_migration_stamp'",
    has_lineage_table: "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'cairn_migration_lineage'",
    create_stamp: "CREATE TABLE IF NOT EXISTS cairn_migration_stamp (\
        set_name TEXT NOT NULL PRIMARY KEY, revision TEXT NOT NULL)",
    create_lineage: "CREATE TABLE IF NOT EXISTS cairn_migration_lineage (\
        set_name TEXT NOT NULL, position INTEGER NOT NULL, revision TEXT NOT NULL, checksum TEXT NOT NULL, \
        PRIMARY KEY (set_name, position))",
    read_stamp: "SELECT revision FROM cairn_migration_stamp WHERE set_name = ?1",
    read_lineage: "SELECT revision, checksum FROM cairn_migration_lineage WHERE set_name = ?1 ORDER BY position",
    upsert_stamp: "INSERT INTO cairn_migration_stamp (set_name, revision) VALUES (?1, ?2) \
        ON CONFLICT (set_name) DO UPDATE SET revision = excluded.revision",
    delete_lineage: "DELETE FROM cairn_migration_lineage WHERE set_name = ?1",
    insert_lineage: "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) VALUES (?1, ?2, ?3, ?4)",
    insert_lineage_is_bulk: false,
    create_down: "CREATE TABLE IF NOT EXISTS cairn_migration_down (\
        set_name TEXT NOT NULL, revision TEXT NOT NULL, position INTEGER NOT NULL, statement TEXT NOT NULL, \
        PRIMARY KEY (set_name, revision, position))",
    read_down: "SELECT statement FROM cairn_migration_down WHERE set_name = ?1 AND revision = ?2 ORDER BY position",
    insert_down: "INSERT INTO cairn_migration_down (set_name, revision, position, statement) VALUES (?1, ?2, ?3, ?4)",
    delete_down: "DELETE FROM cairn_migration_down WHERE set_name = ?1 AND revision = ?2",
};

const POSTGRES: BookkeepingSql = BookkeepingSql {
    has_stamp_table: "SELECT to_regclass('cairn_migration_stamp') IS NOT NULL",
    has_lineage_table: "SELECT to_regclass('cairn_migration_lineage') IS NOT NULL",
    create_stamp: "CREATE TABLE IF NOT EXISTS cairn_migration_stamp (\
        set_name text NOT NULL PRIMARY KEY, revision text NOT NULL)",
    create_lineage: "CREATE TABLE IF NOT EXISTS cairn_migration_lineage (\
        set_name text NOT NULL, position integer NOT NULL, revision text NOT NULL, checksum text NOT NULL, \
        PRIMARY KEY (set_name, position))",
    read_stamp: "SELECT revision FROM cairn_migration_stamp WHERE set_name = $1",
    read_lineage: "SELECT revision, checksum FROM cairn_migration_lineage WHERE set_name = $1 ORDER BY position",
    upsert_stamp: "INSERT INTO cairn_migration_stamp (set_name, revision) VALUES ($1, $2) \
        ON CONFLICT (set_name) DO UPDATE SET revision = excluded.revision",
    delete_lineage: "DELETE FROM cairn_migration_lineage WHERE set_name = $1",
    insert_lineage: "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) \
        SELECT $1, ord::integer - 1, rev, sum FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS l(rev, sum, ord)",
    insert_lineage_is_bulk: true,
    create_down: "CREATE TABLE IF NOT EXISTS cairn_migration_down (\
        set_name text NOT NULL, revision text NOT NULL, position integer NOT NULL, statement text NOT NULL, \
        PRIMARY KEY (set_name, revision, position))",
    read_down: "SELECT statement FROM cairn_migration_down WHERE set_name = $1 AND revision = $2 ORDER BY position",
    insert_down: "INSERT INTO cairn_migration_down (set_name, revision, position, statement) VALUES ($1, $2, $3, $4)",
    delete_down: "DELETE FROM cairn_migration_down WHERE set_name = $1 AND revision = $2",
};

/// The bookkeeping statements for `dialect`.
pub fn sql(dialect: Dialect) -> &'static BookkeepingSql {
    match dialect {
        Dialect::Sqlite => &SQLITE,
        Dialect::Postgres => &POSTGRES,
    }
}

/// The DDL that creates every bookkeeping table when missing, in order.
pub fn ddl(dialect: Dialect) -> [&'static str; 3] {
    let s = sql(dialect);
    [s.create_stamp, s.create_lineage, s.create_down]
}

/// Builds a [`StoredState`] from what [`BookkeepingSql::read_stamp`] and
/// [`BookkeepingSql::read_lineage`] returned (lineage rows base first, as `(revision,
/// checksum hex)`); no rows is no lineage.
///
/// # Errors
/// [`MigrateError::Corrupt`] for a checksum that is not 64 hex digits.
pub fn stored_state(
    stamp: Option<String>,
    lineage_rows: impl IntoIterator<Item = (String, String)>,
) -> Result<StoredState, MigrateError> {
    let lineage = lineage_rows
        .into_iter()
        .map(|(revision, checksum)| {
            Ok(LineageEntry {
                revision,
                checksum: Checksum::from_hex(&checksum)?,
            })
        })
        .collect::<Result<Vec<_>, MigrateError>>()?;
    Ok(StoredState {
        stamp,
        lineage: (!lineage.is_empty()).then_some(lineage),
        lineage_table_missing: false,
    })
}

/// Which bookkeeping tables a store has, as [`BookkeepingSql::has_stamp_table`] and
/// [`BookkeepingSql::has_lineage_table`] found them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tables {
    /// The stamp table exists.
    pub stamp: bool,
    /// The lineage table exists.
    pub lineage: bool,
}

impl Tables {
    /// Whether there is nothing to read: neither table exists (a store this runner never
    /// touched). Otherwise read each table that exists and build the state with
    /// [`stored_state_of`].
    pub fn none(self) -> bool {
        !self.stamp && !self.lineage
    }
}

/// [`stored_state`], for a store whose bookkeeping tables are `tables`: a missing table reads
/// as no rows, and a stamp table without the lineage table is flagged
/// ([`StoredState::lineage_table_missing`]) for the runner to refuse.
///
/// # Errors
/// As [`stored_state`].
pub fn stored_state_of(
    tables: Tables,
    stamp: Option<String>,
    lineage_rows: impl IntoIterator<Item = (String, String)>,
) -> Result<StoredState, MigrateError> {
    let mut state = stored_state(stamp, lineage_rows)?;
    state.lineage_table_missing = tables.stamp && !tables.lineage;
    Ok(state)
}

/// The rows [`BookkeepingSql::insert_lineage`] stores for `lineage`: `(position, revision,
/// checksum hex)`, base at 0.
pub fn lineage_rows(lineage: &[LineageEntry]) -> Vec<(i64, String, String)> {
    lineage
        .iter()
        .enumerate()
        .map(|(i, e)| (i as i64, e.revision.clone(), e.checksum.to_hex()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_names_only_the_bookkeeping_tables() {
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            let s = sql(d);
            assert!(s.has_lineage_table.contains(LINEAGE_TABLE));
            for stmt in [
                s.has_stamp_table,
                s.create_stamp,
                s.read_stamp,
                s.upsert_stamp,
            ] {
                assert!(stmt.contains(STAMP_TABLE), "{stmt}");
            }
            for stmt in [
                s.create_lineage,
                s.read_lineage,
                s.delete_lineage,
                s.insert_lineage,
            ] {
                assert!(stmt.contains(LINEAGE_TABLE), "{stmt}");
            }
            for stmt in [s.create_down, s.read_down, s.insert_down, s.delete_down] {
                assert!(stmt.contains(DOWN_TABLE), "{stmt}");
            }
            assert_eq!(ddl(d), [s.create_stamp, s.create_lineage, s.create_down]);
        }
    }

    #[test]
    fn placeholders_follow_the_dialect() {
        assert!(sql(Dialect::Sqlite).read_stamp.contains("?1"));
        assert!(sql(Dialect::Postgres).read_stamp.contains("$1"));
        assert!(!sql(Dialect::Sqlite).insert_lineage_is_bulk);
        assert!(sql(Dialect::Postgres).insert_lineage_is_bulk);
    }

    #[test]
    fn stored_state_round_trips_and_refuses_bad_checksums() {
        let set = crate::cairn_set();
        let rows: Vec<(String, String)> = lineage_rows(&set.lineage(Dialect::Sqlite))
            .into_iter()
            .map(|(_, r, c)| (r, c))
            .collect();
        let state = stored_state(Some("0001_epoch_log".into()), rows).unwrap();
        assert_eq!(state.lineage, Some(set.lineage(Dialect::Sqlite)));
        assert_eq!(
            stored_state(None, Vec::new()).unwrap(),
            StoredState::default()
        );
        let bad = stored_state(None, vec![("r".into(), "xyz".into())]);
        assert!(matches!(bad, Err(MigrateError::Corrupt { .. })));
    }
}
