//! # cairn-sqlite
//!
//! **The supported surface is the facade crate `cairn`** (`cairn::Store::open(url)`); this
//! crate is one of its parts. Use it directly to write or wrap a backend (see
//! `cairn_migrate::backend`, the backend contract) or to reach what only this engine offers;
//! its API follows the facade's releases and may change with them.
//!
//! cairn's embedded default backend: the epoch log, the spool and the migrations on one
//! SQLite file, through rusqlite. Open a store with [`SqliteStore::open`] and use it through
//! [`cairn_core::EpochStore`]:
//!
//! ```no_run
//! # async fn demo() -> cairn_core::Result<()> {
//! use cairn_core::{EpochStore, Event, SpaceId};
//! let store = cairn_sqlite::SqliteStore::open("/tmp/cairn-demo/store.db").await?;
//! let space = SpaceId::new(b"docs".to_vec())?;
//! let appended = store.append(&space, vec![Event::new("doc.edit", b"hello".to_vec())]).await?;
//! assert_eq!(store.heads(&space).await?[0].id, appended.id);
//! # Ok(()) }
//! ```
//!
//! Files follow DESIGN §6: symlinked paths are refused, the file is created 0600 in a 0700
//! directory, WAL mode with `synchronous=FULL`, foreign keys on and a busy timeout
//! ([`SqliteOptions`]). A file that holds another application's tables is refused unless
//! [`SqliteOptions::share_file_with_application`] is on; with
//! [`SqliteOptions::create_if_missing`] off, a missing store is an error and nothing is
//! created. [`SqliteStore::opened`] says what the migration runner did at open. Blocking
//! SQLite calls run on tokio's blocking pool, never on the async executor; reads run in
//! parallel on [`SqliteOptions::read_connections`] connections. Every statement sent is counted
//! ([`cairn_core::EpochDiagnostics::statements_executed`]); an append with a current head cache
//! costs a fixed number of them
//! ([`APPEND_STATEMENT_BUDGET`] for one event and one head).
//!
//! The spool (DESIGN §3) works on the same file: [`SqliteSpool::open`] (or
//! [`SqliteSpool::from_store`], sharing an open store's connections) implements
//! [`cairn_core::spool::Spool`] on the tables of revisions `0002_spool` and `0003_spool_import`,
//! with wake-up by polling `PRAGMA data_version`, so a consumer sees work another process wrote
//! to the file.
//!
//! The `testkit` feature adds the `testkit` module (the conformance harness, the legacy writer,
//! the benchmark hooks, test-only constructors and hooks) and `spool_testkit` (the spool's
//! harness and fault injection). Nothing public without it is test machinery.

#![forbid(unsafe_code)]

mod additivity;
mod backend;
mod config;
mod db;
mod diagnostics;
mod engine;
mod error;
mod files;
mod group;
mod migrate;
mod pool;
mod shape;
mod spool;
mod sql;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
mod tx;

pub use additivity::SqliteAdditivity;
pub use backend::SqliteBackend;
pub use config::SqliteOptions;
pub use diagnostics::SqliteDiagnostics;
pub use engine::SqliteEngine;
pub use migrate::{SqliteMigrator, BOOKKEEPING_TABLES};
#[cfg(feature = "testkit")]
pub use spool::testkit as spool_testkit;
pub use spool::{SqliteSpool, DEFAULT_WAKE_POLL};
pub use store::{SqliteStore, APPEND_STATEMENT_BUDGET, IDENTITY_WATCH_INTERVAL};
pub use tx::{classify_app_error, SqliteTransaction, SqliteTx};
