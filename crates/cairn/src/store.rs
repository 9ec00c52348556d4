//! [`Store`] and its builder: open a store from a URL, through the migration runner.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, Spool, SpoolConfig, SystemClock};
use cairn_core::{EpochDiagnostics, EpochStore, Error, Result};
use cairn_migrate::fleet::{self, FleetEntry};
use cairn_migrate::{
    AppliedContract, Blocker, MigrateError, MigrationBackend, MigrationSet, Opened, Runner,
    CAIRN_SET,
};

use crate::url::{Backend, DatabaseUrl};

/// How long an open waits for another process's migration before it gives up with
/// [`Error::Retryable`].
const DEFAULT_MIGRATION_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// What opening a store did for one migration set.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SetOpened {
    /// The set's name (`cairn` for cairn's own schema).
    pub set: String,
    /// What the runner did: nothing (at head, ahead), an upgrade, or a lineage repair.
    pub outcome: Opened,
    /// The contract revisions the open applied, each with whether it was forced past live
    /// builds that lack it ([`StoreBuilder::force_contract`]).
    pub contracts: Vec<AppliedContract>,
    /// A contract revision this open left pending because live builds lack it
    /// ([`StoreBuilder::defer_blocked_contracts`]): the revisions before it were applied, the
    /// store stays behind this build until a later open (or `cairn migrate up`) finds no live
    /// build lacking it.
    pub deferred: Option<DeferredContract>,
}

/// A contract revision an open left pending, and the live builds that lack it.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct DeferredContract {
    /// The contract revision (the set's first one that live builds lack).
    pub revision: String,
    /// The live builds that lack it.
    pub blockers: Vec<Blocker>,
}

/// An open cairn store: the capabilities of one database, as trait objects.
///
/// Cheap to clone (a shared handle). Open it with [`Store::open`] or [`Store::builder`]:
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
    inner: Arc<Inner>,
}

struct Inner {
    epochs: Arc<dyn EpochDiagnostics>,
    spool: Arc<dyn Spool>,
    backend: Backend,
    migrations: Vec<SetOpened>,
    fleet: Option<Registration>,
    #[cfg(feature = "postgres")]
    pg: Option<(cairn_postgres::PgStore, cairn_postgres::PgSpool)>,
}

/// This open's entry in the store's fleet registry and the task that heartbeats it.
struct Registration {
    migrator: Arc<dyn MigrationBackend>,
    entry: FleetEntry,
    expiry: Duration,
    clock: Arc<dyn Clock>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    /// The last handle gone without [`Store::close`]: the heartbeat stops and the entry expires
    /// after the expiry window.
    fn drop(&mut self) {
        if let Some(reg) = &self.fleet {
            reg.heartbeat.abort();
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.inner.backend)
            .field("migrations", &self.inner.migrations)
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
    pub fn builder_from_pg_pool(pool: &sqlx::PgPool) -> StoreBuilder {
        StoreBuilder::new(Source::PgPool(pool.clone()))
    }

    /// The epoch log.
    pub fn epochs(&self) -> Arc<dyn EpochStore> {
        self.inner.epochs.clone()
    }

    /// The spool: a durable, interprocess-safe work queue (dedup keys, leases, retries,
    /// supersession, cancellation, run events and facts, wake-up).
    pub fn spool(&self) -> Arc<dyn Spool> {
        self.inner.spool.clone()
    }

    /// The epoch log with its read-only diagnostics (cached vs computed heads, next seq), for
    /// operator tools.
    pub fn diagnostics(&self) -> Arc<dyn EpochDiagnostics> {
        self.inner.epochs.clone()
    }

    /// The engine the store runs on.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// What the open did for each migration set: cairn's own first, then the application's in
    /// the order they were given.
    pub fn migrations(&self) -> &[SetOpened] {
        &self.inner.migrations
    }

    /// This open's entry in the store's fleet registry (its instance id, build id, the newest
    /// revision it knows per set, host, pid), or `None` when registration was turned off
    /// ([`StoreBuilder::register_in_fleet`]).
    pub fn fleet_entry(&self) -> Option<&FleetEntry> {
        self.inner.fleet.as_ref().map(|r| &r.entry)
    }

    /// The live builds in the store's fleet registry (this one included), ordered by instance
    /// id: every entry refreshed within the expiry window ([`StoreBuilder::fleet_expiry`]) of
    /// the store's clock.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fleet(&self) -> Result<Vec<FleetEntry>> {
        let (migrator, clock, expiry) = match &self.inner.fleet {
            Some(r) => (r.migrator.clone(), r.clock.clone(), r.expiry),
            None => return Err(Error::invalid(
                "fleet",
                "this store was opened without fleet registration; use cairn::migrate::live_builds",
            )),
        };
        let all = migrator.read_fleet().await.map_err(Error::from)?;
        Ok(fleet::live(all, clock.now(), expiry))
    }

