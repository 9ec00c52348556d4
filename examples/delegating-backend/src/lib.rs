//! # cairn-example-backend
//!
//! A complete cairn backend written the way a third party would write one: against the
//! public API only (the `cairn` facade with its `backend` feature, and `async-trait`), handed
//! to [`cairn::Store::from_backend`], and tested by the whole conformance suite
//! (`cairn-conformance`) in `tests/conformance.rs`.
//!
//! It is a *delegating* backend: [`DelegatingBackend`] wraps another open handle (any
//! [`cairn::backend::Backend`]; the tests wrap cairn's SQLite one) and every capability it
//! hands out is a type of this crate — [`DelegatingEpochs`] for the epoch log and its
//! diagnostics, [`DelegatingSpool`] for the spool — whose every trait method, the provided
//! ones included, calls the inner store's. Nothing is inherited from a trait's default by
//! accident: a default the wrapper did not override would answer for the wrapped engine
//! without asking it (`Spool::next_due`'s default pages through `runs`; `import_runs`'s
//! refuses). [`Calls`] counts the delegated calls per method, so a test shows the suite went
//! through the wrapper. A real engine replaces the inner calls by its own I/O; the shape —
//! three types and one open — stays.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> cairn::Result<()> {
//! # let dir = std::env::temp_dir().join(cairn::testkit::scratch_name("example-backend"));
//! use std::sync::Arc;
//! use cairn::backend::OpenOptions;
//! use cairn_example_backend::{Calls, DelegatingBackend};
//!
//! // Any open handle; here cairn's SQLite engine (from the `testkit` feature, as the tests do).
//! let inner = cairn::testkit::sqlite::SqliteBackend::open(
//!     dir.join("store.db"),
//!     Default::default(),
//!     OpenOptions::default(),
//! )
//! .await?;
//! let calls = Calls::default();
//! let store = cairn::Store::from_backend(Arc::new(DelegatingBackend::new(
//!     "delegating-sqlite",
//!     Arc::new(inner),
//!     calls.clone(),
//! )));
//! let space = cairn::SpaceId::new("docs")?;
//! store.epochs().append(&space, vec![cairn::Event::new("doc.edit", "hello")]).await?;
//! assert_eq!(store.engine(), "delegating-sqlite");
//! assert_eq!(calls.get("EpochStore::append"), 1);
//! store.close().await?;
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok(()) }
//! ```
//!
//! ## Opening
//!
//! A backend's open must run cairn's open protocol (see [`cairn::backend::Backend`]): cairn's
//! own migration set through the [`cairn::backend::Runner`], then
//! [`cairn::backend::Session::open`] for the application's sets, the contract gate and the
//! fleet registration. A delegating backend wraps a handle whose open already ran it, so it
//! hands out the inner [`Session`] and migrator as they are: the store it wraps registered,
//! and closing the wrapper ([`Backend::close`]) closes it, which deregisters.
//!
//! ## What the conformance suite runs through it
//!
//! `tests/conformance.rs` expands `suite!(…, migrations, additivity)` and `spool_suite!(…)`
//! over cairn's SQLite handle, with harnesses whose `open` and `open_spool` return
//! `store.diagnostics()` and `store.spool()` of a [`cairn::Store::from_backend`] over this
//! wrapper. The other harness methods cannot go through the public open:
//!
//! - `MigrationHarness::open_as` and `SpoolHarness::open_spool_as` open the store *as another
//!   build*: with a runner over a cairn set other than this build's (test revisions after
//!   cairn's, or before them; runner hooks that inject faults). A public open always runs this
//!   build's cairn set — that is the point of a build — so the harness opens those builds
//!   through the inner engine's own harness and wraps what it returns in
//!   [`DelegatingEpochs`] / [`DelegatingSpool`]: the cases still go through this crate's
//!   delegation, not through [`DelegatingBackend`]. `SpoolHarness::fresh_spool` (a new
//!   location per model-test case, removed when its spool is dropped) is wrapped the same way.
//! - The test-only writers and probes (`legacy_append`, `execute_sql`, `query_i64`, `schema`,
//!   `commit_probe`, `migrator`, `additivity`) are the inner engine's: they speak its SQL,
//!   which is the engine's business, not the wrapper's.
//!
//! Over cairn's Postgres handle the same harness runs `suite!(…, multi_node)`: the epoch-log
//! cases with those for engines whose separately opened instances lock spaces independently
//! (SQLite serializes writers); their `Harness::hold_space_lock` is the engine's own test
//! writer's, and the cases then write through the wrapper's stores. The migration and spool
//! cases over Postgres too would double the Postgres suite's time in `cargo xtask test` and
//! show nothing of the wrapper that the SQLite run does not.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use cairn::backend::{Backend, BackendParts, Diagnostics, MigrationBackend, Session, Transaction};
use cairn::spool::{
    CancelOutcome, Claimed, Clock, CloseOutcome, ConsumerId, DedupKey, EnqueueItem, EnqueueOptions,
    Enqueued, EventAppended, FactName, FactOutcome, Heartbeat, ImportSource, ImportedRun,
    LeaseToken, NackKind, Nacked, QueueFlow, QueueLimits, QueueName, RetentionBudget,
    RetentionPolicy, RetentionReport, RunEvent, RunEventId, RunFilter, RunId, RunImportOutcome,
    RunInfo, Spool, SpoolStats, Timestamp, Unparked, Wakeup,
};
use cairn::spool::{Schedule, ScheduleFired, ScheduleInfo, ScheduleName};
use cairn::sync::{StoreId, SyncCursor, SyncPeer};
use cairn::{
    Appended, Epoch, EpochDiagnostics, EpochId, EpochStore, EpochSummary, Event, FeedCursor,
    FeedPage, ForeignEpoch, Head, ImportOutcome, RepairOutcome, Result, Seq, SpaceId,
};

