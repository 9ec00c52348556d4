//! The SQLite side of cairn-migrate's open protocol: stamp, lineage and down-SQL tables, the
//! lock (`BEGIN IMMEDIATE`) and the upgrade (or down) transaction; and the fleet registry
//! (`cairn_fleet`, `cairn_contract`), on a short-lived connection per call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::{Error, Result};
use cairn_migrate::bookkeeping::{self, BookkeepingSql, Tables};
use cairn_migrate::fleet::{self, FleetRow, FleetSql};
use cairn_migrate::{
    Blocker, FleetEntry, LineageEntry, LockedMigration, MigrateError, MigrationBackend, StoredState,
};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};

use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::error::map;
use crate::files;

/// Names of the runner's bookkeeping tables (defined in cairn-migrate, re-exported here for
/// callers that already use this name).
pub use cairn_migrate::BOOKKEEPING_TABLES;

/// The runner's bookkeeping statements, defined once in cairn-migrate for both backends.
fn sql() -> &'static BookkeepingSql {
    bookkeeping::sql(Dialect::Sqlite)
}

/// cairn-migrate's backend for one SQLite store file.
#[derive(Clone, Debug)]
pub struct SqliteMigrator {
    path: PathBuf,
    opts: SqliteOptions,
    /// The directory of a throwaway store of a baseline ([`MigrationBackend::scratch`]),
    /// which `discard` removes.
    throwaway: Option<PathBuf>,
}

impl SqliteMigrator {
    /// A migrator for the store file at `path`, opened with `opts`: the file is created safely
    /// by the first upgrade when missing (unless [`SqliteOptions::create_if_missing`] is off),
    /// and a file holding another application's tables is refused unless
    /// [`SqliteOptions::share_file_with_application`] is on. Looking at a store's state
    /// ([`MigrationBackend::read_state`]) writes nothing.
    pub fn new(path: impl AsRef<Path>, opts: SqliteOptions) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            opts,
            throwaway: None,
        }
    }
}

fn read_state(conn: &Connection, set: &str) -> Result<StoredState> {
    let sql = sql();
    let exists = |q: &str| -> Result<bool> {
        conn.query_row(q, [], |r| r.get::<_, i64>(0))
            .map(|n| n != 0)
            .map_err(map)
    };
    let tables = Tables {
        stamp: exists(sql.has_stamp_table)?,
        lineage: exists(sql.has_lineage_table)?,
    };
    if tables.none() {
        return Ok(StoredState::default());
    }
    let stamp: Option<String> = if tables.stamp {
        conn.query_row(sql.read_stamp, params![set], |r| r.get(0))
            .optional()
            .map_err(map)?
    } else {
        None
    };
    let rows = if tables.lineage {
        let mut stmt = conn.prepare(sql.read_lineage).map_err(map)?;
        let rows = stmt
            .query_map(params![set], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(map)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(map)?
    } else {
        Vec::new()
    };
    bookkeeping::stored_state_of(tables, stamp, rows).map_err(Error::from)
}

fn store_err(e: Error) -> MigrateError {
    MigrateError::Store(e)
}

/// The fleet registry's statements, defined once in cairn-migrate for both backends.
fn fleet_sql() -> &'static FleetSql {
    fleet::sql(Dialect::Sqlite)
}

fn table_exists(conn: &Connection, query: &str) -> Result<bool> {
    conn.query_row(query, [], |r| r.get::<_, i64>(0))
        .map(|n| n != 0)
        .map_err(map)
}

/// Every registry row; none when the store has no registry table.
fn read_fleet(conn: &Connection) -> Result<Vec<FleetEntry>> {
    let sql = fleet_sql();
    if !table_exists(conn, sql.has_table)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(sql.list).map_err(map)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(FleetRow {
                instance: r.get(0)?,
                set: r.get(1)?,
                revision: r.get(2)?,
                build: r.get(3)?,
                host: r.get(4)?,
                pid: r.get(5)?,
                started_at_us: r.get(6)?,
                last_seen_us: r.get(7)?,
            })
        })
        .map_err(map)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(map)?;
    Ok(fleet::entries_from_rows(rows))
}

fn no_registry() -> Error {
    Error::NotFound {
        what: "the fleet registry (cairn revision 0004_fleet): open the store with this build to add it"
            .into(),
    }
}

