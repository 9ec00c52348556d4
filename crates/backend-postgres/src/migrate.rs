//! The Postgres side of cairn-migrate's open protocol: stamp and lineage tables in the store's
//! schema, a session advisory lock taken by polling `pg_try_advisory_lock` with backoff, and
//! the upgrade transaction on one dedicated connection; and the fleet registry (`cairn_fleet`,
//! `cairn_contract`). A migrator built from an open store ([`PgMigrator::from_store`]) reads
//! and registers on the store's pooled connections (a fleet heartbeat opens no connection); one
//! built from options alone ([`PgMigrator::new`], for opening a store and for operator tools)
//! uses a short-lived connection per call.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::{key64, Error, Result};
use cairn_migrate::bookkeeping::{self as bk, BookkeepingSql};
use cairn_migrate::fleet::{self, FleetRow, FleetSql};
use cairn_migrate::{
    Blocker, FleetEntry, LineageEntry, LockedMigration, MigrateError, MigrationBackend, StoredState,
};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use crate::config::{PgOptions, SchemaName};
use crate::error::map;
use crate::sql::{create_schema, SCHEMA_EXISTS, SESSION_SETUP, SET_LOCAL_SEARCH_PATH};

/// The migration lock's statements; the stamp and lineage statements are
/// [`cairn_migrate::bookkeeping`]'s, shared with every backend.
mod sql {
    pub(super) const TRY_LOCK: &str = "SELECT pg_catalog.pg_try_advisory_lock($1)";
    pub(super) const UNLOCK: &str = "SELECT pg_catalog.pg_advisory_unlock($1)";

    /// The lock behind a transaction-mode pooler, which keeps no session: held by the upgrade
    /// transaction (the checkout's, see `crate::pooler`) until it ends.
    pub(super) const TRY_XACT_LOCK: &str = "SELECT pg_catalog.pg_try_advisory_xact_lock($1)";

    /// Marks the upgrade transaction with a transaction-local setting, which is gone once the
    /// transaction ends by any means (a revision's COMMIT, ROLLBACK, END or ABORT included).
    pub(super) const MARK_OPEN: &str =
        "SELECT pg_catalog.set_config('cairn.migration_open', 'on', true)";

    /// Whether the marked transaction is still the session's transaction.
    pub(super) const IS_OPEN: &str =
        "SELECT coalesce(pg_catalog.current_setting('cairn.migration_open', true), '') = 'on'";

    /// Whether the role may create temporary objects (the commit guard is one).
    pub(super) const CAN_USE_TEMP: &str =
        "SELECT pg_catalog.has_database_privilege(pg_catalog.current_database(), 'TEMP')";

    /// The commit guard: a deferred constraint trigger on a temporary row that fails any
    /// COMMIT while the row is armed, so a COMMIT issued by a revision rolls the whole upgrade
    /// back instead of committing half of it. Temporary objects of this session only; the
    /// table goes at commit, the function with the session (closed right after).
    pub(super) const GUARD: [&str; 4] = [
        "CREATE TEMP TABLE cairn_commit_guard (armed boolean NOT NULL) ON COMMIT DROP",
        "CREATE OR REPLACE FUNCTION pg_temp.cairn_commit_guard() RETURNS trigger LANGUAGE plpgsql AS $f$ \
         BEGIN IF (SELECT armed FROM pg_temp.cairn_commit_guard) THEN \
         RAISE EXCEPTION 'a revision statement tried to commit cairn''s migration transaction' \
         USING ERRCODE = '25000'; END IF; RETURN NULL; END $f$",
        "CREATE CONSTRAINT TRIGGER cairn_commit_guard AFTER INSERT ON pg_temp.cairn_commit_guard \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pg_temp.cairn_commit_guard()",
        "INSERT INTO pg_temp.cairn_commit_guard VALUES (true)",
    ];

    /// Lets the runner's own COMMIT through the guard.
    pub(super) const DISARM: &str = "UPDATE pg_temp.cairn_commit_guard SET armed = false";
}