/// How many calls a [`DelegatingBackend`] and the capabilities it handed out delegated to the
/// inner store, per method (`"EpochStore::append"`, `"Spool::claim"`, `"Backend::migrator"`,
/// …). Cheap to clone; clones share the counts, so one `Calls` can follow every store a test
/// opens.
#[derive(Clone, Default)]
pub struct Calls(Arc<Mutex<BTreeMap<&'static str, u64>>>);

impl fmt::Debug for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.snapshot()).finish()
    }
}

impl Calls {
    fn note(&self, method: &'static str) {
        *self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(method)
            .or_default() += 1;
    }

    /// How many calls of `method` were delegated (`"Trait::method"`).
    pub fn get(&self, method: &str) -> u64 {
        self.snapshot().get(method).copied().unwrap_or(0)
    }

    /// How many calls were delegated in all.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Every method called at least once, with its count.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The epoch log of a [`DelegatingBackend`]: every [`EpochStore`] and [`EpochDiagnostics`]
/// method calls the inner store's and counts the call.
pub struct DelegatingEpochs {
    inner: Arc<dyn EpochDiagnostics>,
    calls: Calls,
}

impl DelegatingEpochs {
    /// Wraps `inner`, counting in `calls`.
    pub fn new(inner: Arc<dyn EpochDiagnostics>, calls: Calls) -> Self {
        Self { inner, calls }
    }
}

impl fmt::Debug for DelegatingEpochs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelegatingEpochs")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl EpochStore for DelegatingEpochs {
    async fn append(&self, space: &SpaceId, events: Vec<Event>) -> Result<Appended> {
        self.calls.note("EpochStore::append");
        self.inner.append(space, events).await
    }

    async fn heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.calls.note("EpochStore::heads");
        self.inner.heads(space).await
    }

    async fn repair_heads(&self, space: &SpaceId) -> Result<RepairOutcome> {
        self.calls.note("EpochStore::repair_heads");
        self.inner.repair_heads(space).await
    }

    async fn import(&self, epoch: ForeignEpoch) -> Result<ImportOutcome> {
        self.calls.note("EpochStore::import");
        self.inner.import(epoch).await
    }

    async fn events_since(
        &self,
        space: &SpaceId,
        cursor: Option<&FeedCursor>,
        limit: usize,
    ) -> Result<FeedPage> {
        self.calls.note("EpochStore::events_since");
        self.inner.events_since(space, cursor, limit).await
    }

    async fn epoch(&self, space: &SpaceId, id: &EpochId) -> Result<Option<Epoch>> {
        self.calls.note("EpochStore::epoch");
        self.inner.epoch(space, id).await
    }

    async fn missing(&self, space: &SpaceId, ids: &[EpochId]) -> Result<Vec<EpochId>> {
        self.calls.note("EpochStore::missing");
        self.inner.missing(space, ids).await
    }

    async fn store_id(&self) -> Result<StoreId> {
        self.calls.note("EpochStore::store_id");
        self.inner.store_id().await
    }

    async fn import_batch(
        &self,
        space: &SpaceId,
        epochs: Vec<ForeignEpoch>,
        cursor: Option<&SyncCursor>,
        at_us: i64,
    ) -> Result<Vec<ImportOutcome>> {
        self.calls.note("EpochStore::import_batch");
        self.inner.import_batch(space, epochs, cursor, at_us).await
    }

    async fn sync_peers(&self, space: &SpaceId) -> Result<Vec<SyncPeer>> {
        self.calls.note("EpochStore::sync_peers");
        self.inner.sync_peers(space).await
    }

    async fn list_spaces(&self, after: Option<&SpaceId>, limit: usize) -> Result<Vec<SpaceId>> {
        self.calls.note("EpochStore::list_spaces");
        self.inner.list_spaces(after, limit).await
    }
}

