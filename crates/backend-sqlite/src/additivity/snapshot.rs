//! Snapshots of the throwaway store before and after a revision: its schema objects, each
//! table's columns, and every seeded row, value for value.

use std::collections::BTreeMap;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, ToSql};

use super::sql;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Object {
    pub(super) kind: String,
    pub(super) table: String,
    pub(super) rootpage: i64,
    pub(super) sql: Option<String>,
}

/// `sqlite_schema`, keyed by lowercased name.
pub(super) type Schema = BTreeMap<String, Object>;

pub(super) fn read_schema(conn: &Connection) -> rusqlite::Result<Schema> {
    let mut stmt = conn.prepare(sql::SCHEMA)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(1)?.to_ascii_lowercase(),
            Object {
                kind: r.get(0)?,
                table: r.get::<_, String>(2)?.to_ascii_lowercase(),
                rootpage: r.get::<_, Option<i64>>(3)?.unwrap_or_default(),
                sql: r.get(4)?,
            },
        ))
    })?;
    rows.collect()
}

pub(super) fn of_kind<'s>(
    schema: &'s Schema,
    kind: &'s str,
) -> impl Iterator<Item = (&'s String, &'s Object)> {
    schema.iter().filter(move |(_, o)| o.kind == kind)
}

#[derive(Clone, Debug)]
pub(super) struct Column {
    pub(super) name: String,
    pub(super) notnull: bool,
    pub(super) default: Option<String>,
    pub(super) pk: bool,
    pub(super) hidden: i64,
}

pub(super) fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<Column>> {
    let mut stmt = conn.prepare_cached(sql::COLUMNS)?;
    let rows = stmt.query_map(params![table], |r| {
        Ok(Column {
            name: r.get(0)?,
            notnull: r.get::<_, i64>(1)? != 0,
            default: r.get(2)?,
            pk: r.get::<_, i64>(3)? != 0,
            hidden: r.get(4)?,
        })
    })?;
    rows.collect()
}

/// One stored value, compared exactly (text as its bytes, reals by their bits).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Cell {
    Null,
    Int(i64),
    Real(u64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl From<ValueRef<'_>> for Cell {
    fn from(v: ValueRef<'_>) -> Self {
        match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(i) => Cell::Int(i),
            ValueRef::Real(f) => Cell::Real(f.to_bits()),
            ValueRef::Text(t) => Cell::Text(t.to_vec()),
            ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
        }
    }
}

impl ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Cell::Null => ValueRef::Null,
            Cell::Int(i) => ValueRef::Integer(*i),
            Cell::Real(b) => ValueRef::Real(f64::from_bits(*b)),
            Cell::Text(t) => ValueRef::Text(t),
            Cell::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// An existing table as seeded: how its rows are addressed, its ordinary columns and its rows
/// (key cells first), sorted.
#[derive(Debug)]
pub(super) struct Seeded {
    pub(super) key: Vec<String>,
    pub(super) cols: Vec<String>,
    pub(super) columns: Vec<Column>,
    pub(super) rows: Vec<Vec<Cell>>,
}

pub(super) fn read_rows(
    conn: &Connection,
    table: &str,
    key: &[String],
    cols: &[String],
) -> rusqlite::Result<Vec<Vec<Cell>>> {
    let mut stmt = conn.prepare(&sql::select_rows(table, key, cols))?;
    let width = key.len() + cols.len();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(
            (0..width)
                .map(|i| row.get_ref(i).map(Cell::from))
                .collect::<rusqlite::Result<_>>()?,
        );
    }
    // Compared as a sorted list, so a changed collation cannot reorder what is compared.
    out.sort();
    Ok(out)
}

pub(super) fn read_seeded(conn: &Connection, table: &str) -> rusqlite::Result<Seeded> {
    let columns = columns(conn, table)?;
    let cols: Vec<String> = columns
        .iter()
        .filter(|c| c.hidden == 0)
        .map(|c| c.name.clone())
        .collect();
    let without_rowid: i64 = conn
        .query_row(sql::WITHOUT_ROWID, params![table], |r| r.get(0))
        .unwrap_or(0);
    let key = if without_rowid != 0 {
        // pragma order is cid order; the key's order does not matter for addressing a row.
        columns
            .iter()
            .filter(|c| c.pk)
            .map(|c| c.name.clone())
            .collect()
    } else {
        vec!["rowid".to_owned()]
    };
    let rows = read_rows(conn, table, &key, &cols)?;
    Ok(Seeded {
        key,
        cols,
        columns,
        rows,
    })
}
