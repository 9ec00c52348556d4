//! [`SqliteBackend`]: the backend handle of one SQLite store file.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::{Result, Transaction};
use cairn_migrate::backend::{Backend, BackendParts, Diagnostics, OpenOptions, Session};

use crate::config::SqliteOptions;
use crate::diagnostics::SqliteDiagnostics;
use crate::migrate::SqliteMigrator;
use crate::spool::SqliteSpool;
use crate::store::SqliteStore;

/// One open SQLite store: the epoch log, the spool and the migrator over the store's one
/// writer and its read connections, and the [`Session`] its open ran (application sets,
/// fleet registration, heartbeat). What `cairn::Store` holds for a `sqlite://` URL; a service
/// may use it directly and is registered and gated the same way.
///
/// ```no_run
/// # async fn demo() -> cairn_core::Result<()> {
/// use cairn_migrate::{Backend, OpenOptions};
/// let backend = cairn_sqlite::SqliteBackend::open(
///     "/tmp/cairn-demo/store.db",
///     cairn_sqlite::SqliteOptions::default(),
///     OpenOptions::default().build_id("demo-1.0"),
/// )
/// .await?;
/// assert!(backend.session().fleet_entry().is_some());
/// backend.close().await?;
/// # Ok(()) }
/// ```
pub struct SqliteBackend {
    store: Arc<SqliteStore>,
    spool: Arc<SqliteSpool>,
    parts: BackendParts,
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("store", &self.store)
            .field("session", &self.parts.session)
            .finish_non_exhaustive()
    }
}

impl SqliteBackend {
    /// Opens the store at `path` ([`SqliteStore::open_with`]: file checks, cairn's own migration
    /// set, upgraded only when [`OpenOptions::upgrade`] allows), the spool over its connections
    /// ([`SqliteSpool::from_store`], on `opts`' clock and spool config), then runs the open
    /// protocol ([`Session::open`]: `opts`' application sets, the contract gate, the fleet
    /// registration and its heartbeat).
    ///
    /// # Errors
    /// [`cairn_core::Error::InvalidInput`] for an application set named `cairn` or given twice
    /// (before anything is created); otherwise as [`SqliteStore::open_with`],
    /// [`SqliteSpool::from_store`] and [`Session::open`].
    pub async fn open(
        path: impl AsRef<Path>,
        sqlite: SqliteOptions,
        opts: OpenOptions,
    ) -> Result<Self> {
        opts.check()?;
        let path = path.as_ref();
        let runner = SqliteStore::cairn_runner(&sqlite).upgrade(opts.upgrade);
        let store = SqliteStore::open_with_runner(path, sqlite.clone(), &runner).await?;
        let spool = SqliteSpool::from_store(&store, opts.clock.clone(), opts.spool_config).await?;
        let migrator = Arc::new(SqliteMigrator::new(path, sqlite));
        let session = Session::open(migrator.clone(), store.cairn_opened().clone(), &opts).await?;
        let (store, spool) = (Arc::new(store), Arc::new(spool));
        Ok(Self {
            parts: BackendParts {
                engine: "sqlite",
                epochs: store.clone(),
                spool: spool.clone(),
                migrator,
                session,
            },
            store,
            spool,
        })
    }

    /// The spool, as its concrete type.
    pub fn sqlite_spool(&self) -> &SqliteSpool {
        &self.spool
    }

    /// The epoch log, as its concrete type (for what only SQLite offers, e.g. its path).
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn parts(&self) -> &BackendParts {
        &self.parts
    }

    /// [`SqliteDiagnostics`] of the store's file: its integrity check opens a read-only
    /// connection of its own, as for a store that is not open.
    fn diagnostics(&self) -> Arc<dyn Diagnostics> {
        Arc::new(SqliteDiagnostics::new(self.store.path()))
    }

    /// A [`crate::SqliteTransaction`] on the store's writer.
    async fn begin(&self) -> Result<Box<dyn Transaction>> {
        Ok(Box::new(self.begin_transaction().await?))
    }

    /// Stops the heartbeat and removes the registry entry. Every write was already durable
    /// when it returned; the file's connections close when the last clone of the store and
    /// of the capabilities handed out is dropped, and keep working until then.
    async fn close(&self) -> Result<()> {
        self.parts.session.close().await;
        Ok(())
    }

    /// The [`SqliteBackend`] itself.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