#[async_trait]
impl EpochDiagnostics for DelegatingEpochs {
    async fn cached_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.calls.note("EpochDiagnostics::cached_heads");
        self.inner.cached_heads(space).await
    }

    async fn computed_heads(&self, space: &SpaceId) -> Result<Vec<Head>> {
        self.calls.note("EpochDiagnostics::computed_heads");
        self.inner.computed_heads(space).await
    }

    async fn next_seq(&self, space: &SpaceId) -> Result<Seq> {
        self.calls.note("EpochDiagnostics::next_seq");
        self.inner.next_seq(space).await
    }

    async fn recent_epochs(
        &self,
        space: &SpaceId,
        before: Option<Seq>,
        limit: usize,
    ) -> Result<Vec<EpochSummary>> {
        self.calls.note("EpochDiagnostics::recent_epochs");
        self.inner.recent_epochs(space, before, limit).await
    }

    /// The inner store's count: the wrapper runs no statements of its own, which the suite's
    /// E11 checks against the inner engine's budget.
    fn statements_executed(&self) -> u64 {
        self.calls.note("EpochDiagnostics::statements_executed");
        self.inner.statements_executed()
    }

    async fn check_ready(&self) -> Result<()> {
        self.calls.note("EpochDiagnostics::check_ready");
        self.inner.check_ready().await
    }
}

/// The spool of a [`DelegatingBackend`]: every [`Spool`] method, the provided ones included,
/// calls the inner spool's and counts the call.
pub struct DelegatingSpool {
    inner: Arc<dyn Spool>,
    calls: Calls,
}

impl DelegatingSpool {
    /// Wraps `inner`, counting in `calls`.
    pub fn new(inner: Arc<dyn Spool>, calls: Calls) -> Self {
        Self { inner, calls }
    }
}

impl fmt::Debug for DelegatingSpool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelegatingSpool")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Spool for DelegatingSpool {
    fn clock(&self) -> &dyn Clock {
        self.calls.note("Spool::clock");
        self.inner.clock()
    }

    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued> {
        self.calls.note("Spool::enqueue");
        self.inner.enqueue(queue, key, payload, options).await
    }

    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>> {
        self.calls.note("Spool::enqueue_many");
        self.inner.enqueue_many(queue, items).await
    }

    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        self.calls.note("Spool::claim");
        self.inner.claim(queue, consumer, lease, limit).await
    }

    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat> {
        self.calls.note("Spool::heartbeat");
        self.inner.heartbeat(run, token, lease).await
    }

    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()> {
        self.calls.note("Spool::ack");
        self.inner.ack(run, token).await
    }

    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked> {
        self.calls.note("Spool::nack");
        self.inner.nack(run, token, kind, reason).await
    }

    async fn retry_after(
        &self,
        run: RunId,
        token: LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<Nacked> {
        self.calls.note("Spool::retry_after");
        self.inner.retry_after(run, token, reason, delay).await
    }

    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        self.calls.note("Spool::cancel");
        self.inner.cancel(run).await
    }

    async fn run(&self, run: RunId) -> Result<Option<RunInfo>> {
        self.calls.note("Spool::run");
        self.inner.run(run).await
    }

    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        self.calls.note("Spool::payload");
        self.inner.payload(run).await
    }

    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>> {
        self.calls.note("Spool::runs");
        self.inner.runs(filter, limit).await
    }

    async fn stats(&self) -> Result<SpoolStats> {
        self.calls.note("Spool::stats");
        self.inner.stats().await
    }

    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended> {
        self.calls.note("Spool::append_event");
        self.inner.append_event(run, event_id, payload).await
    }

    async fn close_run(&self, run: RunId) -> Result<CloseOutcome> {
        self.calls.note("Spool::close_run");
        self.inner.close_run(run).await
    }

    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked> {
        self.calls.note("Spool::release");
        self.inner.release(run, token, delay).await
    }

    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.calls.note("Spool::retry_parked");
        self.inner.retry_parked(run, by).await
    }

    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked> {
        self.calls.note("Spool::discard");
        self.inner.discard(run, by).await
    }

    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>> {
        self.calls.note("Spool::events");
        self.inner.events(run, after, limit).await
    }

    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64> {
        self.calls.note("Spool::acknowledge_events");
        self.inner.acknowledge_events(run, event_ids).await
    }

    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome> {
        self.calls.note("Spool::set_fact");
        self.inner.set_fact(run, name, value).await
    }

    async fn facts(&self, run: RunId) -> Result<BTreeMap<FactName, Vec<u8>>> {
        self.calls.note("Spool::facts");
        self.inner.facts(run).await
    }

    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport> {
        self.calls.note("Spool::retention_pass");
        self.inner.retention_pass(policy, budget).await
    }

    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        self.calls.note("Spool::subscribe");
        self.inner.subscribe(queue).await
    }

    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        self.calls.note("Spool::import_runs");
        self.inner.import_runs(source, runs).await
    }

    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        self.calls.note("Spool::next_due");
        self.inner.next_due(queue).await
    }

    async fn put_schedule(&self, schedule: &Schedule) -> Result<ScheduleInfo> {
        self.calls.note("Spool::put_schedule");
        self.inner.put_schedule(schedule).await
    }

    async fn schedule(&self, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
        self.calls.note("Spool::schedule");
        self.inner.schedule(name).await
    }

    async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.calls.note("Spool::schedules");
        self.inner.schedules().await
    }

    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool> {
        self.calls.note("Spool::remove_schedule");
        self.inner.remove_schedule(name).await
    }

    async fn fire_schedule(
        &self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
    ) -> Result<ScheduleFired> {
        self.calls.note("Spool::fire_schedule");
        self.inner.fire_schedule(name, revision, ticks).await
    }

    async fn set_queue_paused(&self, queue: &QueueName, paused: bool) -> Result<QueueFlow> {
        self.calls.note("Spool::set_queue_paused");
        self.inner.set_queue_paused(queue, paused).await
    }

    async fn set_queue_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<QueueFlow> {
        self.calls.note("Spool::set_queue_limits");
        self.inner.set_queue_limits(queue, limits).await
    }

    async fn queue_flow(&self, queue: &QueueName) -> Result<QueueFlow> {
        self.calls.note("Spool::queue_flow");
        self.inner.queue_flow(queue).await
    }

    async fn queue_flows(&self) -> Result<Vec<(QueueName, QueueFlow)>> {
        self.calls.note("Spool::queue_flows");
        self.inner.queue_flows().await
    }
}

