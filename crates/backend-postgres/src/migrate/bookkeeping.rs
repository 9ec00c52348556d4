//! The bookkeeping a migrator reads and writes on one connection: the set's stamp and lineage
//! (cairn-migrate's [`cairn_migrate::bookkeeping`] statements) and the fleet registry
//! (`cairn_fleet`, `cairn_contract`; [`cairn_migrate::fleet`]'s statements), in this backend's
//! dialect.

use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::{Error, Result};
use cairn_migrate::bookkeeping::{self as bk, BookkeepingSql};
use cairn_migrate::fleet::{self, FleetRow, FleetSql};
use cairn_migrate::{FleetEntry, MigrateError, StoredState};
use sqlx::PgConnection;

use crate::error::map;

/// The stamp and lineage statements in this backend's dialect.
pub(super) fn bookkeeping() -> &'static BookkeepingSql {
    cairn_migrate::bookkeeping::sql(Dialect::Postgres)
}

/// The set's stamp and lineage. A schema without either bookkeeping table (or no schema at
/// all) reads as an empty state; a missing table of the two reads as no rows, and a stamp table
/// without the lineage table is flagged for the runner to refuse.
pub(super) async fn read_state(
    conn: &mut PgConnection,
    set: &str,
) -> Result<StoredState, MigrateError> {
    let sql = bookkeeping();
    let mut exists = async |query: &str| -> Result<bool> {
        sqlx::query_scalar(query)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)
    };
    let tables = bk::Tables {
        stamp: exists(sql.has_stamp_table).await?,
        lineage: exists(sql.has_lineage_table).await?,
    };
    if tables.none() {
        return Ok(StoredState::default());
    }
    let stamp: Option<String> = if tables.stamp {
        sqlx::query_scalar(sql.read_stamp)
            .bind(set)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?
    } else {
        None
    };
    let rows: Vec<(String, String)> = if tables.lineage {
        sqlx::query_as(sql.read_lineage)
            .bind(set)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?
    } else {
        Vec::new()
    };
    bk::stored_state_of(tables, stamp, rows)
}

/// The fleet registry's statements, defined once in cairn-migrate for both backends.
pub(super) fn fleet_sql() -> &'static FleetSql {
    fleet::sql(Dialect::Postgres)
}

/// One registry row as Postgres returns it.
type PgFleetRow = (String, String, String, String, String, i64, i64, i64);

/// Every registry row; none when the store has no registry table.
pub(super) async fn read_fleet(conn: &mut PgConnection) -> Result<Vec<FleetEntry>> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows: Vec<PgFleetRow> = sqlx::query_as(sql.list)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    Ok(fleet::entries_from_rows(rows.into_iter().map(
        |(instance, set, revision, build, host, pid, started_at_us, last_seen_us)| FleetRow {
            instance,
            set,
            revision,
            build,
            host,
            pid,
            started_at_us,
            last_seen_us,
        },
    )))
}

/// The contract revisions recorded for `set`; none without the contract table.
pub(super) async fn read_contracts(conn: &mut PgConnection, set: &str) -> Result<Vec<String>> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_contract_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(sql.contracts_of_set)
        .bind(set)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)
}

/// Registers `entry` inside the open transaction on `conn`.
pub(super) async fn register(
    conn: &mut PgConnection,
    entry: &FleetEntry,
    prune_before: Timestamp,
) -> Result<()> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Err(Error::NotFound {
            what: "the fleet registry (cairn revision 0004_fleet): open the store with this build to add it"
                .into(),
        });
    }
    sqlx::query(sql.prune)
        .bind(prune_before.as_unix_micros())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query(sql.delete_instance)
        .bind(&entry.instance)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    for (set, revision) in entry.rows() {
        sqlx::query(sql.insert)
            .bind(&entry.instance)
            .bind(set)
            .bind(revision)
            .bind(&entry.build)
            .bind(&entry.host)
            .bind(i64::from(entry.pid))
            .bind(entry.started_at.as_unix_micros())
            .bind(entry.last_seen.as_unix_micros())
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    Ok(())
}
