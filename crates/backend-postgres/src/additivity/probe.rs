//! The lock check's measuring instruments: the tables that existed before the revision, each
//! with the probe's read and write; the probe session that tries them with a short lock
//! timeout; and the catalog reads (file nodes, indexes, scans, a session's locks) compared
//! around each statement.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cairn_migrate::additivity::LockMode;
use cairn_migrate::{MigrateError, BOOKKEEPING_TABLES};
use sqlx::PgConnection;

use super::checker::to_migrate;
use super::{lock_sql, sql};
use crate::config::SchemaName;

/// How long the probe waits for a lock before it counts as blocked.
pub(super) const PROBE_LOCK_TIMEOUT: Duration = Duration::from_millis(100);

/// SQLSTATE `lock_not_available`: a lock wait reached `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// A table that existed before the revision, with the probe's statements for it.
pub(super) struct Table {
    pub(super) oid: i64,
    pub(super) name: String,
    read: String,
    write: String,
}

/// What is compared around a statement on one table.
#[derive(PartialEq, Eq, Debug)]
pub(super) struct TableState {
    filenode: i64,
    indexes: Vec<String>,
    scans: i64,
}

impl TableState {
    /// Whether the table got a new file node since `before` (a partitioned table has none).
    pub(super) fn rewritten_since(&self, before: &TableState) -> bool {
        before.filenode != 0 && self.filenode != before.filenode
    }

    /// Whether an index of the table is new, or has a new file node, since `before`.
    pub(super) fn index_built_since(&self, before: &TableState) -> bool {
        self.indexes.iter().any(|i| !before.indexes.contains(i))
    }

    /// Whether a sequential scan was counted on the table since `before` (same transaction).
    pub(super) fn scanned_since(&self, before: &TableState) -> bool {
        self.scans > before.scans
    }
}

