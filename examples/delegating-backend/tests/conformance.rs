//! The whole conformance suite — the epoch log with the migration and additivity cases, and
//! the spool — through the delegating backend, opened with `cairn::Store::from_backend` over
//! cairn's SQLite handle; and the epoch-log cases with the `multi_node` ones, which SQLite
//! cannot run, over its Postgres handle. See the crate docs for which harness methods go
//! through the store, which through the wrapper's capabilities only, and which are the inner
//! engine's.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use cairn::backend::{Backend, MigrationBackend, OpenOptions, Runner};
use cairn::migrate::AdditivityEngine;
use cairn::testkit::postgres::testkit::PgHarness;
use cairn::testkit::postgres::PgBackend;
use cairn::testkit::sqlite::spool_testkit::SqliteSpoolHarness;
use cairn::testkit::sqlite::testkit::SqliteHarness;
use cairn::testkit::sqlite::{SqliteBackend, SqliteOptions};
use cairn::{
    Appended, EpochDiagnostics, EpochId, Event, ManualClock, Result, SpaceId, Spool, Store,
};
use cairn_conformance::{AdditivityHarness, Harness, HeldLock, MigrationHarness, SpoolHarness};
use cairn_example_backend::{Calls, DelegatingBackend, DelegatingEpochs, DelegatingSpool};

/// The wrapper's engine name.
const ENGINE: &str = "delegating";

mod sqlite {
    use super::*;

    cairn_conformance::suite!(
        EpochHarness::new(cairn::testkit::sqlite::testkit::harness(), Calls::default()),
        migrations,
        additivity
    );
    cairn_conformance::spool_suite!(DelegatingSpoolHarness::new(
        cairn::testkit::sqlite::spool_testkit::spool_harness(),
        Calls::default()
    ));
}

/// Over the Postgres handle, the cases SQLite cannot run — separately opened stores are
/// separate nodes that lock spaces independently (`multi_node`) — with the epoch-log cases
/// every backend runs (the flag comes with them). The migration and spool cases over Postgres
/// too would double the Postgres suite's time in `cargo xtask test` and show nothing of the
/// wrapper the SQLite run does not.
mod postgres {
    use super::*;

    cairn_conformance::suite!(
        EpochHarness::new(
            cairn::testkit::postgres::testkit::harness(),
            Calls::default()
        ),
        multi_node
    );
}

/// An engine's own harness, which can also open the engine's backend handle over its location:
/// what the wrapper wraps.
#[async_trait]
trait Inner: Harness {
    /// Opens the engine's handle over the harness's location with `opts`.
    async fn open_backend(&self, opts: OpenOptions) -> Result<Arc<dyn Backend>>;
}

#[async_trait]
impl Inner for SqliteHarness {
    async fn open_backend(&self, opts: OpenOptions) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(
            SqliteBackend::open(self.path(), SqliteOptions::default(), opts).await?,
        ))
    }
}

#[async_trait]
impl Inner for SqliteSpoolHarness {
    async fn open_backend(&self, opts: OpenOptions) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(
            SqliteBackend::open(self.path(), SqliteOptions::default(), opts).await?,
        ))
    }
}

#[async_trait]
impl Inner for PgHarness {
    async fn open_backend(&self, opts: OpenOptions) -> Result<Arc<dyn Backend>> {
        Ok(Arc::new(PgBackend::open(self.options(), opts).await?))
    }
}

/// Opens the engine's handle over `inner`'s location and hands the wrapper over it to
/// `Store::from_backend`. The harness's opens stay out of the fleet registry, as the engines'
/// own harnesses' do: the cases model builds through runners and the registry explicitly.
async fn open_store<I: Inner>(inner: &I, opts: OpenOptions, calls: &Calls) -> Result<Store> {
    let handle = inner.open_backend(opts.register_in_fleet(false)).await?;
    Ok(Store::from_backend(Arc::new(DelegatingBackend::new(
        ENGINE,
        handle,
        calls.clone(),
    ))))
}

/// The epoch-log harness: the store through the wrapper, the test-only writers and probes
/// from the engine's own harness.
#[derive(Debug)]
struct EpochHarness<I> {
    inner: I,
    calls: Calls,
}

impl<I> EpochHarness<I> {
    async fn new(inner: impl std::future::Future<Output = I>, calls: Calls) -> Self {
        Self {
            inner: inner.await,
            calls,
        }
    }
}

#[async_trait]
impl<I: Inner> Harness for EpochHarness<I> {
    fn backend(&self) -> &'static str {
        ENGINE
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(open_store(&self.inner, OpenOptions::default(), &self.calls)
            .await?
            .diagnostics())
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.inner.legacy_append(space, parents, events).await
    }

    /// The engine's budget: the wrapper adds no statements, and E11 holds it to that.
    fn append_statement_budget(&self) -> Option<u64> {
        self.inner.append_statement_budget()
    }

    /// The engine's own test writer holds the lock (multi_node, Postgres only); the cases then
    /// write through the wrapper's store and must wait for it.
    async fn hold_space_lock(&self, space: &SpaceId) -> Result<Box<dyn HeldLock>> {
        self.inner.hold_space_lock(space).await
    }
}

