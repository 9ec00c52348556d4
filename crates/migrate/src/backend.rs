//! The backend contract, in one place: what an engine implements to run under `cairn::Store`.
//!
//! - [`Engine`]: one store *location* of one engine (a SQLite file, a Postgres schema), before
//!   anything is opened: it opens the store ([`Engine::open`]), reaches its migration state
//!   without opening it ([`Engine::migrator`]), tells whether anything is there
//!   ([`Engine::location_exists`]), diagnoses it read-only ([`Engine::diagnostics`]) and runs
//!   the executed additivity check in its dialect ([`Engine::additivity`]). The facade turns a
//!   parsed URL into an engine in exactly one place and asks it everything else.
//! - [`Backend`]: the handle of one *open* store, owning every connection of it: its
//!   capabilities as trait objects ([`EpochDiagnostics`], [`Spool`], a [`Transaction`]), its
//!   migrator, the [`Session`] its open ran, an orderly close. The accessors every handle has
//!   alike are written once, over the [`BackendParts`] the handle keeps.
//! - The open protocol every open runs ([`OpenOptions`], [`Session`], over cairn's own set
//!   through the [`crate::Runner`]), and the traits of the migration side
//!   ([`MigrationBackend`]), the read-only diagnostics ([`Diagnostics`]) and the additivity
//!   check ([`AdditivityEngine`]), re-exported here so that the contract reads in one module.
//!
//! `cairn_sqlite` (`SqliteEngine`, `SqliteBackend`) and `cairn_postgres` (`PgEngine`,
//! `PgBackend`) implement it; a third party hands its handle to `cairn::Store::from_backend`.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use cairn_core::spool::Spool;
pub use cairn_core::{EpochDiagnostics, EpochStore, Result, Transaction};

pub use crate::additivity::AdditivityEngine;
pub use crate::diagnostics::Diagnostics;
pub use crate::open::{OpenOptions, Session};
pub use crate::runner::MigrationBackend;

#[cfg(doc)]
use crate::Opened;

/// What every open handle holds alike: the engine's name, its capabilities, its migrator and
/// the session its open ran. A handle keeps one and hands it out through
/// [`Backend::parts`]; [`Backend`]'s accessors are written once over it.
pub struct BackendParts {
    /// The engine's name, lowercase (`"sqlite"`, `"postgres"`).
    pub engine: &'static str,
    /// The epoch log with its read-only diagnostics, on the store's connections.
    pub epochs: Arc<dyn EpochDiagnostics>,
    /// The spool, on the store's connections.
    pub spool: Arc<dyn Spool>,
    /// The migration backend the open's session registered through.
    pub migrator: Arc<dyn MigrationBackend>,
    /// The session the open ran.
    pub session: Session,
}

impl fmt::Debug for BackendParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendParts")
            .field("engine", &self.engine)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// One open store of one engine: its capabilities as trait objects, its migrator, the
/// session its open ran ([`Session`]: what it did per migration set, its fleet entry) and an
/// orderly shutdown. Object safe; `cairn::Store` holds an `Arc<dyn Backend>`.
///
/// # Implementing a backend
///
/// A backend's open ([`Engine::open`], or an inherent `async fn open(…, opts: OpenOptions)`
/// whose location and engine options are its own) must:
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
/// [`Backend::spool`] and [`Backend::migrator`] hand out shared views of them (the
/// [`BackendParts`] it keeps), never new connections per call. A wrapper around another handle
/// overrides the accessors it changes.
///
/// Every method but [`Backend::begin`] and [`Backend::close`] is cheap and synchronous; none
/// may block the async executor on I/O (the capabilities they return are `async`, and a
/// blocking engine runs its calls on a blocking pool, as `SqliteBackend` does).
#[async_trait]
pub trait Backend: Send + Sync {
    /// What the handle holds: the source of the accessors below.
    fn parts(&self) -> &BackendParts;

    /// The engine's name, lowercase (`"sqlite"`, `"postgres"`, a third party's own).
    fn engine(&self) -> &str {
        self.parts().engine
    }

    /// The epoch log with its read-only diagnostics, sharing the store's connections.
    fn epochs(&self) -> Arc<dyn EpochDiagnostics> {
        self.parts().epochs.clone()
    }

    /// The spool, sharing the store's connections.
    fn spool(&self) -> Arc<dyn Spool> {
        self.parts().spool.clone()
    }

