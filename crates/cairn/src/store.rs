//! [`Store`] and its builder. The builder collects the options every engine reads
//! ([`EngineOptions`]) and those of the open protocol ([`OpenOptions`]), asks the facade's one
//! engine switch (`crate::engine`) for the URL's engine and has it open the store; the engine's
//! handle (`SqliteBackend`, `PgBackend`, or a third party's through [`Store::from_backend`])
//! runs the open protocol ([`cairn_migrate::Session`]: application sets, contract gate, fleet
//! registration). Nothing of that protocol, and no engine's options, live here.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, Spool, SpoolConfig};
#[cfg(doc)]
use cairn_core::Error;
use cairn_core::{EpochDiagnostics, EpochStore, Result};
use cairn_migrate::backend::{Backend, Engine, EngineOptions};
use cairn_migrate::fleet::FleetEntry;
pub use cairn_migrate::{DeferredContract, SetOpened};
use cairn_migrate::{MigrationSet, OpenOptions};

use crate::url::{DatabaseUrl, Scheme};

/// An open cairn store: the capabilities of one database, as trait objects.
///
/// Cheap to clone (a shared handle over one backend handle, which owns every connection of the
/// store). Open it with [`Store::open`] or [`Store::builder`], or hand it a backend of your own
/// with [`Store::from_backend`]:
///
/// ```no_run
/// # async fn demo() -> cairn::Result<()> {
/// let store = cairn::Store::open("sqlite://./demo.db").await?;
/// let space = cairn::SpaceId::new("docs")?;
/// store.epochs().append(&space, vec![cairn::Event::new("doc.edit", "hello")]).await?;
/// let heads = store.epochs().heads(&space).await?;
/// let page = store.epochs().events_since(&space, None, 100).await?;
/// # let _ = (heads, page); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// The background retention loop [`StoreBuilder::retention`] asked for: stopped by
    /// [`Store::close`], or when the last clone is dropped.
    retention: Option<Arc<tokio::sync::Mutex<Option<crate::spool::RetentionHandle>>>>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine())
            .field("migrations", &self.migrations())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store at `url` with default options (see [`DatabaseUrl`] for the URL forms),
    /// creating it when missing and bringing cairn's schema to this build's head.
    ///
    /// # Errors
    /// As [`StoreBuilder::open`].
    pub async fn open(url: &str) -> Result<Self> {
        Self::builder(url).open().await
    }

    /// A builder for the store at `url`, to set options and the application's migration sets
    /// before opening.
    pub fn builder(url: impl Into<String>) -> StoreBuilder {
        StoreBuilder::new(Source::Url(url.into()))
    }

    /// A builder for the store at an already parsed location.
    pub fn builder_at(url: DatabaseUrl) -> StoreBuilder {
        StoreBuilder::new(Source::Parsed(url))
    }

    /// A builder for a store in the database an existing `sqlx` pool connects to. cairn reuses
    /// the pool's connect options (host, credentials, TLS) but keeps its own small pool
    /// ([`StoreBuilder::pool_size`]): its connections carry session settings (`search_path`,
    /// `lock_timeout`) that must not leak into the service's connections.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn builder_from_pg_pool(pool: &sqlx::PgPool) -> StoreBuilder {
        StoreBuilder::new(Source::PgPool(pool.clone()))
    }

    /// A store over a backend handle opened elsewhere: a third party's engine, or a wrapper
    /// around a built-in one. The handle's open has already run the open protocol
    /// ([`cairn_migrate::Session::open`], see [`cairn_migrate::Backend`] for what an
    /// implementation must do), so the store registers and is gated like one opened from a
    /// URL; [`Store::close`] closes the handle.
    ///
    /// ```no_run
    /// # async fn demo() -> cairn::Result<()> {
    /// use std::sync::Arc;
    /// let backend = cairn_sqlite::SqliteBackend::open(
    ///     "/tmp/cairn-demo/store.db",
    ///     cairn_sqlite::SqliteOptions::default(),
    ///     cairn_migrate::OpenOptions::default(),
    /// )
    /// .await?;
    /// let store = cairn::Store::from_backend(Arc::new(backend));
    /// assert_eq!(store.engine(), "sqlite");
    /// # Ok(()) }
    /// ```
    pub fn from_backend(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            retention: None,
        }
    }

    /// The backend handle.
    pub(crate) fn handle(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The Postgres handle, when the store runs on cairn's own Postgres backend.
    #[cfg(feature = "postgres")]
    pub(crate) fn pg_backend(&self) -> Option<&cairn_postgres::PgBackend> {
        self.backend.as_any()?.downcast_ref()
    }

    /// The epoch log.
    pub fn epochs(&self) -> Arc<dyn EpochStore> {
        self.backend.epochs()
    }

    /// The spool: a durable, interprocess-safe work queue (dedup keys, leases, retries,
    /// supersession, cancellation, run events and facts, wake-up).
    pub fn spool(&self) -> Arc<dyn Spool> {
        self.backend.spool()
    }

    /// The epoch log with its read-only diagnostics (cached vs computed heads, next seq), for
    /// operator tools.
    pub fn diagnostics(&self) -> Arc<dyn EpochDiagnostics> {
        self.backend.epochs()
    }

    /// Read-only diagnostics of the store itself — its integrity, the additivity check's
    /// leftovers where its engine makes them — on the store's own connections
    /// ([`cairn_migrate::Backend::diagnostics`]): what a running server's doctor asks.
    pub fn store_diagnostics(&self) -> Arc<dyn cairn_migrate::Diagnostics> {
        self.backend.diagnostics()
    }

    /// The store's migration backend, sharing the store's connections (for
    /// [`crate::migrate::Migrations::of`]).
    pub(crate) fn migrator(&self) -> Arc<dyn cairn_migrate::MigrationBackend> {
        self.backend.migrator()
    }

    /// The name of the engine the store runs on (`"sqlite"`, `"postgres"`, or a third-party
    /// backend's own, [`cairn_migrate::Backend::engine`]).
    pub fn engine(&self) -> &str {
        self.backend.engine()
    }

    /// The built-in engine the store runs on, or `None` for a third-party backend's
    /// ([`Store::from_backend`]; see [`Store::engine`] for its name).
    pub fn scheme(&self) -> Option<Scheme> {
        match self.engine() {
            "sqlite" => Some(Scheme::Sqlite),
            "postgres" => Some(Scheme::Postgres),
            _ => None,
        }
    }

    /// What the open did for each migration set: cairn's own first, then the application's in
    /// the order they were given.
    pub fn migrations(&self) -> &[SetOpened] {
        self.backend.session().migrations()
    }

    /// This open's entry in the store's fleet registry (its instance id, build id, the newest
    /// revision it knows per set, host, pid), or `None` when registration was turned off
    /// ([`StoreBuilder::register_in_fleet`]).
    pub fn fleet_entry(&self) -> Option<&FleetEntry> {
        self.backend.session().fleet_entry()
    }

    /// The live builds in the store's fleet registry (this one included when registered),
    /// ordered by instance id: every entry refreshed within the expiry window
    /// ([`StoreBuilder::fleet_expiry`]) of the store's clock. Takes no lock and writes nothing.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fleet(&self) -> Result<Vec<FleetEntry>> {
        self.backend.session().fleet().await
    }

    /// Shuts the store down in order ([`cairn_migrate::Backend::close`]): the fleet heartbeat
    /// stops and this open's registry entry is removed, then, on Postgres, the pool is closed:
    /// connections in use are waited for, and later operations through any clone of this store
    /// (or of a trait object it handed out) fail with [`Error::Unavailable`]. On SQLite every
    /// write was already durable when it returned; the files' connections close when the last
    /// clone is dropped. The last clone dropped without `close` stops the heartbeat, and the
    /// registry entry expires after the window.
    ///
    /// # Errors
    /// The backend's shutdown errors; the built-in backends have none.
    pub async fn close(self) -> Result<()> {
        if let Some(retention) = &self.retention {
            if let Some(handle) = retention.lock().await.take() {
                handle.shutdown().await;
            }
        }
        self.backend.close().await
    }
}

