//! cairn's writes and the application's inside one `BEGIN IMMEDIATE` transaction on the
//! store's writer connection: [`SqliteBackend::transaction`] (a closure, the shape one writer
//! asks for) and [`SqliteTransaction`] (the same as an async handle, behind
//! `cairn_core::Transaction`).
//!
//! The transaction holds the store instance's writer for its whole length, and the file's
//! write lock: other writes of this instance wait for it (and fail with
//! [`Error::Retryable`] after the busy timeout, as do other processes' writes), while reads
//! go on, on the read connections, seeing the last commit. Each cairn operation inside runs in
//! a savepoint of its own, exactly as inside a group commit, so a refused operation leaves the
//! transaction's other writes in place. Subscribers of this instance are woken after the
//! commit; other processes' see the commit through `PRAGMA data_version`. A rollback changes
//! nothing on the file and wakes nobody.

use std::any::Any;
use std::fmt;
use std::ops::Deref;

use async_trait::async_trait;
use cairn_core::spool::{
    check_enqueue, check_enqueue_batch, check_payload, check_producer_event_id, CancelOutcome,
    CheckedEnqueue, CloseOutcome, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, EventAppended,
    FactName, FactOutcome, QueueName, RunEventId, RunId, Spool, MAX_FACT_VALUE,
    MAX_RUN_EVENT_PAYLOAD,
};
use cairn_core::{failed_transaction, Appended, Error, Event, Result, SpaceId, Transaction};
use rusqlite::Connection;
use tokio::sync::OwnedMutexGuard;

use crate::db::{blocking, Db};
use crate::spool::{enqueue, events, settle};
use crate::store::append_tx;
use crate::{sql, SqliteBackend, SqliteSpool};

/// The writer, held by a transaction. Dropped while its transaction is still open (a panic in
/// the application's closure, a canceled operation, a dropped handle), it rolls back first, so
/// the next holder finds nothing of it: on tokio's blocking pool when dropped inside a runtime
/// (the writer stays held until the rollback is done), else right here.
struct Held(Option<OwnedMutexGuard<Connection>>);

impl Held {
    fn new(guard: OwnedMutexGuard<Connection>) -> Self {
        Self(Some(guard))
    }
}

impl Deref for Held {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        // Only `drop` takes the guard out.
        self.0.as_ref().expect("a held writer")
    }
}

/// Rolls back whatever transaction `conn` has open; nothing to report to (the next write's
/// `BEGIN` rolls back whatever is left).
fn roll_back_open(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch(sql::ROLLBACK);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(guard) = self.0.take() else {
            return;
        };
        if guard.is_autocommit() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || roll_back_open(&guard));
            }
            Err(_) => roll_back_open(&guard),
        }
    }
}

/// cairn's operations inside an open SQLite transaction, plus the connection for the
/// application's own statements: what [`SqliteBackend::transaction`]'s closure receives.
///
/// Each method does what the `Spool`/`EpochStore` method of the same name does, in a
/// savepoint of the transaction: an error undoes that operation only. Nothing is visible to
/// other connections until the transaction commits.
pub struct SqliteTx<'a> {
    db: Db<'a>,
    spool: &'a SqliteSpool,
    /// Queues that got a run, woken after the commit.
    woken: Vec<QueueName>,
}

impl fmt::Debug for SqliteTx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteTx")
            .field("path", &self.spool.store().path())
            .finish_non_exhaustive()
    }
}

impl<'a> SqliteTx<'a> {
    fn new(conn: &'a Connection, spool: &'a SqliteSpool) -> Self {
        Self {
            db: Db::grouped(conn, spool.store().statements()),
            spool,
            woken: Vec::new(),
        }
    }

    /// The store's writer connection, inside the transaction: run the application's
    /// statements on it (`rusqlite`). Its tables come from an application migration set
    /// ([`cairn_migrate::MigrationSet`]), so the transaction touches only schemas the
    /// migration runner knows. Do not `COMMIT`, `ROLLBACK` or `BEGIN` on it: the transaction
    /// is cairn's to end (a statement that ends it makes the commit fail).
    pub fn connection(&self) -> &Connection {
        self.db.conn()
    }