/// The stamp and lineage statements in this backend's dialect.
fn bookkeeping() -> &'static BookkeepingSql {
    cairn_migrate::bookkeeping::sql(Dialect::Postgres)
}

/// The key-derivation context of the migration lock (shared by every build: changing it lets
/// two builds migrate one store at once).
const MIGRATION_LOCK_CONTEXT: &str = "cairn 2026-11 postgres migration lock v1";

/// cairn-migrate's backend for one Postgres store (one schema): cairn's own set and an
/// application's sets alike (each set keeps its own stamp and lineage rows).
///
/// Built with [`PgMigrator::new`], it connects as the options say ([`PgOptions::new`] or
/// [`PgOptions::from_pool`]), one short-lived connection per look; built with
/// [`PgMigrator::from_store`], each look (stamp and lineage reads, fleet registration,
/// heartbeat, deregistration) takes one of the store's pooled connections. The upgrade
/// transaction always runs on a dedicated connection, closed when it ends (it holds a session
/// lock and temporary objects that must not go back to a pool). The schema is created
/// only when it is missing, so a role that owns its schema but has no CREATE on the database
/// can open, upgrade and repair; with [`PgOptions::create_if_missing`] `false`, a missing
/// schema is refused with [`Error::NotFound`] instead.
pub struct PgMigrator {
    opts: PgOptions,
    schema: SchemaName,
    /// The open store's pool the looks run on; `None`: a connection of their own.
    pool: Option<PgPool>,
}

/// The connection one look runs on: pooled (returned when done) or its own (closed). Behind a
/// transaction-mode pooler (`true`), its checkout transaction is committed first, so a
/// heartbeat or a deregistration is durable when the look ends.
enum Look {
    Pooled(PoolConnection<Postgres>, bool),
    Own(PgConnection, bool),
}

impl Look {
    fn conn(&mut self) -> &mut PgConnection {
        match self {
            Look::Pooled(c, _) => c,
            Look::Own(c, _) => c,
        }
    }

    /// Gives the connection back: to the pool, or closed (best effort: what the look read or
    /// wrote is settled already).
    async fn done(self) {
        match self {
            Look::Own(mut c, pooled) => {
                if pooled {
                    let _ = crate::pooler::end(&mut c).await;
                }
                let _ = c.close().await;
            }
            Look::Pooled(mut c, true) => {
                let _ = crate::pooler::end(&mut c).await;
            }
            Look::Pooled(_, false) => {}
        }
    }
}

impl PgMigrator {
    /// A migrator for the store `opts` names, on connections of its own (opening a store,
    /// operator tools without an open store). Nothing is connected until the runner looks.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a schema name outside `[a-z_][a-z0-9_]{0,62}`.
    pub fn new(opts: PgOptions) -> Result<Self> {
        let schema = SchemaName::parse(&opts.schema)?;
        Ok(Self {
            opts,
            schema,
            pool: None,
        })
    }

    /// A migrator for the open `store` that looks through the store's pool: the application
    /// sets' opens and the fleet registry (registration, every heartbeat, deregistration) take
    /// a pooled connection instead of opening one.
    pub fn from_store(store: &crate::PgStore) -> Self {
        Self {
            opts: store.options().clone(),
            schema: store.schema().clone(),
            pool: Some(store.pool().clone()),
        }
    }

    /// The advisory-lock key that serializes migrations of this store (its schema).
    pub fn lock_key(&self) -> i64 {
        key64(MIGRATION_LOCK_CONTEXT, &[self.schema.as_str().as_bytes()])
    }

    /// Whether the store is behind a transaction-mode pooler (see `crate::pooler`).
    fn pooled(&self) -> Result<bool> {
        Ok(self.opts.pooler_mode()? == crate::pooler::Pooler::Transaction)
    }

