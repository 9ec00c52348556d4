//! # cairn-conformance
//!
//! One suite of cases every cairn backend must pass. Each case is a plain
//! `pub async fn case<H: Harness>(h: &H)` in [`cases`]; the [`suite!`] macro expands them into
//! one named `#[tokio::test]` per case, so a backend's whole conformance test file is one line.
//! Case names carry the invariant ids of cairn's design catalogue (`e1_…`, `e4_…`).
//!
//! ## Plugging in a backend
//!
//! A backend's conformance tests live in its own test crate (or its `tests/` directory):
//!
//! 1. **Dependencies.** The macros expand to `#[::tokio::test(flavor = "multi_thread",
//!    worker_threads = 2)]` functions and the harness traits are `#[async_trait]` traits, so the
//!    test crate needs, next to the backend itself:
//!
//!    ```toml
//!    [dev-dependencies]
//!    cairn-conformance = "0.1"
//!    tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//!    async-trait = "0.1"
//!    # The harness traits' types: `cairn`'s root (EpochDiagnostics, Spool, ManualClock, …),
//!    # `cairn::backend` (Runner, MigrationBackend; feature `backend`) and `cairn::migrate`
//!    # (AdditivityEngine). No cairn-core or cairn-migrate dependency is needed.
//!    cairn = { version = "0.1", features = ["backend"] }
//!    ```
//!
//! 2. **A harness.** Implement [`Harness`] for a type that owns one empty store location (a
//!    temporary file, a fresh Postgres schema) and can open the store there again and again;
//!    each method's contract is on the trait. Every harness method must leave the async
//!    executor free: the cases run on two worker threads and race harness calls against
//!    timeouts and against each other. A driver call that can wait (on a lock, on the network)
//!    runs on `tokio::task::spawn_blocking` or an async driver; only a short read that never
//!    waits on a lock may use `tokio::task::block_in_place`. A blocking
//!    [`MigrationHarness::execute_sql`] fails M6: the case polls it under a 300 ms timeout
//!    while the test's own task holds the migration lock, so a call that blocks that task's
//!    thread keeps the timeout from firing until the engine gives up waiting for the lock, and
//!    the case fails with "M6: a write to the altered table finished while the migration held
//!    the lock" (on SQLite, wrapped in `block_in_place`: after its 5 s busy timeout).
//!
//! 3. **The suite.** Expand it with an expression that evaluates (awaited) to a fresh harness;
//!    `EXPR` is awaited once per test, so every case gets its own location. For the in-memory
//!    reference backend — the worked example, which this crate runs in its own
//!    `tests/memory.rs` — that is:
//!
//! ```
//! cairn_conformance::suite!(async { cairn_conformance::MemoryHarness::new() });
//! ```
//!
//! 4. **Flags** after the expression, for what the backend supports, each requiring more of
//!    the harness:
//!    - `migrations` — the M, D and F cases (implement [`MigrationHarness`]), each for cairn's
//!      own set (`m4_…`) and for an application's set opened after it (`m4_app_…`), plus two
//!      builds of a service sharing one store; see [SQL dialects](#sql-dialects-and-the-migration-cases)
//!      for what they ask of the engine;
//!    - `migrations, additivity` — also the A cases (implement [`AdditivityHarness`]);
//!    - `…, multi_node` (last) — the cases for backends whose separately opened instances are
//!      separate nodes that lock spaces independently (implement
//!      [`Harness::hold_space_lock`]).
//!
//!    cairn's SQLite backend runs `suite!(cairn_sqlite::testkit::harness(), migrations,
//!    additivity)`; its Postgres backend adds `multi_node`.
//!
//! 5. **The spool.** For a backend with a spool, implement [`SpoolHarness`] (spools over the
//!    same location on one [`ManualClock`]) — all its methods, [`SpoolHarness::open_spool_as`]
//!    included: S14, which every spool backend runs, opens the store as two builds one
//!    additive revision apart, because a rolling upgrade is exactly that — and add a second
//!    line, `cairn_conformance::spool_suite!(EXPR);`, which expands the S cases. The memory
//!    backend's `tests/memory.rs` has both lines.
//!
//! `examples/delegating-backend` in cairn's repository is a complete backend written against
//! the public API only (a wrapper around another backend handle, opened through
//! `cairn::Store::from_backend`) that runs the whole suite this way; its crate docs say which
//! harness methods go through its store and why the others cannot.
//!
//! ## The harness methods
//!
//! | Method | Contract (details on the method) |
//! |---|---|
//! | [`Harness::backend`] | a short name, used in panic messages |
//! | [`Harness::open`] | a new instance over the location on every call, all seeing the same data |
//! | [`Harness::legacy_append`] | an append that predates the head cache: same lock and seq rule, never touches the cache |
//! | [`Harness::append_statement_budget`] | the exact statement count of a cached append, or `None` (E11 then checks nothing) |
//! | [`Harness::hold_space_lock`] | `multi_node` only: one space's write lock held until released |
//! | [`MigrationHarness::fresh`] | a harness over a new, empty location |
//! | [`MigrationHarness::migrator`] | the location's migration backend |
//! | [`MigrationHarness::open_as`] | the epoch store opened as the build `runner` describes |
//! | [`MigrationHarness::schema`] | every table and its columns, bookkeeping left out |
//! | [`MigrationHarness::commit_probe`] | a value that changes when a write to the migration state or schema commits |
//! | [`MigrationHarness::execute_sql`] | one portable statement, committed, waiting for locks without blocking |
//! | [`MigrationHarness::query_i64`] | one portable `SELECT` of one 64-bit integer |
//! | [`AdditivityHarness::additivity`] | the engine of the executed additivity check |
//! | [`SpoolHarness::clock`] | the one clock every spool of the harness reads |
//! | [`SpoolHarness::open_spool`] | a new spool instance over the location on every call |
//! | [`SpoolHarness::fresh_spool`] | a spool over a new, empty location, same clock |
//! | [`SpoolHarness::open_spool_as`] | a spool opened as the build `runner` describes (required) |
//!
//! All of them are async (but `backend`, `append_statement_budget`, `additivity` and `clock`)
//! and none may block the executor (see step 2).
//!
//! ## SQL dialects and the migration cases
//!
//! The M, D, F and A cases drive the engine through SQL, so a backend that runs them must
//! speak it:
//!
//! - **cairn's own set in its dialect.** A revision carries its SQL per
//!   `cairn::migrate::Dialect` (files `NNNN_name.sqlite.sql`, `NNNN_name.postgres.sql`) and the
//!   runner runs the one its [`MigrationBackend::dialect`] names. An engine that accepts
//!   SQLite's or Postgres's SQL as it is reports that dialect; a genuinely new dialect needs a
//!   `Dialect` variant and every revision of cairn's set written in it — a change to cairn
//!   itself, not to the backend crate.
//! - **Portable DDL.** The cases' test revisions and the application fixtures
//!   (`tests/fixtures/app_*`) have one text for both dialects: `CREATE TABLE t (id BIGINT NOT
//!   NULL PRIMARY KEY, note TEXT)`, `ALTER TABLE t ADD COLUMN c TEXT`, `CREATE INDEX i ON t
//!   (c)`, `DROP TABLE`; M10 hands the runner `BEGIN`, `COMMIT`, `END` and `ROLLBACK` and
//!   expects each to fail the upgrade with nothing changed.
//! - **Portable DML through [`MigrationHarness::execute_sql`] and
//!   [`MigrationHarness::query_i64`]:** multi-row `INSERT … VALUES (…), (…)`, `UPDATE`,
//!   `DELETE` with scalar subqueries, `SELECT count(*) … WHERE … LIKE …` returning a 64-bit
//!   integer.
//! - **cairn's table names.** The cases edit bookkeeping and data by hand to model damage and
//!   older builds, so the engine keeps them in cairn's tables with cairn's columns: the
//!   migration stamp and lineage (`cairn_migration_stamp`, `cairn_migration_lineage` with
//!   `set_name, position, revision, checksum`), the contract record (`cairn_contract` with
//!   `revision, forced, blockers`) and the epoch log (`epoch`, `epoch_event`, `epoch_parent`
//!   with `seq`, `id`, `child`). [`MigrationHarness::schema`] leaves out
//!   `cairn_migrate::BOOKKEEPING_TABLES`.
//! - **The A cases** need the engine's side of the executed additivity check, an
//!   [`AdditivityEngine`], which runs revisions on scratch copies of a schema in the engine.
//!
//! An engine that is not SQL at all runs the suite without `migrations`: the E and S cases
//! use only [`Harness`] and [`SpoolHarness`].
//!
//! Property tests draw [`proptest_cases`] cases (default 24; set `CAIRN_PROPTEST_CASES` for a
//! deep run).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use cairn_core::{Appended, EpochDiagnostics, EpochId, Event, MemoryStore, Result, SpaceId};
use cairn_core::{ManualClock, MemorySpool, QueueName, Spool};
use cairn_migrate::additivity::AdditivityEngine;
use cairn_migrate::{MigrationBackend, Runner};

