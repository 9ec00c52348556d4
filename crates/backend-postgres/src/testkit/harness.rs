//! The conformance harness ([`PgHarness`]): one scratch schema of the test server per harness,
//! the legacy (cache-unaware) writer, and the migration and additivity harnesses.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_conformance::{Harness, HeldLock};
use cairn_core::{
    epoch_id, next_seq, scratch_name, Appended, EpochDiagnostics, EpochId, Event, EventId, Result,
    SpaceId,
};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Postgres, Transaction};
use tokio::sync::OnceCell;

use super::test_server_url;
use crate::config::{PgOptions, SchemaName};
use crate::db::Db;
use crate::error::map;
use crate::sql;
use crate::store::append::{insert_epoch, CacheWrite};
use crate::store::import::check_parents;
use crate::store::lock::{lock_spaces, space_lock_key};
use crate::store::read::anti_join;
use crate::store::repair::max_seq;
use crate::store::row::EventColumns;
use crate::store::PgStore;

/// A fresh harness over a new random schema of the test server.
///
/// # Panics
/// When no server can be found (with the §7 message saying how to get one) or the schema
/// cannot be created: Postgres tests fail, they never pass silently.
pub async fn harness() -> PgHarness {
    let url = match test_server_url().await {
        Ok(url) => url,
        Err(msg) => panic!("{msg}"),
    };
    let h = PgHarness::empty(url);
    h.admin().await;
    h
}

/// The conformance harness: one random schema of the test server. Dropping it drops the
/// schema.
pub struct PgHarness {
    url: String,
    /// Where stores connect when not straight to `url` (a pooler: [`super::pgbouncer`]); the
    /// harness's own writers and its cleanup always use `url`.
    store_url: Option<String>,
    schema: String,
    admin: OnceCell<PgStore>,
}

impl std::fmt::Debug for PgHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgHarness")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgHarness {
    /// A harness over a new random schema that does not exist yet (nothing is created until a
    /// store or the migration runner opens it).
    fn empty(url: String) -> Self {
        let schema = scratch_name("cairn_t");
        Self {
            url,
            store_url: None,
            schema,
            admin: OnceCell::new(),
        }
    }

    /// A fresh harness whose stores connect through `store_url` (a pooler in front of the test
    /// server; see [`super::pgbouncer_harness`]); its own writers connect straight to the
    /// server.
    pub(crate) async fn through(store_url: String) -> Self {
        let url = match test_server_url().await {
            Ok(url) => url,
            Err(msg) => panic!("{msg}"),
        };
        let mut h = Self::empty(url);
        h.store_url = Some(store_url);
        h.admin().await;
        h
    }

    /// The harness's own store, for the test-only writers (connected on first use).
    async fn admin(&self) -> &PgStore {
        self.admin
            .get_or_init(|| async {
                PgStore::open_with(self.options().max_connections(4))
                    .await
                    .unwrap_or_else(|e| {
                        panic!("postgres test server: cannot create the test schema: {e}")
                    })
            })
            .await
    }

    /// Options for a new store ("node") over this harness's schema.
    pub fn options(&self) -> PgOptions {
        PgOptions::new(self.store_url.clone().unwrap_or_else(|| self.url.clone()))
            .schema(self.schema.clone())
            .max_connections(8)
    }

    /// Connects a new store over this harness's schema.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn store(&self) -> Result<PgStore> {
        PgStore::open_with(self.options()).await
    }

    /// The schema this harness owns.
    pub fn schema(&self) -> &str {
        &self.schema
    }
}

impl Drop for PgHarness {
    fn drop(&mut self) {
        let Ok(schema) = SchemaName::parse(&self.schema) else {
            return;
        };
        let Ok(opts) = PgConnectOptions::from_str(&self.url) else {
            return;
        };
        // Drop runs inside the test's runtime, which cannot be blocked on; a helper thread with
        // its own runtime does the async cleanup. Failures leave a schema behind, nothing more.
        let worker = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), async move {
                    let mut conn = PgConnection::connect_with(&opts).await.ok()?;
                    sqlx::query(&sql::drop_schema(&schema))
                        .persistent(false)
                        .execute(&mut conn)
                        .await
                        .ok()?;
                    conn.close().await.ok()
                })
                .await;
            });
        });
        let _ = worker.join();
    }
}

struct PgHeldLock {
    tx: Transaction<'static, Postgres>,
}

#[async_trait]
impl HeldLock for PgHeldLock {
    async fn release(self: Box<Self>) {
        let _ = self.tx.rollback().await;
    }
}

