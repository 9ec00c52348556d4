//! cairn's writes inside a transaction: [`PgTransaction`] (one cairn opens on the store's pool)
//! and the `*_in` methods of [`PgSpool`] and [`PgStore`], which run on a connection the caller
//! owns — a `sqlx` transaction from the application's own pool on the same database.
//!
//! Both run the spool's and the epoch log's unbatched statements on the transaction's
//! connection. The `NOTIFY` of an enqueue is part of its statement, and Postgres delivers
//! notifications at commit only, so a rolled-back enqueue wakes nobody.
//!
//! **Isolation.** READ COMMITTED (what [`PgTransaction`] opens, and Postgres' default) is the
//! level cairn is built for: every statement sees what committed before it started, so a dedup
//! key another transaction committed meanwhile is answered with that run's id. Under
//! REPEATABLE READ and SERIALIZABLE the transaction's snapshot is fixed: an enqueue of a key
//! whose run committed after the snapshot fails with a serialization error (SQLSTATE 40001,
//! [`Error::Retryable`]) instead of answering an id the transaction could not see; retry the
//! whole transaction. Keys committed before the snapshot are answered as usual.
//!
//! **search_path.** cairn's statements name their tables unqualified. A caller's connection has
//! its own `search_path`, so each `*_in` method sets it to the store's schema for its own
//! statements (`set_config(…, is_local => true)`) and puts the caller's back afterwards: two
//! more round trips per call. [`PgTransaction`]'s connection comes from cairn's pool, whose
//! `search_path` is the store's schema: name the application's tables with their schema there.

use std::any::Any;
use std::fmt;

use async_trait::async_trait;
use cairn_core::spool::{
    check_enqueue, check_enqueue_batch, CancelOutcome, CheckedEnqueue, CloseOutcome, DedupKey,
    EnqueueItem, EnqueueOptions, Enqueued, EventAppended, FactName, FactOutcome, QueueName,
    RunEventId, RunId, Spool,
};
use cairn_core::{failed_transaction, Appended, Error, Event, Result, SpaceId, Transaction};
use sqlx::{Connection, PgConnection, Postgres, Row};

use crate::config::SchemaName;
use crate::db::Db;
use crate::error::map;
use crate::spool::{enqueue, events, settle};
use crate::store::lock::lock_spaces;
use crate::{sql, PgSpool, PgStore};

/// Refuses a connection outside a transaction: `set_config(…, true)` would not outlive the
/// statement, and the caller's writes would not be atomic with cairn's.
fn check_in_transaction(conn: &PgConnection) -> Result<()> {
    if conn.is_in_transaction() {
        Ok(())
    } else {
        Err(Error::invalid(
            "connection",
            "is not inside a transaction: pass `&mut *tx` of a transaction begun with sqlx \
             (`pool.begin()`)",
        ))
    }
}