/// A backend handle that wraps another one: its epoch log and spool are this crate's
/// [`DelegatingEpochs`] and [`DelegatingSpool`] over the inner handle's (built once, so every
/// call hands out the same shared views, never new connections); its migrator, session and
/// diagnostics are the inner handle's; [`Backend::close`] closes the inner handle.
pub struct DelegatingBackend {
    engine: String,
    inner: Arc<dyn Backend>,
    epochs: Arc<DelegatingEpochs>,
    spool: Arc<DelegatingSpool>,
    calls: Calls,
}

impl fmt::Debug for DelegatingBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelegatingBackend")
            .field("engine", &self.engine)
            .field("inner", &self.inner.engine())
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

impl DelegatingBackend {
    /// Wraps the open handle `inner` under the engine name `engine`, counting every delegated
    /// call in `calls`. `inner`'s open already ran the open protocol; the wrapper's store is
    /// that store, registered in its fleet as `inner` is.
    pub fn new(engine: impl Into<String>, inner: Arc<dyn Backend>, calls: Calls) -> Self {
        let epochs = Arc::new(DelegatingEpochs::new(inner.epochs(), calls.clone()));
        let spool = Arc::new(DelegatingSpool::new(inner.spool(), calls.clone()));
        Self {
            engine: engine.into(),
            inner,
            epochs,
            spool,
            calls,
        }
    }
}

#[async_trait]
impl Backend for DelegatingBackend {
    /// The inner handle's parts: the accessors below override those that delegate.
    fn parts(&self) -> &BackendParts {
        self.inner.parts()
    }

    fn engine(&self) -> &str {
        &self.engine
    }

    fn epochs(&self) -> Arc<dyn EpochDiagnostics> {
        self.calls.note("Backend::epochs");
        self.epochs.clone()
    }

    fn spool(&self) -> Arc<dyn Spool> {
        self.calls.note("Backend::spool");
        self.spool.clone()
    }

    fn migrator(&self) -> Arc<dyn MigrationBackend> {
        self.calls.note("Backend::migrator");
        self.inner.migrator()
    }

    fn session(&self) -> &Session {
        self.calls.note("Backend::session");
        self.inner.session()
    }

    fn diagnostics(&self) -> Arc<dyn Diagnostics> {
        self.calls.note("Backend::diagnostics");
        self.inner.diagnostics()
    }

    /// The inner handle's transaction (its operations are the engine's own, not counted).
    async fn begin(&self) -> Result<Box<dyn Transaction>> {
        self.calls.note("Backend::begin");
        self.inner.begin().await
    }

    /// Closes the inner handle: its session deregisters, then its connections close (SQLite's
    /// close with the last handle, so capabilities handed out keep working until dropped;
    /// Postgres's pool closes, and they fail with `Unavailable`).
    async fn close(&self) -> Result<()> {
        self.calls.note("Backend::close");
        self.inner.close().await
    }
}
