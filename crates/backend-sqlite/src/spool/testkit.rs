//! Test support for the spool (feature `testkit`): the conformance harness and fault
//! injection on a spool's writer connection.

use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;
use cairn_conformance::{Harness, SpoolHarness};
use cairn_core::spool::{ManualClock, Spool};
use cairn_core::{Appended, EpochDiagnostics, EpochId, Error, Event, Result, SpaceId};
use cairn_migrate::Runner;

use super::SqliteSpool;
use crate::config::SqliteOptions;
use crate::error::map;
use crate::testkit::SqliteHarness;
use crate::SqliteStore;

/// The largest page count SQLite accepts for `PRAGMA max_page_count` (its default limit).
const NO_PAGE_LIMIT: u64 = 4_294_967_294;

/// A conformance harness for the spool: a [`SqliteHarness`] (one store file in a fresh
/// temporary directory) plus the [`ManualClock`] every spool it opens reads.
#[derive(Debug)]
pub struct SqliteSpoolHarness {
    inner: SqliteHarness,
    clock: ManualClock,
    /// The directories of the stores [`SpoolHarness::fresh_spool`] created, each removed once
    /// its spool is dropped (or with the harness), so long property runs hold neither file
    /// descriptors nor disk space for finished cases.
    fresh: Mutex<Vec<(tempfile::TempDir, Weak<SqliteSpool>)>>,
}

impl SqliteSpoolHarness {
    /// A harness over a new store file.
    ///
    /// # Errors
    /// When the directory or the store cannot be created.
    pub async fn new() -> Result<Self> {
        Ok(Self {
            inner: SqliteHarness::new().await?,
            clock: ManualClock::default(),
            fresh: Mutex::new(Vec::new()),
        })
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// Opens a spool over this harness's store with `opts`, on the harness's clock.
    ///
    /// # Errors
    /// As [`SqliteSpool::open`].
    pub async fn open_with(&self, opts: SqliteOptions) -> Result<SqliteSpool> {
        SqliteSpool::open(self.path(), opts, Arc::new(self.clock.clone())).await
    }
}

/// A fresh spool harness; panics (test support) when the temporary store cannot be created.
pub async fn spool_harness() -> SqliteSpoolHarness {
    SqliteSpoolHarness::new()
        .await
        .unwrap_or_else(|e| panic!("cannot create a temporary SQLite store: {e}"))
}

#[async_trait]
impl Harness for SqliteSpoolHarness {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        self.inner.open().await
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.inner.legacy_append(space, parents, events).await
    }

    fn append_statement_budget(&self) -> Option<u64> {
        self.inner.append_statement_budget()
    }
}

#[async_trait]
impl SpoolHarness for SqliteSpoolHarness {
    fn clock(&self) -> &ManualClock {
        &self.clock
    }

    async fn open_spool(&self) -> Result<Arc<dyn Spool>> {
        Ok(Arc::new(self.open_with(SqliteOptions::default()).await?))
    }

    async fn fresh_spool(&self) -> Result<Arc<dyn Spool>> {
        let dir = tempfile::Builder::new()
            .prefix("cairn-sqlite-spool-")
            .tempdir()
            .map_err(|source| Error::Io {
                path: std::env::temp_dir().display().to_string(),
                source,
            })?;
        let path = dir.path().join("store").join("cairn.db");
        let spool = Arc::new(
            SqliteSpool::open(
                &path,
                SqliteOptions::default(),
                Arc::new(self.clock.clone()),
            )
            .await?,
        );
        let mut fresh = self
            .fresh
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        fresh.retain(|(_, spool)| spool.strong_count() > 0);
        fresh.push((dir, Arc::downgrade(&spool)));
        Ok(spool)
    }

    async fn open_spool_as(&self, runner: &Runner) -> Result<Arc<dyn Spool>> {
        let (store, _) =
            SqliteStore::open_migrated(self.path(), SqliteOptions::default(), runner).await?;
        Ok(Arc::new(
            SqliteSpool::from_store(&store, Arc::new(self.clock.clone()), Default::default())
                .await?,
        ))
    }
}

