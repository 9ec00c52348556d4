//! Building the throwaway store of one check: every set of the [`CheckTarget`] applied through
//! the lineage-aware runner (cairn's own through the store open), the epoch log seeded with
//! [`seed_epoch_log`], and one synthesized row in every table that is still empty.

use std::time::Duration;

use cairn_core::schema::Dialect;
use cairn_migrate::additivity::hints::literals;
use cairn_migrate::additivity::synth::{candidate_rows, ColumnSpec};
use cairn_migrate::additivity::{seed_epoch_log, CheckTarget};
use cairn_migrate::{MigrateError, Runner, BOOKKEEPING_TABLES, CAIRN_SET};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

use super::{sql, PgAdditivity};
use crate::config::{PgOptions, SchemaName};
use crate::error::map;
use crate::migrate::PgMigrator;
use crate::store::PgStore;

impl PgAdditivity {
    /// Applies the target's sets in order, seeds the epoch log when the store holds it, and
    /// fills the tables still empty.
    pub(super) async fn build(
        &self,
        schema: &SchemaName,
        target: &CheckTarget,
    ) -> Result<(), MigrateError> {
        // A pool that never connects, only there to hand its connect options on: the store's
        // and the runner's sessions carry the check's application_name like the others.
        let named = PgPoolOptions::new().connect_lazy_with(self.connect_options(schema)?);
        let opts = PgOptions::from_pool(&named)
            .schema(schema.as_str())
            .max_connections(2);
        let mut store = None;
        for set in target.sets() {
            let runner = Runner::new(set.clone()).with_lock_timeout(Duration::from_secs(30));
            if set.name() == CAIRN_SET {
                store = Some(PgStore::open_through(opts.clone(), &runner).await?);
            } else {
                runner.open(&PgMigrator::new(opts.clone())?).await?;
            }
        }
        if let Some(store) = &store {
            if target.holds_epoch_log() {
                seed_epoch_log(store).await?;
            }
            store.close().await;
        }
        let mut conn = self.connect(schema).await?;
        let filled = fill_empty_tables(&mut conn, schema).await;
        let _ = conn.close().await;
        filled
    }
}

/// One row of [`sql::SEED_COLUMNS`].
type SeedColumn = (
    String,
    String,
    bool,
    bool,
    bool,
    Vec<String>,
    Vec<String>,
    Vec<String>,
);

/// A column as the synthesizer takes it: an enum's labels, then the literals of its CHECK
/// constraints and partition bounds are its hints.
fn column_spec(
    (name, declared_type, not_null, has_default, generated, labels, checks, bounds): SeedColumn,
) -> ColumnSpec {
    let constrained = !checks.is_empty() || !bounds.is_empty();
    let mut hints = labels;
    for text in checks.iter().chain(&bounds) {
        for lit in literals(text) {
            if !hints.contains(&lit) {
                hints.push(lit);
            }
        }
    }
    ColumnSpec {
        has_default,
        generated,
        hints,
        constrained,
        ..ColumnSpec::new(name, declared_type, not_null)
    }
}

/// Gives every table of the schema that is still empty (bookkeeping left out) one synthesized
/// row, in creation order, so a foreign key to an earlier table usually finds its row: the
/// first of [`candidate_rows`] the table accepts (a CHECK, an enum, a partition bound). A
/// partitioned table's row lands in one of its partitions, which then counts as filled. A table
/// that refuses every candidate (a foreign key, a check the hints cannot satisfy) stays empty:
/// its definition is still checked, its rows cannot be.
async fn fill_empty_tables(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<(), MigrateError> {
    sqlx::query(sql::CREATE_SEED_ROW)
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    let bookkeeping: Vec<String> = BOOKKEEPING_TABLES.iter().map(|s| (*s).to_owned()).collect();
    let tables: Vec<(i64, String)> = sqlx::query_as(sql::TABLES)
        .bind(schema.as_str())
        .bind(&bookkeeping)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    for (oid, _) in tables {
        let columns: Vec<SeedColumn> = sqlx::query_as(sql::SEED_COLUMNS)
            .bind(oid)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        let specs: Vec<ColumnSpec> = columns.into_iter().map(column_spec).collect();
        for row in candidate_rows(Dialect::Postgres, &specs) {
            let (names, values): (Vec<String>, Vec<String>) =
                row.into_iter().map(|(name, v)| (name, v.text())).unzip();
            // A refused row is refused whole (one statement); the next candidate is tried.
            // `false` (the table has a row already) ends the attempts too.
            if sqlx::query(sql::SEED_ROW)
                .bind(oid)
                .bind(&names)
                .bind(&values)
                .execute(&mut *conn)
                .await
                .is_ok()
            {
                break;
            }
        }
    }
    Ok(())
}
