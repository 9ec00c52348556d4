//! Opening a store and lending its connections.
//!
//! The open, in order ([`SqliteStore::open_with_runner`]): the options; the file, before
//! anything is written to it ([`files::admit`]); cairn's migration set through the
//! lineage-aware runner; the connections and the identity of the files they opened
//! ([`connect`]); the identity watcher ([`start_watcher`]). Then the lending: the writer, alone
//! ([`SqliteStore::with_writer`]) or in a group commit ([`SqliteStore::with_writer_grouped`]),
//! each write transaction checking first that the files are still the ones opened
//! ([`check_files`]); and the read connections ([`SqliteStore::with_reader`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use cairn_core::{Error, Result};
#[cfg(feature = "testkit")]
use cairn_migrate::Opened;
use cairn_migrate::{cairn_set, MigrationBackend, Runner};
use rusqlite::Connection;

use super::{Inner, SqliteStore, IDENTITY_WATCH_INTERVAL};
use crate::config::SqliteOptions;
use crate::db::{blocking, lock, Db};
#[cfg(feature = "testkit")]
use crate::error::map;
use crate::files;
use crate::group::{self, GroupStats, Pending};
use crate::migrate::SqliteMigrator;
use crate::pool::ReadPool;

impl SqliteStore {
    /// Opens (creating when missing) the store at `path` with default [`SqliteOptions`].
    ///
    /// # Errors
    /// See [`SqliteStore::open_with`].
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the store at `path`, creating it when missing unless
    /// [`SqliteOptions::create_if_missing`] is off: refuses a symlinked file, `-wal` or
    /// `-shm`; creates the directory 0700 and the file 0600 and fsyncs the directory; refuses a
    /// database that holds other tables and no cairn stamp (unless
    /// [`SqliteOptions::share_file_with_application`]); runs cairn's migration set through the
    /// lineage-aware runner ([`SqliteStore::opened`] says what it did); turns on WAL, foreign
    /// keys, the busy timeout and `synchronous=FULL`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for options no store can be opened with (0 read connections);
    /// [`Error::NotFound`] when `create_if_missing` is off and no file exists, or the file holds no
    /// stamp of cairn's set (nothing is created); [`Error::UnsafePath`] for a symlink or a non-file
    /// at the path (nothing is created); [`Error::Io`] when the file or directory cannot be created
    /// or opened; [`Error::Corrupt`] when the file is not a SQLite database, holds an application's
    /// tables without the opt-in, or holds tables that do not match cairn's schema;
    /// [`Error::Incompatible`] for a store whose migration history this build must not use (nothing
    /// is changed); [`Error::Retryable`] when another writer held the lock past the busy timeout.
    pub async fn open_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        let runner = Self::cairn_runner(&opts);
        Self::open_with_runner(path.as_ref(), opts, &runner).await
    }

    /// The runner of cairn's own set an open with `opts` uses.
    pub(crate) fn cairn_runner(opts: &SqliteOptions) -> Runner {
        Runner::new(cairn_set()).with_lock_timeout(opts.busy_timeout.max(Duration::from_secs(30)))
    }

    /// Test support: opens the store at `path` as the build whose view of cairn's migration set
    /// `runner` holds (an older or a diverged build, or a runner with test hooks).
    ///
    /// # Errors
    /// As [`SqliteStore::open_with`].
    #[cfg(feature = "testkit")]
    pub async fn open_migrated(
        path: impl AsRef<Path>,
        opts: SqliteOptions,
        runner: &Runner,
    ) -> Result<(Self, Opened)> {
        let store = Self::open_with_runner(path.as_ref(), opts, runner).await?;
        let opened = store.opened().clone();
        Ok((store, opened))
    }

    /// Opens the store at `path` as the build whose view of cairn's migration set `runner`
    /// holds, in the order the module docs give.
    pub(crate) async fn open_with_runner(
        path: &Path,
        opts: SqliteOptions,
        runner: &Runner,
    ) -> Result<Self> {
        opts.validate()?;
        let path = path.to_path_buf();
        {
            let (path, opts) = (path.clone(), opts.clone());
            // A file that is not a SQLite database, or a database of something else, is refused
            // before anything (even the switch to WAL) is written to it.
            blocking(move || files::admit(&path, &opts).map(drop)).await?;
        }
        if !opts.create_if_missing {
            // A database that holds no stamp of cairn's set (an empty SQLite file, or one made
            // by something else with the opt-in to share it) is no store yet: refused, as a
            // missing file is, before the runner would create cairn's tables in it. The look
            // writes nothing; Postgres refuses a schema without a stamp the same way.
            let state = SqliteMigrator::new(&path, opts.clone())
                .read_state(runner.set().name())
                .await
                .map_err(|e| files::open_error_mapped(&path, e.into()))?;
            if state.stamp.is_none() {
                return Err(files::no_store(&path));
            }
        }
        // A contract revision of cairn's set that a live older build lacks waits for it to go:
        // the open applies what comes before and runs at that revision meanwhile.
        let opened = runner
            .open_deferring(&SqliteMigrator::new(&path, opts.clone()))
            .await
            .map_err(|e| files::open_error_mapped(&path, e.into()))?;
        let opened = super::cairn_set_opened(opened);
        blocking(move || {
            let store = connect(path, opts, opened)?;
            start_watcher(&store.inner)?;
            Ok(store)
        })
        .await
    }
}