enum Source {
    Url(String),
    Parsed(DatabaseUrl),
    #[cfg(feature = "postgres")]
    PgPool(sqlx::PgPool),
}

/// Options for opening a [`Store`]; every method has a sensible default.
///
/// ```no_run
/// # async fn demo(app: cairn::MigrationSet) -> cairn::Result<()> {
/// use std::time::Duration;
/// let store = cairn::Store::builder("postgres://app@db/app?cairn_schema=cairn")
///     .pool_size(4)
///     .busy_timeout(Duration::from_secs(2))
///     .migrations(app)
///     .open()
///     .await?;
/// # let _ = store; Ok(()) }
/// ```
#[must_use = "a builder does nothing until `open` is awaited"]
pub struct StoreBuilder {
    source: Source,
    engine: EngineOptions,
    open: OpenOptions,
    retention: Option<(crate::spool::RetentionPolicy, std::time::Duration)>,
}

impl fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The source is left out: a URL may hold a password.
        f.debug_struct("StoreBuilder")
            .field("engine", &self.engine)
            .field("open", &self.open)
            .finish()
    }
}

impl StoreBuilder {
    fn new(source: Source) -> Self {
        Self {
            source,
            engine: EngineOptions::default(),
            open: OpenOptions::default(),
            retention: None,
        }
    }