impl SqliteMigrator {
    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on a new connection to the existing store
    /// (the registry's writes: small, and at most one per heartbeat interval).
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T, MigrateError> {
        let (path, opts) = (self.path.clone(), self.opts.clone());
        blocking(move || {
            files::check_path(&path)?;
            let conn = files::connect_unconfigured(&path, &opts)?;
            conn.execute_batch("BEGIN IMMEDIATE").map_err(map)?;
            match f(&conn) {
                Ok(out) => {
                    conn.execute_batch("COMMIT").map_err(map)?;
                    Ok(out)
                }
                // Closing the connection rolls back what the failed step left open.
                Err(e) => Err(e),
            }
        })
        .await
        .map_err(store_err)
    }

    /// Runs `f` on a read-only connection in one read transaction; `default` when the store
    /// file does not exist.
    async fn read<T: Send + 'static>(
        &self,
        default: T,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T, MigrateError> {
        let (path, opts) = (self.path.clone(), self.opts.clone());
        blocking(move || {
            files::check_path(&path)?;
            if !files::exists(&path)? {
                return Ok(default);
            }
            let conn = files::connect_read_only(&path, &opts)?;
            conn.execute_batch("BEGIN").map_err(map)?;
            let out = f(&conn);
            conn.execute_batch("ROLLBACK").map_err(map)?;
            out
        })
        .await
        .map_err(store_err)
    }
}

#[async_trait]
impl MigrationBackend for SqliteMigrator {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError> {
        let (path, opts, set) = (self.path.clone(), self.opts.clone(), set.to_owned());
        blocking(move || {
            files::check_path(&path)?;
            // The look without the lock writes nothing: a missing file reads as a new store
            // (creating it is the locked step's business), and an existing one is read through
            // a read-only connection that leaves its journal mode alone.
            if !files::exists(&path)? {
                return Ok(StoredState::default());
            }
            let conn = files::connect_read_only(&path, &opts)?;
            files::check_not_foreign(&conn, &opts)
                .map_err(|e| files::open_error_mapped(&path, e))?;
            // A deferred read transaction: a consistent snapshot, no lock, no write.
            conn.execute_batch("BEGIN").map_err(map)?;
            let state = read_state(&conn, &set);
            conn.execute_batch("ROLLBACK").map_err(map)?;
            state
        })
        .await
        .map_err(store_err)
    }

    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError> {
        let (path, opts) = (self.path.clone(), self.opts.clone());
        let conn = blocking(move || {
            // Checked before the switch to WAL, which would already write to the file.
            let conn = files::admit(&path, &opts.clone().busy_timeout(timeout))?;
            files::configure(&path, &conn)?;
            conn.execute_batch("BEGIN IMMEDIATE").map_err(map)?;
            conn.busy_timeout(opts.busy_timeout).map_err(map)?;
            for ddl in bookkeeping::ddl(Dialect::Sqlite) {
                conn.execute_batch(ddl).map_err(map)?;
            }
            Ok(conn)
        })
        .await
        .map_err(|e| match e {
            Error::Retryable { .. } => MigrateError::LockTimeout {
                waited_ms: timeout.as_millis() as u64,
            },
            other => MigrateError::Store(other),
        })?;
        Ok(Box::new(SqliteLocked { conn: Some(conn) }))
    }

    async fn register(
        &self,
        entry: &FleetEntry,
        prune_before: Timestamp,
    ) -> Result<(), MigrateError> {
        let entry = entry.clone();
        self.write(move |c| {
            let sql = fleet_sql();
            if !table_exists(c, sql.has_table)? {
                return Err(no_registry());
            }
            c.execute(sql.prune, params![prune_before.as_unix_micros()])
                .map_err(map)?;
            c.execute(sql.delete_instance, params![entry.instance])
                .map_err(map)?;
            for (set, revision) in entry.rows() {
                c.execute(
                    sql.insert,
                    params![
                        entry.instance,
                        set,
                        revision,
                        entry.build,
                        entry.host,
                        i64::from(entry.pid),
                        entry.started_at.as_unix_micros(),
                        entry.last_seen.as_unix_micros()
                    ],
                )
                .map_err(map)?;
            }
            Ok(())
        })
        .await
    }