impl SqliteSpool {
    /// Test support: whether this instance's wake-up poller runs (it runs only while the
    /// instance has subscriptions, and stops within a poll interval of the last one's drop).
    pub fn testkit_wake_poller_running(&self) -> bool {
        self.wake.testkit_poller_running()
    }

    /// Test support: simulates a full disk for this spool's writes. Caps the database of the
    /// writer connection (shared with its store) at its current size plus `spare_pages`
    /// (`PRAGMA max_page_count`), so a write that needs more pages fails with `SQLITE_FULL`;
    /// `None` lifts the cap. Returns the page count the cap was computed from.
    ///
    /// # Errors
    /// When the pragma fails.
    pub async fn testkit_limit_pages(&self, spare_pages: Option<u64>) -> Result<u64> {
        self.store
            .with_writer(move |db| {
                let conn = db.conn();
                let pages: i64 = conn
                    .query_row("PRAGMA page_count", [], |r| r.get(0))
                    .map_err(map)?;
                let pages = u64::try_from(pages).unwrap_or(0);
                let cap = spare_pages.map_or(NO_PAGE_LIMIT, |spare| pages + spare);
                let cap = i64::try_from(cap).unwrap_or(i64::MAX);
                conn.pragma_update_and_check(None, "max_page_count", cap, |r| r.get::<_, i64>(0))
                    .map_err(map)?;
                Ok(pages)
            })
            .await
    }
}

impl SqliteSpoolHarness {
    /// A plain connection to the store file (test support: reads and DDL beside cairn's).
    async fn side_connection<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let path = self.path().to_path_buf();
        crate::db::blocking(move || {
            let conn = rusqlite::Connection::open(&path).map_err(map)?;
            conn.busy_timeout(std::time::Duration::from_secs(10))
                .map_err(map)?;
            f(&conn).map_err(map)
        })
        .await
    }
}

#[async_trait]
impl cairn_conformance::TxHarness for SqliteSpoolHarness {
    async fn open_tx(&self) -> Result<Arc<dyn cairn_migrate::Backend>> {
        let open = cairn_migrate::OpenOptions::default()
            .clock(Arc::new(self.clock.clone()))
            .migrations(cairn_conformance::app_order_set())
            .register_in_fleet(false);
        let backend =
            crate::SqliteBackend::open(self.path(), SqliteOptions::default(), open).await?;
        backend
            .sqlite_spool()
            .set_wake_poll(std::time::Duration::from_secs(3600));
        Ok(Arc::new(backend))
    }

    async fn insert_order(&self, tx: &mut dyn cairn_core::Transaction, id: &str) -> Result<()> {
        let tx = tx
            .as_any_mut()
            .downcast_mut::<crate::SqliteTransaction>()
            .ok_or_else(|| Error::invalid("transaction", "is not a SqliteTransaction"))?;
        let id = id.to_owned();
        tx.with_connection(move |c| c.execute("INSERT INTO app_order (id) VALUES (?1)", [id]))
            .await?;
        Ok(())
    }

    async fn order_exists(&self, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.side_connection(move |c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM app_order WHERE id = ?1)",
                [id],
                |r| r.get(0),
            )
        })
        .await
    }

    async fn open_impatient_spool(&self) -> Result<Arc<dyn Spool>> {
        let opts = SqliteOptions::default().busy_timeout(std::time::Duration::from_millis(200));
        Ok(Arc::new(self.open_with(opts).await?))
    }

    fn exclusive_writer(&self) -> bool {
        true
    }

    async fn fail_inserts_of_key(&self, key: &cairn_core::DedupKey) -> Result<()> {
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        self.side_connection(move |c| {
            c.execute_batch(&format!(
                "CREATE TRIGGER IF NOT EXISTS cairn_test_poison BEFORE INSERT ON spool_run \
                 WHEN NEW.dedup_key = X'{hex}' BEGIN SELECT RAISE(ABORT, 'a poisoned dedup key'); END"
            ))
        })
        .await
    }
}
