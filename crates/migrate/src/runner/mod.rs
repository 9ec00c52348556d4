//! The migration runner: the open protocol (a look without the lock, a second look under it,
//! atomic upgrade with lineage), lineage and bookkeeping repair, and `down`.
//!
//! A leaf per job: [`MigrationBackend`] and [`LockedMigration`] (`store.rs`) are what a backend
//! implements; [`Runner`] (`config.rs`) holds the set and the settings; `upgrade.rs`,
//! `repair.rs` and `down.rs` are its operations, `gate.rs` the contract gate on the fleet
//! registry. This file only re-exports.

mod config;
mod down;
mod gate;
mod hooks;
mod plan;
mod repair;
mod store;
mod upgrade;

pub use config::{Runner, DEFAULT_REVISION_LOCK_TIMEOUT, DEFAULT_REVISION_TRIES};
pub use down::Downgraded;
pub use gate::{AppliedContract, DeferredContract};
#[cfg(feature = "testkit")]
pub use hooks::RunnerHooks;
pub use plan::{Plan, PlannedRevision};
pub use repair::Repaired;
pub use store::{LockedMigration, MigrationBackend};
pub use upgrade::{OpenReport, Opened};
