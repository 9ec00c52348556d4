//! [`Transaction`]: cairn's writes and the application's in one database transaction, on
//! either engine ([`Store::begin`], [`Store::transaction`]); and, on Postgres, cairn's writes
//! inside a transaction of the application's own pool ([`Store::enqueue_in`] and its siblings).
//!
//! The outbox: an application row and the job it needs in one transaction, on either engine
//! (the README's example, run here on SQLite and on the test Postgres server):
//!
//! ```
//! use cairn::sea_query::{Alias, Query};
//! use cairn::{DedupKey, QueueName, Store};
//!
//! /// Saves order `id` and the job that emails its receipt in one transaction: both or neither.
//! async fn place_order(store: &Store, id: i64) -> cairn::Result<()> {
//!     let receipts = QueueName::new("receipts")?;
//!     let key = DedupKey::from_parts(["receipt", &id.to_string()])?;
//!     // Your own statement, written once: cairn builds it for the store's engine.
//!     let insert = Query::insert()
//!         .into_table(Alias::new("orders"))
//!         .columns([Alias::new("id")])
//!         .values_panic([id.into()])
//!         .to_owned();
//!     store
//!         .transaction(async |tx| {
//!             // On the transaction's connection; an existing id is Error::Conflict on both
//!             // engines, and fails the whole transaction.
//!             tx.execute(&insert).await?;
//!             // cairn's write, in the same transaction; subscribers wake after the commit.
//!             tx.enqueue(&receipts, &key, id.to_string().into_bytes(), Default::default())
//!                 .await?;
//!             Ok(())
//!         })
//!         .await
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> cairn::Result<()> {
//! #     let shop = || {
//! #         cairn::MigrationSet::from_files(
//! #             "shop",
//! #             [("0001_orders.sql", "CREATE TABLE orders (id BIGINT PRIMARY KEY)")],
//! #         )
//! #     };
//! #     let dir = tempfile::tempdir().unwrap();
//! #     let sqlite = format!("sqlite://{}", dir.path().join("shop.db").display());
//! #     let server = cairn::testkit::postgres::testkit::test_server_url()
//! #         .await
//! #         .unwrap_or_else(|why| panic!("no Postgres server for the outbox example: {why}"));
//! #     let schema = cairn::testkit::scratch_name("cairn_outbox");
//! #     let sep = if server.contains('?') { '&' } else { '?' };
//! #     let postgres = format!("{server}{sep}cairn_schema={schema}");
//! #     for url in [sqlite, postgres] {
//! #         let store = Store::builder(url).migrations(shop()?).open().await?;
//! #         place_order(&store, 42).await?;
//! #         // The same order again: its row exists, so the transaction fails and nothing of
//! #         // it commits (the first one's run stays the only one).
//! #         let again = place_order(&store, 42).await;
//! #         assert!(matches!(again, Err(cairn::Error::Conflict { .. })), "{again:?}");
//! #         let receipts = QueueName::new("receipts")?;
//! #         let runs = store.spool().runs(&cairn::spool::RunFilter {
//! #             queue: Some(receipts),
//! #             ..Default::default()
//! #         }, 10).await?;
//! #         assert_eq!(runs.len(), 1, "{}: one receipt job", store.engine());
//! #         store.close().await?;
//! #     }
//! #     let mut admin = <cairn::sqlx::PgConnection as cairn::sqlx::Connection>::connect(&server)
//! #         .await
//! #         .unwrap();
//! #     cairn::sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
//! #         .execute(&mut admin)
//! #         .await
//! #         .unwrap();
//! #     Ok(())
//! # }
//! ```

use std::fmt;

use cairn_core::spool::{
    CancelOutcome, CloseOutcome, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, EventAppended,
    FactName, FactOutcome, QueueName, RunEventId, RunId,
};
use cairn_core::{Appended, Error, Event, Result, SpaceId};

use crate::Store;

/// An open transaction of a [`Store`]: cairn's writes made through it — enqueues, bulk
/// enqueues, cancels, run events, run closes, facts, epoch appends — and the application's own statements
/// ([`Transaction::execute`] for either engine, [`Transaction::postgres`],
/// [`Transaction::sqlite`]) commit together or not at all.
///
/// - **Dropped = rolled back**, as are an explicit [`Transaction::rollback`] and a process
///   killed before [`Transaction::commit`] returned.
/// - **Wake-ups on commit.** Subscribers of a queue are woken after the commit that created
///   its runs, never by a transaction that rolled back.
/// - **The dedup answer is the committed one.** An enqueue of a key another open transaction
///   holds waits for it (and answers its run if it commits), up to the store's busy/lock
///   timeout, then fails with [`Error::Retryable`]; a key enqueued twice in one transaction
///   is one run.
/// - **A failed operation fails the transaction**: after an error, [`Transaction::commit`]
///   rolls back and returns [`Error::Conflict`].
///
/// **Postgres**: a READ COMMITTED transaction on a connection of the store's pool, whose
/// `search_path` is the store's schema (`cairn_schema`, default `public`). The tables of the
/// store's application migration sets live there — a set runs with the same `search_path`, so
/// its `CREATE TABLE orders` makes `<schema>.orders` — and are named unqualified; name a table
/// in another schema with it (`public.audit` for a store with a `cairn_schema` of its own).
/// Other claims, enqueues of other keys and appends to other spaces go on while it is open.
/// **SQLite**: one `BEGIN IMMEDIATE` transaction on the store's writer connection, which it
/// holds until it ends: the store's other writes (this process's and others') wait for it and
/// fail with [`Error::Retryable`] after the busy timeout; reads go on. Keep it short on both.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> cairn::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = format!("sqlite://{}", dir.path().join("store.db").display());
/// let store = cairn::Store::open(&url).await?;
/// let queue = cairn::QueueName::new("mail")?;
/// let mut tx = store.begin().await?;
/// let key = cairn::DedupKey::from_parts(["receipt", "42"])?;
/// let run = tx.enqueue(&queue, &key, b"42".to_vec(), Default::default()).await?;
/// tx.rollback().await?; // or drop it: nothing of it remains
/// assert!(store.spool().run(run.run_id).await?.is_none());
/// # Ok(()) }
/// ```
pub struct Transaction {
    inner: Box<dyn cairn_core::Transaction>,
}

impl fmt::Debug for Transaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Transaction {
    /// The engine the transaction runs on (`"sqlite"`, `"postgres"`, …).
    pub fn engine(&self) -> &str {
        self.inner.engine()
    }

    /// [`crate::Spool::enqueue`] inside the transaction.
    ///
    /// # Errors
    /// As [`crate::Spool::enqueue`].
    pub async fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        self.inner.enqueue(queue, key, payload, options).await
    }

    /// [`crate::Spool::enqueue_many`] inside the transaction.
    ///
    /// # Errors
    /// As [`crate::Spool::enqueue_many`].
    pub async fn enqueue_many(
        &mut self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        self.inner.enqueue_many(queue, items).await
    }

    /// [`crate::Spool::cancel`] inside the transaction.
    ///
    /// # Errors
    /// As [`crate::Spool::cancel`].
    pub async fn cancel(&mut self, run: RunId) -> Result<CancelOutcome> {
        self.inner.cancel(run).await
    }

    /// [`crate::Spool::append_event`] inside the transaction.
    ///
    /// # Errors
    /// As [`crate::Spool::append_event`].
    pub async fn append_event(
        &mut self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        self.inner.append_event(run, event_id, payload).await
    }

    /// [`crate::Spool::close_run`] inside the transaction (the run row's lock is held until it
    /// ends).
    ///
    /// # Errors
    /// As [`crate::Spool::close_run`].
    pub async fn close_run(&mut self, run: RunId) -> Result<CloseOutcome> {
        self.inner.close_run(run).await
    }

    /// [`crate::Spool::set_fact`] inside the transaction.
    ///
    /// # Errors
    /// As [`crate::Spool::set_fact`].
    pub async fn set_fact(
        &mut self,
        run: RunId,
        name: &FactName,
        value: Vec<u8>,
    ) -> Result<FactOutcome> {
        self.inner.set_fact(run, name, value).await
    }

    /// [`crate::EpochStore::append`] inside the transaction (the space's write lock is held
    /// until it ends).
    ///
    /// # Errors
    /// As [`crate::EpochStore::append`].
    pub async fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        self.inner.append(space, events).await
    }

    /// Takes the write locks of `spaces` up front, in the one global order every writer uses,
    /// and holds them until the transaction ends: a transaction that appends to several spaces
    /// calls it with all of them before its first append, and then cannot deadlock with
    /// another that does the same, whatever order either appends in. Writes nothing; on
    /// SQLite the transaction holds the whole store's writer already.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> cairn::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite://{}", dir.path().join("store.db").display());
    /// let store = cairn::Store::open(&url).await?;
    /// let (a, b) = (cairn::SpaceId::new("a")?, cairn::SpaceId::new("b")?);
    /// let mut tx = store.begin().await?;
    /// tx.lock_spaces(&[b.clone(), a.clone()]).await?;
    /// tx.append(&b, vec![cairn::Event::new("k", "1")]).await?;
    /// tx.append(&a, vec![cairn::Event::new("k", "2")]).await?;
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The engine's lock errors ([`Error::Retryable`] after its lock timeout).
    pub async fn lock_spaces(&mut self, spaces: &[SpaceId]) -> Result<()> {
        self.inner.lock_spaces(spaces).await
    }

    /// Commits everything, then wakes the subscribers of each queue that got a run.
    ///
    /// # Errors
    /// [`Error::Conflict`] when an operation (or, on Postgres, one of the application's
    /// statements) had failed: the transaction was rolled back instead. The engine's commit
    /// errors: nothing was committed.
    pub async fn commit(self) -> Result<()> {
        self.inner.commit().await
    }

    /// Rolls everything back.
    ///
    /// # Errors
    /// The engine's errors; the transaction is gone either way.
    pub async fn rollback(self) -> Result<()> {
        self.inner.rollback().await
    }

    /// Runs the application's statement — a [`sea_query`] `INSERT`, `UPDATE`, `DELETE` (or
    /// `SELECT`, whose rows it drops) — inside the transaction, built for the transaction's
    /// engine with its values bound as parameters: one statement for both engines. Answers
    /// the rows it affected.
    ///
    /// Its errors are classified alike on both engines ([`classify_sqlx_error`],
    /// [`classify_rusqlite_error`]): a unique or primary-key violation is
    /// [`Error::Conflict`], another constraint violation (a foreign key, `NOT NULL`, `CHECK`)
    /// is [`Error::InvalidInput`] naming the constraint, never the row's values. A failed
    /// statement fails the transaction, as a failed operation of cairn's does.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> cairn::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite://{}", dir.path().join("store.db").display());
    /// use cairn::sea_query::{Alias, Expr, ExprTrait, Query};
    /// # let shop = cairn::MigrationSet::from_files(
    /// #     "shop",
    /// #     [("0001_orders.sql", "CREATE TABLE orders (id BIGINT PRIMARY KEY, note TEXT)")],
    /// # )?;
    /// let store = cairn::Store::builder(url).migrations(shop).open().await?;
    /// let mut tx = store.begin().await?;
    /// let insert = Query::insert()
    ///     .into_table(Alias::new("orders"))
    ///     .columns([Alias::new("id"), Alias::new("note")])
    ///     .values_panic([42.into(), "gift".into()])
    ///     .to_owned();
    /// assert_eq!(tx.execute(&insert).await?, 1);
    /// let select = Query::select()
    ///     .column(Alias::new("note"))
    ///     .from(Alias::new("orders"))
    ///     .and_where(Expr::col(Alias::new("id")).eq(42))
    ///     .to_owned();
    /// let rows = tx.fetch_all(&select).await?;
    /// assert_eq!(rows, vec![vec![cairn::sea_query::Value::String(Some("gift".into()))]]);
    /// tx.commit().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As above; [`Error::InvalidInput`] for a value of a type cairn does not bind (it binds
    /// booleans, integers, reals, text and bytes) and on an engine other than SQLite and
    /// Postgres.
    pub async fn execute<S>(&mut self, stmt: &S) -> Result<u64>
    where
        S: sea_query::QueryStatementWriter + Sync,
    {
        let engine = self.engine().to_owned();
        let any = self.inner.as_any_mut();
        #[cfg(feature = "postgres")]
        if let Some(tx) = any.downcast_mut::<cairn_postgres::PgTransaction>() {
            return tx.execute(stmt).await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(tx) = any.downcast_mut::<cairn_sqlite::SqliteTransaction>() {
            return tx.execute(stmt).await;
        }
        let _ = (any, stmt);
        Err(not_built_in(&engine))
    }

    /// Runs the application's `SELECT` (a [`sea_query`] statement) inside the transaction, as
    /// [`Transaction::execute`] does, and answers its rows: each a [`sea_query::Value`] per
    /// column, the same variant on both engines — integers as `BigInt`, reals as `Double`,
    /// text as `String`, blobs (`bytea`) as `Bytes`; booleans as `Bool` on Postgres (SQLite
    /// stores them as integers: `BigInt`). A NULL is `BigInt(None)` on SQLite (whose NULL has
    /// no type) and its column's variant holding `None` on Postgres.
    ///
    /// # Errors
    /// As [`Transaction::execute`]; on Postgres, [`Error::InvalidInput`] for a column of
    /// another type (cast it in the select: `CAST(created AS TEXT)`).
    pub async fn fetch_all<S>(&mut self, stmt: &S) -> Result<Vec<Vec<sea_query::Value>>>
    where
        S: sea_query::QueryStatementWriter + Sync,
    {
        let engine = self.engine().to_owned();
        let any = self.inner.as_any_mut();
        #[cfg(feature = "postgres")]
        if let Some(tx) = any.downcast_mut::<cairn_postgres::PgTransaction>() {
            return tx.fetch_all(stmt).await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(tx) = any.downcast_mut::<cairn_sqlite::SqliteTransaction>() {
            return tx.fetch_all(stmt).await;
        }
        let _ = (any, stmt);
        Err(not_built_in(&engine))
    }

    /// The transaction's Postgres connection, for the application's own statements (`sqlx`),
    /// or `None` on another engine. Its `search_path` is the store's schema. Map the errors
    /// of statements run on it with [`classify_sqlx_error`] to get the classification
    /// [`Transaction::execute`] gives.
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub fn postgres(&mut self) -> Option<&mut sqlx::PgConnection> {
        self.inner
            .as_any_mut()
            .downcast_mut::<cairn_postgres::PgTransaction>()
            .map(cairn_postgres::PgTransaction::connection)
    }

    /// Runs the application's own statements (`rusqlite`) on the SQLite store's writer,
    /// inside the transaction, on a blocking thread. The tables should come from an
    /// application migration set ([`crate::StoreBuilder::migrations`]). Do not `COMMIT`,
    /// `ROLLBACK` or `BEGIN` there.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] on another engine; `f`'s error (which fails the transaction),
    /// classified as [`classify_rusqlite_error`] does.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub async fn sqlite<T, F>(&mut self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let engine = self.engine().to_owned();
        match self
            .inner
            .as_any_mut()
            .downcast_mut::<cairn_sqlite::SqliteTransaction>()
        {
            Some(tx) => tx.with_connection(f).await,
            None => Err(Error::invalid(
                "transaction",
                format!("runs on {engine}, not sqlite"),
            )),
        }
    }
}

