//! The Postgres side of cairn-migrate's open protocol: stamp and lineage tables in the store's
//! schema, a session advisory lock taken by polling `pg_try_advisory_lock` with backoff, and
//! the upgrade transaction on one dedicated connection.

use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::{Error, Result};
use cairn_migrate::{
    Checksum, LineageEntry, LockedMigration, MigrateError, MigrationBackend, StoredState,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Row};

use crate::config::{PgOptions, SchemaName};
use crate::error::map_sqlx;
use crate::sql::{create_schema, SESSION_SETUP, SET_LOCAL_SEARCH_PATH};

mod sql {
    pub(super) const HAS_STAMP_TABLE: &str =
        "SELECT to_regclass('cairn_migration_stamp') IS NOT NULL";
    pub(super) const CREATE_STAMP: &str = "CREATE TABLE IF NOT EXISTS cairn_migration_stamp (\
        set_name text NOT NULL PRIMARY KEY, revision text NOT NULL)";
    pub(super) const CREATE_LINEAGE: &str = "CREATE TABLE IF NOT EXISTS cairn_migration_lineage (\
        set_name text NOT NULL, position integer NOT NULL, revision text NOT NULL, checksum text NOT NULL, \
        PRIMARY KEY (set_name, position))";
    pub(super) const READ_STAMP: &str =
        "SELECT revision FROM cairn_migration_stamp WHERE set_name = $1";
    pub(super) const READ_LINEAGE: &str =
        "SELECT revision, checksum FROM cairn_migration_lineage WHERE set_name = $1 ORDER BY position";
    pub(super) const UPSERT_STAMP: &str =
        "INSERT INTO cairn_migration_stamp (set_name, revision) VALUES ($1, $2) \
        ON CONFLICT (set_name) DO UPDATE SET revision = excluded.revision";
    pub(super) const DELETE_LINEAGE: &str =
        "DELETE FROM cairn_migration_lineage WHERE set_name = $1";
    pub(super) const INSERT_LINEAGE: &str = "INSERT INTO cairn_migration_lineage (set_name, position, revision, checksum) \
        SELECT $1, ord::integer - 1, rev, sum FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS l(rev, sum, ord)";
    pub(super) const TRY_LOCK: &str = "SELECT pg_try_advisory_lock($1)";
    pub(super) const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";
}

/// Names of the runner's bookkeeping tables; schema comparisons leave them out.
pub const BOOKKEEPING_TABLES: [&str; 2] = ["cairn_migration_stamp", "cairn_migration_lineage"];

/// cairn-migrate's backend for one Postgres store (one schema).
#[derive(Clone, Debug)]
pub struct PgMigrator {
    opts: PgOptions,
    schema: SchemaName,
}

impl PgMigrator {
    /// A migrator for the store `opts` names.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a schema name outside `[a-z_][a-z0-9_]{0,62}`.
    pub fn new(opts: PgOptions) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        Ok(Self { opts, schema })
    }

    /// The advisory-lock key that serializes migrations of this store (its schema).
    pub fn lock_key(&self) -> i64 {
        let mut h = blake3::Hasher::new_derive_key("cairn 2026-11 postgres migration lock v1");
        h.update(self.schema.as_str().as_bytes());
        let mut out = [0u8; 8];
        out.copy_from_slice(&h.finalize().as_bytes()[..8]);
        i64::from_le_bytes(out)
    }

    async fn connection(&self) -> Result<PgConnection> {
        let options = PgConnectOptions::from_str(&self.opts.url).map_err(map_sqlx)?;
        let mut conn = PgConnection::connect_with(&options)
            .await
            .map_err(map_sqlx)?;
        sqlx::query(SESSION_SETUP)
            .bind(self.schema.as_str())
            .bind(self.opts.lock_timeout.as_millis().max(1).to_string())
            .execute(&mut conn)
            .await
            .map_err(map_sqlx)?;
        Ok(conn)
    }
}