    async fn connection(&self) -> Result<PgConnection> {
        let options = self.opts.connect_options()?;
        if self.pooled()? {
            // One checkout transaction for the connection's life (see `crate::pooler`).
            let begin = crate::pooler::begin_sql(
                self.schema.as_str(),
                &self.opts.lock_timeout.as_millis().max(1).to_string(),
            );
            let options = options.statement_cache_capacity(0);
            return tokio::time::timeout(self.opts.acquire_timeout, async {
                let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
                crate::pooler::begin(&mut conn, &begin).await.map_err(map)?;
                Ok(conn)
            })
            .await
            .unwrap_or_else(|_| Err(crate::error::connect_timed_out()));
        }
        // Bounded by the acquire timeout: a server that accepts the connection but never
        // answers fails the look with `Error::Unavailable` instead of hanging it.
        tokio::time::timeout(self.opts.acquire_timeout, async {
            let mut conn = PgConnection::connect_with(&options).await.map_err(map)?;
            sqlx::query(SESSION_SETUP)
                .bind(self.schema.as_str())
                .bind(self.opts.lock_timeout.as_millis().max(1).to_string())
                .execute(&mut conn)
                .await
                .map_err(map)?;
            Ok(conn)
        })
        .await
        .unwrap_or_else(|_| Err(crate::error::connect_timed_out()))
    }

    /// A connection for one look: the store's pooled one, or a new one.
    async fn look(&self) -> Result<Look> {
        match &self.pool {
            Some(pool) => Ok(Look::Pooled(
                pool.acquire().await.map_err(map)?,
                self.pooled()?,
            )),
            None => Ok(Look::Own(self.connection().await?, self.pooled()?)),
        }
    }
}

/// The set's stamp and lineage. A schema without either bookkeeping table (or no schema at
/// all) reads as an empty state; a missing table of the two reads as no rows, and a stamp table
/// without the lineage table is flagged for the runner to refuse.
async fn read_state(conn: &mut PgConnection, set: &str) -> Result<StoredState, MigrateError> {
    let sql = bookkeeping();
    let mut exists = async |query: &str| -> Result<bool> {
        sqlx::query_scalar(query)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)
    };
    let tables = bk::Tables {
        stamp: exists(sql.has_stamp_table).await?,
        lineage: exists(sql.has_lineage_table).await?,
    };
    if tables.none() {
        return Ok(StoredState::default());
    }
    let stamp: Option<String> = if tables.stamp {
        sqlx::query_scalar(sql.read_stamp)
            .bind(set)
            .fetch_optional(&mut *conn)
            .await
            .map_err(map)?
    } else {
        None
    };
    let rows: Vec<(String, String)> = if tables.lineage {
        sqlx::query_as(sql.read_lineage)
            .bind(set)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?
    } else {
        Vec::new()
    };
    bk::stored_state_of(tables, stamp, rows)
}

/// The fleet registry's statements, defined once in cairn-migrate for both backends.
fn fleet_sql() -> &'static FleetSql {
    fleet::sql(Dialect::Postgres)
}

/// One registry row as Postgres returns it.
type PgFleetRow = (String, String, String, String, String, i64, i64, i64);

/// Every registry row; none when the store has no registry table.
async fn read_fleet(conn: &mut PgConnection) -> Result<Vec<FleetEntry>> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows: Vec<PgFleetRow> = sqlx::query_as(sql.list)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)?;
    Ok(fleet::entries_from_rows(rows.into_iter().map(
        |(instance, set, revision, build, host, pid, started_at_us, last_seen_us)| FleetRow {
            instance,
            set,
            revision,
            build,
            host,
            pid,
            started_at_us,
            last_seen_us,
        },
    )))
}

/// The contract revisions recorded for `set`; none without the contract table.
async fn read_contracts(conn: &mut PgConnection, set: &str) -> Result<Vec<String>> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_contract_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(sql.contracts_of_set)
        .bind(set)
        .fetch_all(&mut *conn)
        .await
        .map_err(map)
}