#[async_trait]
impl<I: Inner + MigrationHarness> MigrationHarness for EpochHarness<I> {
    async fn fresh(&self) -> Self {
        Self {
            inner: self.inner.fresh().await,
            calls: self.calls.clone(),
        }
    }

    async fn migrator(&self) -> Arc<dyn MigrationBackend> {
        self.inner.migrator().await
    }

    /// Another build (a runner over another cairn set, or with hooks) cannot be opened through
    /// the public open, which runs this build's set: the engine's harness opens it, and the
    /// wrapper's epoch log wraps what it returns.
    async fn open_as(&self, runner: &Runner) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(Arc::new(DelegatingEpochs::new(
            self.inner.open_as(runner).await?,
            self.calls.clone(),
        )))
    }

    async fn schema(&self) -> BTreeMap<String, Vec<String>> {
        self.inner.schema().await
    }

    async fn commit_probe(&self) -> String {
        self.inner.commit_probe().await
    }

    async fn execute_sql(&self, sql: &str) -> Result<()> {
        self.inner.execute_sql(sql).await
    }

    async fn query_i64(&self, sql: &str) -> Result<i64> {
        self.inner.query_i64(sql).await
    }
}

impl<I: Inner + AdditivityHarness> AdditivityHarness for EpochHarness<I> {
    fn additivity(&self) -> Arc<dyn AdditivityEngine> {
        self.inner.additivity()
    }
}

/// The spool harness: spools through the wrapper on the engine's spool harness's clock.
#[derive(Debug)]
struct DelegatingSpoolHarness<I> {
    inner: I,
    calls: Calls,
}

impl<I> DelegatingSpoolHarness<I> {
    async fn new(inner: impl std::future::Future<Output = I>, calls: Calls) -> Self {
        Self {
            inner: inner.await,
            calls,
        }
    }
}

#[async_trait]
impl<I: Inner> Harness for DelegatingSpoolHarness<I> {
    fn backend(&self) -> &'static str {
        ENGINE
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        Ok(open_store(&self.inner, OpenOptions::default(), &self.calls)
            .await?
            .diagnostics())
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
impl<I: Inner + SpoolHarness> SpoolHarness for DelegatingSpoolHarness<I> {
    fn clock(&self) -> &ManualClock {
        self.inner.clock()
    }

    async fn open_spool(&self) -> Result<Arc<dyn Spool>> {
        let opts = OpenOptions::default().clock(Arc::new(self.clock().clone()));
        Ok(open_store(&self.inner, opts, &self.calls).await?.spool())
    }

    /// A new location is the engine's harness's (it removes it once the spool is dropped);
    /// the wrapper's spool wraps it.
    async fn fresh_spool(&self) -> Result<Arc<dyn Spool>> {
        Ok(Arc::new(DelegatingSpool::new(
            self.inner.fresh_spool().await?,
            self.calls.clone(),
        )))
    }

    /// As [`MigrationHarness::open_as`]: another build is opened by the engine's harness, and
    /// the wrapper's spool wraps it.
    async fn open_spool_as(&self, runner: &Runner) -> Result<Arc<dyn Spool>> {
        Ok(Arc::new(DelegatingSpool::new(
            self.inner.open_spool_as(runner).await?,
            self.calls.clone(),
        )))
    }
}

/// Every method of the epoch log's and the spool's traits that the suite's cases call, so the
/// wrapper must have delegated each of them (and of the handle, those a store's open uses).
/// The suite calls no `Spool::clock`, `Spool::next_due` or `EpochDiagnostics::check_ready`:
/// [`what_the_suite_does_not_call_is_delegated_too`] calls them.
const CALLED_BY_THE_SUITE: &[&str] = &[
    "Backend::epochs",
    "Backend::spool",
    "EpochStore::append",
    "EpochStore::heads",
    "EpochStore::repair_heads",
    "EpochStore::import",
    "EpochStore::events_since",
    "EpochStore::epoch",
    "EpochStore::list_spaces",
    "EpochStore::missing",
    "EpochStore::store_id",
    "EpochStore::import_batch",
    "EpochStore::sync_peers",
    "EpochDiagnostics::cached_heads",
    "EpochDiagnostics::computed_heads",
    "EpochDiagnostics::next_seq",
    "EpochDiagnostics::recent_epochs",
    "EpochDiagnostics::statements_executed",
    "Spool::enqueue",
    "Spool::claim",
    "Spool::heartbeat",
    "Spool::ack",
    "Spool::nack",
    "Spool::retry_after",
    "Spool::cancel",
    "Spool::run",
    "Spool::payload",
    "Spool::runs",
    "Spool::stats",
    "Spool::append_event",
    "Spool::close_run",
    "Spool::release",
    "Spool::retry_parked",
    "Spool::discard",
    "Spool::events",
    "Spool::acknowledge_events",
    "Spool::set_fact",
    "Spool::facts",
    "Spool::retention_pass",
    "Spool::subscribe",
    "Spool::import_runs",
    "Spool::put_schedule",
    "Spool::schedule",
    "Spool::schedules",
    "Spool::remove_schedule",
    "Spool::fire_schedule",
];

/// The suite's cases reach the store through the wrapper: run a selection of them (the model
/// tests, which call most methods, and the cases for what they leave out) on harnesses that
/// share one count, and every method they call was delegated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_goes_through_the_wrapper() {
    use cairn_conformance::cases;