pub mod cases;
pub mod processes;
pub mod sync;

/// A lock on one space, held open by the test (in an open transaction) until dropped or
/// released.
#[async_trait]
pub trait HeldLock: Send {
    /// Releases the lock (rolls its transaction back).
    async fn release(self: Box<Self>);
}

/// What the suite needs from a backend: a store location that can be opened repeatedly, plus
/// test-only writers.
///
/// # Contract (every method)
/// The async methods must not block the executor: a driver call that can wait runs on
/// `tokio::task::spawn_blocking` or an async driver (see the [crate docs](crate)). A method
/// may panic when its location cannot be reached: that fails the case, which is right.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// Short backend name (`memory`, `sqlite`, `postgres`).
    fn backend(&self) -> &'static str;

    /// Opens a new store instance over this harness's location, creating the store on the
    /// first call, exactly as the backend's own open does (cairn's set brought to this build's
    /// head). Every call returns a separate instance (its own connections, like another
    /// process); all see the same data. Cases reopen the store to check what survived, and
    /// open two instances to race them.
    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>>;

    /// Appends an epoch the way a writer that predates the head cache does: under the same
    /// space lock and seq rule as [`cairn_core::EpochStore::append`], with the anti-join's
    /// heads as parents — or `parents` when given, to make a fork — and never touching the
    /// cache. The E4–E7 cases build the histories a pre-cache writer leaves with it.
    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended>;

    /// The exact number of statements ([`EpochDiagnostics::statements_executed`]) a
    /// single-event append costs when the cache is current, or `None` when the backend counts
    /// no statements.
    fn append_statement_budget(&self) -> Option<u64>;

    /// Opens a transaction that holds `space`'s write lock until the returned guard is
    /// released. Only backends that lock spaces independently support it (`multi_node`); the
    /// default panics, and only the `multi_node` cases call it.
    async fn hold_space_lock(&self, space: &SpaceId) -> Result<Box<dyn HeldLock>> {
        let _ = space;
        panic!(
            "the {} harness cannot hold a single space's lock",
            self.backend()
        )
    }
}

