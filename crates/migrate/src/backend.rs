//! The backend handle: one open store of one engine, owning every connection of it.
//!
//! `cairn::Store` holds one `Arc<dyn Backend>`: it picks `cairn_sqlite::SqliteBackend` or
//! `cairn_postgres::PgBackend` from a URL, or takes a third party's through
//! `Store::from_backend`. A service may also use a backend crate's handle directly; it
//! registers in the fleet registry and is gated by contract revisions the same way, because
//! every backend's open runs [`Session::open`].
//!
//! See [`Backend`] for what an implementation's open must do.

use std::sync::Arc;

use async_trait::async_trait;
use cairn_core::spool::Spool;
use cairn_core::{EpochDiagnostics, Result, Transaction};

use crate::diagnostics::Diagnostics;
use crate::open::Session;
use crate::runner::MigrationBackend;

#[cfg(doc)]
use crate::open::OpenOptions;

/// One open store of one engine: its capabilities as trait objects, its migrator, the
/// session its open ran ([`Session`]: what it did per migration set, its fleet entry) and an
/// orderly shutdown. Object safe; `cairn::Store` holds an `Arc<dyn Backend>`.
///
/// # Implementing a backend
///
/// A backend's open (an inherent `async fn open(…, opts: OpenOptions)`, which this trait does
/// not prescribe: its location and engine options are its own) must:
///
/// 1. call [`OpenOptions::check`] before it creates anything;
/// 2. open its store through cairn's own migration set ([`crate::cairn_set`] and the
///    [`crate::Runner`] over its [`MigrationBackend`]), keeping what that did ([`Opened`]);
/// 3. build its epoch log and its spool on the store's connections (the spool reading time from
///    [`OpenOptions::clock`] with [`OpenOptions::spool_config`]);
/// 4. call [`Session::open`] with its migrator, the [`Opened`] of step 2 and the options — never
///    skip it: that is what opens the application's sets, registers the build in the fleet
///    registry, heartbeats it and keeps contract revisions from breaking it — and, should that
///    fail, close what steps 2–3 opened before returning the error.
///
/// The handle then owns every connection of the store: [`Backend::epochs`],
/// [`Backend::spool`] and [`Backend::migrator`] hand out shared views of them, never new
/// connections per call.
///
/// Every method but [`Backend::close`] is cheap and synchronous; none may block the async
/// executor on I/O (the capabilities they return are `async`, and a blocking engine runs its
/// calls on a blocking pool, as `SqliteBackend` does).
///
/// [`Opened`]: crate::Opened
#[async_trait]
pub trait Backend: Send + Sync {
    /// The engine's name, lowercase (`"sqlite"`, `"postgres"`, a third party's own).
    fn engine(&self) -> &str;

    /// The epoch log with its read-only diagnostics, sharing the store's connections.
    fn epochs(&self) -> Arc<dyn EpochDiagnostics>;

    /// The spool, sharing the store's connections.
    fn spool(&self) -> Arc<dyn Spool>;

    /// The migration backend of the store (what the open's [`Session`] registered through):
    /// its stamp and lineage, the fleet registry, the migration lock.
    fn migrator(&self) -> Arc<dyn MigrationBackend>;

    /// The session the open ran: what it did per migration set
    /// ([`Session::migrations`]), its fleet entry and the live fleet.
    fn session(&self) -> &Session;

    /// Read-only diagnostics of the store (its integrity, the additivity check's leftovers),
    /// on the store's own connections where the engine keeps a pool: what a running server's
    /// `/v1/doctor` asks. See [`Diagnostics`] for the contract.
    fn diagnostics(&self) -> Arc<dyn Diagnostics>;

    /// Begins a transaction on the store ([`Transaction`] states its contract): cairn's writes
    /// made through it, and the application's own through the engine's transaction type,
    /// commit together or not at all.
    ///
    /// # Errors
    /// The engine's errors (no connection, the writer busy past its timeout:
    /// [`cairn_core::Error::Retryable`]).
    async fn begin(&self) -> Result<Box<dyn Transaction>>;

    /// Shuts the store down in order: first [`Session::close`] (the heartbeat stops, the
    /// registry entry is removed), then the backend's connections, waiting for those in use.
    /// Later operations through any capability the handle handed out fail with
    /// [`cairn_core::Error::Unavailable`] (or, for a backend whose writes are durable when they
    /// return and whose connections close with the last handle, keep working until then: say
    /// which in the implementation's docs). Calling it twice is harmless.
    ///
    /// # Errors
    /// The backend's shutdown errors; the built-in backends have none.
    async fn close(&self) -> Result<()>;
}