    /// The migration backend of the store (what the open's [`Session`] registered through):
    /// its stamp and lineage, the fleet registry, the migration lock.
    fn migrator(&self) -> Arc<dyn MigrationBackend> {
        self.parts().migrator.clone()
    }

    /// The session the open ran: what it did per migration set
    /// ([`Session::migrations`]), its fleet entry and the live fleet.
    fn session(&self) -> &Session {
        &self.parts().session
    }

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

    /// The handle as its concrete type, for what only its engine offers (a Postgres handle's
    /// transactions on a caller's own connection). `None` (the default) for a handle that
    /// offers nothing beyond this trait.
    fn as_any(&self) -> Option<&dyn Any> {
        None
    }
}

/// The options of an open that every engine reads, each where it means something (the rest
/// are ignored by an engine they do not apply to). The open protocol's own options are
/// [`OpenOptions`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct EngineOptions {
    /// How long an operation waits for another writer's lock (SQLite's busy timeout,
    /// Postgres's `lock_timeout`); `None`: the engine's default.
    pub busy_timeout: Option<Duration>,
    /// Largest number of pooled connections (Postgres); `None`: the engine's default.
    pub pool_size: Option<u32>,
    /// The schema that holds the store (Postgres), over the location's own; `None`: the
    /// location's, else `public`.
    pub schema: Option<String>,
    /// How many read connections the store keeps (SQLite); `None`: the engine's default.
    pub read_connections: Option<usize>,
    /// Whether a missing store is created (default `true`).
    pub create_if_missing: bool,
    /// Whether cairn's tables may share a SQLite file with the application's (default
    /// `false`).
    pub share_sqlite_file: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            busy_timeout: None,
            pool_size: None,
            schema: None,
            read_connections: None,
            create_if_missing: true,
            share_sqlite_file: false,
        }
    }
}

/// One store location of one engine, before anything is opened: everything the facade asks of
/// an engine goes through this trait, and the facade picks the engine from a URL's scheme in
/// one place. Constructing one checks nothing and connects nowhere.
#[async_trait]
pub trait Engine: Send + Sync {
    /// The engine's name, lowercase (`"sqlite"`, `"postgres"`): what [`Backend::engine`] of
    /// the handle it opens answers.
    fn name(&self) -> &'static str;

    /// Opens the store at this location (creating it when missing and allowed), runs the open
    /// protocol (see [`Backend`]) and returns its handle.
    ///
    /// # Errors
    /// The engine's open errors: a bad option ([`cairn_core::Error::InvalidInput`]), no store
    /// and no creation ([`cairn_core::Error::NotFound`]), a refused or failed migration, the
    /// engine unreachable.
    async fn open(&self, engine: &EngineOptions, open: OpenOptions) -> Result<Arc<dyn Backend>>;

    /// The store's migration backend, without opening the store: its stamp, lineage, fleet
    /// registry and migration lock (operator tools). With `create_if_missing` off, a location
    /// without a store is refused with [`cairn_core::Error::NotFound`] where the engine can
    /// tell without connecting.
    ///
    /// # Errors
    /// [`cairn_core::Error::NotFound`] as above; [`cairn_core::Error::InvalidInput`] for a bad
    /// location (a schema name).
    fn migrator(&self, create_if_missing: bool) -> Result<Arc<dyn MigrationBackend>>;

    /// Whether anything is at the location: the file (or a symlink there), the schema.
    /// Read-only: creates nothing.
    ///
    /// # Errors
    /// [`cairn_core::Error::Io`] when a file's metadata cannot be read;
    /// [`cairn_core::Error::Unavailable`] when the server cannot be reached or queried.
    async fn location_exists(&self) -> Result<bool>;

    /// Read-only [`Diagnostics`] built from the location alone: they work on a store that is
    /// damaged, missing or refused, and never create or migrate one.
    ///
    /// # Errors
    /// [`cairn_core::Error::InvalidInput`] for a bad location.
    fn diagnostics(&self) -> Result<Arc<dyn Diagnostics>>;

    /// The executed additivity check's engine in this engine's dialect; a server engine builds
    /// its throwaway schemas on the server this location names.
    ///
    /// # Errors
    /// [`cairn_core::Error::InvalidInput`] for a bad location.
    fn additivity(&self) -> Result<Arc<dyn AdditivityEngine>>;
}