/// What the migration cases (M…) need on top of [`Harness`]: the store's migration backend,
/// opening the epoch store as a build with another history, and probes of the schema and of
/// committed writes.
#[async_trait]
pub trait MigrationHarness: Harness + Sized {
    /// A harness over a new, empty store location of the same backend, where no store exists
    /// yet (the M cases open it with builds of their own).
    async fn fresh(&self) -> Self;

    /// The store's migration backend (cairn-migrate's view of this location): the cases read
    /// its state, take its lock and write its bookkeeping by hand to model other builds. It
    /// must reach the same store as [`Harness::open`], and may be a new one on every call.
    async fn migrator(&self) -> Arc<dyn MigrationBackend>;

    /// Opens the epoch store as a build whose own migration set is `runner`'s: cairn's
    /// revisions, possibly followed by test revisions or cut short, and possibly with the
    /// runner's test hooks (fault injection). The backend's open with `runner` in place of
    /// cairn's set: it upgrades a store that is behind, uses one that is ahead as it is, and
    /// returns the runner's refusal as the open's error.
    async fn open_as(&self, runner: &Runner) -> Result<Arc<dyn EpochDiagnostics>>;

    /// Every table of the store and its columns, sorted, leaving out the runner's bookkeeping
    /// tables.
    async fn schema(&self) -> BTreeMap<String, Vec<String>>;

    /// A value that changes whenever a transaction commits a write to the store's migration
    /// state or schema (SQLite: `PRAGMA data_version` of a long-lived connection; Postgres: the
    /// committing transactions of the stamp and lineage rows and of the schema's catalog rows).
    /// The cases compare it before and after an open that must write nothing.
    async fn commit_probe(&self) -> String;