/// Registers `entry` inside the open transaction on `conn`.
async fn register(
    conn: &mut PgConnection,
    entry: &FleetEntry,
    prune_before: Timestamp,
) -> Result<()> {
    let sql = fleet_sql();
    let exists: bool = sqlx::query_scalar(sql.has_table)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        return Err(Error::NotFound {
            what: "the fleet registry (cairn revision 0004_fleet): open the store with this build to add it"
                .into(),
        });
    }
    sqlx::query(sql.prune)
        .bind(prune_before.as_unix_micros())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query(sql.delete_instance)
        .bind(&entry.instance)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    for (set, revision) in entry.rows() {
        sqlx::query(sql.insert)
            .bind(&entry.instance)
            .bind(set)
            .bind(revision)
            .bind(&entry.build)
            .bind(&entry.host)
            .bind(i64::from(entry.pid))
            .bind(entry.started_at.as_unix_micros())
            .bind(entry.last_seen.as_unix_micros())
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    Ok(())
}

#[async_trait]
impl MigrationBackend for PgMigrator {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError> {
        let mut look = self.look().await?;
        let state = read_state(look.conn(), set).await;
        look.done().await;
        state
    }

    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError> {
        let mut conn = self.connection().await?;
        let key = self.lock_key();
        let pooled = self.pooled()?;
        let try_lock = if pooled {
            sql::TRY_XACT_LOCK
        } else {
            sql::TRY_LOCK
        };
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        // Polling rather than a blocking pg_advisory_lock: the wait stays bounded by `timeout`
        // and never holds a server backend stuck in a lock queue.
        loop {
            let got: bool = sqlx::query_scalar(try_lock)
                .bind(key)
                .fetch_one(&mut conn)
                .await
                .map_err(map)?;
            if got {
                break;
            }
            if started.elapsed() >= timeout {
                let _ = conn.close().await;
                return Err(MigrateError::LockTimeout {
                    waited_ms: started.elapsed().as_millis() as u64,
                });
            }
            tokio::time::sleep(pause.min(timeout.saturating_sub(started.elapsed()))).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
        let guarded = match start(&mut conn, &self.schema, self.opts.create_if_missing).await {
            Ok(guarded) => guarded,
            Err(e) => {
                if !pooled {
                    let _ = sqlx::query(sql::UNLOCK).bind(key).execute(&mut conn).await;
                }
                let _ = conn.close().await;
                return Err(e.into());
            }
        };
        let locked = PgLocked {
            conn: Some(conn),
            key: (!pooled).then_some(key),
            guarded,
        };
        Ok(Box::new(locked))
    }

    async fn register(
        &self,
        entry: &FleetEntry,
        prune_before: Timestamp,
    ) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let done = async {
            let mut tx = sqlx::Connection::begin(look.conn()).await.map_err(map)?;
            match register(&mut tx, entry, prune_before).await {
                Ok(()) => tx.commit().await.map_err(map),
                // Rolled back before the connection goes back to the pool.
                Err(e) => {
                    let _ = tx.rollback().await;
                    Err(e)
                }
            }
        }
        .await;
        look.done().await;
        Ok(done?)
    }

    async fn heartbeat(&self, instance: &str, now: Timestamp) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let done = sqlx::query(fleet_sql().heartbeat)
            .bind(now.as_unix_micros())
            .bind(instance)
            .execute(look.conn())
            .await
            .map(|_| ())
            .map_err(map);
        look.done().await;
        Ok(done?)
    }

    async fn deregister(&self, instance: &str) -> Result<(), MigrateError> {
        let mut look = self.look().await?;
        let conn = look.conn();
        let exists: Result<bool> = sqlx::query_scalar(fleet_sql().has_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map);
        let done = match exists {
            Ok(true) => sqlx::query(fleet_sql().delete_instance)
                .bind(instance)
                .execute(&mut *conn)
                .await
                .map(|_| ())
                .map_err(map),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        look.done().await;
        Ok(done?)
    }

    async fn read_fleet(&self) -> Result<Vec<FleetEntry>, MigrateError> {
        let mut look = self.look().await?;
        let fleet = read_fleet(look.conn()).await;
        look.done().await;
        Ok(fleet?)
    }

    async fn read_contracts(&self, set: &str) -> Result<Vec<String>, MigrateError> {
        let mut look = self.look().await?;
        let contracts = read_contracts(look.conn(), set).await;
        look.done().await;
        Ok(contracts?)
    }
}

