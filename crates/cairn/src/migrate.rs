//! Lineage-aware migrations, for operator tools and services with their own schema.
//!
//! A service hands its [`MigrationSet`]s to [`crate::StoreBuilder::migrations`]; every open
//! then runs the migration protocol. Operator tools (the `cairn migrate …` commands) reach a
//! store's migration state without opening the store, through a [`Migrations`] handle: its
//! status and history, an upgrade, a rollback, a lineage repair and the live builds — each
//! write runs the whole protocol (the lock, a second look, one transaction). The migration
//! lock and the bookkeeping tables are never handed out. The executed additivity check runs
//! through [`additivity_engine`]; read-only diagnostics through [`diagnostics`], and whether a
//! location holds anything at all through [`location_exists`].
//!
//! The fleet registry lists the builds that have the store open; [`Migrations::fleet`] reads
//! it (`cairn migrate fleet`). A revision marked contract (first line [`CONTRACT_MARKER`] in
//! its up file) is applied only when no live build lacks it, unless forced
//! ([`Migrations::upgrade`] with `force_contract`, [`crate::StoreBuilder::force_contract`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> cairn::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = cairn::DatabaseUrl::parse(&format!("sqlite://{}/ops.db", dir.path().display()))?;
//! use cairn::migrate::{cairn_set, Classification, Migrations, Opened};
//!
//! let migrations = Migrations::at(&url, true)?;
//! let set = cairn_set();
//! let state = migrations.state(set.name()).await?;
//! assert!(matches!(migrations.classify(&set, &state), Classification::Upgrade { .. }));
//! let report = migrations.upgrade(&set, false).await?;
//! assert!(matches!(report.opened, Opened::Upgraded { .. }));
//! # Ok(()) }
//! ```
//!
//! The lock is not reachable from a plain dependency:
//!
//! ```compile_fail
//! # async fn f(url: &cairn::DatabaseUrl) {
//! let m = cairn::migrate::Migrations::at(url, false).unwrap();
//! let _ = m.lock(std::time::Duration::from_secs(1)).await;
//! # }
//! ```
//!
//! ```compile_fail
//! use cairn::migrate::MigrationBackend;
//! ```
//!
//! Nor is the statement splitter the runner uses ([`revision_from_sql`] builds a revision
//! from a file's text):
//!
//! ```compile_fail
//! use cairn::migrate::split_statements;
//! ```

use std::sync::Arc;
use std::time::Duration;

pub use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::{Error, Result};
pub use cairn_migrate::additivity::{check_set, AdditivityEngine, RevisionReport, Rule, Violation};
pub use cairn_migrate::additivity::{
    check_set_locks, LockFinding, LockMode, LockReport, LockRule, TableLocks,
};
pub use cairn_migrate::baseline::{Baselined, SchemaShape, TableShape};
pub use cairn_migrate::escape_control;
pub use cairn_migrate::fleet::{
    contract_blockers, Blocker, FleetEntry, DEFAULT_EXPIRY, DEFAULT_HEARTBEAT_INTERVAL,
};
/// The rules of no-transaction revisions (`-- cairn:no-transaction`).
pub use cairn_migrate::outside;
use cairn_migrate::split_statements;
pub use cairn_migrate::ACCEPT_LOCK_MARKER;
pub use cairn_migrate::{
    cairn_set, classify, Checksum, Classification, Inconsistency, LineageEntry, LineageVerdict,
    MigrateError, MigrationSet, Opened, Refusal, Repaired, Revision, SplitError, StoredState,
    CAIRN_SET,
};
pub use cairn_migrate::{AppliedContract, Downgraded, OpenReport, CONTRACT_MARKER};
pub use cairn_migrate::{Diagnostics, Integrity, InvalidIndex};
use cairn_migrate::{MigrationBackend, Runner};
pub use cairn_migrate::{
    Plan, PlannedRevision, DEFAULT_REVISION_LOCK_TIMEOUT, DEFAULT_REVISION_TRIES,
    NO_TRANSACTION_MARKER,
};

use crate::url::{DatabaseUrl, Scheme};

/// How [`Migrations::upgrade_with`] runs an upgrade.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct UpgradeOptions {
    /// Apply contract revisions even when live builds lack them.
    pub force_contract: bool,
    /// How long a revision's statement may wait for a table lock before the upgrade is rolled
    /// back and tried again (Postgres).
    pub revision_lock_timeout: Duration,
    /// How many times the upgrade runs in all when a statement gives up waiting.
    pub revision_tries: u32,
}

