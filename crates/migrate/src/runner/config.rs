//! The [`Runner`]: one build's migration set and the settings its operations read (the lock
//! timeout, the contract gate, test hooks), and what the operations share.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{Clock, SystemClock};

use super::gate::FleetGate;
use super::hooks::RunnerHooks;
use crate::classify::Classification;
use crate::error::MigrateError;
use crate::fleet;
use crate::revision::MigrationSet;

/// How long a revision's statement waits for a table lock before the upgrade is rolled back
/// and tried again ([`Runner::with_revision_lock_timeout`]).
pub const DEFAULT_REVISION_LOCK_TIMEOUT: Duration = Duration::from_secs(3);

/// How many times an upgrade whose revision gave up waiting for a lock runs in all
/// ([`Runner::with_revision_tries`]).
pub const DEFAULT_REVISION_TRIES: u32 = 5;

/// Opens stores for one build's migration set.
#[derive(Clone, Debug)]
pub struct Runner {
    pub(crate) set: MigrationSet,
    pub(crate) lock_timeout: Duration,
    pub(super) revision_lock_timeout: Duration,
    pub(super) revision_tries: u32,
    pub(super) hooks: RunnerHooks,
    pub(super) fleet: FleetGate,
    pub(super) upgrade: bool,
}

impl Runner {
    /// A runner for `set` with a 30 s lock timeout.
    pub fn new(set: MigrationSet) -> Self {
        Self {
            set,
            lock_timeout: Duration::from_secs(30),
            revision_lock_timeout: DEFAULT_REVISION_LOCK_TIMEOUT,
            revision_tries: DEFAULT_REVISION_TRIES,
            hooks: RunnerHooks::default(),
            fleet: FleetGate {
                clock: Arc::new(SystemClock),
                expiry: fleet::DEFAULT_EXPIRY,
                instance: None,
                force: false,
            },
            upgrade: true,
        }
    }

    /// The clock the contract gate reads `now` from (default the system clock): a registry
    /// entry last seen more than the expiry window before `now` is not live.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.fleet.clock = clock;
        self
    }

    /// The expiry window of fleet registry entries (default
    /// [`fleet::DEFAULT_EXPIRY`], 5 minutes).
    pub fn with_fleet_expiry(mut self, expiry: Duration) -> Self {
        self.fleet.expiry = expiry;
        self
    }

    /// The caller's own registry instance id: its entry never blocks its own contract
    /// revisions.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.fleet.instance = Some(instance.into());
        self
    }

    /// Applies contract revisions even when live builds lack them (`cairn migrate up
    /// --force`). Every contract revision applied is recorded in the store with whether it was
    /// forced and the builds it was forced past ([`OpenReport::contracts`]).
    ///
    /// [`OpenReport::contracts`]: crate::OpenReport::contracts
    pub fn force_contract(mut self, force: bool) -> Self {
        self.fleet.force = force;
        self
    }

    /// Whether an open may upgrade a store that is behind this build (default `true`). With
    /// `false`, [`Runner::open`] refuses a store stamped at an older revision of the set with
    /// [`MigrateError::Behind`] and changes nothing: what a one-shot tool wants, or a service
    /// whose deploy runs the upgrade as a step of its own (`cairn migrate up`). A new store
    /// (no stamp) is still created at head, and a lineage repair still runs. A store whose
    /// next pending revision is a contract revision that live builds lack meets the refusal an
    /// upgrading open meets ([`MigrateError::ContractRefused`]), so that
    /// [`Runner::open_deferring`] serves it at its stamp as it would for any build.
    pub fn upgrade(mut self, upgrade: bool) -> Self {
        self.upgrade = upgrade;
        self
    }

    /// Sets how long to wait for the migration lock.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// Sets how long a revision's statement may wait for a table lock (Postgres:
    /// `lock_timeout` in the upgrade transaction; default [`DEFAULT_REVISION_LOCK_TIMEOUT`]).
    /// A statement that waits longer fails, the upgrade is rolled back — so the queries queued
    /// behind the migration's lock request go on — and it is run again after a pause, up to
    /// [`Runner::with_revision_tries`] times ([`crate::OpenReport::tries`] and
    /// [`crate::OpenReport::lock_waits`] say what happened). SQLite's upgrade holds the
    /// database's write lock from its start, so its statements wait for no lock.
    pub fn with_revision_lock_timeout(mut self, timeout: Duration) -> Self {
        self.revision_lock_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets how many times an upgrade whose revision gave up waiting for a lock runs in all
    /// (default [`DEFAULT_REVISION_TRIES`]; at least 1).
    pub fn with_revision_tries(mut self, tries: u32) -> Self {
        self.revision_tries = tries.max(1);
        self
    }

    /// Installs test hooks.
    #[cfg(feature = "testkit")]
    pub fn with_hooks(mut self, hooks: RunnerHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The set this runner applies.
    pub fn set(&self) -> &MigrationSet {
        &self.set
    }

    /// Runs the [`RunnerHooks::after_commit`] hook, if any: the transaction just committed.
    pub(super) fn committed(&self) {
        if let Some(hook) = &self.hooks.after_commit {
            hook();
        }
    }

    /// `class`, or the refusal it holds as an error.
    pub(super) fn checked(&self, class: Classification) -> Result<Classification, MigrateError> {
        match class {
            Classification::Refused(refusal) => Err(MigrateError::Refused {
                set: self.set.name().into(),
                refusal,
            }),
            other => Ok(other),
        }
    }
}

/// The error for statement `n` (0-based) of a revision, a transaction-control statement.
pub(super) fn ends_transaction(n: usize, control: &str) -> cairn_core::Error {
    cairn_core::Error::invalid(
        "migration revision",
        format!(
            "statement {} is {control}: a revision may not BEGIN, COMMIT, END or ROLLBACK a \
             transaction, the runner applies it inside its own; remove the statement (nothing \
             was changed)",
            n + 1
        ),
    )
}