/// The store over a file whose schema is at this build's revision: the writer, its statements
/// checked against the file's tables ([`files::connect_writer`]); the read connections; then
/// the identity of the files they opened.
fn connect(
    path: PathBuf,
    opts: SqliteOptions,
    cairn: cairn_migrate::SetOpened,
) -> Result<SqliteStore> {
    let writer = files::connect_writer(&path, &opts)?;
    let readers = (0..opts.read_connections)
        .map(|_| files::connect_reader(&path, &opts))
        .collect::<Result<Vec<_>>>()?;
    let identity = files::Identity::record(&path)?;
    Ok(SqliteStore {
        inner: Arc::new(Inner {
            path,
            opts,
            cairn,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            readers: ReadPool::new(readers),
            statements: AtomicU64::new(0),
            pending: std::sync::Mutex::new(Vec::new()),
            groups: GroupStats::default(),
            identity,
            wal_scrubbed: AtomicBool::new(false),
            sync: Default::default(),
        }),
    })
}

/// Starts the identity watcher of a newly opened store: a thread that holds the store only
/// weakly and ends within one [`IDENTITY_WATCH_INTERVAL`] after the store's last handle is
/// dropped, or once the log was checkpointed away after a replacement.
fn start_watcher(inner: &Arc<Inner>) -> Result<()> {
    let weak = Arc::downgrade(inner);
    std::thread::Builder::new()
        .name("cairn-sqlite-identity".into())
        .spawn(move || watch(&weak, IDENTITY_WATCH_INTERVAL))
        .map(drop)
        .map_err(|e| {
            Error::unavailable(format!(
                "cannot start the store file's identity watcher: {e}"
            ))
        })
}

/// The watcher's loop ([`start_watcher`]).
fn watch(store: &Weak<Inner>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(inner) = store.upgrade() else {
            return;
        };
        if inner.wal_scrubbed.load(Ordering::SeqCst) {
            return;
        }
        // A path that cannot be looked at now is looked at again next time; writes refuse
        // meanwhile.
        let Ok(Some(_)) = inner.identity.changed() else {
            continue;
        };
        // A busy writer is mid-write, and that write checks the files itself; otherwise the
        // watcher runs the check (and its checkpoint) through the writer.
        if let Ok(conn) = inner.writer.try_lock() {
            let _ = check_files(&inner, &conn);
        };
    }
}

/// Refuses a write when the store file or its `-wal` file is no longer the one this instance
/// opened (one `lstat` of each path per write transaction; a group commit checks once).
///
/// The first time the store file itself is found replaced while the `-wal` file is still this
/// store's, the writer checkpoints the log into the file it opened (through its open
/// descriptor) and truncates it: the log's frames belong to that file, and any process opening
/// the path would otherwise read them as pages of the file now there.
fn check_files(inner: &Inner, conn: &Connection) -> Result<()> {
    let Some(changed) = inner.identity.changed()? else {
        return Ok(());
    };
    if matches!(changed, files::Changed::Main(_)) && !inner.wal_scrubbed.load(Ordering::SeqCst) {
        // Best effort: a failure (a reader holding a snapshot past the busy timeout) leaves
        // the log as it was, and the next write or watcher tick tries again; the write is
        // refused either way. The first column is 1 when the checkpoint could not finish.
        let done = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .is_ok_and(|busy| busy == 0);
        if done {
            inner.wal_scrubbed.store(true, Ordering::SeqCst);
        }
    }
    Err(inner.identity.error(&changed))
}

/// A copy of `e` for each caller of a group the check refused (the error is not `Clone`).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::StoreReplaced { path, detail } => Error::StoreReplaced {
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::Io { path, source } => Error::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        // The writer busy past the timeout: each waiting caller gets the same retryable
        // error, its detail once (not the first error's whole message wrapped again).
        Error::Retryable { detail, .. } => Error::retryable(detail.clone()),
        other => Error::backend("sqlite", other.to_string()),
    }
}

