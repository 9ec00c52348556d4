//! The SQLite side of cairn-migrate's open protocol: stamp and lineage tables, the lock
//! (`BEGIN IMMEDIATE`) and the upgrade transaction.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{Error, Result};
use cairn_migrate::{
    Checksum, LineageEntry, LockedMigration, MigrateError, MigrationBackend, StoredState,
};
use rusqlite::{params, Connection, OptionalExtension};

use crate::config::SqliteOptions;
use crate::db::blocking;
use crate::error::map;
use crate::files;
use crate::store::check_not_foreign;

mod sql {
    pub(super) const HAS_STAMP_TABLE: &str =
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'cairn_migration_stamp'";
    pub(super) const CREATE_STAMP: &str = "CREATE TABLE IF NOT EXISTS cairn_migration_stamp (\
        set_name TEXT NOT NULL PRIMARY KEY, revision TEXT NOT NULL)";
    pub(super) const CREATE_LINEAGE: &str = "CREATE TABLE IF NOT EXISTS cairn_migration_lineage (\
        set_name TEXT NOT NULL, position INTEGER NOT NULL, revision TEXT NOT NULL, checksum TEXT NOT NULL, \
        PRIMARY KEY (set_name, position))";
    pub(super) const READ_STAMP: &str =
        "SELECT revision FROM cairn_migration_stamp WHERE set_name = ?1";
    pub(super) const READ_LINEAGE: &str =
        "SELECT revision, checksum FROM cairn_migration_lineage WHERE set_name = ?1 ORDER BY position";
    pub(super) const UPSERT_STAMP: &str =
        "INSERT INTO cairn_migration_stamp (set_name, revision) VALUES (?1, ?2) \
        ON CONFLICT (set_name) DO UPDATE SET revision = excluded.revision";
    pub(super) const DELETE_LINEAGE: &str =
        "DELETE FROM cairn_migration_lineage WHERE set_name = ?1";
    pub(super) const INSERT_LINEAGE: &str =
        "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) VALUES (?1, ?2, ?3, ?4)";
}

/// Names of the runner's bookkeeping tables; schema comparisons leave them out.
pub const BOOKKEEPING_TABLES: [&str; 2] = ["cairn_migration_stamp", "cairn_migration_lineage"];

/// cairn-migrate's backend for one SQLite store file.
#[derive(Clone, Debug)]
pub struct SqliteMigrator {
    path: PathBuf,
    opts: SqliteOptions,
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
        }
    }
}

fn read_state(conn: &Connection, set: &str) -> Result<StoredState> {
    let has: i64 = conn
        .query_row(sql::HAS_STAMP_TABLE, [], |r| r.get(0))
        .map_err(map)?;
    if has == 0 {
        return Ok(StoredState::default());
    }
    let stamp: Option<String> = conn
        .query_row(sql::READ_STAMP, params![set], |r| r.get(0))
        .optional()
        .map_err(map)?;
    let mut stmt = conn.prepare(sql::READ_LINEAGE).map_err(map)?;
    let rows = stmt
        .query_map(params![set], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(map)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(map)?;
    let mut lineage = Vec::with_capacity(rows.len());
    for (revision, checksum) in rows {
        let checksum = Checksum::from_hex(&checksum).map_err(|e| Error::corrupt(e.to_string()))?;
        lineage.push(LineageEntry { revision, checksum });
    }
    Ok(StoredState {
        stamp,
        lineage: (!lineage.is_empty()).then_some(lineage),
    })
}

fn store_err(e: Error) -> MigrateError {
    MigrateError::Store(e)
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
            check_not_foreign(&conn, &opts).map_err(|e| files::open_error_mapped(&path, e))?;
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
            files::prepare(&path, &opts)?;
            let conn = files::connect_unconfigured(&path, &opts.clone().busy_timeout(timeout))?;
            // Checked before the switch to WAL, which would already write to the file.
            check_not_foreign(&conn, &opts).map_err(|e| files::open_error_mapped(&path, e))?;
            files::configure(&path, &conn)?;
            conn.execute_batch("BEGIN IMMEDIATE").map_err(map)?;
            conn.busy_timeout(opts.busy_timeout).map_err(map)?;
            conn.execute_batch(sql::CREATE_STAMP).map_err(map)?;
            conn.execute_batch(sql::CREATE_LINEAGE).map_err(map)?;
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
        self.run(move |c| c.execute_batch(&statement).map_err(map))
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
            c.execute(sql::UPSERT_STAMP, params![set, stamp])
                .map_err(map)?;
            if let Some(lineage) = lineage {
                c.execute(sql::DELETE_LINEAGE, params![set]).map_err(map)?;
                for (i, e) in lineage.iter().enumerate() {
                    c.execute(
                        sql::INSERT_LINEAGE,
                        params![set, i as i64, e.revision, e.checksum.to_hex()],
                    )
                    .map_err(map)?;
                }
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