    /// Runs one SQL statement (the same text on every backend) against the store location on a
    /// new connection, in its own committed transaction, waiting for locks as a store's writer
    /// does (SQLite: the default busy timeout; Postgres: the store's schema first on the
    /// `search_path`). The application-set cases write an application's tables through it,
    /// and the damage cases edit cairn's tables with it (see the [crate docs](crate) for the
    /// SQL they use).
    ///
    /// Waiting for a lock must not block the executor: M6 polls this call under a timeout
    /// while the same task holds the migration lock, and a call that blocks the task's thread
    /// while it waits (even inside `block_in_place`) fails the case. Run the driver on
    /// `tokio::task::spawn_blocking` (or use an async driver).
    async fn execute_sql(&self, sql: &str) -> Result<()>;

    /// Runs `sql`, a query returning one row of one 64-bit integer column (`SELECT count(*)
    /// …`; a Postgres `bigint`), as [`MigrationHarness::execute_sql`] does, and returns the
    /// value.
    async fn query_i64(&self, sql: &str) -> Result<i64>;

    /// Holds a lock on table `table` the way a long application transaction does (Postgres:
    /// an open transaction that read it, holding ACCESS SHARE) until the returned lock is
    /// released; `None` (the default) for a backend whose upgrade waits for no table lock
    /// (SQLite's holds the database's write lock from its start). The M12 lock-timeout case
    /// runs an upgrade behind it.
    async fn hold_table(&self, table: &str) -> Result<Option<Box<dyn HeldLock>>> {
        let _ = table;
        Ok(None)
    }
}

/// What the additivity cases (A…) need on top of [`MigrationHarness`]: the backend's engine
/// for the executed additivity check.
pub trait AdditivityHarness: MigrationHarness {
    /// The backend's additivity-check engine: it runs revisions on scratch copies of a schema
    /// in the engine (the A cases judge each revision with it).
    fn additivity(&self) -> Arc<dyn AdditivityEngine>;
}

/// What the spool cases (S…) need on top of [`Harness`]: spools over the harness's store
/// location, all reading one [`ManualClock`] the cases advance.
///
/// Every spool the harness opens uses [`cairn_core::spool::SpoolConfig::default`] (the cases
/// rely on its backoff policy).
#[async_trait]
pub trait SpoolHarness: Harness {
    /// The clock every spool this harness opens reads; advancing it drives leases, backoff
    /// and retention.
    fn clock(&self) -> &ManualClock;

    /// Opens a new spool instance over this harness's location, on [`SpoolHarness::clock`].
    /// Every call returns a separate instance (its own connections, like another process); all
    /// see the same data, and a subscriber on one wakes for another's enqueue (S3).
    async fn open_spool(&self) -> Result<Arc<dyn Spool>>;

    /// Opens a spool over a new, empty location of the same backend, on the same clock (the
    /// model property test compares each case's whole store with a fresh model).
    async fn fresh_spool(&self) -> Result<Arc<dyn Spool>>;

    /// Opens a spool over this harness's location as a build whose cairn migration set is
    /// `runner`'s (cairn's revisions, possibly followed by test revisions), on the harness's
    /// clock: the runner upgrades a store that is behind and uses one that is ahead as it is,
    /// exactly as the backend's own open does with cairn's set. S14 models two releases one
    /// additive revision apart with it.
    ///
    /// Required, with no default: every spool backend runs S14, because two releases sharing
    /// one store is what every rolling upgrade is, and a backend whose older build could not
    /// use a store its newer build migrated would lose runs during one. A backend without
    /// schema migrations (the memory model) opens its store as any build of cairn's set.
    async fn open_spool_as(&self, runner: &Runner) -> Result<Arc<dyn Spool>>;

    /// Checks the rules of the backend's own table layout that no [`Spool`] call can observe
    /// (Postgres: every live run, and only a live run, has its `spool_ready` row, with equal
    /// values), over every location the harness opened. [`spool_suite!`] runs it after each
    /// case, so every case is also a test of the layout. The default checks nothing.
    async fn check_layout(&self) -> Result<()> {
        Ok(())
    }
}

/// The application migration set the transaction cases' stores open with
/// ([`TxHarness::open_tx`]): the table `app_order (id TEXT PRIMARY KEY)`, the same SQL on
/// every engine.
pub fn app_order_set() -> cairn_migrate::MigrationSet {
    cairn_migrate::MigrationSet::from_files(
        "app",
        [(
            "0001_orders.sql",
            "CREATE TABLE app_order (id TEXT PRIMARY KEY)",
        )],
    )
    .expect("a valid application set")
}