    async fn heartbeat(&self, instance: &str, now: Timestamp) -> Result<(), MigrateError> {
        let instance = instance.to_owned();
        self.write(move |c| {
            c.execute(
                fleet_sql().heartbeat,
                params![now.as_unix_micros(), instance],
            )
            .map_err(map)?;
            Ok(())
        })
        .await
    }

    async fn deregister(&self, instance: &str) -> Result<(), MigrateError> {
        let instance = instance.to_owned();
        self.write(move |c| {
            if table_exists(c, fleet_sql().has_table)? {
                c.execute(fleet_sql().delete_instance, params![instance])
                    .map_err(map)?;
            }
            Ok(())
        })
        .await
    }

    async fn read_fleet(&self) -> Result<Vec<FleetEntry>, MigrateError> {
        self.read(Vec::new(), read_fleet).await
    }

    async fn read_contracts(&self, set: &str) -> Result<Vec<String>, MigrateError> {
        let set = set.to_owned();
        self.read(Vec::new(), move |c| read_contracts(c, &set))
            .await
    }

    async fn shape(&self) -> Result<cairn_migrate::baseline::SchemaShape, MigrateError> {
        self.read(Default::default(), crate::shape::shape).await
    }

    /// A new store file in a new directory of this machine's temporary directory.
    async fn scratch(&self) -> Result<Box<dyn MigrationBackend>, MigrateError> {
        let dir = std::env::temp_dir().join(cairn_core::scratch_name("cairn_baseline"));
        std::fs::create_dir(&dir).map_err(|e| {
            store_err(Error::backend(
                "sqlite",
                format!("cannot make a throwaway directory: {e}"),
            ))
        })?;
        let opts = self.opts.clone().create_if_missing(true);
        let mut scratch = SqliteMigrator::new(dir.join("baseline.db"), opts);
        scratch.opts.share_file_with_application = false;
        scratch.throwaway = Some(dir);
        Ok(Box::new(scratch))
    }

    /// Removes the directory of a throwaway store [`MigrationBackend::scratch`] made.
    async fn discard(&self) -> Result<(), MigrateError> {
        match &self.throwaway {
            Some(dir) => std::fs::remove_dir_all(dir).map_err(|e| {
                store_err(Error::backend(
                    "sqlite",
                    format!("cannot remove a throwaway directory: {e}"),
                ))
            }),
            None => Ok(()),
        }
    }
}

/// The contract revisions recorded for `set`; none without the contract table.
fn read_contracts(conn: &Connection, set: &str) -> Result<Vec<String>> {
    let sql = fleet_sql();
    if !table_exists(conn, sql.has_contract_table)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(sql.contracts_of_set).map_err(map)?;
    let rows = stmt
        .query_map(params![set], |r| r.get::<_, String>(0))
        .map_err(map)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(map)?;
    Ok(rows)
}

/// Refuses, as SQLite prepares each statement, anything that would begin, commit or roll back
/// a transaction: a revision runs inside the runner's upgrade transaction, and a `COMMIT` in it
/// would make half an upgrade durable.
fn refuse_transaction_control(ctx: AuthContext<'_>) -> Authorization {
    match ctx.action {
        AuthAction::Transaction { .. } => Authorization::Deny,
        _ => Authorization::Allow,
    }
}

/// Runs one statement of a revision inside the upgrade transaction, which it must leave open.
fn execute_revision_statement(conn: &Connection, statement: &str) -> Result<()> {
    conn.authorizer(Some(refuse_transaction_control))
        .map_err(map)?;
    let ran = conn.execute_batch(statement);
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>)
        .map_err(map)?;
    ran.map_err(|e| match e.sqlite_error_code() {
        Some(ErrorCode::AuthorizationForStatementDenied) => Error::invalid(
            "migration revision",
            "a revision may not BEGIN, COMMIT, END or ROLLBACK a transaction: the runner \
             applies it inside its own; remove the statement (nothing was changed)",
        ),
        _ => map(e),
    })?;
    // Transaction control is refused above; this holds the invariant whatever else might end
    // a transaction.
    if conn.is_autocommit() {
        return Err(Error::backend(
            "sqlite",
            "the revision ended the migration transaction",
        ));
    }
    Ok(())
}