/// The tables of `schema` that existed before the revision (bookkeeping left out), in creation
/// order, with the probe's statements built on `conn` (whose `search_path` is the schema).
pub(super) async fn tables(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<Vec<Table>, MigrateError> {
    let bookkeeping: Vec<String> = BOOKKEEPING_TABLES.iter().map(|s| (*s).to_owned()).collect();
    let listed: Vec<(i64, String)> = sqlx::query_as(sql::TABLES)
        .bind(schema.as_str())
        .bind(&bookkeeping)
        .fetch_all(&mut *conn)
        .await
        .map_err(to_migrate)?;
    let mut out = Vec::with_capacity(listed.len());
    for (oid, name) in listed {
        let (read, write): (String, String) = sqlx::query_as(lock_sql::PROBE_STATEMENTS)
            .bind(oid)
            .fetch_one(&mut *conn)
            .await
            .map_err(to_migrate)?;
        out.push(Table {
            oid,
            name,
            read,
            write,
        });
    }
    Ok(out)
}

/// The state of `tables` as `conn` sees it (a table the session dropped is missing).
pub(super) async fn states(
    conn: &mut PgConnection,
    tables: &[Table],
) -> Result<BTreeMap<i64, TableState>, MigrateError> {
    let oids: Vec<i64> = tables.iter().map(|t| t.oid).collect();
    let rows: Vec<(i64, i64, Vec<String>, i64)> = sqlx::query_as(lock_sql::TABLE_STATE)
        .bind(&oids)
        .fetch_all(&mut *conn)
        .await
        .map_err(to_migrate)?;
    Ok(rows
        .into_iter()
        .map(|(oid, filenode, indexes, scans)| {
            (
                oid,
                TableState {
                    filenode,
                    indexes,
                    scans,
                },
            )
        })
        .collect())
}

/// The strongest lock session `pid` holds or waits for on each of `tables`, read on `conn`.
pub(super) async fn session_locks(
    conn: &mut PgConnection,
    pid: i32,
    tables: &[Table],
) -> Result<BTreeMap<i64, LockMode>, MigrateError> {
    let oids: Vec<i64> = tables.iter().map(|t| t.oid).collect();
    let rows: Vec<(i64, String)> = sqlx::query_as(lock_sql::SESSION_LOCKS)
        .bind(pid)
        .bind(&oids)
        .fetch_all(&mut *conn)
        .await
        .map_err(to_migrate)?;
    let mut out: BTreeMap<i64, LockMode> = BTreeMap::new();
    for (oid, mode) in rows {
        if let Some(mode) = LockMode::from_pg(&mode) {
            let strongest = out.entry(oid).or_insert(mode);
            *strongest = (*strongest).max(mode);
        }
    }
    Ok(out)
}

/// The session's backend pid.
pub(super) async fn backend_pid(conn: &mut PgConnection) -> Result<i32, MigrateError> {
    sqlx::query_scalar(lock_sql::BACKEND_PID)
        .fetch_one(conn)
        .await
        .map_err(to_migrate)
}

/// The probe session: it tries a table's read and write as live traffic would, giving up
/// after [`PROBE_LOCK_TIMEOUT`].
pub(super) struct Probe {
    pub(super) conn: PgConnection,
}

impl Probe {
    /// Makes `conn` (a session on the throwaway store) the probe.
    pub(super) async fn new(mut conn: PgConnection) -> Result<Self, MigrateError> {
        sqlx::query(lock_sql::PROBE_SESSION)
            .bind(PROBE_LOCK_TIMEOUT.as_millis().to_string())
            .execute(&mut conn)
            .await
            .map_err(to_migrate)?;
        Ok(Self { conn })
    }

    /// How long the read of `table` waited before it gave up; `None`: it ran.
    pub(super) async fn read(&mut self, table: &Table) -> Result<Option<Duration>, MigrateError> {
        self.attempt(&table.read.clone()).await
    }

    /// How long the write of `table` waited before it gave up; `None`: it ran. The write runs
    /// in a transaction that is rolled back.
    pub(super) async fn write(&mut self, table: &Table) -> Result<Option<Duration>, MigrateError> {
        self.exec(sql::BEGIN).await?;
        let blocked = self.attempt(&table.write.clone()).await;
        let ended = self.exec(sql::ROLLBACK).await;
        let blocked = blocked?;
        ended?;
        Ok(blocked)
    }

    /// Opens a transaction that holds a writer's lock on every one of `tables` until
    /// [`Probe::release`]: a concurrent index build waits for it before its first phase, with
    /// its own lock taken, so its lock can be measured while it runs.
    pub(super) async fn hold(&mut self, tables: &[Table]) -> Result<(), MigrateError> {
        self.exec(sql::BEGIN).await?;
        for t in tables {
            if self.attempt(&t.write.clone()).await?.is_some() {
                let _ = self.exec(sql::ROLLBACK).await;
                return Err(MigrateError::Store(cairn_core::Error::backend(
                    "postgres",
                    format!("the lock check could not lock {} for writing", t.name),
                )));
            }
        }
        Ok(())
    }

    /// Ends the transaction [`Probe::hold`] opened.
    pub(super) async fn release(&mut self) -> Result<(), MigrateError> {
        self.exec(sql::ROLLBACK).await
    }

    async fn attempt(&mut self, statement: &str) -> Result<Option<Duration>, MigrateError> {
        let started = Instant::now();
        match sqlx::query(statement)
            .persistent(false)
            .execute(&mut self.conn)
            .await
        {
            Ok(_) => Ok(None),
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                Ok(Some(started.elapsed()))
            }
            Err(e) => Err(to_migrate(e)),
        }
    }

    pub(super) async fn exec(&mut self, statement: &str) -> Result<(), MigrateError> {
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut self.conn)
            .await
            .map(|_| ())
            .map_err(to_migrate)
    }

    /// Whether session `pid` waits for a lock now.
    pub(super) async fn waiting(&mut self, pid: i32) -> Result<bool, MigrateError> {
        let waiting: Option<bool> = sqlx::query_scalar(lock_sql::WAITING)
            .bind(pid)
            .fetch_optional(&mut self.conn)
            .await
            .map_err(to_migrate)?;
        Ok(waiting.unwrap_or(false))
    }
}