#[async_trait]
impl Harness for PgHarness {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(Arc::new(self.store().await?))
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.admin()
            .await
            .legacy_append(space, parents, events)
            .await
    }

    fn append_statement_budget(&self) -> Option<u64> {
        Some(5)
    }

    async fn hold_space_lock(&self, space: &SpaceId) -> Result<Box<dyn HeldLock>> {
        let admin = self.admin().await;
        let mut tx = admin.pool().begin().await.map_err(map)?;
        sqlx::query(sql::LOCK)
            .bind(space_lock_key(admin.schema(), space))
            .execute(&mut *tx)
            .await
            .map_err(map)?;
        Ok(Box::new(PgHeldLock { tx }))
    }
}

impl PgStore {
    /// Appends an epoch the way a writer that ignores the space lock would: parents from the
    /// anti-join and seq from `max(seq) + 1`, read without the lock; then `between` is awaited
    /// (so a test can line two such writers up after their reads); then the epoch is written,
    /// the cache untouched, and committed. Only the unique `(space, seq)` index stands between
    /// two of these and a space with two epochs at one seq.
    ///
    /// # Errors
    /// [`Error::Conflict`](cairn_core::Error::Conflict) when another writer took the seq first; [`Error::InvalidInput`](cairn_core::Error::InvalidInput) for
    /// an invalid batch.
    pub async fn legacy_append_unlocked(
        &self,
        space: &SpaceId,
        events: Vec<Event>,
        between: impl std::future::Future<Output = ()> + Send,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);
        let mut tx = self.begin().await?;
        let mut db = Db::new(&mut tx, self.statements());
        let parents: Vec<EpochId> = anti_join(&mut db, space)
            .await?
            .into_iter()
            .map(|h| h.id)
            .collect();
        let seq = next_seq(max_seq(&mut db, space).await?);
        between.await;
        let id = epoch_id(space, &parents, &event_ids);
        let cache = CacheWrite::Untouched;
        insert_epoch(&mut db, space, &id, seq, &parents, cols, cache).await?;
        self.commit(tx).await?;
        Ok(Appended { id, seq, parents })
    }
}

impl PgStore {
    /// Appends an epoch the way a writer that predates the head cache does: same space lock
    /// and seq rule, parents from the anti-join (or `parents`, sorted and de-duplicated), and
    /// the cache untouched.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](cairn_core::Error::InvalidInput) for an invalid batch, [`Error::UnknownParent`](cairn_core::Error::UnknownParent) for a parent not
    /// in the space.
    pub async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        Event::validate_batch(&events)?;
        let event_ids: Vec<EventId> = events.iter().map(Event::id).collect();
        let cols = EventColumns::new(events, &event_ids);
        let mut tx = self.begin().await?;
        let mut db = Db::new(&mut tx, self.statements());
        lock_spaces(&mut db, self.schema(), &[space]).await?;
        let parents = match parents {
            None => anti_join(&mut db, space)
                .await?
                .into_iter()
                .map(|h| h.id)
                .collect(),
            Some(mut given) => {
                given.sort();
                given.dedup();
                check_parents(&mut db, space, &given).await?;
                given
            }
        };
        let seq = next_seq(max_seq(&mut db, space).await?);
        let id = epoch_id(space, &parents, &event_ids);
        let cache = CacheWrite::Untouched;
        insert_epoch(&mut db, space, &id, seq, &parents, cols, cache).await?;
        self.commit(tx).await?;
        Ok(Appended { id, seq, parents })
    }
}

const SCHEMA_COLUMNS: &str =
    "SELECT table_name::text, column_name::text FROM information_schema.columns \
    WHERE table_schema = $1 ORDER BY table_name, ordinal_position";
const CATALOG_PROBE: &str = "SELECT coalesce(string_agg(x, ',' ORDER BY x), '') FROM ( \
    SELECT 'rel:' || c.relname || ':' || c.xmin::text AS x FROM pg_catalog.pg_class c \
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 \
    UNION ALL SELECT 'ns:' || xmin::text FROM pg_catalog.pg_namespace WHERE nspname = $1) q";
const HAS_STAMP: &str = "SELECT to_regclass('cairn_migration_stamp') IS NOT NULL";
const HAS_LINEAGE: &str = "SELECT to_regclass('cairn_migration_lineage') IS NOT NULL";
const STAMP_PROBE: &str = "SELECT coalesce((SELECT string_agg(xmin::text, ',' ORDER BY set_name) \
    FROM cairn_migration_stamp), '')";
const LINEAGE_PROBE: &str =
    "SELECT coalesce((SELECT string_agg(xmin::text, ',' ORDER BY set_name, position) \
    FROM cairn_migration_lineage), '')";

impl PgHarness {
    async fn probe_connection(&self) -> PgConnection {
        self.connection().await.expect("connect to the test server")
    }

    /// A new connection with the store's session settings (its schema as the `search_path`,
    /// a 10 s lock timeout), as a store's writer has.
    pub(crate) async fn connection(&self) -> Result<PgConnection> {
        self.connector().await
    }