/// What the transaction cases (T…) need on top of [`SpoolHarness`]: store handles whose
/// transactions ([`cairn_migrate::Backend::begin`]) can hold an application row beside cairn's
/// writes.
///
/// Every handle [`TxHarness::open_tx`] opens is a separate instance over the harness's
/// location (its own connections), whose open applied an application migration set creating
/// the table `app_order (id TEXT PRIMARY KEY)`, with fleet registration off and its spool's
/// fallback wake-up poll set to an hour, so that a subscription on it returns only for a real
/// notification.
#[async_trait]
pub trait TxHarness: SpoolHarness {
    /// Opens a new store instance as described above.
    async fn open_tx(&self) -> Result<Arc<dyn cairn_migrate::Backend>>;

    /// Inserts the application's row `id` into `app_order` inside `tx` (the transaction of a
    /// handle [`TxHarness::open_tx`] opened), on the transaction's own connection.
    async fn insert_order(&self, tx: &mut dyn cairn_core::Transaction, id: &str) -> Result<()>;

    /// Whether `app_order` holds a committed row `id`, read on a connection of its own.
    async fn order_exists(&self, id: &str) -> Result<bool>;

    /// Opens a spool instance over the harness's location whose waits for a lock another
    /// connection holds give up after about 200 ms (SQLite's busy timeout, Postgres'
    /// `lock_timeout`), with [`cairn_core::Error::Retryable`].
    async fn open_impatient_spool(&self) -> Result<Arc<dyn Spool>>;

    /// Whether an open transaction holds the store's only writer (SQLite: every other write
    /// waits for it), rather than row locks (Postgres: claims of other runs go on).
    fn exclusive_writer(&self) -> bool;

    /// Makes every later insert of a run with dedup key `key` (any queue) fail inside the
    /// database (a trigger), so that a bulk enqueue fails in the middle of its writes.
    async fn fail_inserts_of_key(&self, key: &cairn_core::DedupKey) -> Result<()>;
}

/// The in-memory reference backend's harness, and the worked example of a [`Harness`] and a
/// [`SpoolHarness`].
#[derive(Debug, Clone)]
pub struct MemoryHarness {
    store: MemoryStore,
    clock: ManualClock,
    spool: MemorySpool,
}

impl Default for MemoryHarness {
    fn default() -> Self {
        let clock = ManualClock::default();
        Self {
            store: MemoryStore::default(),
            spool: MemorySpool::new(Arc::new(clock.clone())),
            clock,
        }
    }
}

impl MemoryHarness {
    /// A harness over a new, empty [`MemoryStore`].
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Harness for MemoryHarness {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn open(&self) -> Result<Arc<dyn EpochDiagnostics>> {
        // Clones share the same data, like a reopened file.
        Ok(Arc::new(self.store.clone()))
    }

    async fn legacy_append(
        &self,
        space: &SpaceId,
        parents: Option<Vec<EpochId>>,
        events: Vec<Event>,
    ) -> Result<Appended> {
        self.store.legacy_append(space, parents, events)
    }

    fn append_statement_budget(&self) -> Option<u64> {
        None
    }
}

#[async_trait]
impl SpoolHarness for MemoryHarness {
    fn clock(&self) -> &ManualClock {
        &self.clock
    }

    async fn open_spool(&self) -> Result<Arc<dyn Spool>> {
        // Clones share the same data, like a reopened file.
        Ok(Arc::new(self.spool.clone()))
    }

    async fn fresh_spool(&self) -> Result<Arc<dyn Spool>> {
        Ok(Arc::new(MemorySpool::new(Arc::new(self.clock.clone()))))
    }

