//! # cairn
//!
//! Shared state for many processes, nodes and *versions* of a program, on **SQLite** (the
//! embedded default: one file, no server) or **PostgreSQL** (many nodes against one database).
//! This crate is the front door: open a [`Store`] from a URL and use its capabilities as trait
//! objects.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)] async fn main() -> cairn::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = format!("sqlite://{}/demo.db", dir.path().display());
//! let store = cairn::Store::open(&url).await?;
//! let space = cairn::SpaceId::new("docs")?;
//! store.epochs().append(&space, vec![cairn::Event::new("doc.edit", "hello")]).await?;
//! let heads = store.epochs().heads(&space).await?;
//! let page = store.epochs().events_since(&space, None, 100).await?;
//! # assert_eq!(heads.len(), 1); assert_eq!(page.events.len(), 1);
//!
//! // The spool: the same key from any process is the same run; a consumer works it off.
//! use cairn::spool::{ConsumerBuilder, Job, Outcome};
//! let gate = cairn::QueueName::new("gate")?;
//! let key = cairn::DedupKey::from_parts(["gate", "refs/heads/main", "3f2a"])?;
//! let run = store.spool().enqueue(&gate, &key, b"{}".to_vec(), Default::default()).await?;
//! // Its producer reports events, then closes it: later appends (and appends to a finished
//! // run) are refused, and `cairn serve`'s delivery worker finishes only a closed run.
//! let event = cairn::RunEventId::new("build-started")?;
//! store.spool().append_event(run.run_id, &event, b"{}".to_vec()).await?;
//! store.spool().close_run(run.run_id).await?;
//! let worker = ConsumerBuilder::new(store.spool(), gate, cairn::ConsumerId::new("worker-1")?)
//!     .spawn(|_job: Job| async { Outcome::Done })
//!     .await?;
//! # let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
//! # while store.spool().run(run.run_id).await?.map(|r| r.state) != Some(cairn::RunState::Succeeded) {
//! #     assert!(std::time::Instant::now() < deadline, "the consumer finishes the run");
//! #     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! # }
//! worker.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## What a store holds
//!
//! - **The epoch log** ([`Store::epochs`], an [`EpochStore`]): per-space causal histories. An
//!   *epoch* is an atomic batch of [`Event`]s with a commit-ordered [`Seq`]; it names the
//!   space's heads as its parents and is identified by a BLAKE3 content address ([`EpochId`]).
//!   Appends cost a fixed number of statements however long the history is, thanks to a head
//!   cache that checks itself on every write. Imports from other stores (replication), forks and
//!   their merge, repair, and a feed with opaque cursors are included.
//! - **The spool** ([`Store::spool`], a [`Spool`]): a durable, interprocess-safe work queue.
//!   Enqueueing the same `(queue, dedup key)` from any process returns the same [`RunId`];
//!   consumers claim runs under leases, heartbeat, ack or nack (retries with capped backoff,
//!   parking with a reason); supersede groups, cancellation, per-run event streams, write-once
//!   facts, bounded retention and cross-process wake-up ([`Spool::subscribe`]).
//! - **Lineage-aware migrations** ([`migrate`]): a store records, per migration set, its
//!   revision (stamp) and the history of the build that migrated it (lineage). A newer build
//!   upgrades the store atomically; an older build keeps using it (it is *ahead*); a diverged
//!   history is refused in one line naming both revisions. A service brings its own tables as
//!   a [`MigrationSet`] ([`StoreBuilder::migrations`]) on the same runner.
//!
//! ## Operator tools
//!
//! What the `cairn` command runs is public API too: [`migrate::Migrations`] reads and changes
//! a store's migration state without opening it (status, upgrade, rollback, lineage repair,
//! the live builds) and never hands out the migration lock; [`legacy`] imports the replaced
//! system's state directory into the spool, once.
//!
//! ## URLs
//!
//! `sqlite:///absolute/path.db`, `sqlite://relative/path.db` or a bare path open a SQLite file
//! (created 0600 in a 0700 directory; symlinks refused; WAL with `synchronous=FULL`).
//! `postgres://user@host/db?cairn_schema=NAME` opens the store in schema `NAME` (default
//! `public`). See [`DatabaseUrl`]. Errors never repeat a URL: it may hold a password.
//!
//! ## Features
//!
//! Each feature's items are rendered only when it is on: in cairn's repository
//! `cargo doc -p cairn --all-features` shows them all, as docs.rs does; from a crate that
//! depends on cairn, turn the features on in its `Cargo.toml` and run `cargo doc -p cairn`
//! (Cargo takes no `--features` for a package outside the workspace).
//!
//! - `sqlite` (default): the SQLite backend (rusqlite, bundled SQLite).
//! - `postgres`: the PostgreSQL backend (sqlx) and [`Store::builder_from_pg_pool`][pg-pool].
//! - `backend`: for backend authors, [`backend`][backend-mod]: the handle trait, the open
//!   protocol and the migration side an engine implements, to hand a backend of one's own to
//!   [`Store::from_backend`].
//! - `testkit`: test support (conformance harnesses, legacy writers, bench hooks, the raw
//!   migration backend) in `cairn::testkit`; not for production code.

