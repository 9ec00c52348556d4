//! The Postgres side of cairn-migrate's open protocol: stamp and lineage tables in the store's
//! schema, a session advisory lock taken by polling `pg_try_advisory_lock` with backoff, and
//! the upgrade transaction on one dedicated connection; and the fleet registry (`cairn_fleet`,
//! `cairn_contract`). A migrator built from an open store ([`PgMigrator::from_store`]) reads
//! and registers on the store's pooled connections (a fleet heartbeat opens no connection); one
//! built from options alone ([`PgMigrator::new`], for opening a store and for operator tools)
//! uses a short-lived connection per call.

mod bookkeeping;
mod locked;
mod shape;
mod sql;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
#[cfg(doc)]
use cairn_core::Error;
use cairn_core::{key64, Result};
use cairn_migrate::{FleetEntry, LockedMigration, MigrateError, MigrationBackend, StoredState};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use bookkeeping::{fleet_sql, read_contracts, read_fleet, read_state, register};
use locked::{start, PgLocked};

use crate::config::{PgOptions, SchemaName};
use crate::error::map;
use crate::sql::SESSION_SETUP;

/// The key-derivation context of the migration lock (shared by every build: changing it lets
/// two builds migrate one store at once).
const MIGRATION_LOCK_CONTEXT: &str = "cairn 2026-11 postgres migration lock v1";

/// cairn-migrate's backend for one Postgres store (one schema): cairn's own set and an
/// application's sets alike (each set keeps its own stamp and lineage rows).
///
/// Built with [`PgMigrator::new`], it connects as the options say ([`PgOptions::new`] or
/// [`PgOptions::from_pool`]), one short-lived connection per look; built with
/// [`PgMigrator::from_store`], each look (stamp and lineage reads, fleet registration,
/// heartbeat, deregistration) takes one of the store's pooled connections. The upgrade
/// transaction always runs on a dedicated connection, closed when it ends (it holds a session
/// lock and temporary objects that must not go back to a pool). The schema is created
/// only when it is missing, so a role that owns its schema but has no CREATE on the database
/// can open, upgrade and repair; with [`PgOptions::create_if_missing`] `false`, a missing
/// schema is refused with [`Error::NotFound`] instead.
pub struct PgMigrator {
    opts: PgOptions,
    schema: SchemaName,
    /// The open store's pool the looks run on; `None`: a connection of their own.
    pool: Option<PgPool>,
    /// A throwaway schema of a baseline ([`MigrationBackend::scratch`]), which `discard` drops.
    throwaway: bool,
}

/// The connection one look runs on: pooled (returned when done) or its own (closed). Behind a
/// transaction-mode pooler (`true`), its checkout transaction is committed first, so a
/// heartbeat or a deregistration is durable when the look ends.
enum Look {
    Pooled(PoolConnection<Postgres>, bool),
    Own(PgConnection, bool),
}

impl Look {
    fn conn(&mut self) -> &mut PgConnection {
        match self {
            Look::Pooled(c, _) => c,
            Look::Own(c, _) => c,
        }
    }

    /// Gives the connection back: to the pool, or closed (best effort: what the look read or
    /// wrote is settled already).
    async fn done(self) {
        match self {
            Look::Own(mut c, pooled) => {
                if pooled {
                    let _ = crate::pooler::end(&mut c).await;
                }
                let _ = c.close().await;
            }
            Look::Pooled(mut c, true) => {
                let _ = crate::pooler::end(&mut c).await;
            }
            Look::Pooled(_, false) => {}
        }
    }
}

