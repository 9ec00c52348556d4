//! The shape of a store schema for a baseline ([`cairn_migrate::baseline`]), read from the
//! catalog: each table's columns (`format_type`, `NOT NULL`, the default's expression), its
//! constraints, indexes (with whether each is valid) and triggers by name with
//! `pg_get_constraintdef` / `pg_get_indexdef` / `pg_get_triggerdef`; and the schema's views,
//! sequences, enum and domain types and functions. The schema's own name is taken out of every
//! definition so that a throwaway schema and the store's compare equal.

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
    || CASE WHEN x.indisvalid THEN '' ELSE ' (INVALID: an interrupted concurrent build)' END \
FROM pg_catalog.pg_index x \
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
JOIN pg_catalog.pg_class t ON t.oid = x.indrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
WHERE n.nspname = $1 \
UNION ALL \
SELECT t.relname::text, 'trigger ' || g.tgname::text, pg_catalog.pg_get_triggerdef(g.oid) \
    || CASE g.tgenabled WHEN 'D' THEN ' (DISABLED)' WHEN 'R' THEN ' (ENABLE REPLICA)' \
        WHEN 'A' THEN ' (ENABLE ALWAYS)' ELSE '' END \
FROM pg_catalog.pg_trigger g \
JOIN pg_catalog.pg_class t ON t.oid = g.tgrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
WHERE n.nspname = $1 AND NOT g.tgisinternal";

/// What else schema `$1` holds: views, sequences, types and functions, `kind and name,
/// definition`.
const OTHERS: &str = "\
SELECT CASE c.relkind WHEN 'v' THEN 'view ' ELSE 'materialized view ' END || c.relname, \
    pg_catalog.pg_get_viewdef(c.oid) \
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = $1 AND c.relkind IN ('v', 'm') \
UNION ALL \
SELECT 'sequence ' || c.relname, pg_catalog.format_type(q.seqtypid, NULL) \
    || ' start ' || q.seqstart || ' increment ' || q.seqincrement || ' min ' || q.seqmin \
    || ' max ' || q.seqmax || ' cache ' || q.seqcache || CASE WHEN q.seqcycle THEN ' cycle' ELSE '' END \
FROM pg_catalog.pg_sequence q JOIN pg_catalog.pg_class c ON c.oid = q.seqrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
UNION ALL \
SELECT 'type ' || t.typname, CASE t.typtype \
    WHEN 'e' THEN 'enum (' || (SELECT pg_catalog.string_agg(pg_catalog.quote_literal(e.enumlabel), ', ' \
        ORDER BY e.enumsortorder) FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid) || ')' \
    WHEN 'd' THEN 'domain over ' || pg_catalog.format_type(t.typbasetype, t.typtypmod) \
        || CASE WHEN t.typnotnull THEN ' NOT NULL' ELSE '' END \
        || COALESCE(' DEFAULT ' || t.typdefault, '') \
        || COALESCE((SELECT ' ' || pg_catalog.string_agg(k.conname || ' ' || \
            pg_catalog.pg_get_constraintdef(k.oid), ', ' ORDER BY k.conname) \
            FROM pg_catalog.pg_constraint k WHERE k.contypid = t.oid), '') \
    ELSE 'type of kind ' || t.typtype::text END \
FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace \
WHERE n.nspname = $1 AND t.typtype IN ('e', 'd', 'r', 'm') \
UNION ALL \
SELECT 'function ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')', \
    pg_catalog.pg_get_functiondef(p.oid) \
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
WHERE n.nspname = $1 AND p.prokind IN ('f', 'p')";

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
    let others: Vec<(String, String)> = sqlx::query_as(OTHERS)
        .bind(schema)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    Ok(SchemaShape {
        tables,
        others: others
            .into_iter()
            .map(|(name, def)| (name, unqualify(&def)))
            .collect(),
    })
}
