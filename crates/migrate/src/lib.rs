//! # cairn-migrate
//!
//! Lineage-aware schema migrations. A [`MigrationSet`] is a named chain of [`Revision`]s that
//! one build knows, base → head. A store records, per set, its **stamp** (the revision it is
//! at) and its **lineage** (every revision, with a content checksum, in the history of the
//! build that last migrated it). [`classify`] turns those into at head / upgrade / ahead /
//! refused, and [`Runner::open`] carries the open protocol out against a
//! [`MigrationBackend`]: a look without the lock, and only when an upgrade or a lineage repair
//! is due, the lock, a second look, and the upgrade with its lineage in one transaction.
//!
//! **The supported surface is the facade crate `cairn`** (`cairn::Store::open(url)`); this
//! crate is one of its parts. Use it directly to write or wrap a backend (see
//! `cairn_migrate::backend`, the backend contract) or to reach what only this engine offers;
//! its API follows the facade's releases and may change with them.
//!
//! An older build keeps using a store a newer build migrated (it is *ahead*) because every
//! revision after the first is additive; a diverged store is refused with one line naming both
//! revisions. Bookkeeping edited by hand (a stamp row deleted while the lineage stays, a
//! dropped lineage table) is refused as inconsistent, never read as a new store;
//! [`Runner::repair`] (`cairn migrate repair`) restores it.
//!
//! A revision of an application's set may carry compensating down SQL
//! ([`MigrationSet::with_down`], `NNNN_name.down.sql`), stored in the store when the revision
//! is applied; [`Runner::down`] (`cairn migrate down --to REV`) runs it, newest first, from the
//! store — so an older build that never had the file can roll a newer build's change back.
//!
//! ## Expand / contract and the fleet registry
//!
//! Every open of a store — through the `cairn` facade or straight through a backend crate's
//! [`Backend`] — runs [`Session::open`], which registers the build in the store's fleet
//! registry ([`fleet`]: build id, the newest revision it knows per set, host, pid, last seen)
//! and keeps the entry fresh with a heartbeat. A revision marked *contract*
//! ([`MigrationSet::with_contract`], or a first line `-- cairn:contract` in its up file) is
//! applied only when no live build other than the caller lacks it; otherwise the open is
//! refused in one line naming the builds that would break ([`MigrateError::ContractRefused`]),
//! unless forced ([`Runner::force_contract`], `cairn migrate up --force`), which the store
//! records.
//!
//! A revision's checksum is over text that ships with the build (cairn's revisions are files
//! under `sql/`), per dialect for every revision but the two cairn released with one combined
//! checksum; see [`ChecksumForm`] for why those keep it.
//!
//! ## Application sets
//!
//! A service brings its own set, from a directory of SQL files with sqlx-compatible names (see
//! [`source`]) read at run time ([`MigrationSet::from_dir`]: a relative path is relative to the
//! working directory) or embedded at compile time ([`embed_migrations!`]: relative to the crate
//! root), and opens it with the same protocol after cairn's own set; its name must not be
//! `cairn`:
//!
//! ```
//! use cairn_migrate::{embed_migrations, MigrationSet};
//!
//! let set = MigrationSet::from_embedded("inventory", embed_migrations!("../../tests/fixtures/app_v2"))?;
//! assert_eq!(set.head().id, "0003_item_events");
//! # Ok::<(), cairn_migrate::MigrateError>(())
//! ```
//!
//! A directory that does not exist is a compile error:
//!
//! ```compile_fail
//! let files = cairn_migrate::embed_migrations!("no/such/directory");
//! ```
//!
//! ## Features
//! - `testkit`: test hooks for the runner (`RunnerHooks`, `Runner::with_hooks`: fault
//!   injection, a runner that records no lineage, a signal before the lock). For test suites
//!   only; nothing a service needs is behind it.

#![forbid(unsafe_code)]

pub mod additivity;
pub mod backend;
pub mod baseline;
pub mod bookkeeping;
mod cairn_set;
mod checksum;
mod classify;
pub mod diagnostics;
mod dialect;
mod error;
pub mod fleet;
mod identity;
mod open;
pub mod outside;
mod refusal;
mod revision;
mod runner;
mod seen;
mod shape;
pub mod source;
mod split;
mod text;
mod transaction;

pub use backend::{Backend, BackendParts, Engine, EngineOptions};
pub use bookkeeping::BOOKKEEPING_TABLES;
pub use cairn_macros::embed_migrations;
pub use cairn_set::{cairn_revisions, cairn_set, sync_revision_missing, CAIRN_SET, SYNC_REVISION};
pub use checksum::{Checksum, ChecksumForm, LineageEntry};
pub use classify::{classify, Classification, StoredState};
pub use diagnostics::{Diagnostics, Integrity, InvalidIndex};
pub use error::MigrateError;
pub use fleet::{Blocker, FleetEntry};
pub use open::{DeferredContract, OpenOptions, Session, SetOpened, DEFAULT_MIGRATION_LOCK_TIMEOUT};
pub use refusal::{Inconsistency, LineageVerdict, Refusal};
pub use revision::{MigrationSet, Revision};
#[cfg(feature = "testkit")]
pub use runner::RunnerHooks;
pub use runner::{
    AppliedContract, Downgraded, LockedMigration, MigrationBackend, OpenReport, Opened, Plan,
    PlannedRevision, Repaired, Runner, DEFAULT_REVISION_LOCK_TIMEOUT, DEFAULT_REVISION_TRIES,
};
pub use seen::{RevisionSeen, REVISION_RECHECK};
pub use source::{ACCEPT_LOCK_MARKER, CONTRACT_MARKER, NO_TRANSACTION_MARKER};
pub use split::{split_statements, SplitError};
pub use text::escape_control;
pub use transaction::transaction_control;