// The links to feature-gated items resolve when the feature is on; otherwise to this page's
// feature list, so that `cargo doc` with any features is free of broken links.
#![doc = ""]
#![cfg_attr(feature = "postgres", doc = "[pg-pool]: Store::builder_from_pg_pool")]
#![cfg_attr(not(feature = "postgres"), doc = "[pg-pool]: #features")]
#![cfg_attr(feature = "backend", doc = "[backend-mod]: backend")]
#![cfg_attr(not(feature = "backend"), doc = "[backend-mod]: #features")]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backfill;
mod engine;
pub mod legacy;
pub mod migrate;
pub mod spool;
mod store;
pub mod sync;
mod tx;
mod url;

pub use cairn_core::spool::{
    Claimed, Clock, ConsumerId, DedupKey, EnqueueOptions, Enqueued, FactName, Heartbeat,
    LeaseToken, ManualClock, MemorySpool, NackKind, QueueName, RunEventId, RunId, RunInfo,
    RunState, Schedule, ScheduleName, Scheduler, Spool, SupersedeGroup, SystemClock, Timestamp,
    Wakeup,
};
pub use cairn_core::{
    epoch_id, event_id, verify_epoch, Appended, BoxError, Epoch, EpochDiagnostics, EpochId,
    EpochStore, EpochSummary, Error, Event, EventId, FeedCursor, FeedEvent, FeedPage, ForeignEpoch,
    Head, ImportOutcome, MemoryStore, RepairOutcome, Result, Seq, SpaceId, MAX_EPOCH_EVENTS,
    MAX_EVENT_PAYLOAD, MAX_KEY_LEN, MAX_KIND_LEN, MAX_RECENT_EPOCHS, MAX_SPACE_LEN,
    RESERVED_SPACE_PREFIX,
};
pub use cairn_migrate::{embed_migrations, MigrationSet, Opened, Revision};
pub use store::{DeferredContract, SetOpened, Store, StoreBuilder};
#[cfg(feature = "sqlite")]
pub use tx::classify_rusqlite_error;
#[cfg(feature = "postgres")]
pub use tx::classify_sqlx_error;
pub use tx::Transaction;

/// The query builder of [`Transaction::execute`] and [`Transaction::fetch_all`] (the same
/// version cairn links): write the application's statement once, and cairn builds it for the
/// transaction's engine.
pub use sea_query;

/// The SQLite driver the `sqlite` feature builds on, for the application's own statements in a
/// [`Transaction::sqlite`] (the same version cairn links).
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use rusqlite;
/// The Postgres driver the `postgres` feature builds on (the same version cairn links), for
/// the application's transactions that [`Store::enqueue_in`] joins.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use sqlx;
pub use url::{DatabaseUrl, Scheme, SCHEMA_PARAM};

/// For backend authors (feature `backend`): what a third party's engine, or a wrapper around
/// another handle, implements to run under [`Store::from_backend`] — the handle trait
/// ([`Backend`](backend::Backend)), the open protocol its open must run
/// ([`OpenOptions`](backend::OpenOptions), [`Runner`](backend::Runner) over
/// [`cairn_set`](backend::cairn_set), [`Session`](backend::Session)) and the traits of the
/// migration and diagnostics sides. `examples/delegating-backend` is a complete one, tested by
/// the conformance suite. Behind a feature because [`MigrationBackend`](backend::MigrationBackend)
/// carries the migration lock, which a service's plain dependency must not reach.
#[cfg(feature = "backend")]
#[cfg_attr(docsrs, doc(cfg(feature = "backend")))]
pub mod backend {
    pub use cairn_migrate::backend::*;
    pub use cairn_migrate::{cairn_set, Integrity, LockedMigration, Opened, Runner};
}

/// Test support (feature `testkit`): the backend crates with their conformance harnesses,
/// legacy (cache-unaware) writers and benchmark hooks; the migration protocol's raw side
/// ([`MigrationBackend`](testkit::MigrationBackend), with its lock) and runner hooks; the
/// legacy format's writers. Not for production code.
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit {
    /// The backfill's test pacing: a pacer that sleeps on a simulated clock, and the pause
    /// rule it checks.
    pub use cairn_core::backfill::{pause_after, SimulatedPacer};
    pub use cairn_core::scratch_name;
    /// The legacy format in full: the planner, the sealed-record writer, the line limit.
    pub use cairn_core::spool::legacy;
    pub use cairn_migrate::{LockedMigration, MigrationBackend, Runner, RunnerHooks};

    /// The raw migration backend of the store at `url` (what [`crate::migrate::Migrations`]
    /// drives): its lock and bookkeeping writes, for tests that inject faults into the
    /// protocol.
    ///
    /// # Errors
    /// As [`crate::migrate::Migrations::at`].
    pub fn migration_backend(
        url: &crate::DatabaseUrl,
        create_if_missing: bool,
    ) -> crate::Result<std::sync::Arc<dyn MigrationBackend>> {
        crate::migrate::migration_backend(url, create_if_missing)
    }
    #[cfg(feature = "postgres")]
    pub use cairn_postgres as postgres;
    #[cfg(feature = "sqlite")]
    pub use cairn_sqlite as sqlite;
}

// The README's examples are compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
