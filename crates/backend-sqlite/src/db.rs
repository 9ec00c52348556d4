//! [`Db`], the connection wrapper every statement goes through, and the blocking-pool helper.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cairn_core::{Error, Result};
use rusqlite::{Connection, Params, Row};

use crate::error::map;
use crate::sql;

/// Runs blocking work off the async executor.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("sqlite", format!("blocking task failed: {e}")))?
}

/// Locks a mutex around a connection (or the read pool's idle list), poisoned or not.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every transaction is finished (committed or rolled back) before a connection's guard
    // drops, and `Db::begin` rolls back anything left open, so a poisoned connection is still
    // usable; the idle list is a plain `Vec` that no panic can leave half-updated.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a write transaction ends.
pub(crate) enum End {
    Commit,
    /// Nothing was written (or must not be): roll back so no commit touches the file.
    Rollback,
}

/// A connection plus the store's statement counter: every statement sent goes through here.
///
/// A `Db` made by [`Db::grouped`] runs inside a group commit's transaction (see
/// `crate::group`): each [`Db::write_tx`] is then a savepoint of that transaction instead of a
/// transaction of its own, and the group's owner commits once for all of them.
pub(crate) struct Db<'c> {
    conn: &'c Connection,
    counter: &'c AtomicU64,
    grouped: bool,
    /// Set when a savepoint could not be released or rolled back: the group's transaction is
    /// then in an unknown state and must not be committed.
    broken: Cell<bool>,
}

impl<'c> Db<'c> {
    pub(crate) fn new(conn: &'c Connection, counter: &'c AtomicU64) -> Self {
        Self {
            conn,
            counter,
            grouped: false,
            broken: Cell::new(false),
        }
    }

    /// A wrapper for operations that run inside a group commit's open transaction.
    pub(crate) fn grouped(conn: &'c Connection, counter: &'c AtomicU64) -> Self {
        Self {
            grouped: true,
            ..Self::new(conn, counter)
        }
    }

    /// Whether the group's transaction can no longer be committed: a savepoint failed, or
    /// SQLite rolled the whole transaction back on an error (a full disk, an I/O error).
    pub(crate) fn group_broken(&self) -> bool {
        self.broken.get() || self.conn.is_autocommit()
    }

    /// Begins the group's transaction (`BEGIN IMMEDIATE`), rolling back anything left open.
    pub(crate) fn begin_group(&self) -> Result<()> {
        self.begin(sql::BEGIN_IMMEDIATE)
    }

    /// Commits the group's transaction; on failure rolls it back, so nothing of it remains.
    pub(crate) fn commit_group(&self) -> Result<()> {
        self.finish(Ok(((), End::Commit)))
    }

    /// Rolls back whatever transaction is open, ignoring errors (the caller reports its own).
    pub(crate) fn abandon_group(&self) {
        self.rollback_quietly();
    }

    /// Counts one statement sent outside [`Db::exec`] and [`Db::rows`].
    pub(crate) fn count(&self) {
        self.counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The connection, for a statement read lazily (count it with [`Db::count`]).
    pub(crate) fn conn(&self) -> &Connection {
        self.conn
    }

    pub(crate) fn exec(&self, sql: &str, params: impl Params) -> Result<usize> {
        self.count();
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map_err(map)
    }

    pub(crate) fn rows<T>(
        &self,
        sql: &str,
        params: impl Params,
        f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.count();
        let mut stmt = self.conn.prepare_cached(sql).map_err(map)?;
        let rows = stmt.query_map(params, f).map_err(map)?;
        rows.collect::<rusqlite::Result<Vec<T>>>().map_err(map)
    }

    fn begin(&self, sql: &str) -> Result<()> {
        if !self.conn.is_autocommit() {
            self.exec(sql::ROLLBACK, [])?;
        }
        self.exec(sql, []).map(drop)
    }

    /// Runs `f` in a `BEGIN IMMEDIATE` transaction; an error rolls everything back.
    ///
    /// Inside a group commit ([`Db::grouped`]) `f` runs in a savepoint of the group's
    /// transaction instead: an error or [`End::Rollback`] undoes `f`'s writes only, and the
    /// group's owner commits (or, if the commit fails, nothing of the group remains).
    pub(crate) fn write_tx<T>(&self, f: impl FnOnce(&Self) -> Result<(T, End)>) -> Result<T> {
        if self.grouped {
            return self.savepoint(f);
        }
        self.begin(sql::BEGIN_IMMEDIATE)?;
        self.finish(f(self))
    }

    fn savepoint<T>(&self, f: impl FnOnce(&Self) -> Result<(T, End)>) -> Result<T> {
        if let Err(e) = self.exec(sql::SAVEPOINT_OP, []) {
            self.broken.set(true);
            return Err(e);
        }
        let r = f(self);
        let keep = matches!(r, Ok((_, End::Commit)));
        let closed = if keep {
            self.exec(sql::RELEASE_OP, []).map(drop)
        } else {
            self.exec(sql::ROLLBACK_TO_OP, [])
                .and_then(|_| self.exec(sql::RELEASE_OP, []))
                .map(drop)
        };
        if let Err(e) = closed {
            self.broken.set(true);
            return Err(r.err().unwrap_or(e));
        }
        r.map(|(v, _)| v)
    }

    /// Runs `f` in a read transaction: one consistent snapshot for all its statements.
    pub(crate) fn read_tx<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        self.begin(sql::BEGIN_READ)?;
        self.finish(f(self).map(|v| (v, End::Commit)))
    }

    fn finish<T>(&self, r: Result<(T, End)>) -> Result<T> {
        match r {
            Ok((v, End::Commit)) => match self.exec(sql::COMMIT, []) {
                Ok(_) => Ok(v),
                Err(e) => {
                    self.rollback_quietly();
                    Err(e)
                }
            },
            Ok((v, End::Rollback)) => self.exec(sql::ROLLBACK, []).map(|_| v),
            Err(e) => {
                self.rollback_quietly();
                Err(e)
            }
        }
    }

    fn rollback_quietly(&self) {
        if !self.conn.is_autocommit() {
            // The original error is the one to report; a failed rollback leaves the
            // transaction open, and the next `begin` rolls it back.
            let _ = self.exec(sql::ROLLBACK, []);
        }
    }
}