impl PgMigrator {
    /// A migrator for the store `opts` names, on connections of its own (opening a store,
    /// operator tools without an open store). Nothing is connected until the runner looks.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a schema name outside `[a-z_][a-z0-9_]{0,62}`.
    pub fn new(opts: PgOptions) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        Ok(Self {
            opts,
            schema,
            pool: None,
            throwaway: false,
        })
    }

    /// A migrator for the open `store` that looks through the store's pool: the application
    /// sets' opens and the fleet registry (registration, every heartbeat, deregistration) take
    /// a pooled connection instead of opening one.
    pub fn from_store(store: &crate::PgStore) -> Self {
        Self {
            opts: store.options().clone(),
            schema: store.schema().clone(),
            pool: Some(store.pool().clone()),
            throwaway: false,
        }
    }

    /// The advisory-lock key that serializes migrations of this store (its schema).
    pub fn lock_key(&self) -> i64 {
        key64(MIGRATION_LOCK_CONTEXT, &[self.schema.as_str().as_bytes()])
    }

    /// Whether the store is behind a transaction-mode pooler (see `crate::pooler`).
    fn pooled(&self) -> Result<bool> {
        Ok(self.opts.pooler_mode()? == crate::pooler::Pooler::Transaction)
    }

    async fn connection(&self) -> Result<PgConnection> {
        let options = self.opts.connect_options()?;
        if self.pooled()? {
            // One checkout transaction for the connection's life (see `crate::pooler`).
            let begin = crate::pooler::begin_sql(
                self.schema.as_str(),
                &self.opts.lock_timeout.as_millis().max(1).to_string(),
            );
            let options = options.statement_cache_capacity(0);
            return tokio::time::timeout(self.opts.acquire_timeout, async {
                let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
                crate::pooler::begin(&mut conn, &begin).await.map_err(map)?;
                Ok(conn)
            })
            .await
            .unwrap_or_else(|_| Err(crate::error::connect_timed_out()));
        }
        // Bounded by the acquire timeout: a server that accepts the connection but never
        // answers fails the look with `Error::Unavailable` instead of hanging it.
        tokio::time::timeout(self.opts.acquire_timeout, async {
            let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
            sqlx::query(SESSION_SETUP)
                .bind(self.schema.as_str())
                .bind(self.opts.lock_timeout.as_millis().max(1).to_string())
                .execute(&mut conn)
                .await
                .map_err(map)?;
            Ok(conn)
        })
        .await
        .unwrap_or_else(|_| Err(crate::error::connect_timed_out()))
    }

    /// A connection for one look: the store's pooled one, or a new one.
    async fn look(&self) -> Result<Look> {
        match &self.pool {
            Some(pool) => Ok(Look::Pooled(
                pool.acquire().await.map_err(map)?,
                self.pooled()?,
            )),
            None => Ok(Look::Own(self.connection().await?, self.pooled()?)),
        }
    }
}

#[async_trait]
impl MigrationBackend for PgMigrator {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError> {
        let mut look = self.look().await?;
        let state = read_state(look.conn(), set).await;
        look.done().await;
        state
    }

    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError> {
        let mut conn = self.connection().await?;
        let key = self.lock_key();
        let pooled = self.pooled()?;
        let try_lock = if pooled {
            sql::TRY_XACT_LOCK
        } else {
            sql::TRY_LOCK
        };
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        // Polling rather than a blocking pg_advisory_lock: the wait stays bounded by `timeout`
        // and never holds a server backend stuck in a lock queue.
        loop {
            let got: bool = sqlx::query_scalar(try_lock)
                .bind(key)
                .fetch_one(&mut conn)
                .await
                .map_err(map)?;
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
        let guarded = match start(&mut conn, &self.schema, self.opts.create_if_missing).await {
            Ok(guarded) => guarded,
            Err(e) => {
                if !pooled {
                    let _ = sqlx::query(sql::UNLOCK).bind(key).execute(&mut conn).await;
                }
                let _ = conn.close().await;
                return Err(e.into());
            }
        };
        Ok(Box::new(PgLocked::new(
            conn,
            (!pooled).then_some(key),
            guarded,
            self.schema.clone(),
        )))
    }

    async fn register(
        &self,
        entry: &FleetEntry,
        prune_before: Timestamp,
    ) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let done = async {
            let mut tx = sqlx::Connection::begin(look.conn()).await.map_err(map)?;
            match register(&mut tx, entry, prune_before).await {
                Ok(()) => tx.commit().await.map_err(map),
                // Rolled back before the connection goes back to the pool.
                Err(e) => {
                    let _ = tx.rollback().await;
                    Err(e)
                }
            }
        }
        .await;
        look.done().await;
        Ok(done?)
    }