    fn created(&mut self, queue: &QueueName, created: bool) {
        if created && !self.woken.contains(queue) {
            self.woken.push(queue.clone());
        }
    }

    /// [`cairn_core::Spool::enqueue`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::enqueue`].
    pub fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let CheckedEnqueue { max_attempts, now } =
            check_enqueue(key, &payload, &options, self.spool.clock())?;
        let done =
            enqueue::enqueue_tx(&self.db, queue, key, &payload, &options, max_attempts, now)?;
        self.created(queue, done.created);
        Ok(done)
    }

    /// [`cairn_core::Spool::enqueue_many`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::enqueue_many`].
    pub fn enqueue_many(
        &mut self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let attempts = check_enqueue_batch(&items)?;
        let now = self.spool.now();
        let done = enqueue::enqueue_many_tx(&self.db, queue, &items, &attempts, now)?;
        self.created(queue, done.iter().any(|e| e.created));
        Ok(done)
    }

    /// [`cairn_core::Spool::cancel`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::cancel`].
    pub fn cancel(&mut self, run: RunId) -> Result<CancelOutcome> {
        settle::cancel_tx(&self.db, run, self.spool.now())
    }

    /// [`cairn_core::Spool::append_event`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::append_event`].
    pub fn append_event(
        &mut self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        check_producer_event_id(event_id)?;
        check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &payload)?;
        events::append_event_tx(&self.db, run, event_id, &payload, self.spool.now())
    }

    /// [`cairn_core::Spool::close_run`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::close_run`].
    pub fn close_run(&mut self, run: RunId) -> Result<CloseOutcome> {
        events::close_run_tx(&self.db, run)
    }

    /// [`cairn_core::Spool::set_fact`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::set_fact`].
    pub fn set_fact(&mut self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        check_payload("fact value", MAX_FACT_VALUE, &value)?;
        events::set_fact_tx(&self.db, run, name, &value, self.spool.now())
    }

    /// [`cairn_core::EpochStore::append`] inside the transaction.
    ///
    /// # Errors
    /// As [`cairn_core::EpochStore::append`].
    pub fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        Event::validate_batch(&events)?;
        append_tx(&self.db, space, &events)
    }
}

/// The error of a transaction whose connection SQLite rolled back under it (a full disk, an
/// I/O error, or a `COMMIT`/`ROLLBACK` sent through [`SqliteTx::connection`]).
fn ended_early() -> Error {
    Error::backend(
        "sqlite",
        "the transaction ended before its commit (an I/O error, or a statement that ended it); \
         nothing of it was committed",
    )
}

/// Takes the writer and begins `BEGIN IMMEDIATE` on it.
async fn begin_on(spool: &SqliteSpool) -> Result<Held> {
    let conn = Held::new(spool.store().writer_guard().await?);
    let spool = spool.clone();
    blocking(move || {
        spool.store().check_writer(&conn)?;
        Db::grouped(&conn, spool.store().statements()).begin_group()?;
        Ok(conn)
    })
    .await
}

/// Commits the transaction on `conn` (rolled back instead if it ended early).
fn commit_on(conn: &Connection, spool: &SqliteSpool) -> Result<()> {
    let db = Db::grouped(conn, spool.store().statements());
    if db.group_broken() {
        db.abandon_group();
        return Err(ended_early());
    }
    db.commit_group()
}

impl SqliteBackend {
    /// Runs `f` inside one `BEGIN IMMEDIATE` transaction on the store's writer (module docs):
    /// `f` gets a [`SqliteTx`] with cairn's operations and the connection for the
    /// application's statements. `Ok` from `f` commits everything `f` wrote; an `Err` (or a
    /// panic) rolls everything back and is returned. Subscribers are woken after the commit.
    ///
    /// `f` runs on a blocking thread and holds the writer: keep it short, and do no waiting
    /// inside it.
    ///
    /// # Errors
    /// [`Error::Retryable`] when the writer (or the file's write lock) could not be had within
    /// the busy timeout; `f`'s error; the commit's errors (nothing was committed).
    pub async fn transaction<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
    {
        let spool = self.sqlite_spool().clone();
        let conn = Held::new(spool.store().writer_guard().await?);
        let worker = spool.clone();
        // One trip to the blocking pool for the whole transaction: begin, `f`, commit.
        let (value, woken) = blocking(move || {
            worker.store().check_writer(&conn)?;
            Db::grouped(&conn, worker.store().statements()).begin_group()?;
            let mut tx = SqliteTx::new(&conn, &worker);
            let value = f(&mut tx)?;
            let woken = std::mem::take(&mut tx.woken);
            drop(tx);
            commit_on(&conn, &worker)?;
            Ok((value, woken))
        })
        .await?;
        for queue in &woken {
            spool.notify(queue);
        }
        Ok(value)
    }

