//! The spool's conformance harness ([`PgSpoolHarness`], feature `testkit`): spools over one
//! scratch schema of the test server, all on one [`ManualClock`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cairn_conformance::{Harness, HeldLock, MigrationHarness, SpoolHarness};
use cairn_core::spool::{ManualClock, SpoolConfig};
use cairn_core::{Appended, EpochDiagnostics, EpochId, Event, Result, RunId, SpaceId, Spool};

use super::handle::PgSpool;
use super::hooks::lock;
use crate::testkit::{harness, PgHarness};
use crate::{PgOptions, PgStore};

/// A fresh spool harness over a new random schema of the test server.
///
/// # Panics
/// As [`crate::testkit::harness`]: when no server can be found.
pub async fn spool_harness() -> PgSpoolHarness {
    PgSpoolHarness {
        pg: harness().await,
        clock: ManualClock::default(),
        fresh: Mutex::new(None),
    }
}

/// A fresh spool harness whose spools and stores connect through the test PgBouncer in
/// transaction mode ([`crate::testkit::pgbouncer_harness`]).
///
/// # Panics
/// As [`crate::testkit::pgbouncer_harness`]: when no server or no `pgbouncer` can be found.
pub async fn pgbouncer_spool_harness() -> PgSpoolHarness {
    PgSpoolHarness {
        pg: crate::testkit::pgbouncer_harness().await,
        clock: ManualClock::default(),
        fresh: Mutex::new(None),
    }
}

/// The spool harness: a [`PgHarness`] (one scratch schema, dropped with the harness) plus the
/// clock every spool it opens reads.
pub struct PgSpoolHarness {
    pg: PgHarness,
    clock: ManualClock,
    /// The latest [`SpoolHarness::fresh_spool`]'s harness and spool: its schema lives until the
    /// next fresh spool replaces it (a property test opens one per case, and the test server's
    /// connections are shared by everyone's tests) or this harness is dropped.
    fresh: Mutex<Option<(PgHarness, PgSpool)>>,
}

impl std::fmt::Debug for PgSpoolHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSpoolHarness")
            .field("schema", &self.pg.schema())
            .finish_non_exhaustive()
    }
}

impl PgSpoolHarness {
    /// The epoch-log harness underneath (its schema is the spool's).
    pub fn pg(&self) -> &PgHarness {
        &self.pg
    }

    /// Options for a new spool or store over this harness's schema.
    pub fn options(&self) -> PgOptions {
        self.pg.options()
    }

    /// Opens a new store over this harness's schema and its [`PgSpool`], on the harness's
    /// clock.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn spool(&self) -> Result<PgSpool> {
        self.spool_with(self.options()).await
    }

    /// Opens a new store with `opts` (e.g. shorter timeouts) and its [`PgSpool`], on the
    /// harness's clock.
    ///
    /// # Errors
    /// As [`PgStore::open_with`].
    pub async fn spool_with(&self, opts: PgOptions) -> Result<PgSpool> {
        let store = PgStore::open_with(opts).await?;
        PgSpool::from_store(&store, Arc::new(self.clock.clone()), SpoolConfig::default())
    }
}

#[async_trait]
impl Harness for PgSpoolHarness {
    fn backend(&self) -> &'static str {
        self.pg.backend()
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        self.pg.open().await
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.pg.legacy_append(space, parents, events).await
    }

    fn append_statement_budget(&self) -> Option<u64> {
        self.pg.append_statement_budget()
    }

    async fn hold_space_lock(&self, space: &SpaceId) -> Result<Box<dyn HeldLock>> {
        self.pg.hold_space_lock(space).await
    }
}

#[async_trait]
impl SpoolHarness for PgSpoolHarness {
    fn clock(&self) -> &ManualClock {
        &self.clock
    }

    async fn open_spool(&self) -> Result<Arc<dyn Spool>> {
        Ok(Arc::new(self.spool().await?))
    }

    async fn open_spool_as(&self, runner: &cairn_migrate::Runner) -> Result<Arc<dyn Spool>> {
        let (store, _) = PgStore::open_migrated(self.options(), runner).await?;
        Ok(Arc::new(PgSpool::from_store(
            &store,
            Arc::new(self.clock.clone()),
            SpoolConfig::default(),
        )?))
    }

