//! The shape of a SQLite store's tables for a baseline ([`cairn_migrate::baseline`]), read
//! from the catalog pragmas: each column's declared type, `NOT NULL`, default and primary-key
//! position (`pragma_table_info`); each index by name with its uniqueness, origin, partiality,
//! columns and `CREATE INDEX` text (`pragma_index_list`, `pragma_index_info`); each foreign
//! key (`pragma_foreign_key_list`); and each view and trigger with its `CREATE` text.

use cairn_core::Result;
use cairn_migrate::baseline::{SchemaShape, TableShape};
use rusqlite::Connection;

use crate::error::map;

/// Whitespace runs as one space, for `CREATE INDEX` text written by another tool.
fn squeeze(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The shape of every table of the database on `conn` (SQLite's own `sqlite_…` tables aside).
pub(crate) fn shape(conn: &Connection) -> Result<SchemaShape> {
    let mut out = SchemaShape::default();
    let tables: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
        .map_err(map)?;
    for table in tables {
        let mut shape = TableShape::default();
        let mut columns = conn
            .prepare(
                "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1) \
                 ORDER BY cid",
            )
            .map_err(map)?;
        let rows = columns
            .query_map([&table], |r| {
                let (name, ty, not_null, default, pk): (String, String, bool, Option<String>, i64) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
                let mut line = format!("{name} {ty}");
                if not_null {
                    line.push_str(" NOT NULL");
                }
                if let Some(d) = default {
                    line.push_str(&format!(" DEFAULT {d}"));
                }
                if pk > 0 {
                    line.push_str(&format!(" PRIMARY KEY {pk}"));
                }
                Ok(line)
            })
            .map_err(map)?;
        for row in rows {
            shape.columns.push(row.map_err(map)?);
        }
        let indexes: Vec<(String, bool, String, bool)> = conn
            .prepare("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1)")
            .and_then(|mut s| {
                s.query_map([&table], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(map)?;
        for (name, unique, origin, partial) in indexes {
            let cols: Vec<String> = conn
                .prepare("SELECT coalesce(name, '<expression>') FROM pragma_index_info(?1) ORDER BY seqno")
                .and_then(|mut s| s.query_map([&name], |r| r.get(0))?.collect())
                .map_err(map)?;
            let sql: Option<String> = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1",
                    [&name],
                    |r| r.get(0),
                )
                .map_err(map)?;
            let def = format!(
                "{}index ({}) origin {origin}{}{}",
                if unique { "unique " } else { "" },
                cols.join(", "),
                if partial { " partial" } else { "" },
                sql.map(|s| format!(": {}", squeeze(&s)))
                    .unwrap_or_default()
            );
            shape.objects.insert(format!("index {name}"), def);
        }
        let keys: Vec<(i64, String, String, Option<String>, String, String)> = conn
            .prepare(
                "SELECT id, \"table\", \"from\", \"to\", on_update, on_delete \
                 FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
            )
            .and_then(|mut s| {
                s.query_map([&table], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                    ))
                })?
                .collect()
            })
            .map_err(map)?;
        for (id, parent, from, to, on_update, on_delete) in keys {
            let def = format!(
                "{from} REFERENCES {parent}({}) ON UPDATE {on_update} ON DELETE {on_delete}",
                to.unwrap_or_default()
            );
            shape
                .objects
                .entry(format!("foreign key {id}"))
                .and_modify(|d: &mut String| {
                    d.push_str(", ");
                    d.push_str(&def);
                })
                .or_insert(def);
        }
        out.tables.insert(table, shape);
    }
    let others: Vec<(String, String, Option<String>)> = conn
        .prepare(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('view', 'trigger') \
             ORDER BY type, name",
        )
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        })
        .map_err(map)?;
    for (kind, name, sql) in others {
        out.others
            .insert(format!("{kind} {name}"), squeeze(&sql.unwrap_or_default()));
    }
    Ok(out)
}