    async fn heartbeat(&self, instance: &str, now: Timestamp) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let done = sqlx::query(fleet_sql().heartbeat)
            .bind(now.as_unix_micros())
            .bind(instance)
            .execute(look.conn())
            .await
            .map(|_| ())
            .map_err(map);
        look.done().await;
        Ok(done?)
    }

    async fn deregister(&self, instance: &str) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let conn = look.conn();
        let exists: Result<bool> = sqlx::query_scalar(fleet_sql().has_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map);
        let done = match exists {
            Ok(true) => sqlx::query(fleet_sql().delete_instance)
                .bind(instance)
                .execute(&mut *conn)
                .await
                .map(|_| ())
                .map_err(map),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        look.done().await;
        Ok(done?)
    }

    async fn read_fleet(&self) -> Result<Vec<FleetEntry>, MigrateError> {
        let mut look = self.look().await?;
        let fleet = read_fleet(look.conn()).await;
        look.done().await;
        Ok(fleet?)
    }

    async fn read_contracts(&self, set: &str) -> Result<Vec<String>, MigrateError> {
        let mut look = self.look().await?;
        let contracts = read_contracts(look.conn(), set).await;
        look.done().await;
        Ok(contracts?)
    }

    async fn database_identity(&self) -> Result<Option<String>, MigrateError> {
        let mut look = self.look().await?;
        let identity: Result<String, MigrateError> = sqlx::query_scalar(sql::DATABASE_IDENTITY)
            .fetch_one(look.conn())
            .await
            .map_err(|e| map(e).into());
        look.done().await;
        Ok(Some(identity?))
    }

    fn outside_refusal(&self) -> Option<cairn_core::Error> {
        // An unreadable pooler setting fails the real upgrade's connection anyway.
        self.pooled().ok()?.then(locked::behind_a_pooler)
    }

    async fn shape(&self) -> Result<cairn_migrate::baseline::SchemaShape, MigrateError> {
        let mut look = self.look().await?;
        let shape = shape::shape(look.conn(), self.schema.as_str()).await;
        look.done().await;
        shape
    }

    /// A new schema on this migrator's server and database, named `cairn_baseline_…`, created
    /// by the first open on it. A baseline asks it of a migrator for its scratch server,
    /// never of the store's own.
    async fn scratch(&self) -> Result<Box<dyn MigrationBackend>, MigrateError> {
        let name = cairn_core::scratch_name("cairn_baseline");
        let opts = self.opts.clone().schema(name).create_if_missing(true);
        let mut scratch = PgMigrator::new(opts)?;
        scratch.throwaway = true;
        Ok(Box::new(scratch))
    }

    /// Drops the schema, when this migrator is a throwaway one [`MigrationBackend::scratch`]
    /// made.
    async fn discard(&self) -> Result<(), MigrateError> {
        if !self.throwaway {
            return Ok(());
        }
        let mut conn = self.connection().await?;
        let dropped = sqlx::query(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema.as_str()
        ))
        .execute(&mut conn)
        .await
        .map(|_| ())
        .map_err(map);
        let _ = conn.close().await;
        Ok(dropped?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_lock_key_is_the_one_every_earlier_build_takes() {
        // Builds of different versions serialize their migrations on this key: it must not
        // move.
        let m = PgMigrator::new(PgOptions::new("postgres://h/db")).unwrap();
        assert_eq!(m.lock_key(), -5_844_876_268_162_346_966);
        let other = PgMigrator::new(PgOptions::new("postgres://h/db").schema("tenant_a")).unwrap();
        assert_ne!(other.lock_key(), m.lock_key());
    }
}