    /// Begins a [`SqliteTransaction`]: the async handle over the same transaction as
    /// [`SqliteBackend::transaction`], holding the writer until it is committed, rolled back
    /// or dropped.
    ///
    /// # Errors
    /// [`Error::Retryable`] when the writer could not be had within the busy timeout.
    pub async fn begin_transaction(&self) -> Result<SqliteTransaction> {
        let spool = self.sqlite_spool().clone();
        let conn = begin_on(&spool).await?;
        Ok(SqliteTransaction {
            conn: Some(conn),
            spool,
            woken: Vec::new(),
            failed: false,
        })
    }
}

/// An open `BEGIN IMMEDIATE` transaction on a SQLite store's writer, as an async handle
/// ([`cairn_core::Transaction`] states the contract): each operation runs on a blocking thread
/// with the writer; [`SqliteTransaction::with_connection`] runs the application's statements.
/// Dropped without a commit, it rolls back.
pub struct SqliteTransaction {
    /// `None` once an operation was canceled while it held the connection (that operation's
    /// thread rolls the transaction back when it ends).
    conn: Option<Held>,
    spool: SqliteSpool,
    woken: Vec<QueueName>,
    failed: bool,
}

impl fmt::Debug for SqliteTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteTransaction")
            .field("path", &self.spool.store().path())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl SqliteTransaction {
    /// Runs `f` with the transaction's operations on a blocking thread; any error fails the
    /// transaction.
    async fn run<T, F>(&mut self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut SqliteTx<'_>) -> Result<T> + Send + 'static,
    {
        let Some(conn) = self.conn.take() else {
            self.failed = true;
            return Err(Error::backend(
                "sqlite",
                "an operation of this transaction was canceled while it ran; the transaction \
                 was rolled back",
            ));
        };
        let spool = self.spool.clone();
        let (conn, r, woken) = blocking(move || {
            let (r, woken, broken) = {
                let mut tx = SqliteTx::new(&conn, &spool);
                let r = f(&mut tx);
                (r, std::mem::take(&mut tx.woken), tx.db.group_broken())
            };
            let r = if broken && r.is_ok() {
                Err(ended_early())
            } else {
                r
            };
            Ok((conn, r, woken))
        })
        .await?;
        self.conn = Some(conn);
        if r.is_err() {
            self.failed = true;
        }
        for queue in woken {
            if !self.woken.contains(&queue) {
                self.woken.push(queue);
            }
        }
        r
    }

    /// Runs the application's statements on the transaction's connection (the store's
    /// writer, inside the transaction; see [`SqliteTx::connection`]). An error of `f` fails
    /// the transaction.
    ///
    /// # Errors
    /// `f`'s error, classified by [`classify_app_error`].
    pub async fn with_connection<T, F>(&mut self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.run(move |tx| f(tx.connection()).map_err(classify_app_error))
            .await
    }

    /// Builds `stmt` for SQLite and runs it on the transaction's connection, its values
    /// bound as parameters. Answers the rows it affected. An error fails the transaction; it
    /// is classified by [`classify_app_error`].
    ///
    /// # Errors
    /// As [`classify_app_error`]; [`Error::InvalidInput`] for a value type cairn does not bind.
    pub async fn execute<S: sea_query::QueryStatementWriter>(&mut self, stmt: &S) -> Result<u64> {
        let (sql, params) = app_statement(stmt);
        self.run(move |tx| {
            let params = params?;
            let n = tx
                .connection()
                .execute(&sql, rusqlite::params_from_iter(params))
                .map_err(classify_app_error)?;
            Ok(n as u64)
        })
        .await
    }

    /// Builds `stmt` for SQLite, runs it on the transaction's connection and answers its
    /// rows, each a [`sea_query::Value`] per column, by the stored value's type: integers as
    /// `BigInt`, reals as `Double`, text as `String`, blobs as `Bytes`, a NULL (which has no
    /// type in SQLite) as `BigInt(None)`.
    ///
    /// # Errors
    /// As [`SqliteTransaction::execute`].
    pub async fn fetch_all<S: sea_query::QueryStatementWriter>(
        &mut self,
        stmt: &S,
    ) -> Result<Vec<Vec<sea_query::Value>>> {
        let (sql, params) = app_statement(stmt);
        self.run(move |tx| {
            let params = params?;
            let mut st = tx.connection().prepare(&sql).map_err(classify_app_error)?;
            let width = st.column_count();
            let rows = st
                .query_map(rusqlite::params_from_iter(params), |row| {
                    (0..width).map(|i| row.get_ref(i).map(read_cell)).collect()
                })
                .map_err(classify_app_error)?;
            rows.map(|row| row.map_err(classify_app_error)).collect()
        })
        .await
    }
}

/// Classifies an error of the application's own statement (run through
/// [`SqliteTransaction::execute`] or [`SqliteTransaction::with_connection`], or by the
/// application on the transaction's connection) the way the Postgres backend classifies its:
/// a unique or primary-key violation is [`Error::Conflict`]; another constraint violation (a
/// foreign key, `NOT NULL`, `CHECK`, a trigger's `RAISE`) is [`Error::InvalidInput`] naming
/// SQLite's extended code, never the row's values; everything else is mapped as cairn's own
/// statements' errors are ([`Error::Retryable`] for a busy store, …).
pub fn classify_app_error(e: rusqlite::Error) -> Error {
    use rusqlite::ffi;
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        let code = f.extended_code;
        if f.code == rusqlite::ErrorCode::ConstraintViolation
            && code != ffi::SQLITE_CONSTRAINT_UNIQUE
            && code != ffi::SQLITE_CONSTRAINT_PRIMARYKEY
        {
            let kind = match code {
                ffi::SQLITE_CONSTRAINT_FOREIGNKEY => "a foreign key (SQLITE_CONSTRAINT_FOREIGNKEY",
                ffi::SQLITE_CONSTRAINT_NOTNULL => {
                    "a NOT NULL constraint (SQLITE_CONSTRAINT_NOTNULL"
                }
                ffi::SQLITE_CONSTRAINT_CHECK => "a CHECK constraint (SQLITE_CONSTRAINT_CHECK",
                ffi::SQLITE_CONSTRAINT_TRIGGER => "a trigger (SQLITE_CONSTRAINT_TRIGGER",
                _ => "a constraint (SQLITE_CONSTRAINT",
            };
            return Error::invalid(
                "statement",
                format!("violates {kind}, code {code}); nothing of it was written"),
            );
        }
    }
    crate::error::map(e)
}

