//! Test support (feature `testkit`): the conformance harness, the legacy writer and the
//! benchmark hooks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn_conformance::Harness;
use cairn_core::{
    Appended, EpochDiagnostics, EpochId, Error, Event, EventId, Head, Result, SpaceId,
};
use rusqlite::{params, OptionalExtension};

use crate::config::SqliteOptions;
use crate::db::{blocking, End};
use crate::pool::Checkout;
use crate::store::{
    anti_join, cache_sole_head, epoch_seq, insert_epoch, max_seq, probe, APPEND_STATEMENT_BUDGET,
};
use crate::{files, sql, SqliteStore};

/// A conformance harness over one SQLite file in a fresh temporary directory (removed on drop).
#[derive(Debug)]
pub struct SqliteHarness {
    path: PathBuf,
    /// The instance the legacy writer uses (opened on first use); tests open their own.
    legacy: tokio::sync::OnceCell<SqliteStore>,
    /// A long-lived connection whose `PRAGMA data_version` changes when another connection
    /// commits (opened once the file exists).
    probe: std::sync::Mutex<Option<rusqlite::Connection>>,
    _dir: tempfile::TempDir,
}

impl SqliteHarness {
    /// A harness over a new store file in a fresh temporary directory.
    ///
    /// # Errors
    /// When the directory or the store cannot be created.
    pub async fn new() -> Result<Self> {
        let h = Self::empty()?;
        h.legacy().await?;
        Ok(h)
    }

    /// A harness over a path in a fresh temporary directory where no store exists yet.
    fn empty() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("cairn-sqlite-")
            .tempdir()
            .map_err(|source| Error::Io {
                path: std::env::temp_dir().display().to_string(),
                source,
            })?;
        let path = dir.path().join("store").join("cairn.db");
        Ok(Self {
            path,
            legacy: tokio::sync::OnceCell::new(),
            probe: std::sync::Mutex::new(None),
            _dir: dir,
        })
    }

    async fn legacy(&self) -> Result<&SqliteStore> {
        self.legacy
            .get_or_try_init(|| SqliteStore::open(&self.path))
            .await
    }

    /// The store file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A fresh harness; panics (test support) when the temporary store cannot be created.
pub async fn harness() -> SqliteHarness {
    SqliteHarness::new()
        .await
        .unwrap_or_else(|e| panic!("cannot create a temporary SQLite store: {e}"))
}

#[async_trait]
impl Harness for SqliteHarness {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(Arc::new(SqliteStore::open(&self.path).await?))
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.legacy()
            .await?
            .legacy_append(space, parents, events)
            .await
    }

    fn append_statement_budget(&self) -> Option<u64> {
        Some(APPEND_STATEMENT_BUDGET)
    }
}

/// A read transaction held open on one of a store's read connections (see
/// [`SqliteStore::testkit_hold_read`]); dropping it ends the transaction and returns the
/// connection to the store.
pub struct ReadHold {
    conn: Option<Checkout>,
}

impl std::fmt::Debug for ReadHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadHold").finish_non_exhaustive()
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        // The rollback is a blocking call: it runs on the blocking pool when there is a
        // runtime. A failure leaves the transaction open, and the next read on this connection
        // rolls it back before it begins.
        if let Some(conn) = self.conn.take() {
            let end = move || drop(conn.execute_batch(sql::ROLLBACK));
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(end)),
                Err(_) => end(),
            }
        }
    }
}

/// The store's in-process writer guard, held by a blocking task until this is dropped (see
/// [`SqliteStore::testkit_hold_writer`]).
#[derive(Debug)]
pub struct WriterHold {
    _release: std::sync::mpsc::Sender<()>,
}