/// Points `conn`'s `search_path` at `schema` for the rest of its transaction and returns the
/// one it had.
async fn enter_schema(conn: &mut PgConnection, schema: &SchemaName) -> Result<String> {
    check_in_transaction(conn)?;
    let row = sqlx::query(sql::ENTER_SCHEMA)
        .bind(schema.as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    row.try_get::<String, _>(0).map_err(map)
}

/// Puts `conn`'s `search_path` back to `old` and returns `r`; after a failed `r` the
/// transaction is usually aborted, and `r` is what the caller needs to see.
async fn leave_schema<T>(conn: &mut PgConnection, old: String, r: Result<T>) -> Result<T> {
    let restored = sqlx::query(sql::SET_LOCAL_SEARCH_PATH)
        .bind(old)
        .execute(&mut *conn)
        .await
        .map_err(map);
    match (r, restored) {
        (Ok(v), Ok(_)) => Ok(v),
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    }
}

impl PgSpool {
    /// [`cairn_core::Spool::enqueue`] inside the caller's transaction on the same database:
    /// `conn` is `&mut *tx` of a `sqlx` transaction from the application's pool. The run
    /// commits (and its wake-up is delivered) with that transaction, or never. See the module
    /// docs for isolation levels and the `search_path`.
    ///
    /// ```no_run
    /// # async fn demo(spool: cairn_postgres::PgSpool, app: sqlx::PgPool) -> cairn_core::Result<()> {
    /// use cairn_core::spool::{DedupKey, EnqueueOptions, QueueName};
    /// let mut tx = app.begin().await.map_err(cairn_postgres::classify_app_error)?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (42)")
    ///     .execute(&mut *tx)
    ///     .await
    ///     .map_err(cairn_postgres::classify_app_error)?;
    /// let queue = QueueName::new("receipts")?;
    /// let key = DedupKey::from_parts(["order", "42"])?;
    /// spool.enqueue_in(&mut tx, &queue, &key, b"42".to_vec(), EnqueueOptions::default()).await?;
    /// tx.commit().await.map_err(cairn_postgres::classify_app_error)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`cairn_core::Spool::enqueue`]; [`Error::InvalidInput`] when `conn` is not inside a
    /// transaction; [`Error::Retryable`] for a serialization failure (see the module docs) or
    /// a key another open transaction held past the connection's `lock_timeout`.
    pub async fn enqueue_in(
        &self,
        conn: &mut PgConnection,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let old = enter_schema(conn, self.schema()).await?;
        let r = match check_enqueue(key, &payload, &options, self.clock()) {
            Ok(CheckedEnqueue { max_attempts, now }) => {
                enqueue::enqueue_on(self, conn, queue, key, payload, options, max_attempts, now)
                    .await
            }
            Err(e) => Err(e),
        };
        leave_schema(conn, old, r).await
    }

    /// [`cairn_core::Spool::enqueue_many`] inside the caller's transaction (see
    /// [`PgSpool::enqueue_in`]).
    ///
    /// # Errors
    /// As [`cairn_core::Spool::enqueue_many`] and [`PgSpool::enqueue_in`].
    pub async fn enqueue_many_in(
        &self,
        conn: &mut PgConnection,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let old = enter_schema(conn, self.schema()).await?;
        let r = match check_enqueue_batch(&items) {
            Ok(attempts) => {
                enqueue::enqueue_many_on(self, conn, queue, &items, &attempts, self.now()).await
            }
            Err(e) => Err(e),
        };
        leave_schema(conn, old, r).await
    }

    /// [`cairn_core::Spool::cancel`] inside the caller's transaction (see
    /// [`PgSpool::enqueue_in`]); the run row stays locked until it ends.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::cancel`] and [`PgSpool::enqueue_in`].
    pub async fn cancel_in(&self, conn: &mut PgConnection, run: RunId) -> Result<CancelOutcome> {
        let old = enter_schema(conn, self.schema()).await?;
        let r = settle::cancel_on(self, conn, run, self.now()).await;
        leave_schema(conn, old, r).await
    }

    /// [`cairn_core::Spool::append_event`] inside the caller's transaction (see
    /// [`PgSpool::enqueue_in`]); the run row stays locked until it ends.
    ///
    /// # Errors
    /// As [`cairn_core::Spool::append_event`] and [`PgSpool::enqueue_in`].
    pub async fn append_event_in(
        &self,
        conn: &mut PgConnection,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        let old = enter_schema(conn, self.schema()).await?;
        let r = events::append_event_on(conn, run, event_id, payload, self.now()).await;
        leave_schema(conn, old, r).await
    }
}

impl PgStore {
    /// [`cairn_core::EpochStore::append`] inside the caller's transaction (see
    /// [`PgSpool::enqueue_in`]): the space's write lock is held until that transaction ends,
    /// so other appends to the space wait for it.
    ///
    /// # Errors
    /// As [`cairn_core::EpochStore::append`] and [`PgSpool::enqueue_in`].
    pub async fn append_in(
        &self,
        conn: &mut PgConnection,
        space: &SpaceId,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let old = enter_schema(conn, self.schema()).await?;
        let r = self.append_on(conn, space, events).await;
        leave_schema(conn, old, r).await
    }
}

/// A READ COMMITTED transaction on a connection of the store's pool, holding cairn's writes
/// and the application's own statements ([`PgTransaction::connection`]): all commit together
/// or none does ([`cairn_core::Transaction`] states the contract). Dropped without
/// [`Transaction::commit`], it rolls back.
pub struct PgTransaction {
    tx: sqlx::Transaction<'static, Postgres>,
    store: PgStore,
    spool: PgSpool,
    /// An operation of the transaction failed: it can only roll back.
    failed: bool,
    /// The connection was handed out, so a statement of the application's may have failed
    /// (an aborted transaction whose `COMMIT` Postgres turns into a rollback).
    lent: bool,
}

impl fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTransaction")
            .field("schema", &self.store.schema().as_str())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl PgTransaction {
    /// Begins a READ COMMITTED transaction on a connection of `store`'s pool.
    pub(crate) async fn begin(store: &PgStore, spool: &PgSpool) -> Result<Self> {
        let tx = store
            .pool()
            .begin_with(sql::BEGIN_READ_COMMITTED)
            .await
            .map_err(map)?;
        Ok(Self {
            tx,
            store: store.clone(),
            spool: spool.clone(),
            failed: false,
            lent: false,
        })
    }

    /// The transaction's connection, for the application's own statements. Its `search_path`
    /// is the store's schema: qualify the application's tables with their schema (`public.orders`)
    /// unless they live there. A failed statement aborts the whole transaction
    /// ([`Transaction::commit`] then reports it).
    pub fn connection(&mut self) -> &mut PgConnection {
        self.lent = true;
        &mut self.tx
    }

    fn track<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed = true;
        }
        r
    }
}

