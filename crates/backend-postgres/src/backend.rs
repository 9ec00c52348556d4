//! [`PgBackend`]: the backend handle of one Postgres store (one schema).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::{Result, Transaction};
use cairn_migrate::backend::{Backend, BackendParts, Diagnostics, OpenOptions, Session};

use crate::config::PgOptions;
use crate::diagnostics::PgDiagnostics;
use crate::migrate::PgMigrator;
use crate::spool::PgSpool;
use crate::store::PgStore;
use crate::tx::PgTransaction;

/// One open Postgres store: the epoch log, the spool and the migrator of one schema, and the
/// [`Session`] its open ran (application sets, fleet registration, heartbeat). What
/// `cairn::Store` holds for a `postgres://` URL; a service may use it directly and is
/// registered and gated the same way.
///
/// ```no_run
/// # async fn demo() -> cairn_core::Result<()> {
/// use cairn_migrate::{Backend, OpenOptions};
/// let backend = cairn_postgres::PgBackend::open(
///     cairn_postgres::PgOptions::new("postgres://app@db/app").schema("cairn"),
///     OpenOptions::default().build_id("demo-1.0"),
/// )
/// .await?;
/// assert!(backend.session().fleet_entry().is_some());
/// backend.close().await?;
/// # Ok(()) }
/// ```
pub struct PgBackend {
    store: Arc<PgStore>,
    spool: Arc<PgSpool>,
    parts: BackendParts,
}

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("store", &self.store)
            .field("session", &self.parts.session)
            .finish_non_exhaustive()
    }
}

impl PgBackend {
    /// Begins a READ COMMITTED [`PgTransaction`] on a connection of the store's pool: cairn's
    /// writes and the application's statements ([`PgTransaction::connection`]) commit together.
    ///
    /// # Errors
    /// The pool's errors (no connection within the acquire timeout).
    pub async fn transaction(&self) -> Result<PgTransaction> {
        PgTransaction::begin(&self.store, &self.spool).await
    }

    /// Opens the store `pg` names ([`PgStore::open_with`]: the schema, cairn's own migration set,
    /// upgraded only when [`OpenOptions::upgrade`] allows, the pool), the spool and the migrator on
    /// the store's pool ([`PgSpool::from_store`] on `opts`' clock and spool config,
    /// [`PgMigrator::from_store`]), then runs the open protocol ([`Session::open`]: `opts`'
    /// application sets, the contract gate, the fleet registration and its heartbeat). One pool
    /// serves the epoch log, the spool, the migrations and the heartbeat; the spool's subscriptions
    /// add one listening connection. On an error the pool is closed again.
    ///
    /// # Errors
    /// [`cairn_core::Error::InvalidInput`] for an application set named `cairn` or given twice
    /// (before anything is created); otherwise as [`PgStore::open_with`] and
    /// [`Session::open`].
    pub async fn open(pg: PgOptions, opts: OpenOptions) -> Result<Self> {
        opts.check()?;
        let runner = PgStore::cairn_runner(&pg).upgrade(opts.upgrade);
        let store = PgStore::open_through(pg, &runner).await?;
        let spool = match PgSpool::from_store(&store, opts.clock.clone(), opts.spool_config) {
            Ok(spool) => spool,
            Err(e) => {
                store.close().await;
                return Err(e);
            }
        };
        let migrator = Arc::new(PgMigrator::from_store(&store));
        match Session::open(migrator.clone(), store.cairn_opened().clone(), &opts).await {
            Ok(session) => {
                let (store, spool) = (Arc::new(store), Arc::new(spool));
                Ok(Self {
                    parts: BackendParts {
                        engine: "postgres",
                        epochs: store.clone(),
                        spool: spool.clone(),
                        migrator,
                        session,
                    },
                    store,
                    spool,
                })
            }
            Err(e) => {
                spool.close().await;
                store.close().await;
                Err(e)
            }
        }
    }

    /// The epoch log, as its concrete type.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// The spool, as its concrete type (for what only Postgres offers, e.g. its wake
    /// channels).
    pub fn pg_spool(&self) -> &PgSpool {
        &self.spool
    }
}

#[async_trait]
impl Backend for PgBackend {
    fn parts(&self) -> &BackendParts {
        &self.parts
    }

    /// [`PgDiagnostics`] on a connection of the store's pool per check.
    fn diagnostics(&self) -> Arc<dyn Diagnostics> {
        Arc::new(PgDiagnostics::from_store(&self.store))
    }

    /// A [`PgTransaction`]: READ COMMITTED, on a connection of the store's pool.
    async fn begin(&self) -> Result<Box<dyn Transaction>> {
        Ok(Box::new(self.transaction().await?))
    }

    /// Stops the heartbeat and removes the registry entry, then closes the connections,
    /// waiting for those in use: later operations through any capability the handle handed
    /// out fail with [`cairn_core::Error::Unavailable`].
    async fn close(&self) -> Result<()> {
        self.parts.session.close().await;
        self.spool.close().await;
        self.store.close().await;
        Ok(())
    }

    /// The [`PgBackend`] itself (its transactions on a caller's own connection).
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