/// `stmt` built for SQLite, with its values as rusqlite values (or why one cannot be bound).
fn app_statement<S: sea_query::QueryStatementWriter>(
    stmt: &S,
) -> (String, Result<Vec<rusqlite::types::Value>>) {
    let (sql, values) = stmt.build(sea_query::SqliteQueryBuilder);
    let params = values
        .0
        .into_iter()
        .enumerate()
        .map(|(i, v)| to_sqlite(i, v))
        .collect();
    (sql, params)
}

/// A sea-query value as the SQLite value it is stored as (booleans as 0/1, a `char` as text).
fn to_sqlite(index: usize, value: sea_query::Value) -> Result<rusqlite::types::Value> {
    use rusqlite::types::Value as S;
    use sea_query::Value as V;
    let int = |v: Option<i64>| v.map_or(S::Null, S::Integer);
    Ok(match value {
        V::Bool(v) => int(v.map(i64::from)),
        V::TinyInt(v) => int(v.map(i64::from)),
        V::SmallInt(v) => int(v.map(i64::from)),
        V::Int(v) => int(v.map(i64::from)),
        V::BigInt(v) => int(v),
        V::TinyUnsigned(v) => int(v.map(i64::from)),
        V::SmallUnsigned(v) => int(v.map(i64::from)),
        V::Unsigned(v) => int(v.map(i64::from)),
        V::BigUnsigned(v) => int(v
            .map(i64::try_from)
            .transpose()
            .map_err(|_| unbindable(index, "an unsigned integer above i64::MAX"))?),
        V::Float(v) => v.map_or(S::Null, |f| S::Real(f64::from(f))),
        V::Double(v) => v.map_or(S::Null, S::Real),
        V::String(v) => v.map_or(S::Null, S::Text),
        V::Char(v) => v.map_or(S::Null, |c| S::Text(c.to_string())),
        V::Bytes(v) => v.map_or(S::Null, S::Blob),
        #[allow(unreachable_patterns)] // variants of sea-query features cairn does not enable
        _ => return Err(unbindable(index, "a value type cairn does not bind")),
    })
}

