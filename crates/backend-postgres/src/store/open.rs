//! Opening a store: the migration runner brings the schema to this build's revision, then the
//! store's one pool is built (its session setup, or a transaction-mode pooler's checkouts).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use cairn_core::{Error, Result};
use cairn_migrate::{cairn_set, MigrationBackend, Runner};
use sqlx::postgres::PgPoolOptions;

use super::{Inner, PgStore};
use crate::config::{PgOptions, SchemaName};
use crate::error::map;
use crate::migrate::PgMigrator;
use crate::pooler::Pooler;
use crate::sql;

impl PgStore {
    /// Opens the store at `url` in schema `public`.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with(PgOptions::new(url)).await
    }

    /// Opens with `opts` as a build that knows cairn's own migration set: opens the store
    /// through the lineage-aware runner (creating the schema and tables when missing, unless
    /// [`PgOptions::create_if_missing`] says not to; upgrading an older store; using a newer
    /// compatible one as is), then builds the pool. [`PgStore::opened`] says what the open did.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL, a schema name outside
    /// `[a-z_][a-z0-9_]{0,62}` or a zero `max_connections`; [`Error::Unavailable`] when the
    /// server cannot be reached; [`Error::NotFound`] when `create_if_missing(false)` and the
    /// schema holds no cairn store; [`Error::Incompatible`] for a store whose migration history
    /// this build must not use; [`Error::Migration`] when an upgrade failed (and was rolled
    /// back); [`Error::Backend`] when the schema cannot be created.
    pub async fn open_with(opts: PgOptions) -> Result<Self> {
        let runner = Self::cairn_runner(&opts);
        Self::open_through(opts, &runner).await
    }

    /// The runner of cairn's own set an open with `opts` uses.
    pub(crate) fn cairn_runner(opts: &PgOptions) -> Runner {
        Runner::new(cairn_set())
            .with_lock_timeout(opts.lock_timeout.max(std::time::Duration::from_secs(30)))
    }

    /// Opens with `opts` through `runner` (a build's own view of cairn's
    /// migration set), and says what the open did.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    #[cfg(feature = "testkit")]
    pub async fn open_migrated(
        opts: PgOptions,
        runner: &Runner,
    ) -> Result<(Self, cairn_migrate::Opened)> {
        let store = Self::open_through(opts, runner).await?;
        let opened = store.opened().clone();
        Ok((store, opened))
    }

    /// Opens the store through `runner`, then builds the pool.
    pub(crate) async fn open_through(opts: PgOptions, runner: &Runner) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        if opts.max_connections == 0 {
            return Err(Error::invalid("max_connections", "must be at least 1"));
        }
        let connect = opts.connect_options()?;
        if opts.pooler_mode()? == Pooler::None {
            let shared = tokio::time::timeout(
                opts.acquire_timeout,
                crate::pooler::sessions_are_shared(&connect),
            )
            .await
            .map_err(|_| crate::error::connect_timed_out())?
            .map_err(map)?;
            if shared {
                return Err(Error::invalid(
                    "postgres connection options",
                    crate::error::UNDECLARED_POOLER,
                ));
            }
        }
        let migrator = PgMigrator::new(opts.clone())?;
        if !opts.create_if_missing {
            // The look without the lock writes nothing, and a missing schema reads as a store
            // without a stamp, so this refuses before anything could be created.
            let state = migrator.read_state(runner.set().name()).await?;
            if state.stamp.is_none() {
                return Err(Error::NotFound {
                    what: format!("cairn store in schema {}", schema.as_str()),
                });
            }
        }
        // A contract revision of cairn's set that a live older build lacks waits for it to go:
        // the open applies what comes before and runs at that revision meanwhile.
        let cairn = crate::store::cairn_set_opened(runner.open_deferring(&migrator).await?);
        let search_path = schema.as_str().to_owned();
        let lock_timeout_ms = opts.lock_timeout.as_millis().max(1).to_string();
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections)
            .acquire_timeout(opts.acquire_timeout);
        let checkouts = (opts.pooler_mode()? == Pooler::Transaction)
            .then(|| Arc::new(crate::pooler::Checkouts::default()));
        let pool = match &checkouts {
            // Behind a transaction-mode pooler every checkout is one transaction that sets
            // what it needs (crate::pooler), and no statement is cached.
            Some(checkouts) => {
                crate::pooler::connect(
                    crate::pooler::with_checkout_transactions(
                        pool,
                        &search_path,
                        &lock_timeout_ms,
                        checkouts.clone(),
                    ),
                    connect.statement_cache_capacity(0),
                )
                .await
            }
            None => {
                crate::config::with_liveness_check(pool)
                    .after_connect(move |conn, _meta| {
                        let search_path = search_path.clone();
                        let lock_timeout_ms = lock_timeout_ms.clone();
                        Box::pin(async move {
                            sqlx::query(sql::SESSION_SETUP)
                                .bind(search_path)
                                .bind(lock_timeout_ms)
                                .execute(conn)
                                .await
                                .map(|_| ())
                        })
                    })
                    .connect_with(connect)
                    .await
            }
        }
        .map_err(map)?;
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                opts,
                schema,
                cairn,
                statements: AtomicU64::new(0),
                checkouts,
                sync: Default::default(),
            }),
        })
    }
}