impl SqliteStore {
    /// Runs `f` on the writer connection, once the in-process writer guard is free.
    ///
    /// # Errors
    /// [`Error::Retryable`] when another task of this instance held the guard past the busy
    /// timeout; whatever `f` returns.
    pub(crate) async fn with_writer<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let conn = self.writer_guard().await?;
        let inner = self.inner.clone();
        blocking(move || {
            check_files(&inner, &conn)?;
            f(&Db::new(&conn, &inner.statements))
        })
        .await
    }

    /// Runs `f` on the writer connection as part of a group commit ([`crate::group`]):
    /// concurrent calls share one transaction and one fsync, and each is answered only after
    /// that transaction committed. `f` may run twice (the second time on its own, in a fresh
    /// transaction, after the group's transaction failed and left nothing behind).
    ///
    /// # Errors
    /// [`Error::Retryable`] when the writer could not be had within the busy timeout; whatever
    /// `f` returns.
    pub(crate) async fn with_writer_grouped<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let (op, answer) = group::Op::queued(f);
        lock(&self.inner.pending).push(op);
        // The drain runs as a task of its own, so a caller that stops waiting cannot strand
        // the operations queued behind it; every queued operation has a drain after it.
        let store = self.clone();
        tokio::spawn(async move { store.drain_group().await });
        answer.await.map_err(|_| {
            Error::backend(
                "sqlite",
                "a grouped write ended without an answer (its writer task failed)",
            )
        })?
    }

    /// Takes the writer, then runs every queued operation (up to [`group::MAX_GROUP`]) as one
    /// group.
    async fn drain_group(&self) {
        let conn = match self.writer_guard().await {
            Ok(conn) => conn,
            Err(e) => {
                let ops = std::mem::take(&mut *lock(&self.inner.pending));
                for op in ops {
                    op.fail(copy_error(&e));
                }
                return;
            }
        };
        let ops: Vec<Box<dyn Pending>> = {
            let mut pending = lock(&self.inner.pending);
            let n = pending.len().min(group::MAX_GROUP);
            pending.drain(..n).collect()
        };
        if ops.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        let _ = blocking(move || {
            match check_files(&inner, &conn) {
                Ok(()) => group::run_group(&conn, &inner.statements, &inner.groups, ops),
                Err(e) => {
                    for op in ops {
                        op.fail(copy_error(&e));
                    }
                }
            }
            Ok(())
        })
        .await;
    }

    /// Test and bench support: how many group commits of several operations this instance
    /// made, the operations they held, and the groups that fell back to one transaction per
    /// operation.
    #[cfg(feature = "testkit")]
    pub fn testkit_group_stats(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let g = &self.inner.groups;
        (
            g.groups.load(Relaxed),
            g.grouped_ops.load(Relaxed),
            g.fallbacks.load(Relaxed),
        )
    }

    /// Test support: write operations queued for the next group commit.
    #[cfg(feature = "testkit")]
    pub fn testkit_pending_writes(&self) -> usize {
        lock(&self.inner.pending).len()
    }

    /// Test support: makes the writer connection's next `fail` commits fail (SQLite's commit
    /// hook turns them into rollbacks), to check that no caller is answered with success for
    /// a write that did not commit.
    #[cfg(feature = "testkit")]
    pub async fn testkit_fail_commits(&self, fail: u64) -> Result<()> {
        let conn = self.writer_guard().await?;
        blocking(move || {
            let left = std::sync::atomic::AtomicU64::new(fail);
            conn.commit_hook(Some(move || {
                left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            }))
            .map_err(map)?;
            Ok(())
        })
        .await
    }

    /// The in-process writer guard, waited for at most the busy timeout. A panic inside a
    /// write leaves no transaction behind that matters: `Db::begin` rolls back whatever the
    /// connection still has open.
    pub(crate) async fn writer_guard(&self) -> Result<tokio::sync::OwnedMutexGuard<Connection>> {
        let timeout = self.inner.opts.busy_timeout;
        tokio::time::timeout(timeout, self.inner.writer.clone().lock_owned())
            .await
            .map_err(|_| {
                Error::retryable(format!(
                    "another write of this store instance held the writer past the busy \
                     timeout ({} ms); retry, or raise SqliteOptions::busy_timeout",
                    timeout.as_millis()
                ))
            })
    }

    /// Refuses a write on `conn` (the writer) when the store's files are no longer the ones
    /// this instance opened (see `check_files`).
    pub(crate) fn check_writer(&self, conn: &Connection) -> Result<()> {
        check_files(&self.inner, conn)
    }

    /// The statement counter, for a [`Db`] over the writer.
    pub(crate) fn statements(&self) -> &AtomicU64 {
        &self.inner.statements
    }

    /// Runs `f` on a read connection of its own (waiting, without holding a thread, while all
    /// of them are busy).
    pub(crate) async fn with_reader<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db<'_>) -> Result<T> + Send + 'static,
    {
        let conn = self.inner.readers.checkout().await?;
        let inner = self.inner.clone();
        blocking(move || f(&Db::new(&conn, &inner.statements))).await
    }

    /// Test support: the read connections, to hold one busy.
    #[cfg(feature = "testkit")]
    pub(crate) fn readers(&self) -> &Arc<ReadPool> {
        &self.inner.readers
    }

    /// Test support: rows the writer connection has changed since it was opened
    /// (`sqlite3_total_changes`), to prove that an operation wrote nothing.
    #[cfg(feature = "testkit")]
    pub async fn testkit_total_changes(&self) -> Result<u64> {
        let conn = self.writer_guard().await?;
        blocking(move || Ok(conn.total_changes())).await
    }
}