/// Statements SQLite reported starting on a traced writer connection (see
/// [`SqliteStore::testkit_traced_writes`]).
static TRACED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// One traced measurement at a time in a process: the counter is global.
static TRACING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn count_statement(event: rusqlite::trace::TraceEvent<'_>) {
    if let rusqlite::trace::TraceEvent::Stmt(_, text) = event {
        // The trace also reports the start of each trigger program (`-- TRIGGER name`); those
        // are not statements the store sent.
        if !text.starts_with("-- ") {
            TRACED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Which head lookup [`SqliteStore::bench_time_lookup`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadLookup {
    /// The anti-join without the `(space, parent, child)` index. Not measured on SQLite:
    /// [`SqliteStore::bench_time_lookup`] refuses it with [`Error::InvalidInput`]. Without that
    /// index SQLite plans the correlated `NOT EXISTS` probe as a walk over all of the space's
    /// edges for every epoch (`SEARCH p USING COVERING INDEX sqlite_autoindex_epoch_parent_1
    /// (space=?)`), so the lookup is quadratic: hours at a million epochs, and not a plan the
    /// store ever runs (the index is part of its schema).
    AntiJoinPlain,
    /// The anti-join as the store runs it, with the `(space, parent, child)` index.
    AntiJoinIndexed,
    /// The cached lookup as the store runs it: the one-statement probe that reads the next seq
    /// and the cache rows (the currency check included).
    Cache,
}

/// Epochs per transaction while seeding.
const SEED_BATCH: u64 = 50_000;

impl SqliteStore {
    /// Test support: takes one of the store's read connections out of use, inside a read
    /// transaction that has read `space`'s largest seq (so it holds a WAL snapshot), until the
    /// returned hold is dropped. Waits while every read connection is busy.
    ///
    /// # Errors
    /// Backend errors.
    pub async fn testkit_hold_read(&self, space: &SpaceId) -> Result<ReadHold> {
        let conn = self.readers().checkout().await?;
        let space = space.clone();
        let conn = blocking(move || {
            conn.execute_batch(sql::BEGIN_READ)
                .map_err(crate::error::map)?;
            let _seq: Option<i64> = conn
                .query_row(sql::MAX_SEQ, params![space.as_bytes()], |r| r.get(0))
                .optional()
                .map_err(crate::error::map)?;
            Ok(conn)
        })
        .await?;
        Ok(ReadHold { conn: Some(conn) })
    }

    /// Test support: takes the store instance's in-process writer guard (the way a long write
    /// would hold it) and keeps it until the returned hold is dropped.
    ///
    /// # Errors
    /// When the guard cannot be taken (see [`cairn_core::EpochStore::append`]).
    pub async fn testkit_hold_writer(&self) -> Result<WriterHold> {
        let (held, taken) = tokio::sync::oneshot::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let store = self.clone();
        tokio::spawn(async move {
            store
                .with_writer(move |_db| {
                    let _ = held.send(());
                    // Returns when the hold (the only sender) is dropped.
                    let _ = released.recv();
                    Ok(())
                })
                .await
        });
        taken
            .await
            .map_err(|_| Error::backend("sqlite", "the writer guard could not be taken"))?;
        Ok(WriterHold { _release: release })
    }

    /// Test support: runs `op` with SQLite's own statement trace (`trace_v2`) on this
    /// instance's writer connection and returns its output with the number of statements
    /// SQLite reported starting there: a count independent of the store's own counter
    /// ([`EpochDiagnostics::statements_executed`]).
    ///
    /// # Errors
    /// When the writer cannot be reached to install or remove the trace.
    pub async fn testkit_traced_writes<T>(
        &self,
        op: impl std::future::Future<Output = T>,
    ) -> Result<(T, u64)> {
        let _one_at_a_time = TRACING.lock().await;
        let trace = |on: bool| {
            self.with_writer(move |db| {
                if on {
                    db.conn().trace_v2(
                        rusqlite::trace::TraceEventCodes::SQLITE_TRACE_STMT,
                        Some(count_statement),
                    );
                } else {
                    db.conn()
                        .trace_v2(rusqlite::trace::TraceEventCodes::empty(), None);
                }
                Ok(())
            })
        };
        trace(true).await?;
        TRACED.store(0, std::sync::atomic::Ordering::Relaxed);
        let out = op.await;
        trace(false).await?;
        Ok((out, TRACED.load(std::sync::atomic::Ordering::Relaxed)))
    }

    /// Test support: appends an epoch the way a writer that predates the head cache does:
    /// under the same writer lock and seq rule, with the anti-join's heads as parents (or
    /// `parents` when given, to make a fork), never touching `epoch_head`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an invalid batch; [`Error::UnknownParent`] for a parent not
    /// in the space.
    pub async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let space = space.clone();
        self.with_writer(move |db| {
            let ids: Vec<EventId> = events.iter().map(Event::id).collect();
            db.write_tx(|db| {
                let mut parents = match parents {
                    Some(p) => p,
                    None => anti_join(db, &space)?.into_iter().map(|h| h.id).collect(),
                };
                parents.sort();
                parents.dedup();
                for p in &parents {
                    if epoch_seq(db, &space, p)?.is_none() {
                        return Err(Error::UnknownParent { parent: *p });
                    }
                }
                let seq = cairn_core::next_seq(max_seq(db, &space)?);
                let id = insert_epoch(db, &space, seq, &parents, &events, &ids)?;
                Ok((Appended { id, seq, parents }, End::Commit))
            })
        })
        .await
    }

    /// Bulk-seeds a linear chain of `epochs` one-event epochs on `space`, continuing from its
    /// current heads, in transactions of 50,000 epochs that each end with the head cache
    /// current (one row). Calls `progress(done)` after each transaction.
    ///
    /// # Errors
    /// Backend errors; a failed batch is rolled back, earlier batches stay.
    pub async fn bench_seed_chain(
        &self,
        space: &SpaceId,
        epochs: u64,
        progress: Arc<dyn Fn(u64) + Send + Sync>,
    ) -> Result<()> {
        let space = space.clone();
        self.with_writer(move |db| {
            let mut done = 0u64;
            while done < epochs {
                let batch = SEED_BATCH.min(epochs - done);
                db.write_tx(|db| {
                    let probe = probe(db, &space)?;
                    let mut parents: Vec<EpochId> = if probe.cache_is_current() {
                        probe.cached.iter().map(|h| h.id).collect()
                    } else {
                        anti_join(db, &space)?.into_iter().map(|h| h.id).collect()
                    };
                    let mut seq = probe.next();
                    let mut last = None;
                    for i in 0..batch {
                        let events =
                            vec![Event::new("bench.seed", (done + i).to_le_bytes().to_vec())];
                        let ids = [events[0].id()];
                        let id = insert_epoch(db, &space, seq, &parents, &events, &ids)?;
                        last = Some(Head { id, seq });
                        parents = vec![id];
                        seq = cairn_core::Seq(seq.0 + 1);
                    }
                    if let Some(head) = last {
                        cache_sole_head(db, &space, &probe.cached, head)?;
                    }
                    Ok(((), End::Commit))
                })?;
                done += batch;
                progress(done);
            }
            Ok(())
        })
        .await
    }

    /// Runs the named head lookup `runs` times on a connection of its own, with the exact SQL
    /// the store uses, inside one blocking task, and returns each run's duration (statement
    /// execution and reading every row; compilation happens once, before the first run).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for [`HeadLookup::AntiJoinPlain`] (see there); backend errors.
    pub async fn bench_time_lookup(
        &self,
        space: &SpaceId,
        lookup: HeadLookup,
        runs: usize,
    ) -> Result<Vec<Duration>> {
        let space = space.clone();
        let path = self.path().to_path_buf();
        let opts: SqliteOptions = self.options().clone();
        blocking(move || {
            let conn = files::connect(&path, &opts)?;
            let time = |q: &str| -> Result<Vec<Duration>> {
                let mut stmt = conn.prepare(q).map_err(crate::error::map)?;
                let mut out = Vec::with_capacity(runs);
                for _ in 0..runs {
                    let start = Instant::now();
                    let n = stmt
                        .query_map(params![space.as_bytes()], |_| Ok(()))
                        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<()>>>())
                        .map_err(crate::error::map)?
                        .len();
                    out.push(start.elapsed());
                    std::hint::black_box(n);
                }
                Ok(out)
            };
            match lookup {
                HeadLookup::Cache => time(sql::PROBE),
                HeadLookup::AntiJoinIndexed => time(sql::ANTI_JOIN_HEADS),
                HeadLookup::AntiJoinPlain => Err(Error::invalid(
                    "head lookup",
                    "AntiJoinPlain is not measured on SQLite: without the (space, parent, child) \
                     index its plan scans the space's edges once per epoch (quadratic)",
                )),
            }
        })
        .await
    }
}

const SCHEMA_COLUMNS: &str =
    "SELECT m.name, p.name FROM sqlite_schema m JOIN pragma_table_info(m.name) p \
    WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid";

#[async_trait]
impl cairn_conformance::MigrationHarness for SqliteHarness {
    async fn fresh(&self) -> Self {
        Self::empty().unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"))
    }

    async fn migrator(&self) -> Arc<dyn cairn_migrate::MigrationBackend> {
        Arc::new(crate::SqliteMigrator::new(
            &self.path,
            SqliteOptions::default(),
        ))
    }

    async fn open_as(&self, runner: &cairn_migrate::Runner) -> Result<Arc<dyn EpochDiagnostics>> {
        let (store, _) =
            SqliteStore::open_migrated(&self.path, SqliteOptions::default(), runner).await?;
        Ok(Arc::new(store))
    }

    async fn schema(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let path = self.path.clone();
        blocking(move || {
            let conn = files::connect(&path, &SqliteOptions::default())?;
            let rows: Vec<(String, String)> = conn
                .prepare(SCHEMA_COLUMNS)
                .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
                .map_err(crate::error::map)?;
            let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
            for (table, column) in rows {
                if !cairn_migrate::BOOKKEEPING_TABLES.contains(&table.as_str()) {
                    out.entry(table).or_default().push(column);
                }
            }
            Ok(out)
        })
        .await
        .expect("read the store's schema")
    }

    async fn execute_sql(&self, sql: &str) -> Result<()> {
        let (path, sql) = (self.path.clone(), sql.to_owned());
        blocking(move || {
            let conn = files::connect(&path, &SqliteOptions::default())?;
            conn.execute_batch(crate::sql::BEGIN_IMMEDIATE)
                .map_err(crate::error::map)?;
            conn.execute_batch(&sql).map_err(crate::error::map)?;
            conn.execute_batch(crate::sql::COMMIT)
                .map_err(crate::error::map)
        })
        .await
    }

    async fn query_i64(&self, sql: &str) -> Result<i64> {
        let (path, sql) = (self.path.clone(), sql.to_owned());
        blocking(move || {
            let conn = files::connect(&path, &SqliteOptions::default())?;
            conn.query_row(&sql, [], |r| r.get(0))
                .map_err(crate::error::map)
        })
        .await
    }

    async fn commit_probe(&self) -> String {
        if !self.path.exists() {
            return "absent".into();
        }
        // A quick read on a long-lived connection; block_in_place keeps it off the executor's
        // other tasks.
        tokio::task::block_in_place(|| {
            let mut guard = self
                .probe
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if guard.is_none() {
                *guard = Some(
                    files::connect(&self.path, &SqliteOptions::default())
                        .expect("probe connection"),
                );
            }
            let conn = guard.as_ref().expect("probe connection");
            let v: i64 = conn
                .query_row("PRAGMA data_version", [], |r| r.get(0))
                .expect("data_version");
            format!("data_version {v}")
        })
    }
}

impl cairn_conformance::AdditivityHarness for SqliteHarness {
    fn additivity(&self) -> Arc<dyn cairn_migrate::additivity::AdditivityEngine> {
        Arc::new(crate::SqliteAdditivity::new())
    }
}