    let calls = Calls::default();
    let h = EpochHarness::new(cairn::testkit::sqlite::testkit::harness(), calls.clone()).await;
    cases::model_random_ops_match_reference(&h).await;
    cases::e9_import_fork_merge_and_refusals(&h).await;
    cases::e10_feed_order_paging_and_cursor_refusals(&h).await;
    cases::e7_repair_fills_once_and_fork_collapses(&h).await;
    cases::e11_append_statement_budget_is_fixed(&h).await;
    cases::list_spaces_pages_in_id_order(&h).await;
    cases::e13_recent_epochs_newest_first_with_parents_and_counts(&h).await;
    cases::e14_present_epochs_are_answered_and_not_counted(&h).await;
    cases::e14_missing_answers_the_absent_ids_in_order(&h).await;
    cases::e14_store_id_is_stable(&h).await;
    let s = DelegatingSpoolHarness::new(
        cairn::testkit::sqlite::spool_testkit::spool_harness(),
        calls.clone(),
    )
    .await;
    cases::spool_model_random_ops_match_reference(&s).await;
    cases::s13_legacy_import_once_keeps_ids_keys_events_and_facts(&s).await;
    cases::s3_subscriber_wakes_for_another_instances_enqueue(&s).await;
    cases::s17_operator_retries_or_discards_a_parked_run(&s).await;
    cases::s19_payload_reads_back_the_enqueued_bytes(&s).await;
    cases::s10_retry_after_uses_the_callers_delay(&s).await;
    cases::q7_edits_and_removals_take_effect_at_the_next_tick(&s).await;
    let missed: Vec<&str> = CALLED_BY_THE_SUITE
        .iter()
        .copied()
        .filter(|m| calls.get(m) == 0)
        .collect();
    assert!(
        missed.is_empty(),
        "never delegated: {missed:?}; delegated: {calls:?}"
    );
}

/// What the suite does not call goes through the wrapper too: the spool's clock and
/// `next_due` (a provided method the wrapper overrides), the epoch log's `check_ready`, and the
/// handle's migrator, session, diagnostics and close as `Store` uses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_suite_does_not_call_is_delegated_too() {
    use cairn::backend::Integrity;
    use cairn::spool::{EnqueueOptions, RunState};
    use cairn::{Clock, DedupKey, QueueName};

    let h = cairn::testkit::sqlite::testkit::harness().await;
    let clock = ManualClock::default();
    clock.advance(std::time::Duration::from_secs(3600));
    let inner = SqliteBackend::open(
        h.path(),
        SqliteOptions::default(),
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .build_id("delegating-1"),
    )
    .await
    .unwrap();
    let calls = Calls::default();
    let backend = Arc::new(DelegatingBackend::new(
        ENGINE,
        Arc::new(inner),
        calls.clone(),
    ));
    let store = Store::from_backend(backend.clone());
    assert_eq!(store.engine(), ENGINE);

    let spool = store.spool();
    assert_eq!(spool.clock().now(), clock.now(), "the inner spool's clock");
    let q = QueueName::new("next-due").unwrap();
    assert_eq!(spool.next_due(&q).await.unwrap(), None);
    let run = spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["a"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let info = spool.run(run.run_id).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Queued);
    assert_eq!(spool.next_due(&q).await.unwrap(), info.due_at);
    store.diagnostics().check_ready().await.unwrap();

    assert_eq!(
        backend.migrator().dialect(),
        cairn::migrate::Dialect::Sqlite
    );
    assert_eq!(store.migrations()[0].set, "cairn");
    let entry = store
        .fleet_entry()
        .expect("the inner open registered")
        .clone();
    assert_eq!(entry.build, "delegating-1");
    assert_eq!(store.fleet().await.unwrap(), vec![entry]);
    assert!(matches!(
        store.store_diagnostics().integrity().await,
        Integrity::Intact { .. }
    ));
    store.close().await.unwrap();

    for (method, n) in [
        ("Spool::clock", 1),
        ("Spool::next_due", 2),
        ("EpochDiagnostics::check_ready", 1),
        ("Backend::migrator", 1),
        ("Backend::diagnostics", 1),
        ("Backend::close", 1),
    ] {
        assert_eq!(calls.get(method), n, "{method}: {calls:?}");
    }
    assert!(calls.get("Backend::session") >= 3, "{calls:?}");

    // Closed: the inner open deregistered.
    let reader = Store::builder(format!("sqlite://{}", h.path().display()))
        .register_in_fleet(false)
        .open()
        .await
        .unwrap();
    assert!(
        reader.fleet().await.unwrap().is_empty(),
        "close deregistered"
    );
    reader.close().await.unwrap();
}