    /// Runs the spool's retention in the background of the opened store, as `cairn serve`
    /// does: a pass at open and then every `interval` (a pass cut short by its 2 s budget is
    /// continued a second later), keeping `policy` — finished runs and events older than
    /// `max_age`, events over `max_bytes` — on the library's
    /// [`RetentionWorker`](crate::spool::RetentionWorker), counted through the `metrics`
    /// facade. It stops at [`Store::close`] (after the pass in flight) or when the last clone
    /// of the store is dropped. Off by default. Needs a Tokio runtime at `open`.
    pub fn retention(
        mut self,
        policy: crate::spool::RetentionPolicy,
        interval: std::time::Duration,
    ) -> Self {
        self.retention = Some((policy, interval));
        self
    }

    /// What an open does when an application set's pending contract revision is lacked by
    /// live builds (and not forced). `true` (the default): it applies the revisions before the
    /// contract revision, leaves the contract revision pending and opens, reporting it in
    /// [`SetOpened::deferred`] — so a release that ships a contract revision rolls out while
    /// older nodes still run (its code must not need the contract applied, which is what makes
    /// it a contract). `false`: the open is refused with [`Error::Incompatible`] naming the
    /// live builds, and nothing changes.
    pub fn defer_blocked_contracts(mut self, defer: bool) -> Self {
        self.open = self.open.defer_blocked_contracts(defer);
        self
    }

    /// Whether the open may upgrade a store that is behind this build (default `true`). With
    /// `false`, a store stamped at an older revision of cairn's set or of an application's set
    /// is refused with [`Error::Incompatible`] and nothing is written to it; a missing store is
    /// still created at head (unless [`StoreBuilder::create_if_missing`] is off), and a store
    /// behind only by a contract revision that live builds lack is served at its stamp, the
    /// revision deferred, as an upgrading open would serve it. For one-shot
    /// tools, and for services whose deploy upgrades the store in a step of its own
    /// (`cairn migrate up`, [`crate::migrate::Migrations::upgrade`]).
    pub fn upgrade(mut self, upgrade: bool) -> Self {
        self.open = self.open.upgrade(upgrade);
        self
    }

    /// Whether the open records this build in the store's fleet registry and heartbeats it
    /// (default `true`). Turn it off for read-only tools; a service that applies or depends on
    /// application sets keeps it on, so contract revisions wait for it.
    pub fn register_in_fleet(mut self, register: bool) -> Self {
        self.open = self.open.register_in_fleet(register);
        self
    }

    /// The build id recorded in the fleet registry (default: this crate's version and every
    /// set's head, e.g. `0.1.0+app@0002_notes,cairn@0004_fleet`). Name your release here.
    pub fn build_id(mut self, build: impl Into<String>) -> Self {
        self.open = self.open.build_id(build);
        self
    }

    /// The host name recorded in the fleet registry (default: the `HOSTNAME` environment
    /// variable, else `/etc/hostname`, else `unknown`).
    pub fn fleet_host(mut self, host: impl Into<String>) -> Self {
        self.open = self.open.fleet_host(host);
        self
    }

