//! Synthesized rows: every table the seed leaves empty (an application's tables, tables of
//! cairn's that its write paths do not fill) gets one row built from its declared column types,
//! so the rules on rows and on old-column writes apply to it too.

use std::path::Path;

use cairn_core::schema::Dialect;
use cairn_core::Result;
use cairn_migrate::additivity::synth::{synthesize_row, ColumnSpec, SeedValue};
use cairn_migrate::BOOKKEEPING_TABLES;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};

use super::sql;
use crate::config::SqliteOptions;
use crate::error::map;
use crate::files;

/// Gives every empty table of the store at `path`, in creation order, one synthesized row.
/// A table whose row cannot be synthesized (a NOT NULL column of a type the check cannot
/// fill) or is refused (a CHECK, a foreign key, a trigger) stays empty: its definition is
/// still judged, its rows cannot be.
pub(super) fn fill_empty_tables(path: &Path, opts: &SqliteOptions) -> Result<()> {
    let conn = files::connect(path, opts)?;
    let tables: Vec<String> = conn
        .prepare(sql::TABLES_IN_CREATION_ORDER)
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .map_err(map)?;
    for table in tables
        .iter()
        .filter(|t| !BOOKKEEPING_TABLES.contains(&t.as_str()))
    {
        let empty: bool = conn
            .query_row(&sql::is_empty(table), [], |r| r.get(0))
            .map_err(map)?;
        if !empty {
            continue;
        }
        let Some(row) = synthesize_row(Dialect::Sqlite, &column_specs(&conn, table)?) else {
            continue;
        };
        let names: Vec<String> = row.iter().map(|(n, _)| n.clone()).collect();
        let values = row.into_iter().map(|(_, v)| value(v));
        // A refused row leaves the table empty (see above); the statement is atomic, so a
        // failure writes nothing.
        let _ = conn.execute(&sql::insert_row(table, &names), params_from_iter(values));
    }
    Ok(())
}

/// The table's columns as the catalog declares them (`hidden` 1 is a virtual table's hidden
/// column, 2 and 3 are generated columns: none takes a value).
fn column_specs(conn: &Connection, table: &str) -> Result<Vec<ColumnSpec>> {
    let mut stmt = conn.prepare_cached(sql::COLUMN_TYPES).map_err(map)?;
    let rows = stmt
        .query_map(params![table], |r| {
            Ok(ColumnSpec {
                name: r.get(0)?,
                declared_type: r.get(1)?,
                not_null: r.get::<_, i64>(2)? != 0,
                has_default: r.get::<_, Option<String>>(3)?.is_some(),
                generated: r.get::<_, i64>(4)? != 0,
            })
        })
        .map_err(map)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(map)
}

fn value(v: SeedValue) -> Value {
    match v {
        SeedValue::Integer(n) => Value::Integer(n),
        SeedValue::Real(x) => Value::Real(x),
        SeedValue::Boolean(b) => Value::Integer(i64::from(b)),
        SeedValue::Text(t) => Value::Text(t),
        SeedValue::Blob(b) => Value::Blob(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_empty_table_gets_one_row_and_refused_rows_leave_it_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fill.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE parent (id INTEGER PRIMARY KEY, name TEXT NOT NULL, at TIMESTAMP);
                 CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL
                     REFERENCES parent (id), note VARCHAR(2), g INTEGER AS (id * 2));
                 CREATE TABLE picky (n INTEGER NOT NULL CHECK (n > 5));
                 CREATE TABLE full (x);
                 INSERT INTO full VALUES (7);",
            )
            .unwrap();
        }
        fill_empty_tables(&path, &SqliteOptions::default()).unwrap();
        let conn = Connection::open(&path).unwrap();
        let count = |t: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(count("parent"), 1);
        assert_eq!(
            count("child"),
            1,
            "filled after its parent, whose key it names"
        );
        assert_eq!(count("picky"), 0, "the CHECK refuses the synthesized row");
        assert_eq!(count("full"), 1, "a table with rows is left alone");
        let (name, note): (String, String) = conn
            .query_row(
                "SELECT p.name, c.note FROM parent p JOIN child c",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((name.as_str(), note.as_str()), ("seed", "se"));
    }
}
