//! The upgrade transaction: opened on the dedicated connection that holds the migration lock
//! ([`start`]: marked, guarded against a revision's COMMIT, the schema and bookkeeping tables
//! created when missing), and cairn-migrate's [`LockedMigration`] over it ([`PgLocked`]).

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::{Error, Result};
use cairn_migrate::bookkeeping as bk;
use cairn_migrate::outside::{concurrent_index_name, concurrent_reindex_target};
use cairn_migrate::{
    Blocker, FleetEntry, LineageEntry, LockedMigration, MigrateError, StoredState,
};
use sqlx::{Connection, Executor, PgConnection, Row};

use super::bookkeeping::{bookkeeping, fleet_sql, read_fleet, read_state};
use super::sql;
use crate::config::SchemaName;
use crate::error::map;
use crate::sql::{create_schema, SCHEMA_EXISTS, SET_LOCAL_SEARCH_PATH};

/// Opens the upgrade transaction: marks it (see [`sql::MARK_OPEN`]), installs the commit guard
/// when the role may create temporary objects (returns whether it did), and creates the schema
/// (when missing and allowed) and the bookkeeping tables when missing.
///
/// `CREATE SCHEMA IF NOT EXISTS` is not used on an existing schema: Postgres checks CREATE on
/// the database before it notices the schema exists, which would shut out a role that owns its
/// schema and nothing else. Concurrent creators are serialized by the migration lock.
pub(super) async fn start(
    conn: &mut PgConnection,
    schema: &SchemaName,
    create: bool,
) -> Result<bool> {
    sqlx::query("BEGIN")
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query(sql::MARK_OPEN)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    let guarded: bool = sqlx::query_scalar(sql::CAN_USE_TEMP)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if guarded {
        for statement in sql::GUARD {
            sqlx::query(statement)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
    }
    let exists: bool = sqlx::query_scalar(SCHEMA_EXISTS)
        .bind(schema.as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        if !create {
            return Err(Error::NotFound {
                what: format!("cairn store in schema {}", schema.as_str()),
            });
        }
        sqlx::query(&create_schema(schema))
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    // The session's search_path named the schema before it existed: re-read it now.
    sqlx::query(SET_LOCAL_SEARCH_PATH)
        .bind(schema.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    for ddl in bk::ddl(Dialect::Postgres) {
        sqlx::query(ddl)
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    Ok(guarded)
}

/// An open upgrade transaction holding the session advisory lock on a dedicated connection.
/// Dropping it closes the connection, which rolls back and releases the lock.
pub(super) struct PgLocked {
    conn: Option<PgConnection>,
    /// The session lock's key; `None` behind a transaction-mode pooler, where the lock is the
    /// transaction's and ends with it.
    key: Option<i64>,
    /// Whether the commit guard is installed (and must be disarmed before the runner's COMMIT).
    guarded: bool,
    /// The store's schema (a transaction opened again after a no-transaction revision re-reads
    /// it, as [`start`] does).
    schema: SchemaName,
    /// The `lock_timeout` of every upgrade transaction, once the runner set it.
    revision_lock_timeout: Option<std::time::Duration>,
}

impl PgLocked {
    /// The upgrade transaction [`start`] opened on `conn`, holding the session lock `key`
    /// (`None` behind a transaction-mode pooler) and the commit guard when `guarded`.
    pub(super) fn new(
        conn: PgConnection,
        key: Option<i64>,
        guarded: bool,
        schema: SchemaName,
    ) -> Self {
        Self {
            conn: Some(conn),
            key,
            guarded,
            schema,
            revision_lock_timeout: None,
        }
    }

    /// Applies the revision lock timeout, if set, to the open upgrade transaction.
    async fn apply_lock_timeout(&mut self) -> Result<()> {
        let Some(timeout) = self.revision_lock_timeout else {
            return Ok(());
        };
        let conn = self.conn()?;
        sqlx::query(sql::SET_LOCAL_LOCK_TIMEOUT)
            .bind(timeout.as_millis().max(1).to_string())
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    fn conn(&mut self) -> Result<&mut PgConnection> {
        self.conn
            .as_mut()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))
    }

    async fn finish(&mut self, statement: &str, disarm: bool) -> Result<()> {
        let key = self.key;
        let mut conn = self
            .conn
            .take()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))?;
        let disarmed = if disarm {
            sqlx::query(sql::DISARM)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(map)
        } else {
            Ok(())
        };
        // One simple-protocol message: when a revision statement already ended the transaction,
        // a transaction-mode pooler may hand each message of an extended-protocol exchange to
        // a different server session (SQLSTATE 26000); one `Query` message cannot be split.
        let ended = match disarmed {
            Ok(()) => conn
                .execute(sqlx::raw_sql(statement))
                .await
                .map(|_| ())
                .map_err(map),
            Err(e) => Err(e),
        };
        let unlocked = match key {
            Some(key) => sqlx::query(sql::UNLOCK)
                .bind(key)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(map),
            None => Ok(()),
        };
        // Closing the session would release the lock anyway; report the first real failure.
        let _ = conn.close().await;
        ended?;
        unlocked
    }
}

/// Why a no-transaction revision is refused behind a transaction-mode pooler.
pub(super) fn behind_a_pooler() -> Error {
    Error::invalid(
        "migration",
        "a no-transaction revision runs outside the upgrade transaction, and behind a \
         transaction-mode pooler (cairn_pooler=transaction) the migration lock ends with each \
         transaction: run this upgrade over a direct connection to the server",
    )
}

/// Drops index `name` (in `schema`, else the session's current schema) when it is invalid and
/// no session is building it: what an interrupted `CREATE INDEX CONCURRENTLY` leaves. An
/// invalid index some session is still building is an error saying which; a valid one, or
/// none, is left alone.
async fn drop_interrupted_build(
    conn: &mut PgConnection,
    schema: Option<&str>,
    name: &str,
) -> Result<()> {
    let found: Option<(String, bool, Option<i32>)> = sqlx::query_as(sql::INDEX_BUILD_STATE)
        .bind(name)
        .bind(schema)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map)?;
    match found {
        Some((_, false, Some(pid))) => Err(Error::invalid(
            "migration",
            format!(
                "index {} is invalid and still being built by server process {pid}; wait for \
                 it to end or cancel it (SELECT pg_cancel_backend({pid})), then run the upgrade \
                 again",
                cairn_core::escape_control(name)
            ),
        )),
        Some((qualified, false, None)) => {
            conn.execute(sqlx::raw_sql(&format!(
                "DROP INDEX CONCURRENTLY IF EXISTS {qualified}"
            )))
            .await
            .map_err(map)?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Drops what an interrupted `REINDEX … CONCURRENTLY` of index `name` (or of every index of
/// table `name`, with `table`) left: the invalid `…_ccnew` / `…_ccold` indexes no session is
/// building. One still being built is an error saying which process builds it.
async fn drop_interrupted_reindex(
    conn: &mut PgConnection,
    table: bool,
    schema: Option<&str>,
    name: &str,
) -> Result<()> {
    let left: Vec<(String, Option<i32>)> = sqlx::query_as(sql::REINDEX_LEFTOVERS)
        .bind(name)
        .bind(schema)
        .bind(table)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    for (qualified, building) in left {
        if let Some(pid) = building {
            return Err(Error::invalid(
                "migration",
                format!(
                    "index {} is invalid and still being built by server process {pid}; wait \
                     for it to end or cancel it (SELECT pg_cancel_backend({pid})), then run the \
                     upgrade again",
                    cairn_core::escape_control(&qualified)
                ),
            ));
        }
        conn.execute(sqlx::raw_sql(&format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {qualified}"
        )))
        .await
        .map_err(map)?;
    }
    Ok(())
}

#[async_trait]
impl LockedMigration for PgLocked {
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError> {
        read_state(self.conn()?, set).await
    }

    /// Runs one revision statement, then checks the upgrade transaction is still open: a
    /// statement that ended it (COMMIT, ROLLBACK, END, ABORT) fails the upgrade before anything
    /// else runs outside it. With the commit guard a COMMIT fails itself and takes the whole
    /// upgrade back; without it (a role without TEMP) what ran before it stays committed.
    async fn execute(&mut self, statement: &str) -> Result<()> {
        let conn = self.conn()?;
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        // Simple protocol, as in `finish`: after a statement that ended the transaction the
        // session is no longer pinned behind a transaction-mode pooler.
        let open: bool = conn
            .fetch_one(sqlx::raw_sql(sql::IS_OPEN))
            .await
            .and_then(|row| row.try_get(0))
            .map_err(map)?;
        if !open {
            return Err(Error::invalid(
                "migration statement",
                "it ended the upgrade transaction (COMMIT, ROLLBACK, END or ABORT); a revision \
                 must not manage transactions, the runner runs it in one",
            ));
        }
        Ok(())
    }

    fn runs_outside_transaction(&self) -> bool {
        true
    }

    fn outside_refusal(&self) -> Option<Error> {
        self.key.is_none().then(behind_a_pooler)
    }

    /// Commits the upgrade so far (the session's advisory lock stays held), runs each
    /// statement alone in autocommit, then opens the next upgrade transaction as [`start`]
    /// opens the first. Before a `CREATE INDEX CONCURRENTLY`, an invalid index of the same name
    /// that no session is building (what an interrupted build leaves) is dropped
    /// concurrently, so the upgrade that failed or was killed there can run again.
    async fn execute_outside(&mut self, statements: &[String]) -> Result<()> {
        if let Some(refused) = self.outside_refusal() {
            return Err(refused);
        }
        let (guarded, schema) = (self.guarded, self.schema.clone());
        let conn = self.conn()?;
        if guarded {
            sqlx::query(sql::DISARM)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        conn.execute(sqlx::raw_sql("COMMIT")).await.map_err(map)?;
        // A build whose client died (a killed `cairn migrate up`) stops within a second rather
        // than holding the migration lock to its end (Postgres 14 and later; older servers
        // refuse the setting, and then the build runs to its end).
        let _ = conn
            .execute(sqlx::raw_sql(sql::CLIENT_CHECK_INTERVAL))
            .await;
        for statement in statements {
            if let Some((in_schema, name)) = concurrent_index_name(statement) {
                drop_interrupted_build(conn, in_schema.as_deref(), &name).await?;
            }
            if let Some((table, in_schema, name)) = concurrent_reindex_target(statement) {
                drop_interrupted_reindex(conn, table, in_schema.as_deref(), &name).await?;
            }
            conn.execute(sqlx::raw_sql(statement)).await.map_err(map)?;
        }
        self.guarded = start(conn, &schema, false).await?;
        self.apply_lock_timeout().await
    }

    async fn set_revision_lock_timeout(&mut self, timeout: std::time::Duration) -> Result<()> {
        self.revision_lock_timeout = Some(timeout);
        self.apply_lock_timeout().await
    }

    /// SQLSTATE 55P03 (`lock_not_available`): the revision lock timeout ran out.
    fn gave_up_waiting_for_a_lock(&self, error: &Error) -> bool {
        matches!(error, Error::Retryable { detail, .. } if detail == "SQLSTATE 55P03")
    }

    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
    ) -> Result<(), MigrateError> {
        let sql = bookkeeping();
        let conn = self.conn()?;
        sqlx::query(sql.upsert_stamp)
            .bind(set)
            .bind(stamp)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        if let Some(lineage) = lineage {
            let (revs, sums): (Vec<String>, Vec<String>) = bk::lineage_rows(lineage)
                .into_iter()
                .map(|(_, revision, checksum)| (revision, checksum))
                .unzip();
            sqlx::query(sql.delete_lineage)
                .bind(set)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
            // Postgres's insert takes the whole lineage as two arrays, in order.
            debug_assert!(sql.insert_lineage_is_bulk);
            sqlx::query(sql.insert_lineage)
                .bind(set)
                .bind(revs)
                .bind(sums)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn store_down(
        &mut self,
        set: &str,
        revision: &str,
        statements: &[String],
    ) -> Result<(), MigrateError> {
        let sql = bookkeeping();
        let conn = self.conn()?;
        sqlx::query(sql.delete_down)
            .bind(set)
            .bind(revision)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        for (position, statement) in statements.iter().enumerate() {
            sqlx::query(sql.insert_down)
                .bind(set)
                .bind(revision)
                .bind(position as i32)
                .bind(statement)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn read_down(
        &mut self,
        set: &str,
        revision: &str,
    ) -> Result<Option<Vec<String>>, MigrateError> {
        let conn = self.conn()?;
        let rows: Vec<String> = sqlx::query_scalar(bookkeeping().read_down)
            .bind(set)
            .bind(revision)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        Ok((!rows.is_empty()).then_some(rows))
    }

    async fn read_fleet(&mut self) -> Result<Vec<FleetEntry>, MigrateError> {
        let conn = self.conn()?;
        let sql = fleet_sql();
        let exists: bool = sqlx::query_scalar(sql.has_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if let (true, Some(lock)) = (exists, sql.lock_for_gate) {
            // Held to the end of the migration transaction: a build registering meanwhile
            // waits, then finds the contract revision committed (see `FleetSql::lock_for_gate`).
            sqlx::query(lock)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(read_fleet(conn).await?)
    }

    async fn record_contract(
        &mut self,
        set: &str,
        revision: &str,
        at: Timestamp,
        forced: bool,
        blockers: &[Blocker],
    ) -> Result<(), MigrateError> {
        let sql = fleet_sql();
        let conn = self.conn()?;
        let exists: bool = sqlx::query_scalar(sql.has_contract_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if exists {
            let blockers: Vec<String> = blockers.iter().map(ToString::to_string).collect();
            sqlx::query(sql.record_contract)
                .bind(set)
                .bind(revision)
                .bind(at.as_unix_micros())
                .bind(i64::from(forced))
                .bind(blockers.join("\n"))
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), MigrateError> {
        let disarm = self.guarded;
        Ok(self.finish("COMMIT", disarm).await?)
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), MigrateError> {
        Ok(self.finish("ROLLBACK", false).await?)
    }
}