/// The error of [`Transaction::execute`] on a backend that is neither of cairn's own.
fn not_built_in(engine: &str) -> Error {
    Error::invalid(
        "transaction",
        format!("runs on {engine}: execute and fetch_all need a sqlite or postgres store"),
    )
}

/// Classifies a `sqlx` error of the application's own statement (one it runs on
/// [`Transaction::postgres`]'s connection, or in its own pool) the way
/// [`Transaction::execute`] classifies its errors on both engines: a unique or primary-key
/// violation (SQLSTATE 23505) is [`Error::Conflict`]; another integrity constraint violation
/// (23503 foreign key, 23502 `NOT NULL`, 23514 `CHECK`, …) is [`Error::InvalidInput`] naming
/// the constraint and the SQLSTATE, never the row's values; a serialization failure or
/// deadlock is [`Error::Retryable`]; and so on, as for cairn's own statements.
///
/// ```no_run
/// # async fn demo(conn: &mut cairn::sqlx::PgConnection) -> cairn::Result<()> {
/// cairn::sqlx::query("INSERT INTO orders (id) VALUES ($1)")
///     .bind(42_i64)
///     .execute(conn)
///     .await
///     .map_err(cairn::classify_sqlx_error)?; // a duplicate id: Error::Conflict
/// # Ok(()) }
/// ```
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub fn classify_sqlx_error(e: sqlx::Error) -> Error {
    cairn_postgres::classify_app_error(e)
}