    /// The model has no schema, so every build reads and writes it alike; the runner is only
    /// checked to be a build of cairn's own set (cairn's revisions first).
    async fn open_spool_as(&self, runner: &Runner) -> Result<Arc<dyn Spool>> {
        let set = runner.set();
        let ours = cairn_migrate::cairn_revisions();
        let prefix = set.revisions().get(..ours.len());
        if set.name() != cairn_migrate::CAIRN_SET || prefix != Some(&ours[..]) {
            return Err(cairn_core::Error::Incompatible {
                detail: format!("set {} is not a build of cairn's own set", set.name()),
                blockers: Vec::new(),
            });
        }
        Ok(Arc::new(self.spool.clone()))
    }
}

/// How many cases each property test draws: `CAIRN_PROPTEST_CASES` when set, else 24.
pub fn proptest_cases() -> u32 {
    std::env::var("CAIRN_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24)
}

/// A random space id, so cases sharing a store never see each other's data.
pub fn random_space(label: &str) -> SpaceId {
    SpaceId::new(cairn_core::scratch_name(label).into_bytes()).expect("valid space id")
}

/// A random queue name, so cases sharing a store never see each other's runs.
pub fn random_queue(label: &str) -> QueueName {
    QueueName::new(random_space(label).to_string()).expect("valid queue name")
}

/// Expands the conformance cases into one `#[tokio::test]` per case.
///
/// `suite!(EXPR)` runs the cases every backend must pass; `suite!(EXPR, migrations)` adds the
/// migration cases (the harness must implement [`MigrationHarness`]);
/// `suite!(EXPR, migrations, multi_node)` adds the cases for backends whose separately opened
/// instances are separate nodes that lock spaces independently. `EXPR` is awaited once per
/// test to build a fresh harness.
#[macro_export]
macro_rules! suite {
    ($harness:expr) => {
        $crate::__cases!($harness;
            e1_commit_ordered_seq,
            e2_ids_recompute,
            e3_parents_are_heads_in_id_byte_order,
            e4_one_head_and_one_cache_row_after_every_append,
            e5_cache_used_only_when_current,
            e6_legacy_history_with_fork_detected,
            e7_repair_fills_once_and_fork_collapses,
            e8_backfill_pacing_switch_first_error_stop_and_marker,
            e9_import_fork_merge_and_refusals,
            e10_feed_order_paging_and_cursor_refusals,
            e10_feed_pages_within_bytes,
            e11_append_statement_budget_is_fixed,
            e13_recent_epochs_newest_first_with_parents_and_counts,
            e14_batch_imports_a_chain_in_order_with_an_exact_cache,
            e14_refused_batch_writes_nothing,
            e14_oversized_batch_is_refused_before_writing,
            e14_present_epochs_are_answered_and_not_counted,
            e14_empty_batch_moves_the_cursor_only,
            e14_sync_peers_lists_cursors_per_peer_with_summed_counters,
            e14_missing_answers_the_absent_ids_in_order,
            e14_store_id_is_stable,
            e14_batch_fork_leaves_two_heads_and_the_next_append_merges,
            bad_input_is_refused_without_writes,
            reopen_keeps_history_and_cache,
            list_spaces_pages_in_id_order,
            model_random_ops_match_reference,
        );
    };
    ($harness:expr, migrations) => {
        $crate::suite!($harness);
        $crate::__cases!($harness;
            e5_cached_head_deleted_by_hand_and_its_seq_reused_is_not_trusted,
            e14_two_stores_have_different_ids,
            e14_a_store_before_the_sync_revision_refuses_sync_state_by_name,
            m2_real_stores_match_the_model,
            m3_one_line_of_history_never_refuses,
            m4_older_build_uses_newer_store_without_the_lock,
            m6_live_older_connection_survives_a_migration,
            m7_divergence_refused_without_the_lock,
            m8_second_look_under_the_lock_returns_ahead,
            m9_lineage_repair_and_base_exemption,
            m9_lost_stamp_or_lineage_table_refused_until_repaired,
            m9_foreign_lineage_at_head_repaired,
            m10_failed_upgrade_changes_nothing,
            m10_transaction_control_in_a_revision_changes_nothing,
            m11_same_id_different_content_refused,
            m11_lineage_written_by_earlier_builds_still_opens,
            m_rollback_story_end_to_end,
            m2_app_real_stores_match_the_model,
            m3_app_one_line_of_history_never_refuses,
            m4_app_older_build_uses_newer_store_without_the_lock,
            m6_app_live_older_connection_survives_a_migration,
            m7_app_divergence_refused_without_the_lock,
            m8_app_second_look_under_the_lock_returns_ahead,
            m9_app_lineage_repair_and_base_exemption,
            m9_app_lost_stamp_or_lineage_table_refused_until_repaired,
            m9_app_foreign_lineage_at_head_repaired,
            m10_app_failed_upgrade_changes_nothing,
            m10_app_transaction_control_in_a_revision_changes_nothing,
            m11_app_same_id_different_content_refused,
            m12_app_no_transaction_revision_applies_outside_the_transaction,
            m12_app_failed_no_transaction_revision_keeps_what_ran_before_and_is_retried,
            m12_app_baseline_adopts_a_matching_schema_and_refuses_another,
            m12_app_revision_waiting_for_a_table_gives_way_and_is_tried_again,
            m_app_rollback_story_end_to_end,
            m_app_two_builds_share_one_store,
            d1_app_older_build_runs_down_and_is_at_head,
            d2_down_without_stored_sql_refused,
            d2_app_down_without_stored_sql_refused,
            d3_app_failed_down_changes_nothing,
            d4_app_racing_down_and_up_end_consistent,
            f1_app_contract_refused_while_older_build_heartbeats_applied_once_it_expires,
            f2_app_forced_contract_is_applied_and_recorded,
            f3_app_older_build_refuses_a_store_with_an_unknown_contract,
            f4_fleet_registry_records_refreshes_expires_and_removes,
        );
    };
    ($harness:expr, migrations, multi_node) => {
        $crate::suite!($harness, migrations);
        $crate::__multi_node_cases!($harness);
    };
    ($harness:expr, migrations, additivity) => {
        $crate::suite!($harness, migrations);
        $crate::__additivity_cases!($harness);
    };
    ($harness:expr, migrations, additivity, multi_node) => {
        $crate::suite!($harness, migrations, multi_node);
        $crate::__additivity_cases!($harness);
    };
    ($harness:expr, multi_node) => {
        $crate::suite!($harness);
        $crate::__multi_node_cases!($harness);
    };
}

/// Expands the spool cases (S…) into one `#[tokio::test]` per case; the harness must
/// implement [`SpoolHarness`]. Kept apart from [`suite!`] so a backend adds the spool with one
/// more line, whatever flags its epoch-log suite takes. `EXPR` is awaited once per test to
/// build a fresh harness.
#[macro_export]
macro_rules! spool_suite {
    ($harness:expr) => {
        $crate::__spool_cases!($harness;
            s1_same_key_same_run_across_instances,
            s2_run_id_survives_reopen,
            s3_subscriber_wakes_for_another_instances_enqueue,
            s4_concurrent_claimers_never_share_a_run,
            s4_expired_lease_reclaimed_and_stale_token_refused,
            s4_heartbeat_extends_and_unreclaimed_lease_is_still_held,
            s5_enqueue_claim_ack_races_lose_and_duplicate_nothing,
            s6_shutdown_while_enqueues_arrive_strands_nothing,
            s7_run_events_sequence_dedup_and_order,
            s7_run_events_within_bytes,
            s7_concurrent_appends_get_gap_free_seqs,
            s8_supersede_replaces_older_queued_runs_only,
            s9_cancel_queued_claimed_and_terminal,
            s10_retry_backoff_then_park,
            s10_permanent_failed_and_expired_last_attempt,
            s10_success_after_failed_attempts_clears_the_reason,
            s10_claim_order_priority_then_due_time,
            s10_retry_after_uses_the_callers_delay,
            s11_retention_keeps_store_under_cap_in_long_run,
            s11_retention_order_and_batches,
            s11_retention_limits_are_exact,
            s13_legacy_import_once_keeps_ids_keys_events_and_facts,
            s13_legacy_torn_tail_imported_and_reported,
            s13_legacy_stale_generation_never_replays,
            s13_legacy_corruption_refused_with_nothing_changed,
            s13_legacy_existing_keys_reported_not_duplicated,
            s14_builds_one_additive_revision_apart_share_runs,
            s15_facts_first_writer_wins,
            s16_closed_or_finished_run_refuses_appends,
            s16_appends_racing_a_close_are_stored_or_refused,
            s16_release_returns_the_attempt,
            s16_unmarked_runs_take_events_until_closed,
            s17_operator_retries_or_discards_a_parked_run,
            s17_bulk_retry_of_parked_runs_by_reason,
            s17_racing_operators_apply_once,
            s17_producers_cannot_take_the_spools_event_ids,
            s17_bulk_retry_goes_on_past_a_run_it_cannot_retry,
            s18_stats_count_each_queues_runs,
            s19_payload_reads_back_the_enqueued_bytes,
            q1_paused_queue_claims_nothing_until_resumed,
            q2_max_claimed_holds_under_concurrent_claims,
            q2_invalid_limits_are_refused_without_writes,
            q3_per_partition_limits_each_partition_only,
            q4_rate_limit_is_a_sliding_window,
            q1_a_queue_back_to_its_defaults_keeps_no_flow_row,
            spool_bad_input_is_refused_without_writes,
            spool_model_random_ops_match_reference,
            t4_bulk_dedups_repeated_keys_in_input_order,
            t4_bulk_answers_stored_keys_and_supersedes_in_order,
            t4_bulk_bad_input_refuses_the_whole_batch,
            q5_each_tick_is_enqueued_once_across_schedulers,
            q6_catch_up_policies_after_a_gap,
            q7_edits_and_removals_take_effect_at_the_next_tick,
            q7_an_edited_expression_catches_up_nothing_from_before_the_edit,
            q8_a_run_carries_its_enqueuers_trace_context,
        );
    };
}

/// Expands the transaction cases (T1–T7) for a [`TxHarness`] expression, as
/// [`spool_suite!`] does for the spool cases.
#[macro_export]
macro_rules! tx_suite {
    ($harness:expr) => {
        $crate::__cases!($harness;
            t1_app_row_and_enqueue_commit_together,
            t1_rolled_back_dropped_or_failed_leave_nothing,
            t1_epoch_append_and_run_events_commit_with_the_transaction,
            t2_subscriber_is_woken_by_the_commit_only,
            t3_a_key_inside_and_outside_an_open_transaction_is_one_run,
            t3_an_outside_enqueue_after_a_rollback_creates_the_run,
            t4_bulk_failure_in_the_middle_changes_nothing,
            t4_bulk_inside_a_transaction_commits_with_it,
            t5_an_open_transaction_is_bounded_for_other_writers,
            t6_close_run_and_set_fact_commit_with_the_transaction,
            t6_a_run_enqueued_filled_and_closed_in_one_transaction_is_all_or_nothing,
            t7_overlapping_transactions_that_lock_up_front_all_commit,
            q3_partition_keys_commit_with_a_transaction,
            q8_trace_context_commits_with_a_transaction,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __additivity_cases {
    ($harness:expr) => {
        $crate::__cases!($harness;
            a1_every_packaged_revision_passes,
            a2_each_change_alone_is_judged_for_its_own_reason,
            a2_random_combinations_flag_iff_forbidden,
            a3_app_set_checked_over_cairns_schema,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __multi_node_cases {
    ($harness:expr) => {
        $crate::__cases!($harness;
            e1_two_nodes_concurrent_appends_keep_one_head,
            e7_repair_concurrent_with_appends_ends_exact,
            e12_spaces_do_not_block_each_other,
            e12_repair_and_import_wait_for_the_space_lock,
            e6_upgrade_path_legacy_history_gets_cache_by_repair,
        );
    };
}

/// [`__cases!`] for the spool cases: each case ends with [`SpoolHarness::check_layout`].
#[doc(hidden)]
#[macro_export]
macro_rules! __spool_cases {
    ($harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $harness.await;
                $crate::cases::$case(&harness).await;
                $crate::SpoolHarness::check_layout(&harness)
                    .await
                    .expect("the backend's table layout after the case");
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __cases {
    ($harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let harness = $harness.await;
                $crate::cases::$case(&harness).await;
            }
        )*
    };
}

/// The sync cases (`r1_…`–`r6_…` and the property test) for one pair of side kinds: `$pair`
/// evaluates to a [`sync::SyncPair`]. Put each pair in its own module.
#[macro_export]
macro_rules! sync_suite {
    ($pair:expr) => {
        $crate::__sync_cases!($pair;
            r1_sync_leaves_both_sides_the_union,
            r2_a_second_sync_transfers_nothing,
            r3_an_interrupted_sync_leaves_both_consistent_and_resumes,
            r4_a_forged_epoch_is_refused_with_nothing_after_it,
            r5_forks_made_apart_converge_and_the_next_append_merges,
            r6_a_replaced_sender_fails_the_cursor_check_and_is_negotiated,
            r6_a_restored_sender_with_new_work_below_the_cursor_is_negotiated,
            r6_negotiation_reads_in_proportion_to_the_difference,
            r_random_dags_and_partitions_converge_to_the_union,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __sync_cases {
    ($pair:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let pair = $pair;
                $crate::cases::$case(&pair).await;
            }
        )*
    };
}