    /// Shuts the store down in order: the fleet heartbeat stops and this open's registry
    /// entry is removed, then, on Postgres, the pool is closed: connections in use are
    /// waited for, and later operations through any clone of this store (or of a trait object
    /// it handed out) fail with [`Error::Unavailable`]. On SQLite every write was already
    /// durable when it returned; the files' connections close when the last clone is dropped.
    ///
    /// # Errors
    /// None today; the signature leaves room for backends whose shutdown can fail.
    pub async fn close(self) -> Result<()> {
        if let Some(reg) = &self.inner.fleet {
            reg.heartbeat.abort();
            // Best effort: an entry that is not removed expires after the window.
            let _ = reg.migrator.deregister(&reg.entry.instance).await;
        }
        #[cfg(feature = "postgres")]
        if let Some((store, spool)) = &self.inner.pg {
            spool.close().await;
            store.close().await;
        }
        Ok(())
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
    busy_timeout: Option<Duration>,
    pool_size: Option<u32>,
    schema: Option<String>,
    read_connections: Option<usize>,
    create_if_missing: bool,
    share_sqlite_file: bool,
    migration_lock_timeout: Duration,
    sets: Vec<MigrationSet>,
    clock: Arc<dyn Clock>,
    spool_config: SpoolConfig,
    register: bool,
    build_id: Option<String>,
    host: Option<String>,
    heartbeat_interval: Duration,
    fleet_expiry: Duration,
    force_contract: bool,
    defer_blocked_contracts: bool,
}

impl fmt::Debug for StoreBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The source is left out: a URL may hold a password.
        f.debug_struct("StoreBuilder")
            .field("busy_timeout", &self.busy_timeout)
            .field("pool_size", &self.pool_size)
            .field("schema", &self.schema)
            .field("read_connections", &self.read_connections)
            .field("create_if_missing", &self.create_if_missing)
            .field("share_sqlite_file", &self.share_sqlite_file)
            .field("migration_lock_timeout", &self.migration_lock_timeout)
            .field("clock", &self.clock)
            .field("spool_config", &self.spool_config)
            .field("register", &self.register)
            .field("build_id", &self.build_id)
            .field("host", &self.host)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("fleet_expiry", &self.fleet_expiry)
            .field("force_contract", &self.force_contract)
            .field("defer_blocked_contracts", &self.defer_blocked_contracts)
            .field(
                "sets",
                &self.sets.iter().map(MigrationSet::name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl StoreBuilder {
    fn new(source: Source) -> Self {
        Self {
            source,
            busy_timeout: None,
            pool_size: None,
            schema: None,
            read_connections: None,
            create_if_missing: true,
            share_sqlite_file: false,
            migration_lock_timeout: DEFAULT_MIGRATION_LOCK_TIMEOUT,
            sets: Vec::new(),
            clock: Arc::new(SystemClock),
            spool_config: SpoolConfig::default(),
            register: true,
            build_id: None,
            host: None,
            heartbeat_interval: fleet::DEFAULT_HEARTBEAT_INTERVAL,
            fleet_expiry: fleet::DEFAULT_EXPIRY,
            force_contract: false,
            defer_blocked_contracts: true,
        }
    }

    /// What an open does when an application set's pending contract revision is lacked by
    /// live builds (and not forced). `true` (the default): it applies the revisions before the
    /// contract revision, leaves the contract revision pending and opens, reporting it in
    /// [`SetOpened::deferred`] — so a release that ships a contract revision rolls out while
    /// older nodes still run (its code must not need the contract applied, which is what makes
    /// it a contract). `false`: the open is refused with [`Error::Incompatible`] naming the
    /// live builds, and nothing changes.
    pub fn defer_blocked_contracts(mut self, defer: bool) -> Self {
        self.defer_blocked_contracts = defer;
        self
    }

    /// Whether the open records this build in the store's fleet registry and heartbeats it
    /// (default `true`). Turn it off for read-only tools; a service that applies or depends on
    /// application sets keeps it on, so contract revisions wait for it.
    pub fn register_in_fleet(mut self, register: bool) -> Self {
        self.register = register;
        self
    }

    /// The build id recorded in the fleet registry (default: this crate's version and every
    /// set's head, e.g. `0.1.0+app@0002_notes,cairn@0004_fleet`). Name your release here.
    pub fn build_id(mut self, build: impl Into<String>) -> Self {
        self.build_id = Some(build.into());
        self
    }

    /// The host name recorded in the fleet registry (default: the `HOSTNAME` environment
    /// variable, else `/etc/hostname`, else `unknown`).
    pub fn fleet_host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    /// How often the open store refreshes its fleet registry entry (default 30 s): one write
    /// per interval, from a background task stopped by [`Store::close`] or the last drop.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.heartbeat_interval = interval;
        self
    }

    /// How long a fleet registry entry stays live without a heartbeat (default 5 min), as the
    /// contract gate and [`Store::fleet`] judge it on the store's clock. Keep it several
    /// heartbeat intervals long.
    pub fn fleet_expiry(mut self, expiry: Duration) -> Self {
        self.fleet_expiry = expiry;
        self
    }

    /// Applies an application set's contract revisions even while live builds that lack them
    /// are registered (default `false`: such an open is refused with [`Error::Incompatible`]
    /// naming them). A forced revision is recorded in the store with the builds it was forced
    /// past, and reported in [`SetOpened::contracts`].
    pub fn force_contract(mut self, force: bool) -> Self {
        self.force_contract = force;
        self
    }

    /// How long an operation waits for another writer's lock before it fails with
    /// [`Error::Retryable`] (SQLite's busy timeout, Postgres's `lock_timeout`). Default 5 s on
    /// SQLite, 10 s on Postgres.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = Some(timeout);
        self
    }

    /// Largest number of pooled connections (Postgres; default 10). Ignored on SQLite, whose
    /// writes go through one connection (see [`StoreBuilder::read_connections`] for reads).
    pub fn pool_size(mut self, connections: u32) -> Self {
        self.pool_size = Some(connections);
        self
    }

    /// The Postgres schema that holds the store (default `public`, or the URL's
    /// `cairn_schema`). Must match `[a-z_][a-z0-9_]{0,62}`. Ignored on SQLite.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// How many read connections a SQLite store keeps, so concurrent reads proceed in parallel
    /// (default 4). Ignored on Postgres, whose reads share the pool.
    pub fn read_connections(mut self, connections: usize) -> Self {
        self.read_connections = Some(connections);
        self
    }

    /// Whether a missing store is created (default `true`). With `false`, opening a missing
    /// SQLite file or a Postgres schema without a store fails with [`Error::NotFound`] and
    /// creates nothing: what a read-only tool wants.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// Allows cairn's tables to live in a SQLite file that already holds the application's own
    /// tables (default `false`: such a file is refused as "not a cairn store", so a mistyped
    /// path never gets cairn's tables written into somebody else's database).
    pub fn share_sqlite_file(mut self, share: bool) -> Self {
        self.share_sqlite_file = share;
        self
    }

    /// How long an open waits for another process that is migrating the same store (default
    /// 30 s); past it the open fails with [`Error::Retryable`] and changes nothing.
    pub fn migration_lock_timeout(mut self, timeout: Duration) -> Self {
        self.migration_lock_timeout = timeout;
        self
    }

    /// The clock the spool reads every time from (lease expiry, backoff, retention; default the
    /// system clock). Tests pass a `ManualClock` to drive time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The spool's config: the retry backoff after a retryable nack or an expired lease
    /// (default 1 s doubling to 60 s). Every process of one store should use the same config,
    /// since the backoff decides when a run is due again.
    pub fn spool_config(mut self, config: SpoolConfig) -> Self {
        self.spool_config = config;
        self
    }

    /// Adds an application migration set, opened after cairn's own with the same protocol:
    /// stamp and lineage per set; at head and ahead take no lock and write nothing; an upgrade
    /// takes the migration lock, looks again, and applies the pending revisions with the
    /// lineage in one transaction; a diverged history is refused naming both revisions. Call
    /// it once per set.
    pub fn migrations(mut self, set: MigrationSet) -> Self {
        self.sets.push(set);
        self
    }

    /// Opens the store: picks the backend from the URL, opens cairn's own migration set
    /// through the runner, then each application set in order.
    ///
    /// # Errors
    /// - [`Error::InvalidInput`]: a malformed URL or option, an application set named `cairn`
    ///   or given twice, a backend this build was compiled without (enable the `sqlite` or
    ///   `postgres` feature);
    /// - [`Error::NotFound`]: no store and [`StoreBuilder::create_if_missing`] is off;
    /// - [`Error::Incompatible`]: a set's stored history is one this build must not use
    ///   (nothing was changed);
    /// - [`Error::Migration`]: a revision failed (its upgrade was rolled back);
    /// - [`Error::Retryable`]: another process held a lock past its timeout;
    /// - the backend's errors: [`Error::UnsafePath`], [`Error::Io`], [`Error::Corrupt`],
    ///   [`Error::Unavailable`].
    pub async fn open(self) -> Result<Store> {
        let mut names: Vec<&str> = vec![CAIRN_SET];
        for set in &self.sets {
            if names.contains(&set.name()) {
                return Err(Error::invalid(
                    "migration set",
                    format!(
                        "the set name `{}` is {}",
                        set.name(),
                        if set.name() == CAIRN_SET {
                            "reserved for cairn's own schema"
                        } else {
                            "given twice"
                        }
                    ),
                ));
            }
            names.push(set.name());
        }
        let url = match &self.source {
            Source::Url(url) => DatabaseUrl::parse(url)?,
            Source::Parsed(url) => url.clone(),
            #[cfg(feature = "postgres")]
            Source::PgPool(pool) => {
                let opts = cairn_postgres::PgOptions::from_pool(pool);
                return self.open_postgres(opts, None).await;
            }
        };
        match url {
            DatabaseUrl::Sqlite(path) => self.open_sqlite(path).await,
            #[cfg(feature = "postgres")]
            DatabaseUrl::Postgres { url, schema } => {
                self.open_postgres(cairn_postgres::PgOptions::new(url), schema)
                    .await
            }
            #[cfg(not(feature = "postgres"))]
            DatabaseUrl::Postgres { .. } => Err(missing_feature(Backend::Postgres)),
        }
    }

    #[cfg(feature = "sqlite")]
    async fn open_sqlite(&self, path: std::path::PathBuf) -> Result<Store> {
        let mut opts = cairn_sqlite::SqliteOptions::default()
            .create_if_missing(self.create_if_missing)
            .share_file_with_application(self.share_sqlite_file);
        if let Some(t) = self.busy_timeout {
            opts = opts.busy_timeout(t);
        }
        if let Some(n) = self.read_connections {
            opts = opts.read_connections(n);
        }
        let store = cairn_sqlite::SqliteStore::open_with(&path, opts.clone()).await?;
        let mut migrations = vec![SetOpened {
            set: CAIRN_SET.into(),
            outcome: store.opened().clone(),
            contracts: Vec::new(),
            deferred: None,
        }];
        let migrator: Arc<dyn MigrationBackend> =
            Arc::new(cairn_sqlite::SqliteMigrator::new(&path, opts));
        let instance = instance_id();
        self.open_sets(migrator.as_ref(), &instance, &mut migrations)
            .await?;
        let spool = cairn_sqlite::SqliteSpool::from_store(&store, self.clock.clone())
            .await?
            .with_config(self.spool_config);
        let fleet = self.register_open(migrator, instance).await?;
        Ok(Store {
            inner: Arc::new(Inner {
                epochs: Arc::new(store),
                spool: Arc::new(spool),
                backend: Backend::Sqlite,
                migrations,
                fleet,
                #[cfg(feature = "postgres")]
                pg: None,
            }),
        })
    }

    #[cfg(not(feature = "sqlite"))]
    async fn open_sqlite(&self, _path: std::path::PathBuf) -> Result<Store> {
        Err(missing_feature(Backend::Sqlite))
    }

    #[cfg(feature = "postgres")]
    async fn open_postgres(
        &self,
        mut opts: cairn_postgres::PgOptions,
        url_schema: Option<String>,
    ) -> Result<Store> {
        if let Some(schema) = self.schema.clone().or(url_schema) {
            opts = opts.schema(schema);
        }
        if let Some(n) = self.pool_size {
            opts = opts.max_connections(n);
        }
        if let Some(t) = self.busy_timeout {
            opts = opts.lock_timeout(t);
        }
        opts = opts.create_if_missing(self.create_if_missing);
        let store = cairn_postgres::PgStore::open_with(opts.clone()).await?;
        let mut migrations = vec![SetOpened {
            set: CAIRN_SET.into(),
            outcome: store.opened().clone(),
            contracts: Vec::new(),
            deferred: None,
        }];
        let migrator: Arc<dyn MigrationBackend> =
            Arc::new(cairn_postgres::PgMigrator::new(opts.clone())?);
        let instance = instance_id();
        let spool = match self
            .open_sets(migrator.as_ref(), &instance, &mut migrations)
            .await
        {
            Ok(()) => {
                cairn_postgres::PgSpool::connect_with_config(
                    opts,
                    self.clock.clone(),
                    self.spool_config,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let spool = match spool {
            Ok(spool) => spool,
            Err(e) => {
                store.close().await;
                return Err(e);
            }
        };
        let fleet = match self.register_open(migrator, instance).await {
            Ok(fleet) => fleet,
            Err(e) => {
                spool.close().await;
                store.close().await;
                return Err(e);
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                epochs: Arc::new(store.clone()),
                spool: Arc::new(spool.clone()),
                backend: Backend::Postgres,
                migrations,
                fleet,
                pg: Some((store, spool)),
            }),
        })
    }

    /// Opens the application's sets, in order, through the runner (the contract gate on the
    /// store's clock, this open's instance exempt from its own gate).
    async fn open_sets(
        &self,
        migrator: &dyn MigrationBackend,
        instance: &str,
        out: &mut Vec<SetOpened>,
    ) -> Result<()> {
        let runner = |set: MigrationSet| {
            Runner::new(set)
                .with_lock_timeout(self.migration_lock_timeout)
                .with_clock(self.clock.clone())
                .with_fleet_expiry(self.fleet_expiry)
                .with_instance(instance)
                .force_contract(self.force_contract)
        };
        for set in &self.sets {
            let mut deferred = None;
            let report = match runner(set.clone()).open_with_report(migrator).await {
                Err(MigrateError::ContractRefused {
                    revision, blockers, ..
                }) if self.defer_blocked_contracts => {
                    // A contract revision is never the base, so it has a parent: apply up to
                    // it (the gate runs again for any earlier contract revision).
                    let at = set.position(&revision).unwrap_or_default();
                    let parent = &set.revisions()[at.saturating_sub(1)].id;
                    let before = set.up_to(parent)?;
                    let report = runner(before).open_with_report(migrator).await?;
                    deferred = Some(DeferredContract { revision, blockers });
                    report
                }
                other => other?,
            };
            out.push(SetOpened {
                set: set.name().to_owned(),
                outcome: report.opened,
                contracts: report.contracts,
                deferred,
            });
        }
        Ok(())
    }

    /// Records this open in the store's fleet registry and starts its heartbeat.
    async fn register_open(
        &self,
        migrator: Arc<dyn MigrationBackend>,
        instance: String,
    ) -> Result<Option<Registration>> {
        if !self.register {
            return Ok(None);
        }
        let mut heads: Vec<(String, String)> = vec![(
            CAIRN_SET.into(),
            cairn_migrate::cairn_set().head().id.clone(),
        )];
        heads.extend(
            self.sets
                .iter()
                .map(|s| (s.name().to_owned(), s.head().id.clone())),
        );
        let build = self.build_id.clone().unwrap_or_else(|| {
            fleet::default_build_id(
                env!("CARGO_PKG_VERSION"),
                heads.iter().map(|(s, r)| (s.as_str(), r.as_str())),
            )
        });
        let now = self.clock.now();
        let entry = FleetEntry {
            instance,
            build,
            heads: heads.into_iter().collect(),
            host: self.host.clone().unwrap_or_else(host_name),
            pid: std::process::id(),
            started_at: now,
            last_seen: now,
        };
        migrator
            .register(&entry, now.saturating_sub(fleet::PRUNE_AFTER))
            .await?;
        // Checked again now that this build is registered: a contract revision committed
        // between this open's look and its registration is found here (a registration waits
        // for a migration that read the registry), and the open is refused instead of running
        // against a schema this build breaks on.
        for set in &self.sets {
            if let Err(e) = Runner::new(set.clone())
                .check_contracts_known(migrator.as_ref())
                .await
            {
                let _ = migrator.deregister(&entry.instance).await;
                return Err(e.into());
            }
        }
        let heartbeat = tokio::spawn(heartbeat(
            migrator.clone(),
            entry.instance.clone(),
            self.clock.clone(),
            self.heartbeat_interval,
        ));
        Ok(Some(Registration {
            migrator,
            entry,
            expiry: self.fleet_expiry,
            clock: self.clock.clone(),
            heartbeat,
        }))
    }
}

/// Refreshes instance `instance`'s registry entry every `interval` until aborted. A failed
/// refresh is retried at the next tick: the entry stays live as long as one succeeds within
/// the expiry window.
async fn heartbeat(
    migrator: Arc<dyn MigrationBackend>,
    instance: String,
    clock: Arc<dyn Clock>,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval.max(Duration::from_millis(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: the registration just wrote the entry.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let _ = migrator.heartbeat(&instance, clock.now()).await;
    }
}

/// A new instance id for one open: unique across processes and opens.
fn instance_id() -> String {
    cairn_core::scratch_name("open")
}

/// The host name as the environment or `/etc/hostname` gives it.
fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
pub(crate) fn missing_feature(backend: Backend) -> Error {
    Error::invalid(
        "database URL",
        format!("this build of cairn has no {backend} backend; enable the `{backend}` feature"),
    )
}