/// An open `BEGIN IMMEDIATE` upgrade transaction. Dropping it rolls back (SQLite rolls back an
/// open transaction when its connection closes).
struct SqliteLocked {
    conn: Option<Connection>,
}

impl SqliteLocked {
    async fn run<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self
            .conn
            .take()
            .ok_or_else(|| Error::backend("sqlite", "migration transaction already finished"))?;
        let (conn, out) = blocking(move || {
            let out = f(&conn);
            Ok((conn, out))
        })
        .await?;
        self.conn = Some(conn);
        out
    }
}

#[async_trait]
impl LockedMigration for SqliteLocked {
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError> {
        let set = set.to_owned();
        self.run(move |c| read_state(c, &set))
            .await
            .map_err(store_err)
    }

    async fn execute(&mut self, statement: &str) -> Result<()> {
        let statement = statement.to_owned();
        self.run(move |c| execute_revision_statement(c, &statement))
            .await
    }

    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
    ) -> Result<(), MigrateError> {
        let (set, stamp) = (set.to_owned(), stamp.to_owned());
        let lineage = lineage.map(<[LineageEntry]>::to_vec);
        self.run(move |c| {
            let sql = sql();
            c.execute(sql.upsert_stamp, params![set, stamp])
                .map_err(map)?;
            if let Some(lineage) = lineage {
                c.execute(sql.delete_lineage, params![set]).map_err(map)?;
                // SQLite's statement inserts one row per execution (`insert_lineage_is_bulk`
                // is false for this dialect).
                for (position, revision, checksum) in bookkeeping::lineage_rows(&lineage) {
                    c.execute(
                        sql.insert_lineage,
                        params![set, position, revision, checksum],
                    )
                    .map_err(map)?;
                }
            }
            Ok(())
        })
        .await
        .map_err(store_err)
    }

    async fn store_down(
        &mut self,
        set: &str,
        revision: &str,
        statements: &[String],
    ) -> Result<(), MigrateError> {
        let (set, revision) = (set.to_owned(), revision.to_owned());
        let statements = statements.to_vec();
        self.run(move |c| {
            let sql = sql();
            c.execute(sql.delete_down, params![set, revision])
                .map_err(map)?;
            for (position, statement) in statements.iter().enumerate() {
                c.execute(
                    sql.insert_down,
                    params![set, revision, position as i64, statement],
                )
                .map_err(map)?;
            }
            Ok(())
        })
        .await
        .map_err(store_err)
    }

    async fn read_down(
        &mut self,
        set: &str,
        revision: &str,
    ) -> Result<Option<Vec<String>>, MigrateError> {
        let (set, revision) = (set.to_owned(), revision.to_owned());
        self.run(move |c| {
            let mut stmt = c.prepare(sql().read_down).map_err(map)?;
            let rows = stmt
                .query_map(params![set, revision], |r| r.get::<_, String>(0))
                .map_err(map)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(map)?;
            Ok((!rows.is_empty()).then_some(rows))
        })
        .await
        .map_err(store_err)
    }

    async fn read_fleet(&mut self) -> Result<Vec<FleetEntry>, MigrateError> {
        self.run(read_fleet).await.map_err(store_err)
    }

    async fn record_contract(
        &mut self,
        set: &str,
        revision: &str,
        at: Timestamp,
        forced: bool,
        blockers: &[Blocker],
    ) -> Result<(), MigrateError> {
        let (set, revision) = (set.to_owned(), revision.to_owned());
        let blockers: Vec<String> = blockers.iter().map(ToString::to_string).collect();
        self.run(move |c| {
            let sql = fleet_sql();
            if table_exists(c, sql.has_contract_table)? {
                c.execute(
                    sql.record_contract,
                    params![
                        set,
                        revision,
                        at.as_unix_micros(),
                        i64::from(forced),
                        blockers.join("\n")
                    ],
                )
                .map_err(map)?;
            }
            Ok(())
        })
        .await
        .map_err(store_err)
    }

    async fn commit(mut self: Box<Self>) -> Result<(), MigrateError> {
        self.run(|c| c.execute_batch("COMMIT").map_err(map))
            .await
            .map_err(store_err)
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), MigrateError> {
        self.run(|c| c.execute_batch("ROLLBACK").map_err(map))
            .await
            .map_err(store_err)
    }
}