#[async_trait]
impl Transaction for PgTransaction {
    fn engine(&self) -> &str {
        "postgres"
    }

    async fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        let r = match check_enqueue(key, &payload, &options, self.spool.clock()) {
            Ok(CheckedEnqueue { max_attempts, now }) => {
                let (spool, conn) = (&self.spool, &mut *self.tx);
                enqueue::enqueue_on(spool, conn, queue, key, payload, options, max_attempts, now)
                    .await
            }
            Err(e) => Err(e),
        };
        self.track(r)
    }

    async fn enqueue_many(
        &mut self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        let r = match check_enqueue_batch(&items) {
            Ok(attempts) => {
                let now = self.spool.now();
                let (spool, conn) = (&self.spool, &mut *self.tx);
                enqueue::enqueue_many_on(spool, conn, queue, &items, &attempts, now).await
            }
            Err(e) => Err(e),
        };
        self.track(r)
    }

    async fn cancel(&mut self, run: RunId) -> Result<CancelOutcome> {
        let now = self.spool.now();
        let r = settle::cancel_on(&self.spool, &mut self.tx, run, now).await;
        self.track(r)
    }

    async fn append_event(
        &mut self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        let now = self.spool.now();
        let r = events::append_event_on(&mut self.tx, run, event_id, payload, now).await;
        self.track(r)
    }

    async fn close_run(&mut self, run: RunId) -> Result<CloseOutcome> {
        let r = events::close_run_on(&mut self.tx, run).await;
        self.track(r)
    }

    async fn set_fact(
        &mut self,
        run: RunId,
        name: &FactName,
        value: Vec<u8>,
    ) -> Result<FactOutcome> {
        let now = self.spool.now();
        let r = events::set_fact_on(&mut self.tx, run, name, value, now).await;
        self.track(r)
    }

    async fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        let r = self.store.append_on(&mut self.tx, space, events).await;
        self.track(r)
    }

    async fn lock_spaces(&mut self, spaces: &[SpaceId]) -> Result<()> {
        // Transaction-scoped advisory locks, ascending by key (`store::space_lock_keys`), the
        // order every append of every node takes them in; `append` takes its space's lock
        // again later, which Postgres counts and releases with the rest at the end.
        let spaces: Vec<&SpaceId> = spaces.iter().collect();
        let mut db = Db::new(&mut self.tx, self.store.statements());
        let r = lock_spaces(&mut db, self.store.schema(), &spaces).await;
        self.track(r)
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        if self.failed {
            self.tx.rollback().await.map_err(map)?;
            return Err(failed_transaction());
        }
        if self.lent {
            // COMMIT of an aborted transaction is a rollback that reports success: ask first.
            if sqlx::query(sql::TRANSACTION_ALIVE)
                .execute(&mut *self.tx)
                .await
                .is_err()
            {
                self.tx.rollback().await.map_err(map)?;
                return Err(Error::conflict(
                    "a statement of this transaction failed, so it was rolled back instead \
                     of committed",
                ));
            }
        }
        self.tx.commit().await.map_err(map)
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.tx.rollback().await.map_err(map)
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Classifies an error of the application's own statement (run through
/// [`PgTransaction::execute`], or by the application on a transaction's connection) the way
/// the SQLite backend classifies its: a unique or primary-key violation (SQLSTATE 23505) is
/// [`Error::Conflict`]; another integrity constraint violation (class 23: a foreign key,
/// `NOT NULL`, `CHECK`, an exclusion constraint) is [`Error::InvalidInput`] naming the
/// constraint and the SQLSTATE, never the row's values; everything else is mapped as cairn's
/// own statements' errors are ([`Error::Retryable`] for serialization failures, …).
pub fn classify_app_error(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e {
        let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
        if code.starts_with("23") && code != "23505" {
            let kind = match code.as_str() {
                "23503" => "a foreign key",
                "23502" => "a NOT NULL constraint",
                "23514" => "a CHECK constraint",
                "23P01" => "an exclusion constraint",
                _ => "an integrity constraint",
            };
            return Error::invalid(
                "statement",
                match db.constraint() {
                    Some(c) => {
                        format!("violates {kind} ({c}, SQLSTATE {code}); nothing of it was written")
                    }
                    None => format!("violates {kind} (SQLSTATE {code}); nothing of it was written"),
                },
            );
        }
    }
    map(e)
}

/// A sea-query value bound as the Postgres parameter of the matching type (unsigned integers
/// as the next wider signed one, a `char` as text).
fn bind_value<'q>(
    q: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    index: usize,
    value: sea_query::Value,
) -> Result<sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>> {
    use sea_query::Value as V;
    Ok(match value {
        V::Bool(v) => q.bind(v),
        V::TinyInt(v) => q.bind(v.map(i16::from)),
        V::SmallInt(v) => q.bind(v),
        V::Int(v) => q.bind(v),
        V::BigInt(v) => q.bind(v),
        V::TinyUnsigned(v) => q.bind(v.map(i16::from)),
        V::SmallUnsigned(v) => q.bind(v.map(i32::from)),
        V::Unsigned(v) => q.bind(v.map(i64::from)),
        V::BigUnsigned(v) => q.bind(
            v.map(i64::try_from)
                .transpose()
                .map_err(|_| unbindable(index, "an unsigned integer above i64::MAX"))?,
        ),
        V::Float(v) => q.bind(v),
        V::Double(v) => q.bind(v),
        V::String(v) => q.bind(v),
        V::Char(v) => q.bind(v.map(String::from)),
        V::Bytes(v) => q.bind(v),
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

/// One cell of a row read by [`PgTransaction::fetch_all`], by its column's type: integers
/// as `BigInt`, reals as `Double`, text as `String`, `bytea` as `Bytes`, booleans as `Bool`.
fn read_cell(row: &sqlx::postgres::PgRow, i: usize) -> Result<sea_query::Value> {
    use sea_query::Value as V;
    use sqlx::{Column, TypeInfo};
    let ty = row.column(i).type_info().name().to_owned();
    // No source: a decode error can quote the stored value.
    let bad = |_| Error::backend("postgres", format!("column {i} could not be read as {ty}"));
    Ok(match ty.as_str() {
        "BOOL" => V::Bool(row.try_get(i).map_err(bad)?),
        "INT2" => V::BigInt(
            row.try_get::<Option<i16>, _>(i)
                .map_err(bad)?
                .map(i64::from),
        ),
        "INT4" => V::BigInt(
            row.try_get::<Option<i32>, _>(i)
                .map_err(bad)?
                .map(i64::from),
        ),
        "INT8" => V::BigInt(row.try_get(i).map_err(bad)?),
        "FLOAT4" => V::Double(
            row.try_get::<Option<f32>, _>(i)
                .map_err(bad)?
                .map(f64::from),
        ),
        "FLOAT8" => V::Double(row.try_get(i).map_err(bad)?),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" => V::String(row.try_get(i).map_err(bad)?),
        "BYTEA" => V::Bytes(row.try_get(i).map_err(bad)?),
        _ => {
            return Err(Error::invalid(
                "select",
                format!(
                    "column {i} has type {ty}, which cairn does not read: cast it to an integer, \
                     real, boolean, text or bytea type in the select"
                ),
            ))
        }
    })
}

impl PgTransaction {
    /// Builds `stmt` for Postgres and runs it on the transaction's connection, its values
    /// bound as parameters (an unnamed statement: nothing is cached on the server, so it
    /// works behind a pooler in transaction mode). Answers the rows it affected. An error
    /// fails the transaction; it is classified by [`classify_app_error`].
    ///
    /// # Errors
    /// As [`classify_app_error`]; [`Error::InvalidInput`] for a value type cairn does not bind.
    pub async fn execute<S: sea_query::QueryStatementWriter>(&mut self, stmt: &S) -> Result<u64> {
        let (sql, values) = stmt.build(sea_query::PostgresQueryBuilder);
        let r = async {
            let mut q = sqlx::query(&sql).persistent(false);
            for (i, v) in values.0.into_iter().enumerate() {
                q = bind_value(q, i, v)?;
            }
            let done = q.execute(&mut *self.tx).await.map_err(classify_app_error)?;
            Ok(done.rows_affected())
        }
        .await;
        self.track(r)
    }

    /// Builds `stmt` for Postgres, runs it on the transaction's connection and answers its
    /// rows, each a [`sea_query::Value`] per column (see [`PgTransaction::execute`]): integer
    /// columns read as `BigInt`, real ones as `Double`, text ones as `String`, `bytea` as
    /// `Bytes`, booleans as `Bool`, a NULL as its column's variant holding `None`.
    ///
    /// # Errors
    /// As [`PgTransaction::execute`]; [`Error::InvalidInput`] for a column of another type
    /// (cast it in the select).
    pub async fn fetch_all<S: sea_query::QueryStatementWriter>(
        &mut self,
        stmt: &S,
    ) -> Result<Vec<Vec<sea_query::Value>>> {
        let (sql, values) = stmt.build(sea_query::PostgresQueryBuilder);
        let r = async {
            let mut q = sqlx::query(&sql).persistent(false);
            for (i, v) in values.0.into_iter().enumerate() {
                q = bind_value(q, i, v)?;
            }
            let rows = q
                .fetch_all(&mut *self.tx)
                .await
                .map_err(classify_app_error)?;
            rows.iter()
                .map(|row| (0..row.len()).map(|i| read_cell(row, i)).collect())
                .collect()
        }
        .await;
        self.track(r)
    }
}