    async fn check_layout(&self) -> Result<()> {
        let fresh = self
            .fresh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(pg, _)| pg.connector());
        let mut schemas = vec![self.pg.connection().await?];
        if let Some(connect) = fresh {
            schemas.push(connect.await?);
        }
        for mut conn in schemas {
            let wrong = ready_mismatches(&mut conn).await?;
            if !wrong.is_empty() {
                return Err(cairn_core::Error::corrupt(format!(
                    "spool_ready breaks I-ready for run_no {wrong:?}"
                )));
            }
        }
        Ok(())
    }

    async fn fresh_spool(&self) -> Result<Arc<dyn Spool>> {
        let previous = self.fresh.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((pg, spool)) = previous {
            spool.close().await;
            drop(pg);
        }
        let pg = self.pg.fresh().await;
        let store = PgStore::open_with(pg.options().max_connections(4)).await?;
        let spool =
            PgSpool::from_store(&store, Arc::new(self.clock.clone()), SpoolConfig::default())?;
        *self.fresh.lock().unwrap_or_else(|p| p.into_inner()) = Some((pg, spool.clone()));
        Ok(Arc::new(spool))
    }
}

/// Test support for batched enqueues (`spool::enqueue`).
impl PgSpool {
    /// Holds the enqueue lane: no batch runs until the returned guard drops, so a test can
    /// queue several enqueues into one batch.
    pub async fn testkit_hold_enqueue_lane(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.inner.enqueues.hold().await
    }

    /// Enqueues queued for the next batch.
    pub fn testkit_pending_enqueues(&self) -> usize {
        self.inner.enqueues.pending()
    }

    /// Batch statements committed, and batch statements that failed (their enqueues ran
    /// alone), since this instance was made.
    pub fn testkit_batch_stats(&self) -> (u64, u64) {
        let hooks = &self.inner.enqueues.hooks;
        (
            hooks.batches.load(Ordering::Relaxed),
            hooks.fallbacks.load(Ordering::Relaxed),
        )
    }

    /// Makes the next batch statement fail without being sent.
    pub fn testkit_fail_next_batch(&self) {
        self.inner
            .enqueues
            .hooks
            .fail_next
            .store(true, Ordering::Relaxed);
    }
}

/// Test support for the enqueue's retry of a new id that is taken.
impl PgSpool {
    /// The ids the next unbatched enqueue attempts (an enqueue with a supersede group, or one
    /// whose batch failed) take, in order, before fresh ones are generated again.
    pub fn testkit_force_next_run_ids(&self, ids: impl IntoIterator<Item = RunId>) {
        lock(&self.inner.hooks.forced_ids).extend(ids);
    }

    /// How many forced ids no attempt has taken yet.
    pub fn testkit_forced_ids_left(&self) -> usize {
        lock(&self.inner.hooks.forced_ids).len()
    }
}

/// Test support for batched acks (`spool::settle`).
impl PgSpool {
    /// Holds the ack lane: no ack batch runs until the returned guard drops, so a test can
    /// queue several acks into one batch.
    pub async fn testkit_hold_ack_lane(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.inner.acks.hold().await
    }

    /// Acks queued for the next batch.
    pub fn testkit_pending_acks(&self) -> usize {
        self.inner.acks.pending()
    }

    /// Ack batch statements committed, and ack batch statements that failed (their acks ran
    /// alone), since this instance was made.
    pub fn testkit_ack_batch_stats(&self) -> (u64, u64) {
        let hooks = &self.inner.acks.hooks;
        (
            hooks.batches.load(Ordering::Relaxed),
            hooks.fallbacks.load(Ordering::Relaxed),
        )
    }

    /// Makes the next ack batch statement fail without being sent.
    pub fn testkit_fail_next_ack_batch(&self) {
        self.inner
            .acks
            .hooks
            .fail_next
            .store(true, Ordering::Relaxed);
    }
}

/// Test support for the one-statement claim (`spool::claim`).
impl PgSpool {
    /// Claims answered by the one-statement path and by the transaction, since this instance
    /// was made.
    pub fn testkit_claim_paths(&self) -> (u64, u64) {
        let paths = &self.inner.hooks.claim_paths;
        (
            paths[0].load(Ordering::Relaxed),
            paths[1].load(Ordering::Relaxed),
        )
    }