    /// [`PgHarness::connection`] as a future that borrows nothing from the harness.
    pub(crate) fn connector(
        &self,
    ) -> impl std::future::Future<Output = Result<PgConnection>> + Send + 'static {
        let (url, schema) = (self.url.clone(), self.schema.as_str().to_owned());
        async move {
            let opts = PgConnectOptions::from_str(&url).map_err(map)?;
            let mut conn = PgConnection::connect_with(&opts).await.map_err(map)?;
            sqlx::query(sql::SESSION_SETUP)
                .bind(schema)
                .bind("10000")
                .execute(&mut conn)
                .await
                .map_err(map)?;
            Ok(conn)
        }
    }
}

/// A table held by an open transaction on a connection of its own (see
/// [`cairn_conformance::MigrationHarness::hold_table`]).
struct PgHeldTable {
    conn: PgConnection,
}

#[async_trait]
impl HeldLock for PgHeldTable {
    async fn release(mut self: Box<Self>) {
        let _ = sqlx::query("ROLLBACK")
            .persistent(false)
            .execute(&mut self.conn)
            .await;
        let _ = self.conn.close().await;
    }
}

#[async_trait]
impl cairn_conformance::MigrationHarness for PgHarness {
    async fn hold_table(&self, table: &str) -> Result<Option<Box<dyn HeldLock>>> {
        let mut conn = self.connection().await?;
        for statement in [
            "BEGIN".to_owned(),
            format!(
                "LOCK TABLE \"{}\" IN ACCESS SHARE MODE",
                table.replace('"', "")
            ),
        ] {
            sqlx::query(&statement)
                .persistent(false)
                .execute(&mut conn)
                .await
                .map_err(map)?;
        }
        Ok(Some(Box::new(PgHeldTable { conn })))
    }

    async fn fresh(&self) -> Self {
        let mut h = Self::empty(self.url.clone());
        h.store_url = self.store_url.clone();
        h
    }

    async fn migrator(&self) -> Arc<dyn cairn_migrate::MigrationBackend> {
        Arc::new(crate::PgMigrator::new(self.options()).expect("valid test schema"))
    }

    async fn open_as(&self, runner: &cairn_migrate::Runner) -> Result<Arc<dyn EpochDiagnostics>> {
        let (store, _) = PgStore::open_migrated(self.options(), runner).await?;
        Ok(Arc::new(store))
    }

    async fn schema(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut conn = self.probe_connection().await;
        let rows: Vec<(String, String)> = sqlx::query_as(SCHEMA_COLUMNS)
            .bind(self.schema.as_str())
            .fetch_all(&mut conn)
            .await
            .expect("read the schema's columns");
        let _ = conn.close().await;
        let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (table, column) in rows {
            if !cairn_migrate::BOOKKEEPING_TABLES.contains(&table.as_str()) {
                out.entry(table).or_default().push(column);
            }
        }
        out
    }

    async fn execute_sql(&self, sql: &str) -> Result<()> {
        let mut conn = self.connection().await?;
        let done = sqlx::query(sql)
            .persistent(false)
            .execute(&mut conn)
            .await
            .map_err(map);
        let _ = conn.close().await;
        done.map(|_| ())
    }

    async fn query_i64(&self, sql: &str) -> Result<i64> {
        let mut conn = self.connection().await?;
        let value = sqlx::query_scalar(sql)
            .persistent(false)
            .fetch_one(&mut conn)
            .await
            .map_err(map);
        let _ = conn.close().await;
        value
    }

    async fn commit_probe(&self) -> String {
        let mut conn = self.probe_connection().await;
        let catalog: String = sqlx::query_scalar(CATALOG_PROBE)
            .bind(self.schema.as_str())
            .fetch_one(&mut conn)
            .await
            .expect("catalog probe");
        // Each bookkeeping table is probed only when it exists (a case may have dropped one).
        let mut rows = Vec::new();
        for (has, probe) in [(HAS_STAMP, STAMP_PROBE), (HAS_LINEAGE, LINEAGE_PROBE)] {
            let exists: bool = sqlx::query_scalar(has)
                .fetch_one(&mut conn)
                .await
                .expect("bookkeeping probe");
            rows.push(if exists {
                sqlx::query_scalar(probe)
                    .fetch_one(&mut conn)
                    .await
                    .expect("bookkeeping probe")
            } else {
                "-".to_owned()
            });
        }
        let _ = conn.close().await;
        format!("{catalog}#{}|{}", rows[0], rows[1])
    }
}

impl cairn_conformance::AdditivityHarness for PgHarness {
    fn additivity(&self) -> Arc<dyn cairn_migrate::additivity::AdditivityEngine> {
        Arc::new(crate::PgAdditivity::new(self.url.clone()))
    }
}
