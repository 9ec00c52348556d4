//! The executed up-then-down check: a revision's up SQL, then its down SQL, in one transaction
//! (always rolled back) on the filled throwaway schema, must leave the schema and the rows of
//! every table that existed before exactly as they were.

use std::collections::{BTreeMap, BTreeSet};

use cairn_migrate::additivity::{difference, Rule, Violation};
use cairn_migrate::{MigrateError, BOOKKEEPING_TABLES};
use sqlx::PgConnection;

use super::checker::to_migrate;
use super::sql;
use crate::config::SchemaName;

/// `(kind, table, name)` → definition.
type Objects = BTreeMap<(String, String, String), String>;

async fn objects(conn: &mut PgConnection, schema: &SchemaName) -> Result<Objects, MigrateError> {
    let bookkeeping: Vec<String> = BOOKKEEPING_TABLES.iter().map(|s| (*s).to_owned()).collect();
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(sql::DOWN_OBJECTS)
        .bind(schema.as_str())
        .bind(&bookkeeping)
        .fetch_all(&mut *conn)
        .await
        .map_err(to_migrate)?;
    Ok(rows
        .into_iter()
        .map(|(kind, table, name, def)| ((kind, table, name), def))
        .collect())
}

async fn rows(
    conn: &mut PgConnection,
    schema: &SchemaName,
    table: &str,
    cols: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    let mut rows: Vec<String> = sqlx::query_scalar(&sql::down_rows(schema, table, cols))
        .persistent(false)
        .fetch_all(&mut *conn)
        .await?;
    // Sorted here as bytes: a collation cannot reorder what is compared.
    rows.sort();
    Ok(rows)
}

/// Runs `statements`; the 1-based number of the first that fails, with the server's message.
async fn run(conn: &mut PgConnection, statements: &[String]) -> Result<(), (usize, String)> {
    for (i, statement) in statements.iter().enumerate() {
        if let Err(e) = sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await
        {
            let why = match &e {
                sqlx::Error::Database(db) => db.message().replace('\n', " "),
                other => other.to_string().replace('\n', " "),
            };
            return Err((i + 1, why));
        }
    }
    Ok(())
}

fn add(out: &mut Vec<Violation>, table: Option<&str>, detail: String) {
    let v = Violation {
        rule: Rule::Down,
        table: table.map(str::to_owned),
        detail,
    };
    if !out.contains(&v) {
        out.push(v);
    }
}

/// Up then down inside the transaction the caller opened (and rolls back).
pub(super) async fn check_down(
    conn: &mut PgConnection,
    schema: &SchemaName,
    up: &[String],
    down: &[String],
) -> Result<Vec<Violation>, MigrateError> {
    let before = objects(conn, schema).await?;
    let tables: Vec<String> = before
        .keys()
        .filter(|(kind, _, _)| kind == "table")
        .map(|(_, t, _)| t.clone())
        .collect();
    let mut data = BTreeMap::new();
    for table in &tables {
        let cols: Vec<String> = sqlx::query_scalar(sql::DOWN_COLUMNS)
            .bind(schema.as_str())
            .bind(table)
            .fetch_all(&mut *conn)
            .await
            .map_err(to_migrate)?;
        let rows = rows(conn, schema, table, &cols).await.map_err(to_migrate)?;
        data.insert(table.clone(), (cols, rows));
    }
    let mut out = Vec::new();
    if run(conn, up).await.is_err() {
        // Reported by the additivity check itself.
        return Ok(out);
    }
    if let Err((n, why)) = run(conn, down).await {
        add(
            &mut out,
            None,
            format!("down statement {n} failed after the up SQL: {why}"),
        );
        return Ok(out);
    }
    let after = objects(conn, schema).await?;
    let mut lost_columns = BTreeSet::new();
    for ((kind, table, name), def) in &before {
        match after.get(&(kind.clone(), table.clone(), name.clone())) {
            None if kind == "column" => {
                lost_columns.insert(table.clone());
                add(
                    &mut out,
                    Some(table),
                    format!("column {name} is lost after up then down"),
                );
            }
            None if kind == "table" => add(
                &mut out,
                Some(table),
                "the table is gone after up then down".into(),
            ),
            None => add(
                &mut out,
                Some(table),
                format!("{kind} {name} is gone after up then down"),
            ),
            Some(now) if now != def => add(
                &mut out,
                Some(table),
                format!("{kind} {name} differs after up then down: {def} -> {now}"),
            ),
            Some(_) => {}
        }
    }
    for (kind, table, name) in after.keys() {
        if !before.contains_key(&(kind.clone(), table.clone(), name.clone())) {
            let what = if kind == "table" {
                format!("down leaves table {name} behind")
            } else {
                format!("down leaves {kind} {name} behind")
            };
            add(&mut out, Some(table), what);
        }
    }
    for (table, (cols, was)) in &data {
        if lost_columns.contains(table)
            || !after.contains_key(&("table".into(), table.clone(), table.clone()))
        {
            continue;
        }
        match rows(conn, schema, table, cols).await {
            Ok(now) if &now == was => {}
            Ok(now) => {
                let (missing, extra) = difference(was, &now);
                add(
                    &mut out,
                    Some(table),
                    format!(
                        "rows differ after up then down: {missing} of {} row(s) lost or changed, {extra} row(s) not there before",
                        was.len()
                    ),
                );
            }
            Err(e) => {
                add(
                    &mut out,
                    Some(table),
                    format!("its rows cannot be read after up then down: {e}"),
                );
                return Ok(out);
            }
        }
    }
    Ok(out)
}