async fn read_state(conn: &mut PgConnection, set: &str) -> Result<StoredState> {
    let has: bool = sqlx::query_scalar(sql::HAS_STAMP_TABLE)
        .fetch_one(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    if !has {
        return Ok(StoredState::default());
    }
    let stamp: Option<String> = sqlx::query_scalar(sql::READ_STAMP)
        .bind(set)
        .fetch_optional(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    let rows = sqlx::query(sql::READ_LINEAGE)
        .bind(set)
        .fetch_all(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    let mut lineage = Vec::with_capacity(rows.len());
    for row in rows {
        let revision: String = row.try_get(0).map_err(map_sqlx)?;
        let checksum: String = row.try_get(1).map_err(map_sqlx)?;
        let checksum = Checksum::from_hex(&checksum).map_err(|e| Error::corrupt(e.to_string()))?;
        lineage.push(LineageEntry { revision, checksum });
    }
    Ok(StoredState {
        stamp,
        lineage: (!lineage.is_empty()).then_some(lineage),
    })
}

#[async_trait]
impl MigrationBackend for PgMigrator {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError> {
        let mut conn = self.connection().await?;
        let state = read_state(&mut conn, set).await;
        // Closing is best effort: the state is already read and nothing was written.
        let _ = conn.close().await;
        Ok(state?)
    }

    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError> {
        let mut conn = self.connection().await?;
        let key = self.lock_key();
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        // Polling rather than a blocking pg_advisory_lock: the wait stays bounded by `timeout`
        // and never holds a server backend stuck in a lock queue.
        loop {
            let got: bool = sqlx::query_scalar(sql::TRY_LOCK)
                .bind(key)
                .fetch_one(&mut conn)
                .await
                .map_err(map_sqlx)?;
            if got {
                break;
            }
            if started.elapsed() >= timeout {
                let _ = conn.close().await;
                return Err(MigrateError::LockTimeout {
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            tokio::time::sleep(pause.min(timeout.saturating_sub(started.elapsed()))).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        if let Err(e) = start(&mut conn, &self.schema).await {
            let _ = sqlx::query(sql::UNLOCK).bind(key).execute(&mut conn).await;
            let _ = conn.close().await;
            return Err(e.into());
        }
        let locked = PgLocked {
            conn: Some(conn),
            key,
        };
        Ok(Box::new(locked))
    }
}

/// Opens the upgrade transaction: creates the schema and the bookkeeping tables when missing.
async fn start(conn: &mut PgConnection, schema: &SchemaName) -> Result<()> {
    sqlx::query("BEGIN")
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    sqlx::query(&create_schema(schema))
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    // The session's search_path named the schema before it existed: re-read it now.
    sqlx::query(SET_LOCAL_SEARCH_PATH)
        .bind(schema.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    sqlx::query(sql::CREATE_STAMP)
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    sqlx::query(sql::CREATE_LINEAGE)
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map_sqlx)?;
    Ok(())
}

/// An open upgrade transaction holding the session advisory lock on a dedicated connection.
/// Dropping it closes the connection, which rolls back and releases the lock.
struct PgLocked {
    conn: Option<PgConnection>,
    key: i64,
}

impl PgLocked {
    fn conn(&mut self) -> Result<&mut PgConnection> {
        self.conn
            .as_mut()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))
    }

    async fn finish(&mut self, statement: &str) -> Result<()> {
        let key = self.key;
        let mut conn = self
            .conn
            .take()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))?;
        let ended = sqlx::query(statement)
            .persistent(false)
            .execute(&mut conn)
            .await
            .map_err(map_sqlx);
        let unlocked = sqlx::query(sql::UNLOCK)
            .bind(key)
            .execute(&mut conn)
            .await
            .map_err(map_sqlx);
        // Closing the session would release the lock anyway; report the first real failure.
        let _ = conn.close().await;
        ended?;
        unlocked.map(|_| ())
    }
}

#[async_trait]
impl LockedMigration for PgLocked {
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError> {
        Ok(read_state(self.conn()?, set).await?)
    }

    async fn execute(&mut self, statement: &str) -> Result<()> {
        sqlx::query(statement)
            .persistent(false)
            .execute(self.conn()?)
            .await
            .map_err(map_sqlx)?;
        Ok(())
    }

    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
    ) -> Result<(), MigrateError> {
        let conn = self.conn()?;
        sqlx::query(sql::UPSERT_STAMP)
            .bind(set)
            .bind(stamp)
            .execute(&mut *conn)
            .await
            .map_err(map_sqlx)?;
        if let Some(lineage) = lineage {
            let revs: Vec<String> = lineage.iter().map(|e| e.revision.clone()).collect();
            let sums: Vec<String> = lineage.iter().map(|e| e.checksum.to_hex()).collect();
            sqlx::query(sql::DELETE_LINEAGE)
                .bind(set)
                .execute(&mut *conn)
                .await
                .map_err(map_sqlx)?;
            sqlx::query(sql::INSERT_LINEAGE)
                .bind(set)
                .bind(revs)
                .bind(sums)
                .execute(&mut *conn)
                .await
                .map_err(map_sqlx)?;
        }
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), MigrateError> {
        Ok(self.finish("COMMIT").await?)
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), MigrateError> {
        Ok(self.finish("ROLLBACK").await?)
    }
}