    /// Whether claims try the one statement first (`true`, the default) or always take the
    /// transaction.
    pub fn testkit_one_statement_claims(&self, on: bool) {
        self.inner
            .hooks
            .transaction_claims_only
            .store(!on, Ordering::Relaxed);
    }

    /// The `due_at` the one-statement claim writes (in microseconds since the Unix epoch) for
    /// a lease expiring at `expires_at`, attempt `attempt` and claim jitter `jitter` (the top
    /// 32 bits of the jitter seed) under the backoff `base` and `cap`: the claim's own SQL
    /// (`claim_backoff_joins` in `spool::sql`), evaluated by the server.
    ///
    /// # Errors
    /// A failed query.
    pub async fn testkit_claim_due_in_sql(
        &self,
        expires_at: i64,
        base: std::time::Duration,
        cap: std::time::Duration,
        attempt: i64,
        jitter: i64,
    ) -> Result<i64> {
        const QUERY: &str = concat!(
            "SELECT d.due_at FROM (SELECT $1::int8 AS expires_at, $2::numeric AS base_ns, \
             $3::numeric AS cap_ns) p CROSS JOIN (SELECT $4::int8 AS attempt, $5::int8 AS jitter) n ",
            super::sql::claim_backoff_joins!()
        );
        let row = sqlx::query(QUERY)
            .bind(expires_at)
            .bind(base.as_nanos().to_string())
            .bind(cap.as_nanos().to_string())
            .bind(attempt)
            .bind(jitter)
            .fetch_one(self.pool())
            .await
            .map_err(crate::error::map)?;
        super::row::get(&row, 0)
    }
}

/// Test support for the claim's plan.
impl PgSpool {
    /// The server's plan (`EXPLAIN`, text) for a one-statement claim of `limit` runs of `queue`
    /// now (the statement a claim sends: `CLAIM_QUEUED_FLOW` on a store at revision 0009), planned on one of this spool's connections — with its session setup, or with bitmap
    /// scans allowed again when `bitmap_scans` (to show what the setup prevents). Nothing is
    /// claimed.
    ///
    /// # Errors
    /// A failed query.
    pub async fn testkit_explain_claim(
        &self,
        queue: &cairn_core::QueueName,
        limit: i64,
        bitmap_scans: bool,
    ) -> Result<String> {
        use crate::error::map;
        let mut tx = self.pool().begin().await.map_err(map)?;
        if bitmap_scans {
            sqlx::query("SET LOCAL enable_bitmapscan = on")
                .execute(&mut *tx)
                .await
                .map_err(map)?;
        }
        // The statement the claim sends: gated by the queue's flow once revision 0009 is in.
        let statement = if self.flow_layout().await? {
            super::sql_flow::CLAIM_QUEUED_FLOW
        } else {
            super::sql::CLAIM_QUEUED
        };
        let now = cairn_core::spool::Clock::now(self.inner.clock.as_ref()).as_unix_micros();
        let rows: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {statement}"))
            .bind(queue.as_str())
            .bind(now)
            .bind(limit)
            .bind(Vec::<Vec<u8>>::new())
            .bind("explain")
            .bind(now)
            .bind("1000000000")
            .bind("60000000000")
            .fetch_all(&mut *tx)
            .await
            .map_err(map)?;
        tx.rollback().await.map_err(map)?;
        Ok(rows.join("\n"))
    }
}

#[async_trait]
impl cairn_conformance::TxHarness for PgSpoolHarness {
    async fn open_tx(&self) -> Result<Arc<dyn cairn_migrate::Backend>> {
        let open = cairn_migrate::OpenOptions::default()
            .clock(Arc::new(self.clock.clone()))
            .migrations(cairn_conformance::app_order_set())
            .register_in_fleet(false);
        let backend = crate::PgBackend::open(self.options(), open).await?;
        backend
            .pg_spool()
            .set_wake_poll(std::time::Duration::from_secs(3600));
        Ok(Arc::new(backend))
    }