impl Default for UpgradeOptions {
    fn default() -> Self {
        Self {
            force_contract: false,
            revision_lock_timeout: DEFAULT_REVISION_LOCK_TIMEOUT,
            revision_tries: DEFAULT_REVISION_TRIES,
        }
    }
}

impl UpgradeOptions {
    /// Sets [`UpgradeOptions::force_contract`].
    pub fn force_contract(mut self, force: bool) -> Self {
        self.force_contract = force;
        self
    }

    /// Sets [`UpgradeOptions::revision_lock_timeout`].
    pub fn revision_lock_timeout(mut self, timeout: Duration) -> Self {
        self.revision_lock_timeout = timeout;
        self
    }

    /// Sets [`UpgradeOptions::revision_tries`].
    pub fn revision_tries(mut self, tries: u32) -> Self {
        self.revision_tries = tries;
        self
    }
}

/// The migration state of one store, for operator tools: read it, upgrade it, roll it back,
/// repair its lineage, list the live builds — without opening the store's other capabilities.
///
/// Reads take no lock and write nothing. Each write ([`Migrations::upgrade`],
/// [`Migrations::repair`], [`Migrations::down`]) is the runner's whole protocol: a look
/// without the lock, then the lock, a second look and one transaction; nothing else writes
/// the bookkeeping.
#[derive(Clone)]
pub struct Migrations {
    backend: Arc<dyn MigrationBackend>,
    /// The location, when the handle was made from one ([`Migrations::at`]).
    url: Option<DatabaseUrl>,
}

impl std::fmt::Debug for Migrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migrations")
            .field("dialect", &self.backend.dialect())
            .finish_non_exhaustive()
    }
}

impl Migrations {
    /// The migration state of the store at `url`.
    ///
    /// With `create_if_missing` off, a SQLite file that does not exist is refused with
    /// [`Error::NotFound`] instead of being created.
    ///
    /// # Errors
    /// [`Error::NotFound`] as above; [`Error::InvalidInput`] for a bad Postgres schema name or
    /// a backend this build was compiled without.
    pub fn at(url: &DatabaseUrl, create_if_missing: bool) -> Result<Self> {
        Ok(Self {
            backend: migration_backend(url, create_if_missing)?,
            url: Some(url.clone()),
        })
    }

    /// The migration state of an open `store`, read through the store's own handle: on
    /// Postgres its looks take a connection of the store's pool instead of opening one (what a
    /// running server's doctor asks, however often). The lock stays unexposed, as with
    /// [`Migrations::at`].
    pub fn of(store: &crate::Store) -> Self {
        Self {
            backend: store.migrator(),
            url: None,
        }
    }

    /// The SQL dialect the store's revisions run in (its lineage holds that dialect's
    /// checksums).
    pub fn dialect(&self) -> Dialect {
        self.backend.dialect()
    }

    /// The stamp and lineage the store records for set `set`, read without the lock and
    /// without writing. A store with neither bookkeeping table reads as empty.
    ///
    /// # Errors
    /// Store errors.
    pub async fn state(&self, set: &str) -> Result<StoredState, MigrateError> {
        self.backend.read_state(set).await
    }

    /// How `set` (this build's history) classifies a store in `state` ([`classify`] in this
    /// store's dialect): at head, upgrade, ahead or refused. Pure.
    pub fn classify(&self, set: &MigrationSet, state: &StoredState) -> Classification {
        classify(set, self.dialect(), state)
    }

    /// Refuses a store *ahead* of `set` whose lineage holds a contract revision `set` does not
    /// know: the verdict an open (and `cairn migrate up`) gives such a store. Takes no lock and
    /// writes nothing.
    ///
    /// # Errors
    /// [`MigrateError::ContractAhead`], store errors.
    pub async fn check_contracts_known(&self, set: &MigrationSet) -> Result<(), MigrateError> {
        Runner::new(set.clone())
            .check_contracts_known(self.backend.as_ref())
            .await
    }

    /// Upgrades the store to `set`'s head (`cairn migrate up`), or records its lineage when it
    /// is at head without one; a store at head or ahead is left as it is. A contract revision
    /// is applied only when no live build lacks it, unless `force_contract`, which the store
    /// records with the builds it was forced past ([`OpenReport::contracts`]).
    ///
    /// # Errors
    /// [`MigrateError::Refused`], [`MigrateError::ContractRefused`],
    /// [`MigrateError::ContractAhead`] (nothing changed); [`MigrateError::RevisionFailed`]
    /// (rolled back); [`MigrateError::LockTimeout`]; store errors.
    pub async fn upgrade(
        &self,
        set: &MigrationSet,
        force_contract: bool,
    ) -> Result<OpenReport, MigrateError> {
        self.upgrade_with(
            set,
            &UpgradeOptions::default().force_contract(force_contract),
        )
        .await
    }