    /// How often the open store refreshes its fleet registry entry (default 30 s): one write
    /// per interval, from a background task stopped by [`Store::close`] or the last drop.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.open = self.open.heartbeat_interval(interval);
        self
    }

    /// How long a fleet registry entry stays live without a heartbeat (default 5 min), as the
    /// contract gate and [`Store::fleet`] judge it on the store's clock. Keep it several
    /// heartbeat intervals long.
    pub fn fleet_expiry(mut self, expiry: Duration) -> Self {
        self.open = self.open.fleet_expiry(expiry);
        self
    }

    /// Applies an application set's contract revisions even while live builds that lack them
    /// are registered (default `false`: such an open is refused with [`Error::Incompatible`]
    /// naming them). A forced revision is recorded in the store with the builds it was forced
    /// past, and reported in [`SetOpened::contracts`].
    pub fn force_contract(mut self, force: bool) -> Self {
        self.open = self.open.force_contract(force);
        self
    }

    /// How long an operation waits for another writer's lock before it fails with
    /// [`Error::Retryable`] (SQLite's busy timeout, Postgres's `lock_timeout`). Default 5 s on
    /// SQLite, 10 s on Postgres.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.engine.busy_timeout = Some(timeout);
        self
    }

    /// Largest number of pooled connections (Postgres; default 10). Ignored on SQLite, whose
    /// writes go through one connection (see [`StoreBuilder::read_connections`] for reads).
    pub fn pool_size(mut self, connections: u32) -> Self {
        self.engine.pool_size = Some(connections);
        self
    }

    /// The Postgres schema that holds the store — cairn's tables and those of the store's
    /// application migration sets (default `public`, or the URL's `cairn_schema`). Must match
    /// `[a-z_][a-z0-9_]{0,62}`. Ignored on SQLite.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.engine.schema = Some(schema.into());
        self
    }

    /// How many read connections a SQLite store keeps, so concurrent reads proceed in parallel
    /// (default 4). Ignored on Postgres, whose reads share the pool.
    pub fn read_connections(mut self, connections: usize) -> Self {
        self.engine.read_connections = Some(connections);
        self
    }

    /// Whether a missing store is created (default `true`). With `false`, opening a missing
    /// SQLite file or a Postgres schema without a store fails with [`Error::NotFound`] and
    /// creates nothing: what a read-only tool wants.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.engine.create_if_missing = create;
        self
    }

    /// Allows cairn's tables to live in a SQLite file that already holds the application's own
    /// tables (default `false`: such a file is refused as "not a cairn store", so a mistyped
    /// path never gets cairn's tables written into somebody else's database).
    pub fn share_sqlite_file(mut self, share: bool) -> Self {
        self.engine.share_sqlite_file = share;
        self
    }

    /// How long an open waits for another process that is migrating the same store (default
    /// 30 s); past it the open fails with [`Error::Retryable`] and changes nothing.
    pub fn migration_lock_timeout(mut self, timeout: Duration) -> Self {
        self.open = self.open.migration_lock_timeout(timeout);
        self
    }

    /// The clock the spool reads every time from (lease expiry, backoff, retention; default the
    /// system clock). Tests pass a `ManualClock` to drive time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.open = self.open.clock(clock);
        self
    }

    /// The spool's config: the retry backoff after a retryable nack or an expired lease
    /// (default 1 s doubling to 60 s). Every process of one store should use the same config,
    /// since the backoff decides when a run is due again.
    pub fn spool_config(mut self, config: SpoolConfig) -> Self {
        self.open = self.open.spool_config(config);
        self
    }

    /// Adds an application migration set, opened after cairn's own with the same protocol:
    /// stamp and lineage per set; at head and ahead take no lock and write nothing; an upgrade
    /// takes the migration lock, looks again, and applies the pending revisions with the
    /// lineage in one transaction; a diverged history is refused naming both revisions. Call
    /// it once per set.
    ///
    /// On Postgres a set runs with the store's schema ([`StoreBuilder::schema`], default
    /// `public`) as its `search_path`: its unqualified tables are created in that schema, next
    /// to cairn's, where a [`crate::Transaction`]'s connection finds them unqualified.
    pub fn migrations(mut self, set: MigrationSet) -> Self {
        self.open = self.open.migrations(set);
        self
    }

    /// Opens the store: picks the backend from the URL and opens its handle
    /// (`SqliteBackend::open`, `PgBackend::open`), which opens cairn's own migration set, then
    /// runs the open protocol: each application set in order, the fleet registration and its
    /// heartbeat.
    ///
    /// # Errors
    /// - [`Error::InvalidInput`]: a malformed URL or option, an application set named `cairn`
    ///   or given twice, a backend this build was compiled without (enable the `sqlite` or
    ///   `postgres` feature);
    /// - [`Error::NotFound`]: no store and [`StoreBuilder::create_if_missing`] is off;
    /// - [`Error::Incompatible`]: a set's stored history is one this build must not use, or
    ///   the store is behind this build and [`StoreBuilder::upgrade`] is off (nothing was
    ///   changed);
    /// - [`Error::Migration`]: a revision failed (its upgrade was rolled back);
    /// - [`Error::Retryable`]: another process held a lock past its timeout;
    /// - the backend's errors: [`Error::UnsafePath`], [`Error::Io`], [`Error::Corrupt`],
    ///   [`Error::Unavailable`].
    pub async fn open(self) -> Result<Store> {
        self.open.check()?;
        let engine: Box<dyn Engine> = match self.source {
            Source::Url(url) => crate::engine::engine(&DatabaseUrl::parse(&url)?)?,
            Source::Parsed(url) => crate::engine::engine(&url)?,
            #[cfg(feature = "postgres")]
            Source::PgPool(pool) => Box::new(cairn_postgres::PgEngine::from_options(
                cairn_postgres::PgOptions::from_pool(&pool),
            )),
        };
        let backend = engine.open(&self.engine, self.open).await?;
        let mut store = Store::from_backend(backend);
        if let Some((policy, interval)) = self.retention {
            let handle = crate::spool::RetentionWorker::new(store.spool(), policy)
                .interval(interval)
                .spawn();
            store.retention = Some(Arc::new(tokio::sync::Mutex::new(Some(handle))));
        }
        Ok(store)
    }
}