/// Opens the upgrade transaction: marks it (see [`sql::MARK_OPEN`]), installs the commit guard
/// when the role may create temporary objects (returns whether it did), and creates the schema
/// (when missing and allowed) and the bookkeeping tables when missing.
///
/// `CREATE SCHEMA IF NOT EXISTS` is not used on an existing schema: Postgres checks CREATE on
/// the database before it notices the schema exists, which would shut out a role that owns its
/// schema and nothing else. Concurrent creators are serialized by the migration lock.
async fn start(conn: &mut PgConnection, schema: &SchemaName, create: bool) -> Result<bool> {
    sqlx::query("BEGIN")
        .persistent(false)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    sqlx::query(sql::MARK_OPEN)
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    let guarded: bool = sqlx::query_scalar(sql::CAN_USE_TEMP)
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if guarded {
        for statement in sql::GUARD {
            sqlx::query(statement)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
    }
    let exists: bool = sqlx::query_scalar(SCHEMA_EXISTS)
        .bind(schema.as_str())
        .fetch_one(&mut *conn)
        .await
        .map_err(map)?;
    if !exists {
        if !create {
            return Err(Error::NotFound {
                what: format!("cairn store in schema {}", schema.as_str()),
            });
        }
        sqlx::query(&create_schema(schema))
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    // The session's search_path named the schema before it existed: re-read it now.
    sqlx::query(SET_LOCAL_SEARCH_PATH)
        .bind(schema.as_str())
        .execute(&mut *conn)
        .await
        .map_err(map)?;
    for ddl in bk::ddl(Dialect::Postgres) {
        sqlx::query(ddl)
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
    }
    Ok(guarded)
}

/// An open upgrade transaction holding the session advisory lock on a dedicated connection.
/// Dropping it closes the connection, which rolls back and releases the lock.
struct PgLocked {
    conn: Option<PgConnection>,
    /// The session lock's key; `None` behind a transaction-mode pooler, where the lock is the
    /// transaction's and ends with it.
    key: Option<i64>,
    /// Whether the commit guard is installed (and must be disarmed before the runner's COMMIT).
    guarded: bool,
}

impl PgLocked {
    fn conn(&mut self) -> Result<&mut PgConnection> {
        self.conn
            .as_mut()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))
    }

    async fn finish(&mut self, statement: &str, disarm: bool) -> Result<()> {
        let key = self.key;
        let mut conn = self
            .conn
            .take()
            .ok_or_else(|| Error::backend("postgres", "migration transaction already finished"))?;
        let disarmed = if disarm {
            sqlx::query(sql::DISARM)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(map)
        } else {
            Ok(())
        };
        let ended = match disarmed {
            Ok(()) => sqlx::query(statement)
                .persistent(false)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(map),
            Err(e) => Err(e),
        };
        let unlocked = match key {
            Some(key) => sqlx::query(sql::UNLOCK)
                .bind(key)
                .execute(&mut conn)
                .await
                .map(|_| ())
                .map_err(map),
            None => Ok(()),
        };
        // Closing the session would release the lock anyway; report the first real failure.
        let _ = conn.close().await;
        ended?;
        unlocked
    }
}

#[async_trait]
impl LockedMigration for PgLocked {
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError> {
        read_state(self.conn()?, set).await
    }

