//! Synthesized rows: every table the seed leaves empty (an application's tables, tables of
//! cairn's that its write paths do not fill) gets one row built from its declared column types,
//! so the rules on rows and on old-column writes apply to it too.

use std::path::Path;

use cairn_core::schema::Dialect;
use cairn_core::Result;
use cairn_migrate::additivity::hints::{check_clauses, literals, mentions};
use cairn_migrate::additivity::synth::{candidate_rows, ColumnSpec, SeedValue};
use cairn_migrate::BOOKKEEPING_TABLES;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};

use super::sql;
use crate::config::SqliteOptions;
use crate::error::map;
use crate::files;

/// Gives every empty table of the store at `path`, in creation order, one synthesized row: the
/// first of [`candidate_rows`] the table accepts (its CHECK constraints' literals are the
/// hints). A table that refuses every candidate (a NOT NULL column of a type the check cannot
/// fill, a foreign key, a trigger, a check the hints cannot satisfy) stays empty: its
/// definition is still judged, its rows cannot be.
pub(super) fn fill_empty_tables(path: &Path, opts: &SqliteOptions) -> Result<()> {
    let conn = files::connect(path, opts)?;
    let tables: Vec<(String, Option<String>)> = conn
        .prepare(sql::TABLES_IN_CREATION_ORDER)
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(map)?;
    for (table, create) in tables
        .iter()
        .filter(|(t, _)| !BOOKKEEPING_TABLES.contains(&t.as_str()))
    {
        let empty: bool = conn
            .query_row(&sql::is_empty(table), [], |r| r.get(0))
            .map_err(map)?;
        if !empty {
            continue;
        }
        let checks = check_clauses(create.as_deref().unwrap_or_default());
        for row in candidate_rows(Dialect::Sqlite, &column_specs(&conn, table, &checks)?) {
            let names: Vec<String> = row.iter().map(|(n, _)| n.clone()).collect();
            let values = row.into_iter().map(|(_, v)| value(v));
            // A refused row writes nothing (the statement is atomic); the next is tried.
            if conn
                .execute(&sql::insert_row(table, &names), params_from_iter(values))
                .is_ok()
            {
                break;
            }
        }
    }
    Ok(())
}

/// The table's columns as the catalog declares them (`hidden` 1 is a virtual table's hidden
/// column, 2 and 3 are generated columns: none takes a value); a column a CHECK clause of
/// `checks` names is constrained, with that clause's literals as hints.
fn column_specs(conn: &Connection, table: &str, checks: &[String]) -> Result<Vec<ColumnSpec>> {
    let mut stmt = conn.prepare_cached(sql::COLUMN_TYPES).map_err(map)?;
    let rows = stmt
        .query_map(params![table], |r| {
            Ok(ColumnSpec {
                has_default: r.get::<_, Option<String>>(3)?.is_some(),
                generated: r.get::<_, i64>(4)? != 0,
                ..ColumnSpec::new(
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)? != 0,
                )
            })
        })
        .map_err(map)?;
    let mut specs = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(map)?;
    for spec in &mut specs {
        for check in checks.iter().filter(|c| mentions(c, &spec.name)) {
            spec.constrained = true;
            for lit in literals(check) {
                if !spec.hints.contains(&lit) {
                    spec.hints.push(lit);
                }
            }
        }
    }
    Ok(specs)
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
    fn every_empty_table_gets_one_row_satisfying_its_checks_or_stays_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fill.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE parent (id INTEGER PRIMARY KEY, name TEXT NOT NULL, at TIMESTAMP);
                 CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL
                     REFERENCES parent (id), note VARCHAR(2), g INTEGER AS (id * 2));
                 CREATE TABLE picky (n INTEGER NOT NULL CHECK (n > 5));
                 CREATE TABLE kinds (k TEXT NOT NULL CHECK (k IN ('open', 'shut')),
                     lo INTEGER NOT NULL, hi INTEGER NOT NULL, CHECK (lo < hi));
                 CREATE TABLE hopeless (n INTEGER NOT NULL CHECK (n = 1 AND n = 2));
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
        assert_eq!(
            conn.query_row("SELECT n FROM picky", [], |r| r.get::<_, i64>(0))
                .unwrap(),
            6,
            "the CHECK's literal, plus one"
        );
        let (k, lo, hi): (String, i64, i64) = conn
            .query_row("SELECT k, lo, hi FROM kinds", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap();
        assert_eq!(k, "open");
        assert!(lo < hi, "{lo} < {hi}");
        assert_eq!(count("hopeless"), 0, "a CHECK no candidate satisfies");
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
