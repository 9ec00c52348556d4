//! The executed up-then-down check: a revision's up SQL, then its down SQL, in one
//! transaction on the filled throwaway store, must leave the schema and the rows of every
//! table that existed before exactly as they were.

use std::collections::BTreeMap;
use std::path::Path;

use cairn_core::Result;
use cairn_migrate::additivity::{difference, Rule, Violation};
use rusqlite::Connection;

use super::snapshot::{columns, of_kind, read_rows, read_schema, Cell, Column};
use super::verdict::{one_line, Verdict};
use crate::config::SqliteOptions;
use crate::error::map;
use crate::files;

/// A table before the revision: its columns and its rows over the ordinary columns, sorted
/// (rowids are left out: a down that rebuilds a table keeps its rows if their values are
/// kept).
struct Before {
    columns: Vec<Column>,
    cols: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

pub(super) fn inspect_down(
    path: &Path,
    opts: &SqliteOptions,
    up: &[String],
    down: &[String],
) -> Result<Vec<Violation>> {
    let conn = files::connect(path, opts)?;
    let schema = read_schema(&conn).map_err(map)?;
    let mut tables = BTreeMap::new();
    for (name, _) in of_kind(&schema, "table") {
        let columns = columns(&conn, name).map_err(map)?;
        let cols: Vec<String> = columns
            .iter()
            .filter(|c| c.hidden == 0)
            .map(|c| c.name.clone())
            .collect();
        let rows = read_rows(&conn, name, &[], &cols).map_err(map)?;
        tables.insert(
            name.clone(),
            Before {
                columns,
                cols,
                rows,
            },
        );
    }
    conn.execute_batch(crate::sql::BEGIN_IMMEDIATE)
        .map_err(map)?;
    let mut verdict = Verdict(Vec::new());
    if run(&conn, up).is_ok() {
        match run(&conn, down) {
            Err((n, why)) => verdict.add(
                Rule::Down,
                None,
                format!("down statement {n} failed after the up SQL: {why}"),
            ),
            Ok(()) => judge(&conn, &schema, &tables, &mut verdict)?,
        }
    }
    if !conn.is_autocommit() {
        conn.execute_batch(crate::sql::ROLLBACK).map_err(map)?;
    }
    Ok(verdict.0)
}

/// Runs `statements` inside the open transaction; the 1-based number of the first that fails
/// or ends the transaction, with why.
fn run(conn: &Connection, statements: &[String]) -> std::result::Result<(), (usize, String)> {
    for (i, statement) in statements.iter().enumerate() {
        conn.execute_batch(statement)
            .map_err(|e| (i + 1, one_line(e)))?;
        if conn.is_autocommit() {
            return Err((i + 1, "it ended the transaction".into()));
        }
    }
    Ok(())
}

fn judge(
    conn: &Connection,
    schema: &super::snapshot::Schema,
    tables: &BTreeMap<String, Before>,
    verdict: &mut Verdict,
) -> Result<()> {
    let after = read_schema(conn).map_err(map)?;
    for (name, old) in schema {
        match after.get(name) {
            None => verdict.add(
                Rule::Down,
                Some(&old.table),
                format!("{} {name} is gone after up then down", old.kind),
            ),
            Some(new) if old.kind != "table" && (new.kind != old.kind || new.sql != old.sql) => {
                verdict.add(
                    Rule::Down,
                    Some(&old.table),
                    format!("{} {name} differs after up then down", old.kind),
                )
            }
            Some(_) => {}
        }
    }
    for (name, new) in &after {
        if !schema.contains_key(name) {
            verdict.add(
                Rule::Down,
                Some(&new.table),
                format!("down leaves {} {name} behind", new.kind),
            );
        }
    }
    for (table, before) in tables {
        if after.get(table).is_none_or(|o| o.kind != "table") {
            continue;
        }
        let now = columns(conn, table).map_err(map)?;
        let mut lost = false;
        for old in &before.columns {
            match now.iter().find(|c| c.name == old.name) {
                None => {
                    lost = true;
                    verdict.add(
                        Rule::Down,
                        Some(table),
                        format!("column {} is lost after up then down", old.name),
                    );
                }
                Some(c)
                    if (c.notnull, &c.default, c.pk, c.hidden)
                        != (old.notnull, &old.default, old.pk, old.hidden) =>
                {
                    verdict.add(
                        Rule::Down,
                        Some(table),
                        format!(
                            "column {} differs after up then down (NOT NULL, default, key or generation)",
                            old.name
                        ),
                    )
                }
                Some(_) => {}
            }
        }
        for c in &now {
            if !before.columns.iter().any(|o| o.name == c.name) {
                verdict.add(
                    Rule::Down,
                    Some(table),
                    format!("down leaves column {} behind", c.name),
                );
            }
        }
        if lost {
            continue;
        }
        let rows = match read_rows(conn, table, &[], &before.cols) {
            Ok(rows) => rows,
            Err(e) => {
                verdict.add(
                    Rule::Down,
                    Some(table),
                    format!(
                        "its rows cannot be read after up then down: {}",
                        one_line(e)
                    ),
                );
                continue;
            }
        };
        if rows != before.rows {
            let (missing, extra) = difference(&before.rows, &rows);
            verdict.add(
                Rule::Down,
                Some(table),
                format!(
                    "rows differ after up then down: {missing} of {} row(s) lost or changed, {extra} row(s) not there before",
                    before.rows.len()
                ),
            );
        }
    }
    Ok(())
}