    /// [`Migrations::upgrade`] with its settings: whether contract revisions are forced, and
    /// how long a revision's statement may wait for a table lock and how many times the
    /// upgrade is tried when one gives up ([`OpenReport::tries`], [`OpenReport::lock_waits`]).
    ///
    /// # Errors
    /// As [`Migrations::upgrade`], and [`MigrateError::RevisionFailedPartly`] when a
    /// no-transaction revision had committed part of the upgrade.
    pub async fn upgrade_with(
        &self,
        set: &MigrationSet,
        opts: &UpgradeOptions,
    ) -> Result<OpenReport, MigrateError> {
        Runner::new(set.clone())
            .force_contract(opts.force_contract)
            .with_revision_lock_timeout(opts.revision_lock_timeout)
            .with_revision_tries(opts.revision_tries)
            .open_with_report(self.backend.as_ref())
            .await
    }

    /// What [`Migrations::upgrade`] would run now (`cairn migrate up --dry-run`): the pending
    /// revisions and their exact statements in the store's dialect, read without the lock;
    /// nothing is written.
    ///
    /// # Errors
    /// The refusals an upgrade would give; store errors.
    pub async fn plan(&self, set: &MigrationSet) -> Result<Plan, MigrateError> {
        Runner::new(set.clone()).plan(self.backend.as_ref()).await
    }

    /// Adopts the store at revision `at` of `set` without running its SQL on the store (`cairn
    /// migrate baseline`), when what the store holds is exactly what the set makes up to `at`
    /// and it holds no stamp of `set`. To know what that is, the set's SQL runs on a throwaway
    /// store: for a SQLite store a temporary file; for a Postgres store a new schema on
    /// `scratch_server`, a Postgres server (and database) that holds no production data — a
    /// revision's SQL may name other schemas — and never the store's own database. The
    /// throwaway store is removed afterwards.
    ///
    /// # Errors
    /// [`MigrateError::BaselineMismatch`] (with the differences),
    /// [`MigrateError::BaselineRefused`], an invalid-input store error for an unknown `at`, a
    /// Postgres store without `scratch_server` or with the store's own database as it (nothing
    /// written); [`MigrateError::LockTimeout`]; store errors.
    pub async fn baseline(
        &self,
        set: &MigrationSet,
        at: &str,
        scratch_server: Option<&DatabaseUrl>,
    ) -> Result<Baselined, MigrateError> {
        let invalid =
            |why: &str| MigrateError::Store(Error::invalid("baseline scratch server", why));
        let scratch = match self.dialect() {
            Dialect::Sqlite => self.backend.scratch().await?,
            Dialect::Postgres => {
                let Some(server) = scratch_server else {
                    return Err(invalid(
                        "a Postgres baseline runs the set's SQL on a scratch server: name one \
                         whose databases hold no production data",
                    ));
                };
                let DatabaseUrl::Postgres { url: theirs, .. } = server else {
                    return Err(invalid("the scratch server must be a Postgres URL"));
                };
                if matches!(&self.url, Some(DatabaseUrl::Postgres { url: ours, .. }) if ours == theirs)
                {
                    return Err(invalid(
                        "the scratch server must not be the store's own database",
                    ));
                }
                // Compared as what each connection reaches, not as text: another spelling of
                // the store's own URL (a host name, a socket, a parameter) reaches it too.
                let on_scratch = migration_backend(server, true)?;
                let theirs = on_scratch.database_identity().await?;
                if theirs.is_some() && theirs == self.backend.database_identity().await? {
                    return Err(invalid(
                        "the scratch server must not be the store's own database (it is, under \
                         another URL)",
                    ));
                }
                on_scratch.scratch().await?
            }
        };
        Runner::new(set.clone())
            .baseline(self.backend.as_ref(), scratch, at)
            .await
    }

    /// Repairs the store's bookkeeping for `set` (`cairn migrate repair`): restores a missing
    /// stamp row from the recorded lineage, recreates a dropped lineage table, records `set`'s
    /// lineage on a store at its head whose lineage is missing or another history's. Never runs
    /// a revision; a store that needs none of this is not locked and not written.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] (nothing changed) for a store `set` must not use even once
    /// repaired; [`MigrateError::LockTimeout`]; store errors.
    pub async fn repair(&self, set: &MigrationSet) -> Result<Repaired, MigrateError> {
        Runner::new(set.clone()).repair(self.backend.as_ref()).await
    }

