//! The statements the engine sends. Fixed statements are constants; the per-table ones are
//! built from identifiers read from the throwaway store's own catalog (always quoted), and
//! every value is bound.

/// Every table, index, trigger and view, except SQLite's internal tables and the
/// runner's bookkeeping (automatic indexes are kept: a rebuild replaces them too).
pub(super) const SCHEMA: &str = "\
SELECT type, name, tbl_name, rootpage, sql FROM sqlite_schema
WHERE tbl_name NOT IN ('cairn_migration_stamp', 'cairn_migration_lineage', 'cairn_migration_down')
  AND NOT (type = 'table' AND name LIKE 'sqlite\\_%' ESCAPE '\\')
ORDER BY type, name";

/// A table's columns, hidden and generated ones included (`hidden`: 2 and 3 are
/// generated columns).
pub(super) const COLUMNS: &str =
    "SELECT name, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1) ORDER BY cid";

/// Every ordinary table with its `CREATE TABLE` text, oldest first (`sqlite_schema` rows are
/// appended as objects are created), SQLite's internal tables left out.
pub(super) const TABLES_IN_CREATION_ORDER: &str = "\
SELECT name, sql FROM sqlite_schema
WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
ORDER BY rowid";

/// A table's columns with their declared types, for a synthesized row (`hidden` non-zero: no
/// value may be given).
pub(super) const COLUMN_TYPES: &str = "SELECT name, type, \"notnull\", dflt_value, hidden \
    FROM pragma_table_xinfo(?1) ORDER BY cid";

/// Whether a table has no row.
pub(super) fn is_empty(table: &str) -> String {
    format!("SELECT NOT EXISTS (SELECT 1 FROM {})", quote(table))
}

/// Whether a table of the main schema is a WITHOUT ROWID table.
pub(super) const WITHOUT_ROWID: &str = "SELECT wr FROM pragma_table_list(?1) WHERE schema = 'main'";

/// The flags of one index of a table.
pub(super) const INDEX_FLAGS: &str =
    "SELECT \"unique\", partial FROM pragma_index_list(?1) WHERE name = ?2";

/// The key columns of an index (`cid` -2 is an expression).
pub(super) const INDEX_KEY_COLUMNS: &str =
    "SELECT cid FROM pragma_index_xinfo(?1) WHERE key = 1 ORDER BY seqno";

/// Defers foreign-key checks to the end of the (never committed) transaction, so a row
/// can be deleted and inserted back; `FOREIGN_KEY_CHECK` then finds what is left broken.
pub(super) const DEFER_FOREIGN_KEYS: &str = "PRAGMA defer_foreign_keys = ON";
pub(super) const FOREIGN_KEY_CHECK: &str = "PRAGMA foreign_key_check";

pub(super) const SAVEPOINT: &str = "SAVEPOINT cairn_additivity_old_writes";
pub(super) const ROLLBACK_TO: &str = "ROLLBACK TO cairn_additivity_old_writes";
pub(super) const RELEASE: &str = "RELEASE cairn_additivity_old_writes";

/// Quotes an identifier for SQLite.
pub(super) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

fn list(cols: &[String]) -> String {
    cols.iter().map(|c| quote(c)).collect::<Vec<_>>().join(", ")
}

/// `WHERE k1 IS ?n AND k2 IS ?n+1 …`, numbering from `first`.
fn key_filter(key: &[String], first: usize) -> String {
    key.iter()
        .enumerate()
        .map(|(i, k)| format!("{} IS ?{}", quote(k), first + i))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The key columns then the given columns of every row.
pub(super) fn select_rows(table: &str, key: &[String], cols: &[String]) -> String {
    let all: Vec<String> = key.iter().chain(cols).cloned().collect();
    format!("SELECT {} FROM {}", list(&all), quote(table))
}

pub(super) fn delete_row(table: &str, key: &[String]) -> String {
    format!("DELETE FROM {} WHERE {}", quote(table), key_filter(key, 1))
}

pub(super) fn insert_row(table: &str, cols: &[String]) -> String {
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT INTO {} ({}) VALUES ({})",
        quote(table),
        list(cols),
        marks.join(", ")
    )
}

pub(super) fn update_row(table: &str, cols: &[String], key: &[String]) -> String {
    let set: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{} = ?{}", quote(c), i + 1))
        .collect();
    format!(
        "UPDATE {} SET {} WHERE {}",
        quote(table),
        set.join(", "),
        key_filter(key, cols.len() + 1)
    )
}
