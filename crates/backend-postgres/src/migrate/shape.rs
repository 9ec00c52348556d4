//! The shape of a store schema's tables for a baseline ([`cairn_migrate::baseline`]), read
//! from the catalog: columns (`format_type`, `NOT NULL`, the default's expression), and
//! constraints and indexes by name with `pg_get_constraintdef` / `pg_get_indexdef`, the
//! schema's own name taken out of every definition so that a throwaway schema and the store's
//! compare equal.

use std::collections::BTreeMap;

use cairn_migrate::baseline::{SchemaShape, TableShape};
use cairn_migrate::MigrateError;
use sqlx::PgConnection;

use crate::error::map;

/// Every ordinary or partitioned table's columns in schema `$1`, in order:
/// `table, column line`.
const COLUMNS: &str = "\
SELECT c.relname::text, \
    pg_catalog.quote_ident(a.attname) || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod) \
    || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END \
    || COALESCE(' DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') \
FROM pg_catalog.pg_attribute a \
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped \
ORDER BY c.relname, a.attnum";

/// Constraints and indexes of schema `$1`'s tables: `table, kind and name, definition` (a
/// primary key and its index share a name).
const OBJECTS: &str = "\
SELECT t.relname::text, 'constraint ' || k.conname::text, pg_catalog.pg_get_constraintdef(k.oid) \
FROM pg_catalog.pg_constraint k \
JOIN pg_catalog.pg_class t ON t.oid = k.conrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
WHERE n.nspname = $1 \
UNION ALL \
SELECT t.relname::text, 'index ' || i.relname::text, pg_catalog.pg_get_indexdef(i.oid) \
FROM pg_catalog.pg_index x \
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
JOIN pg_catalog.pg_class t ON t.oid = x.indrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
WHERE n.nspname = $1";

/// The shape of schema `schema`'s tables.
pub(super) async fn shape(
    conn: &mut PgConnection,
    schema: &str,
) -> Result<SchemaShape, MigrateError> {
    let columns: Vec<(String, String)> = sqlx::query_as(COLUMNS)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    let objects: Vec<(String, String, String)> = sqlx::query_as(OBJECTS)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    let quoted: String = sqlx::query_scalar("SELECT pg_catalog.quote_ident($1)")
        .bind(schema)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    let unqualify = |def: &str| def.replace(&format!("{quoted}."), "");
    let mut tables: BTreeMap<String, TableShape> = BTreeMap::new();
    for (table, column) in columns {
        tables
            .entry(table)
            .or_default()
            .columns
            .push(unqualify(&column));
    }
    for (table, name, def) in objects {
        if let Some(t) = tables.get_mut(&table) {
            t.objects.insert(name, unqualify(&def));
        }
    }
    Ok(SchemaShape { tables })
}