    /// Rolls the store back to revision `to` of `set` (`cairn migrate down --to REV`) with the
    /// down SQL stored when each revision was applied, newest first, in one transaction. A
    /// store already at `to` is neither locked nor written.
    ///
    /// # Errors
    /// [`MigrateError::NoDownSql`], [`MigrateError::DownRefused`] (nothing changed);
    /// [`MigrateError::DownFailed`] (rolled back); [`MigrateError::LockTimeout`]; store errors.
    pub async fn down(&self, set: &MigrationSet, to: &str) -> Result<Downgraded, MigrateError> {
        Runner::new(set.clone())
            .down(self.backend.as_ref(), to)
            .await
    }

    /// The live builds in the store's fleet registry: every entry refreshed within `expiry` of
    /// `now`, ordered by instance id. A store without a registry (its cairn set predates
    /// `0004_fleet`) has none. Takes no lock and writes nothing.
    ///
    /// # Errors
    /// Store errors.
    pub async fn fleet(&self, now: Timestamp, expiry: Duration) -> Result<Vec<FleetEntry>> {
        let all = self.backend.read_fleet().await.map_err(Error::from)?;
        Ok(cairn_migrate::fleet::live(all, now, expiry))
    }
}

/// A revision `id` following `parent`, from one file's SQL text split into statements for
/// both dialects, as a set's files are read (`cairn migrate check --with-revision FILE`).
/// Text without a statement gives a revision with none; check [`Revision::up`].
///
/// # Errors
/// [`SplitError`] naming the line of an unterminated quote, comment or dollar-quoted block.
pub fn revision_from_sql(
    id: impl Into<String>,
    parent: impl Into<String>,
    sql: &str,
    description: impl Into<String>,
) -> std::result::Result<Revision, SplitError> {
    Ok(Revision {
        id: id.into(),
        parent: Some(parent.into()),
        up_sqlite: split_statements(sql, Dialect::Sqlite)?,
        up_postgres: split_statements(sql, Dialect::Postgres)?,
        description: description.into(),
    })
}

/// The store's side of the migration protocol, for [`Migrations`] and [`crate::testkit`].
pub(crate) fn migration_backend(
    url: &DatabaseUrl,
    create_if_missing: bool,
) -> Result<Arc<dyn MigrationBackend>> {
    crate::engine::engine(url)?.migrator(create_if_missing)
}

/// Whether anything is at the store location `url` names: the SQLite file (or a symlink
/// there), the Postgres schema. The location where the first writing open would create the
/// store is empty; an existing one may hold a store, or tables of an application set alone.
/// Read-only: creates nothing (`cairn migrate status` tells "no store here" by it).
///
/// # Errors
/// [`Error::Io`] when the file's metadata cannot be read; [`Error::Unavailable`] when the
/// Postgres server cannot be reached or queried (or does not answer within 10 s);
/// [`Error::InvalidInput`] for a bad URL or schema name, or a backend this build was compiled
/// without.
pub async fn location_exists(url: &DatabaseUrl) -> Result<bool> {
    crate::engine::engine(url)?.location_exists().await
}

/// Read-only [`Diagnostics`] of the store at `url` (its integrity, the additivity check's
/// leftovers where its engine makes them), built from the location alone: it works on a
/// store that is damaged, missing or refused, and never creates or migrates one (`cairn
/// doctor`).
///
/// # Errors
/// [`Error::InvalidInput`] for a bad Postgres schema name or a backend this build was
/// compiled without.
pub fn diagnostics(url: &DatabaseUrl) -> Result<Arc<dyn Diagnostics>> {
    crate::engine::engine(url)?.diagnostics()
}

/// The executed additivity check's engine for `scheme`. The Postgres engine builds its
/// throwaway schemas on the server `postgres_url` names; the SQLite engine runs in memory.
///
/// # Errors
/// [`Error::InvalidInput`] when `postgres_url` is missing or not a Postgres URL for
/// Postgres, or for a backend this build was compiled without.
pub fn additivity_engine(
    scheme: Scheme,
    postgres_url: Option<&str>,
) -> Result<Arc<dyn AdditivityEngine>> {
    let location = match scheme {
        // The SQLite check never touches a file: any path names its engine.
        Scheme::Sqlite => DatabaseUrl::parse(":memory:")?,
        Scheme::Postgres => {
            let url = postgres_url.ok_or_else(|| {
                Error::invalid(
                    "additivity check",
                    "the Postgres engine needs a server URL for its throwaway schemas",
                )
            })?;
            let url = DatabaseUrl::parse(url)?;
            if url.scheme() != Scheme::Postgres {
                return Err(Error::invalid(
                    "additivity check",
                    "the Postgres engine's server URL is not a postgres:// URL",
                ));
            }
            url
        }
    };
    crate::engine::engine(&location)?.additivity()
}