fn unbindable(index: usize, what: &str) -> Error {
    Error::invalid(
        "statement",
        format!(
            "parameter {} is {what}: bind integers, reals, booleans, text or bytes",
            index + 1
        ),
    )
}

/// A stored SQLite value as a sea-query value (see [`SqliteTransaction::fetch_all`]).
fn read_cell(v: rusqlite::types::ValueRef<'_>) -> sea_query::Value {
    use rusqlite::types::ValueRef as S;
    use sea_query::Value as V;
    match v {
        S::Null => V::BigInt(None),
        S::Integer(i) => V::BigInt(Some(i)),
        S::Real(f) => V::Double(Some(f)),
        S::Text(t) => V::String(Some(String::from_utf8_lossy(t).into_owned())),
        S::Blob(b) => V::Bytes(Some(b.to_vec())),
    }
}

#[async_trait]
impl Transaction for SqliteTransaction {
    fn engine(&self) -> &str {
        "sqlite"
    }

    async fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let (queue, key) = (queue.clone(), key.clone());
        self.run(move |tx| tx.enqueue(&queue, &key, payload, options))
            .await
    }

    async fn enqueue_many(
        &mut self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let queue = queue.clone();
        self.run(move |tx| tx.enqueue_many(&queue, items)).await
    }

    async fn cancel(&mut self, run: RunId) -> Result<CancelOutcome> {
        self.run(move |tx| tx.cancel(run)).await
    }

    async fn append_event(
        &mut self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        let event_id = event_id.clone();
        self.run(move |tx| tx.append_event(run, &event_id, payload))
            .await
    }

    async fn close_run(&mut self, run: RunId) -> Result<CloseOutcome> {
        self.run(move |tx| tx.close_run(run)).await
    }

    async fn set_fact(
        &mut self,
        run: RunId,
        name: &FactName,
        value: Vec<u8>,
    ) -> Result<FactOutcome> {
        let name = name.clone();
        self.run(move |tx| tx.set_fact(run, &name, value)).await
    }

    async fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        let space = space.clone();
        self.run(move |tx| tx.append(&space, events)).await
    }

    async fn lock_spaces(&mut self, _spaces: &[SpaceId]) -> Result<()> {
        // The transaction holds the store's only writer (and the file's write lock) from its
        // `BEGIN IMMEDIATE`: every space is locked already, and no other writer waits in
        // between, so no cycle can form.
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        let conn = self.conn.take();
        let (failed, spool) = (self.failed, self.spool.clone());
        let committed = blocking(move || match conn {
            // Dropping the writer rolls the transaction back.
            None => Err(failed_transaction()),
            Some(_) if failed => Err(failed_transaction()),
            Some(conn) => commit_on(&conn, &spool),
        })
        .await;
        committed?;
        for queue in &self.woken {
            self.spool.notify(queue);
        }
        Ok(())
    }

    async fn rollback(mut self: Box<Self>) -> Result<()> {
        let conn = self.conn.take();
        blocking(move || {
            if let Some(conn) = conn {
                if !conn.is_autocommit() {
                    conn.execute_batch(sql::ROLLBACK)
                        .map_err(crate::error::map)?;
                }
            }
            Ok(())
        })
        .await
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