    async fn insert_order(&self, tx: &mut dyn cairn_core::Transaction, id: &str) -> Result<()> {
        let tx = tx
            .as_any_mut()
            .downcast_mut::<crate::PgTransaction>()
            .ok_or_else(|| cairn_core::Error::invalid("transaction", "is not a PgTransaction"))?;
        sqlx::query("INSERT INTO app_order (id) VALUES ($1)")
            .bind(id)
            .execute(tx.connection())
            .await
            .map_err(crate::error::map)?;
        Ok(())
    }

    async fn order_exists(&self, id: &str) -> Result<bool> {
        let mut conn = self.pg.connection().await?;
        let row: (bool,) = sqlx::query_as("SELECT EXISTS (SELECT 1 FROM app_order WHERE id = $1)")
            .bind(id)
            .fetch_one(&mut conn)
            .await
            .map_err(crate::error::map)?;
        Ok(row.0)
    }

    async fn open_impatient_spool(&self) -> Result<Arc<dyn Spool>> {
        let opts = self
            .options()
            .lock_timeout(std::time::Duration::from_millis(200));
        Ok(Arc::new(self.spool_with(opts).await?))
    }

    fn exclusive_writer(&self) -> bool {
        false
    }

    async fn fail_inserts_of_key(&self, key: &cairn_core::DedupKey) -> Result<()> {
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let conn = self.pg.connection().await?;
        poison(conn, hex).await
    }
}

/// Installs the failing trigger of [`cairn_conformance::TxHarness::fail_inserts_of_key`].
async fn poison(mut conn: sqlx::PgConnection, hex: String) -> Result<()> {
    let function = format!(
        "CREATE OR REPLACE FUNCTION cairn_test_poison() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF NEW.dedup_key = '\\x{hex}'::bytea THEN \
         RAISE EXCEPTION 'a poisoned dedup key'; END IF; RETURN NEW; END $$"
    );
    sqlx::query(&function)
        .execute(&mut conn)
        .await
        .map_err(crate::error::map)?;
    sqlx::query("DROP TRIGGER IF EXISTS cairn_test_poison ON spool_run")
        .execute(&mut conn)
        .await
        .map_err(crate::error::map)?;
    sqlx::query(
        "CREATE TRIGGER cairn_test_poison BEFORE INSERT ON spool_run FOR EACH ROW \
         EXECUTE FUNCTION cairn_test_poison()",
    )
    .execute(&mut conn)
    .await
    .map_err(crate::error::map)?;
    Ok(())
}

/// The runs (`run_no`) of the schema on `conn`'s `search_path` that break **I-ready** (the
/// module doc of `spool::sql`): a live run (`due_at` not NULL) without its `spool_ready` row, a
/// row whose queue, priority, `due_at` or `claimed` differ from the run's, a row for a run that
/// is not live or does not exist. Empty before the contract revision `0008_spool_ready_contract`
/// (no `spool_ready` yet, or `spool_run_claim` still there): until then builds older than 0007
/// may write runs without a row, and no claim reads the table.
///
/// # Errors
/// When the query fails.
pub async fn ready_mismatches(conn: &mut sqlx::PgConnection) -> Result<Vec<i64>> {
    let contracted: bool = sqlx::query_scalar(
        "SELECT pg_catalog.to_regclass('spool_ready') IS NOT NULL \
            AND pg_catalog.to_regclass('spool_run_claim') IS NULL",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(crate::error::map)?;
    if !contracted {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(READY_MISMATCHES)
        .fetch_all(conn)
        .await
        .map_err(crate::error::map)
}

/// [`ready_mismatches`]' query.
const READY_MISMATCHES: &str = "\
SELECT m.run_no FROM ( \
    SELECT coalesce(r.run_no, q.run_no) AS run_no \
    FROM spool_run r FULL JOIN spool_ready q ON q.run_no = r.run_no \
    WHERE (r.due_at IS NOT NULL) IS DISTINCT FROM (q.run_no IS NOT NULL) \
        OR (q.run_no IS NOT NULL AND r.run_no IS NOT NULL AND ( \
            q.queue <> r.queue OR q.priority <> r.priority OR q.due_at <> r.due_at \
            OR q.claimed <> (r.state = 'claimed'))) \
) m ORDER BY 1";