/// Classifies a `rusqlite` error of the application's own statement the way
/// [`Transaction::execute`] classifies its errors on both engines (what
/// [`Transaction::sqlite`] does with its closure's error): a unique or primary-key violation
/// is [`Error::Conflict`]; another constraint violation (`SQLITE_CONSTRAINT_FOREIGNKEY`,
/// `_NOTNULL`, `_CHECK`, …) is [`Error::InvalidInput`] naming SQLite's extended code, never
/// the row's values; a busy store is [`Error::Retryable`]; and so on.
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub fn classify_rusqlite_error(e: rusqlite::Error) -> Error {
    cairn_sqlite::classify_app_error(e)
}

impl Store {
    /// Begins a [`Transaction`] on the store.
    ///
    /// # Errors
    /// The engine's errors: no connection within the pool's acquire timeout (Postgres), the
    /// writer busy past the busy timeout (SQLite, [`Error::Retryable`]).
    pub async fn begin(&self) -> Result<Transaction> {
        Ok(Transaction {
            inner: self.handle().begin().await?,
        })
    }

    /// Runs `f` in a [`Transaction`]: commits when it returns `Ok`, rolls back (and returns
    /// the error) when it returns `Err`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> cairn::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite://{}", dir.path().join("store.db").display());
    /// let store = cairn::Store::open(&url).await?;
    /// let queue = cairn::QueueName::new("mail")?;
    /// let runs = store
    ///     .transaction(async |tx| {
    ///         let items = (0..3)
    ///             .map(|i| cairn::spool::EnqueueItem::new(
    ///                 cairn::DedupKey::from_parts(["receipt", &i.to_string()]).unwrap(),
    ///                 b"{}".to_vec(),
    ///             ))
    ///             .collect();
    ///         tx.enqueue_many(&queue, items).await
    ///     })
    ///     .await?;
    /// assert_eq!(runs.len(), 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Store::begin`]; `f`'s error; [`Transaction::commit`]'s.
    pub async fn transaction<T, F>(&self, f: F) -> Result<T>
    where
        F: AsyncFnOnce(&mut Transaction) -> Result<T>,
    {
        let mut tx = self.begin().await?;
        match f(&mut tx).await {
            Ok(value) => {
                tx.commit().await?;
                Ok(value)
            }
            Err(e) => {
                // The closure's error is the one to report; a failed rollback leaves nothing
                // committed either.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }
}

/// cairn's writes inside a transaction of the application's own Postgres pool (River's
/// `InsertTx` model): `conn` is `&mut *tx` of a `sqlx` transaction on the store's database.
/// Each call does what the same method of [`Transaction`] does, and commits or rolls back with
/// the application's transaction. Isolation: READ COMMITTED is the level cairn is built for;
/// under REPEATABLE READ or SERIALIZABLE, an enqueue of a key whose run committed after the
/// transaction's snapshot fails with [`Error::Retryable`] (retry the transaction). Each call
/// points the transaction's `search_path` at the store's schema for its own statements and puts
/// the application's back before it returns.
///
/// These need a store opened from a `postgres://` URL (or [`Store::builder_from_pg_pool`]);
/// on another engine, or a store over a third party's backend, they fail with
/// [`Error::InvalidInput`].
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl Store {
    fn pg(&self) -> Result<&cairn_postgres::PgBackend> {
        self.pg_backend().ok_or_else(|| {
            Error::invalid(
                "store",
                format!(
                    "runs on {}: a caller's Postgres transaction needs a store opened from a \
                     postgres:// URL",
                    self.engine()
                ),
            )
        })
    }

    /// [`crate::Spool::enqueue`] inside the application's transaction `conn`.
    ///
    /// ```no_run
    /// # async fn demo(store: cairn::Store, app: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = app.begin().await?;
    /// sqlx::query("INSERT INTO orders (id) VALUES (42)").execute(&mut *tx).await?;
    /// let queue = cairn::QueueName::new("receipts")?;
    /// let key = cairn::DedupKey::from_parts(["order", "42"])?;
    /// store.enqueue_in(&mut tx, &queue, &key, b"42".to_vec(), Default::default()).await?;
    /// tx.commit().await?; // the order and its receipt job, or neither
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`crate::Spool::enqueue`]; [`Error::InvalidInput`] when `conn` is not inside a
    /// transaction or the store is not a Postgres one.
    pub async fn enqueue_in(
        &self,
        conn: &mut sqlx::PgConnection,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        self.pg()?
            .pg_spool()
            .enqueue_in(conn, queue, key, payload, options)
            .await
    }

    /// [`crate::Spool::enqueue_many`] inside the application's transaction `conn`.
    ///
    /// # Errors
    /// As [`Store::enqueue_in`] and [`crate::Spool::enqueue_many`].
    pub async fn enqueue_many_in(
        &self,
        conn: &mut sqlx::PgConnection,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        self.pg()?
            .pg_spool()
            .enqueue_many_in(conn, queue, items)
            .await
    }

    /// [`crate::Spool::cancel`] inside the application's transaction `conn`.
    ///
    /// # Errors
    /// As [`Store::enqueue_in`] and [`crate::Spool::cancel`].
    pub async fn cancel_in(
        &self,
        conn: &mut sqlx::PgConnection,
        run: RunId,
    ) -> Result<CancelOutcome> {
        self.pg()?.pg_spool().cancel_in(conn, run).await
    }

    /// [`crate::Spool::append_event`] inside the application's transaction `conn`.
    ///
    /// # Errors
    /// As [`Store::enqueue_in`] and [`crate::Spool::append_event`].
    pub async fn append_event_in(
        &self,
        conn: &mut sqlx::PgConnection,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        self.pg()?
            .pg_spool()
            .append_event_in(conn, run, event_id, payload)
            .await
    }

    /// [`crate::EpochStore::append`] inside the application's transaction `conn` (the
    /// space's write lock is held until it ends).
    ///
    /// # Errors
    /// As [`Store::enqueue_in`] and [`crate::EpochStore::append`].
    pub async fn append_in(
        &self,
        conn: &mut sqlx::PgConnection,
        space: &SpaceId,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.pg()?.store().append_in(conn, space, events).await
    }
}