    /// Runs one revision statement, then checks the upgrade transaction is still open: a
    /// statement that ended it (COMMIT, ROLLBACK, END, ABORT) fails the upgrade before anything
    /// else runs outside it. With the commit guard a COMMIT fails itself and takes the whole
    /// upgrade back; without it (a role without TEMP) what ran before it stays committed.
    async fn execute(&mut self, statement: &str) -> Result<()> {
        let conn = self.conn()?;
        sqlx::query(statement)
            .persistent(false)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        let open: bool = sqlx::query_scalar(sql::IS_OPEN)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if !open {
            return Err(Error::invalid(
                "migration statement",
                "it ended the upgrade transaction (COMMIT, ROLLBACK, END or ABORT); a revision \
                 must not manage transactions, the runner runs it in one",
            ));
        }
        Ok(())
    }

    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
    ) -> Result<(), MigrateError> {
        let sql = bookkeeping();
        let conn = self.conn()?;
        sqlx::query(sql.upsert_stamp)
            .bind(set)
            .bind(stamp)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        if let Some(lineage) = lineage {
            let (revs, sums): (Vec<String>, Vec<String>) = bk::lineage_rows(lineage)
                .into_iter()
                .map(|(_, revision, checksum)| (revision, checksum))
                .unzip();
            sqlx::query(sql.delete_lineage)
                .bind(set)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
            // Postgres's insert takes the whole lineage as two arrays, in order.
            debug_assert!(sql.insert_lineage_is_bulk);
            sqlx::query(sql.insert_lineage)
                .bind(set)
                .bind(revs)
                .bind(sums)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn store_down(
        &mut self,
        set: &str,
        revision: &str,
        statements: &[String],
    ) -> Result<(), MigrateError> {
        let sql = bookkeeping();
        let conn = self.conn()?;
        sqlx::query(sql.delete_down)
            .bind(set)
            .bind(revision)
            .execute(&mut *conn)
            .await
            .map_err(map)?;
        for (position, statement) in statements.iter().enumerate() {
            sqlx::query(sql.insert_down)
                .bind(set)
                .bind(revision)
                .bind(position as i32)
                .bind(statement)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn read_down(
        &mut self,
        set: &str,
        revision: &str,
    ) -> Result<Option<Vec<String>>, MigrateError> {
        let conn = self.conn()?;
        let rows: Vec<String> = sqlx::query_scalar(bookkeeping().read_down)
            .bind(set)
            .bind(revision)
            .fetch_all(&mut *conn)
            .await
            .map_err(map)?;
        Ok((!rows.is_empty()).then_some(rows))
    }

    async fn read_fleet(&mut self) -> Result<Vec<FleetEntry>, MigrateError> {
        let conn = self.conn()?;
        let sql = fleet_sql();
        let exists: bool = sqlx::query_scalar(sql.has_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if let (true, Some(lock)) = (exists, sql.lock_for_gate) {
            // Held to the end of the migration transaction: a build registering meanwhile
            // waits, then finds the contract revision committed (see `FleetSql::lock_for_gate`).
            sqlx::query(lock)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(read_fleet(conn).await?)
    }

    async fn record_contract(
        &mut self,
        set: &str,
        revision: &str,
        at: Timestamp,
        forced: bool,
        blockers: &[Blocker],
    ) -> Result<(), MigrateError> {
        let sql = fleet_sql();
        let conn = self.conn()?;
        let exists: bool = sqlx::query_scalar(sql.has_contract_table)
            .fetch_one(&mut *conn)
            .await
            .map_err(map)?;
        if exists {
            let blockers: Vec<String> = blockers.iter().map(ToString::to_string).collect();
            sqlx::query(sql.record_contract)
                .bind(set)
                .bind(revision)
                .bind(at.as_unix_micros())
                .bind(i64::from(forced))
                .bind(blockers.join("\n"))
                .execute(&mut *conn)
                .await
                .map_err(map)?;
        }
        Ok(())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), MigrateError> {
        let disarm = self.guarded;
        Ok(self.finish("COMMIT", disarm).await?)
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), MigrateError> {
        Ok(self.finish("ROLLBACK", false).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_lock_key_is_the_one_every_earlier_build_takes() {
        // Builds of different versions serialize their migrations on this key: it must not
        // move.
        let m = PgMigrator::new(PgOptions::new("postgres://h/db")).unwrap();
        assert_eq!(m.lock_key(), -5_844_876_268_162_346_966);
        let other = PgMigrator::new(PgOptions::new("postgres://h/db").schema("tenant_a")).unwrap();
        assert_ne!(other.lock_key(), m.lock_key());
    }
}
