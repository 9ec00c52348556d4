//! [`PgEngine`]: one Postgres store location (a server and a schema), before anything is
//! opened — what `cairn::Store` asks for a `postgres://` URL.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::{Error, Result};
use cairn_migrate::additivity::AdditivityEngine;
use cairn_migrate::backend::{Backend, Engine, EngineOptions};
use cairn_migrate::{Diagnostics, MigrationBackend, OpenOptions};
use sqlx::{Connection, Executor};

use crate::additivity::PgAdditivity;
use crate::backend::PgBackend;
use crate::config::PgOptions;
use crate::diagnostics::PgDiagnostics;
use crate::migrate::PgMigrator;

/// How long [`Engine::location_exists`] waits for the server to accept and answer a
/// connection: a server that accepts but never answers is unreachable, not a command that
/// hangs.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One Postgres store location: the server [`PgOptions`] reach and the schema they name.
/// Constructing it connects nowhere; a malformed URL is refused when it is first used.
#[derive(Clone)]
pub struct PgEngine {
    opts: PgOptions,
    /// The server's URL, when the location came from one: the additivity check's throwaway
    /// schemas are made on that server.
    url: Option<String>,
}

impl std::fmt::Debug for PgEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL is left out: it may hold a password.
        f.debug_struct("PgEngine")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl PgEngine {
    /// The location at `url` (without cairn's `cairn_schema` parameter), in `schema` (default
    /// `public`).
    pub fn new(url: impl Into<String>, schema: Option<String>) -> Self {
        let url = url.into();
        let mut opts = PgOptions::new(url.clone());
        if let Some(schema) = schema {
            opts = opts.schema(schema);
        }
        Self {
            opts,
            url: Some(url),
        }
    }

    /// The location `opts` describe (e.g. [`PgOptions::from_pool`]). Without a URL it has
    /// no additivity check ([`Engine::additivity`] refuses).
    pub fn from_options(opts: PgOptions) -> Self {
        Self { opts, url: None }
    }

    /// This location's options with `engine`'s applied over them.
    fn options(&self, engine: &EngineOptions) -> PgOptions {
        let mut opts = self.opts.clone();
        if let Some(schema) = &engine.schema {
            opts = opts.schema(schema.clone());
        }
        if let Some(n) = engine.pool_size {
            opts = opts.max_connections(n);
        }
        if let Some(t) = engine.busy_timeout {
            opts = opts.lock_timeout(t);
        }
        opts.create_if_missing(engine.create_if_missing)
    }

    /// Whether the schema exists, on a connection of its own (closed after).
    async fn schema_exists(&self) -> Result<bool> {
        // The driver's errors can name the host: none is passed on.
        let unreachable = |_| Error::unavailable("cannot query the Postgres server");
        let options = self.opts.connect_options()?;
        let connect = sqlx::PgConnection::connect_with(&options);
        let mut own = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| Error::unavailable("timed out connecting to the Postgres server"))?
            .map_err(unreachable)?;
        let conn: &mut sqlx::PgConnection = &mut own;
        // One transaction, begun by a simple query: behind a transaction-mode pooler
        // (`cairn_pooler=transaction`) the statement's Parse and Bind then reach the one
        // server connection the transaction holds, and `DEALLOCATE ALL` first drops a
        // statement name another client left on it. Direct, both cost nothing.
        conn.execute(sqlx::raw_sql("BEGIN; DEALLOCATE ALL"))
            .await
            .map_err(unreachable)?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(self.opts.schema_name().to_owned())
                .fetch_one(&mut *conn)
                .await
                .map_err(unreachable)?;
        conn.execute(sqlx::raw_sql("COMMIT"))
            .await
            .map_err(unreachable)?;
        let _ = own.close().await;
        Ok(exists)
    }

    /// Opens the store as [`Engine::open`] does, as the concrete handle.
    ///
    /// # Errors
    /// As [`PgBackend::open`].
    pub async fn open_pg(&self, engine: &EngineOptions, open: OpenOptions) -> Result<PgBackend> {
        PgBackend::open(self.options(engine), open).await
    }
}

#[async_trait]
impl Engine for PgEngine {
    fn name(&self) -> &'static str {
        "postgres"
    }

    /// [`PgBackend::open`] with `engine`'s schema, pool size, lock timeout and creation.
    async fn open(&self, engine: &EngineOptions, open: OpenOptions) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(self.open_pg(engine, open).await?))
    }

    fn migrator(&self, create_if_missing: bool) -> Result<Arc<dyn MigrationBackend>> {
        let opts = self.opts.clone().create_if_missing(create_if_missing);
        Ok(Arc::new(PgMigrator::new(opts)?))
    }

    /// Whether the schema exists, on a connection of its own (closed after).
    async fn location_exists(&self) -> Result<bool> {
        self.schema_exists().await
    }

    fn diagnostics(&self) -> Result<Arc<dyn Diagnostics>> {
        Ok(Arc::new(PgDiagnostics::new(self.opts.clone())?))
    }

    fn additivity(&self) -> Result<Arc<dyn AdditivityEngine>> {
        let url = self.url.clone().ok_or_else(|| {
            Error::invalid(
                "additivity check",
                "the Postgres engine needs a server URL for its throwaway schemas",
            )
        })?;
        Ok(Arc::new(PgAdditivity::new(url)))
    }
}
