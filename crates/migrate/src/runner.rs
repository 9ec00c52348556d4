//! The open protocol: a look without the lock, a second look under it, atomic upgrade with
//! lineage, and lineage repair.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::{Clock, SystemClock, Timestamp};

use crate::classify::{classify, Classification, Refusal, StoredState};
use crate::error::MigrateError;
use crate::fleet::{self, Blocker, FleetEntry};
use crate::revision::{LineageEntry, MigrationSet};
use crate::transaction::transaction_control;

/// A store's side of the protocol. Each backend implements it with its own SQL.
#[async_trait]
pub trait MigrationBackend: Send + Sync {
    /// The SQL dialect revisions are rendered in.
    fn dialect(&self) -> Dialect;

    /// Reads the set's stamp and lineage without taking the write lock and without writing
    /// anything. Both bookkeeping tables missing read as an empty state; one missing is read
    /// as such ([`crate::bookkeeping::stored_state_of`]), for the runner to refuse.
    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError>;

    /// Takes the migration lock (waiting at most `timeout`) and opens the upgrade transaction,
    /// creating each bookkeeping table inside it when missing (which is how a repair restores
    /// a dropped lineage table).
    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError>;

    /// Records `entry` in the fleet registry ([`crate::fleet`]): replaces the instance's rows
    /// with one per set in [`FleetEntry::heads`], and deletes rows last seen before
    /// `prune_before` (long-dead instances), in one transaction.
    ///
    /// # Errors
    /// Store errors; a store without the registry table (its cairn set predates `0004_fleet`)
    /// fails with [`cairn_core::Error::NotFound`].
    async fn register(
        &self,
        entry: &FleetEntry,
        prune_before: Timestamp,
    ) -> Result<(), MigrateError>;

    /// Refreshes the `last_seen` of instance `instance` to `now` (one statement).
    ///
    /// # Errors
    /// Store errors.
    async fn heartbeat(&self, instance: &str, now: Timestamp) -> Result<(), MigrateError>;

    /// Removes instance `instance` from the registry.
    ///
    /// # Errors
    /// Store errors.
    async fn deregister(&self, instance: &str) -> Result<(), MigrateError>;

    /// Every registry entry, live or not, without taking the lock and without writing; a
    /// store without the registry reads as none.
    ///
    /// # Errors
    /// Store errors.
    async fn read_fleet(&self) -> Result<Vec<FleetEntry>, MigrateError>;

    /// The contract revisions of `set` recorded as applied (ever; the caller compares them with
    /// the stored lineage), without taking the lock and without writing.
    ///
    /// # Errors
    /// Store errors.
    async fn read_contracts(&self, set: &str) -> Result<Vec<String>, MigrateError>;
}

/// An open upgrade transaction holding the migration lock. Dropping it without
/// [`LockedMigration::commit`] rolls everything back.
#[async_trait]
pub trait LockedMigration: Send {
    /// Reads the state again, under the lock.
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError>;
    /// Runs one statement of a revision inside the upgrade transaction.
    ///
    /// # Contract
    /// - The statement must leave the upgrade transaction open: one that would end it
    ///   (`COMMIT`, `END`, `ROLLBACK`, or anything else that commits or replaces the
    ///   transaction) fails, and the backend checks after every statement that its transaction
    ///   is still the one it opened (SQLite: not in autocommit; Postgres: the same transaction
    ///   id). The runner refuses the statements [`crate::transaction_control`] recognises before
    ///   running anything; this check holds the invariant whatever else could end it.
    ///
    /// # Errors
    /// The statement's error, or one saying the transaction ended; the runner then rolls the
    /// upgrade back.
    async fn execute(&mut self, sql: &str) -> Result<(), cairn_core::Error>;
    /// Records the stamp and, when given, replaces the lineage.
    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
    ) -> Result<(), MigrateError>;
    /// Replaces the stored down SQL of revision `revision` of `set` with `statements` (none:
    /// the revision has no down SQL), in the locked transaction.
    async fn store_down(
        &mut self,
        set: &str,
        revision: &str,
        statements: &[String],
    ) -> Result<(), MigrateError>;
    /// The stored down SQL of revision `revision` of `set`, in order; `None` when none is
    /// stored.
    async fn read_down(
        &mut self,
        set: &str,
        revision: &str,
    ) -> Result<Option<Vec<String>>, MigrateError>;
    /// Every registry entry, live or not, read inside the locked transaction (none when the
    /// store has no registry table).
    async fn read_fleet(&mut self) -> Result<Vec<FleetEntry>, MigrateError>;
    /// Records that contract revision `revision` of `set` was applied at `at`, `forced` past
    /// `blockers`, in the locked transaction; a store without the contract table records
    /// nothing.
    async fn record_contract(
        &mut self,
        set: &str,
        revision: &str,
        at: Timestamp,
        forced: bool,
        blockers: &[Blocker],
    ) -> Result<(), MigrateError>;
    /// Commits and releases the lock.
    async fn commit(self: Box<Self>) -> Result<(), MigrateError>;
    /// Rolls back and releases the lock.
    async fn rollback(self: Box<Self>) -> Result<(), MigrateError>;
}

/// What an open did.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Opened {
    /// The store was at this build's head; nothing was written.
    AtHead,
    /// The store was migrated from `from` to this build's head.
    Upgraded {
        /// The previous stamp.
        from: Option<String>,
        /// Revisions applied, oldest first.
        applied: Vec<String>,
    },
    /// The store is at a newer revision whose lineage holds this head; nothing was written.
    Ahead {
        /// The store's stamp.
        stamp: String,
    },
    /// The store was at this head with a missing or foreign lineage; this build's lineage was
    /// recorded.
    LineageRepaired,
}

/// A contract revision an open applied.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct AppliedContract {
    /// The revision.
    pub revision: String,
    /// Whether it was forced ([`Runner::force_contract`]) past live builds that lack it.
    pub forced: bool,
    /// The live builds it was forced past (empty when not forced).
    pub blockers: Vec<Blocker>,
}

/// What [`Runner::open_with_report`] did: the open's outcome and the contract revisions it
/// applied.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct OpenReport {
    /// What the open did.
    pub opened: Opened,
    /// The contract revisions applied, oldest first (each recorded in the store's
    /// `cairn_contract` table with whether it was forced).
    pub contracts: Vec<AppliedContract>,
}

/// How the runner gates contract revisions on the fleet registry.
#[derive(Clone, Debug)]
struct FleetGate {
    clock: Arc<dyn Clock>,
    expiry: Duration,
    instance: Option<String>,
    force: bool,
}

/// What [`Runner::down`] did.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Downgraded {
    /// The stamp before.
    pub from: String,
    /// The stamp now.
    pub to: String,
    /// The revisions undone, newest first (empty when the store was already at `to`; then
    /// nothing was locked or written).
    pub reverted: Vec<String>,
}

/// The revisions `down --to to` undoes on a store in `state`, newest first, with the lineage
/// the store keeps afterwards (the stored lineage up to and including `to`).
fn down_plan(
    set: &str,
    state: &StoredState,
    to: &str,
) -> Result<(String, Vec<String>, Vec<LineageEntry>), MigrateError> {
    let refused = |reason: String| MigrateError::DownRefused {
        set: set.into(),
        reason,
    };
    let Some(stamp) = &state.stamp else {
        return Err(refused(
            "the store has no stamp for this set (nothing applied, or bookkeeping edited by hand: run `cairn migrate repair`)".into(),
        ));
    };
    let Some(lineage) = &state.lineage else {
        return Err(refused(
            "the store records no lineage for this set; run `cairn migrate repair` first".into(),
        ));
    };
    let pos = |id: &str| lineage.iter().position(|e| e.revision == id);
    let Some(at) = pos(stamp) else {
        return Err(refused(format!(
            "the stamp {} is not in the stored lineage; run `cairn migrate repair` first",
            crate::text::escape_control(stamp)
        )));
    };
    let Some(target) = pos(to) else {
        return Err(refused(format!(
            "{to} is not in the store's history; `cairn migrate history` lists it"
        )));
    };
    if target > at {
        return Err(refused(format!(
            "{to} comes after the store's revision {}; use `cairn migrate up`",
            crate::text::escape_control(stamp)
        )));
    }
    let reverted = lineage[target + 1..=at]
        .iter()
        .rev()
        .map(|e| e.revision.clone())
        .collect();
    Ok((stamp.clone(), reverted, lineage[..=target].to_vec()))
}

/// What [`Runner::repair`] did. Every repair runs under the migration lock, after a second
/// look, in one transaction.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Repaired {
    /// The stamp row was missing while a lineage was recorded; it was restored to the
    /// lineage's last revision (the stamp the build that recorded the lineage wrote with it).
    pub stamp_restored: Option<String>,
    /// The lineage table was missing while the stamp table was present; it was recreated.
    pub lineage_table_restored: bool,
    /// The store is at this build's head with a missing or another history's lineage; this
    /// build's lineage was recorded.
    pub lineage_recorded: bool,
    /// How the store classifies for this build now (an upgrade still pending is left to
    /// [`Runner::open`], `cairn migrate up`).
    pub now: Classification,
}

impl Repaired {
    /// Whether the repair wrote anything.
    pub fn changed(&self) -> bool {
        self.stamp_restored.is_some() || self.lineage_table_restored || self.lineage_recorded
    }
}

/// Test hooks for the runner (fault injection, runners that predate lineage). Only with the
/// `testkit` feature: a user's runner never carries hooks.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "testkit"), allow(unreachable_pub))]
pub struct RunnerHooks {
    /// Called after the first look found work to do, just before waiting for the lock (lets a
    /// test interleave another migration deterministically).
    pub before_lock: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
    /// Upgrade without recording a lineage, as a runner that predates lineage does.
    pub skip_lineage: bool,
    /// Fail after writing the stamp and lineage, before commit (atomicity tests): in an
    /// upgrade, a `repair` and a `down`.
    pub fail_after_lineage_write: bool,
    /// Called right after the runner's COMMIT succeeded (an open that took the lock, a
    /// `repair` that wrote, a `down`), before it returns: lets a test die at that point, as a
    /// process killed right after the commit would (the work is durable, the caller never
    /// hears of it).
    pub after_commit: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for RunnerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerHooks")
            .field("before_lock", &self.before_lock.is_some())
            .field("skip_lineage", &self.skip_lineage)
            .field("fail_after_lineage_write", &self.fail_after_lineage_write)
            .field("after_commit", &self.after_commit.is_some())
            .finish()
    }
}

/// Opens stores for one build's migration set.
#[derive(Clone, Debug)]
pub struct Runner {
    set: MigrationSet,
    lock_timeout: Duration,
    hooks: RunnerHooks,
    fleet: FleetGate,
}

impl Runner {
    /// A runner for `set` with a 30 s lock timeout.
    pub fn new(set: MigrationSet) -> Self {
        Self {
            set,
            lock_timeout: Duration::from_secs(30),
            hooks: RunnerHooks::default(),
            fleet: FleetGate {
                clock: Arc::new(SystemClock),
                expiry: fleet::DEFAULT_EXPIRY,
                instance: None,
                force: false,
            },
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
    pub fn force_contract(mut self, force: bool) -> Self {
        self.fleet.force = force;
        self
    }

    /// Sets how long to wait for the migration lock.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
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

    /// Classifies the store without locking or writing.
    ///
    /// # Errors
    /// [`MigrateError::UnsupportedDialect`] for a store of an engine the set is not for
    /// ([`MigrationSet::only_on`]); store errors.
    pub async fn status(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<Classification, MigrateError> {
        self.set.require(backend.dialect())?;
        Ok(classify(
            &self.set,
            backend.dialect(),
            &backend.read_state(self.set.name()).await?,
        ))
    }

    /// Repairs the store's bookkeeping for this build (`cairn migrate repair`): restores a
    /// missing stamp row from the recorded lineage, recreates a dropped lineage table, and
    /// records this build's lineage on a store at this build's head whose lineage is missing
    /// or another history's (a head that is the base revision is exempt: every history
    /// contains it). It never runs a revision: a store left behind this build is upgraded by
    /// [`Runner::open`]. A store that needs none of this is not locked and not written.
    ///
    /// A stamp is restored only when the store then classifies as something this build may
    /// use (at head, behind, or ahead with this build's history in the lineage); otherwise the
    /// repair is refused and changes nothing.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] (nothing changed) for a store this build must not use even
    /// once repaired, [`MigrateError::UnsupportedDialect`] for a store of an engine the set is
    /// not for, [`MigrateError::LockTimeout`], store errors.
    pub async fn repair(&self, backend: &dyn MigrationBackend) -> Result<Repaired, MigrateError> {
        let dialect = backend.dialect();
        self.set.require(dialect)?;
        let state = backend.read_state(self.set.name()).await?;
        if !needs_repair(&classify(&self.set, dialect, &state)) {
            return Ok(Repaired {
                stamp_restored: None,
                lineage_table_restored: false,
                lineage_recorded: false,
                now: self.checked(classify(&self.set, dialect, &state))?,
            });
        }
        if let Some(signal) = &self.hooks.before_lock {
            signal();
        }
        let mut tx = backend.lock(self.lock_timeout).await?;
        let result = self
            .repair_locked(dialect, state.lineage_table_missing, tx.as_mut())
            .await;
        match result {
            Ok(repaired) if repaired.changed() => {
                tx.commit().await?;
                self.committed();
                Ok(repaired)
            }
            other => {
                // Nothing to keep (or an error that matters more than a failed rollback).
                let _ = tx.rollback().await;
                other
            }
        }
    }

    async fn repair_locked(
        &self,
        dialect: Dialect,
        lineage_table_was_missing: bool,
        tx: &mut dyn LockedMigration,
    ) -> Result<Repaired, MigrateError> {
        let name = self.set.name();
        // Second look: another process may have repaired or migrated meanwhile. Taking the
        // lock created any missing bookkeeping table, so a lineage table the first look missed
        // and this one finds empty is the one this transaction restores.
        let mut state = tx.read_state(name).await?;
        let lineage_table_restored = lineage_table_was_missing && state.lineage.is_none();
        let mut stamp_restored = None;
        if state.stamp.is_none() {
            if let Some(last) = state.lineage.as_ref().and_then(|l| l.last()) {
                let restored = StoredState {
                    stamp: Some(last.revision.clone()),
                    ..state.clone()
                };
                self.checked(classify(&self.set, dialect, &restored))?;
                tx.write_state(name, &last.revision, None).await?;
                stamp_restored = Some(last.revision.clone());
                state = restored;
            }
        }
        let mut now = self.checked(classify(&self.set, dialect, &state))?;
        let mut lineage_recorded = false;
        if now
            == (Classification::AtHead {
                repair_lineage: true,
            })
            && !self.hooks.skip_lineage
        {
            let ours = self.set.lineage(dialect);
            tx.write_state(name, &self.set.head().id, Some(&ours))
                .await?;
            lineage_recorded = true;
            now = Classification::AtHead {
                repair_lineage: false,
            };
        }
        if self.hooks.fail_after_lineage_write {
            return Err(MigrateError::Store(cairn_core::Error::backend(
                "test",
                "injected failure after the repair's writes",
            )));
        }
        Ok(Repaired {
            stamp_restored,
            lineage_table_restored,
            lineage_recorded,
            now,
        })
    }

    /// Runs the [`RunnerHooks::after_commit`] hook, if any: the transaction just committed.
    fn committed(&self) {
        if let Some(hook) = &self.hooks.after_commit {
            hook();
        }
    }

    /// `class`, or the refusal it holds as an error.
    fn checked(&self, class: Classification) -> Result<Classification, MigrateError> {
        match class {
            Classification::Refused(refusal) => Err(MigrateError::Refused {
                set: self.set.name().into(),
                refusal,
            }),
            other => Ok(other),
        }
    }

    /// Opens a store: at head and ahead take no lock and write nothing; an upgrade or a lineage
    /// repair takes the lock, looks again, and applies everything with the lineage in one
    /// transaction.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] (nothing changed), [`MigrateError::UnsupportedDialect`] for a
    /// store of an engine the set is not for ([`MigrationSet::only_on`]; nothing read or
    /// changed), [`MigrateError::LockTimeout`], [`MigrateError::RevisionFailed`] (rolled back),
    /// store errors.
    pub async fn open(&self, backend: &dyn MigrationBackend) -> Result<Opened, MigrateError> {
        Ok(self.open_with_report(backend).await?.opened)
    }

    /// [`Runner::open`], reporting the contract revisions applied as well.
    ///
    /// A pending contract revision ([`MigrationSet::with_contract`]) is applied only when no
    /// live build in the store's fleet registry, other than this runner's own instance
    /// ([`Runner::with_instance`]), lacks it ([`fleet::contract_blockers`], read under the
    /// lock); otherwise the open is refused before anything runs, unless forced
    /// ([`Runner::force_contract`]). A store found *ahead* with a contract revision in its
    /// lineage that this build does not know is refused: that revision removed what this build
    /// uses.
    ///
    /// # Errors
    /// As [`Runner::open`], plus [`MigrateError::ContractRefused`] and
    /// [`MigrateError::ContractAhead`] (nothing changed).
    pub async fn open_with_report(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<OpenReport, MigrateError> {
        let plain = |opened| OpenReport {
            opened,
            contracts: Vec::new(),
        };
        self.set.require(backend.dialect())?;
        let state = backend.read_state(self.set.name()).await?;
        match classify(&self.set, backend.dialect(), &state) {
            Classification::AtHead {
                repair_lineage: false,
            } => return Ok(plain(Opened::AtHead)),
            Classification::Ahead { stamp } => {
                self.check_no_unknown_contract(backend, &state).await?;
                return Ok(plain(Opened::Ahead { stamp }));
            }
            Classification::Refused(refusal) => {
                return Err(MigrateError::Refused {
                    set: self.set.name().into(),
                    refusal,
                })
            }
            Classification::AtHead {
                repair_lineage: true,
            }
            | Classification::Upgrade { .. } => {}
        }
        if let Some(signal) = &self.hooks.before_lock {
            signal();
        }
        let mut tx = backend.lock(self.lock_timeout).await?;
        let result = self.migrate_locked(backend.dialect(), tx.as_mut()).await;
        match result {
            Ok(report) => {
                tx.commit().await?;
                self.committed();
                // The second look found the store ahead (another build migrated meanwhile):
                // the same refusal as on the first look.
                if matches!(report.opened, Opened::Ahead { .. }) {
                    self.check_contracts_known(backend).await?;
                }
                Ok(report)
            }
            Err(e) => {
                // The error that stopped the upgrade matters more than a failed rollback; the
                // transaction is discarded either way.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// Refuses, without locking or writing, a store whose lineage holds a contract revision of
    /// this set that this build does not know. [`Runner::open`] checks it on a store it finds
    /// ahead; a build checks it again once registered in the fleet registry, which closes the
    /// window between its open and its registration (a registration waits for a migration
    /// transaction that read the registry, see [`fleet::FleetSql::lock_for_gate`]).
    ///
    /// # Errors
    /// [`MigrateError::ContractAhead`], store errors.
    pub async fn check_contracts_known(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<(), MigrateError> {
        let state = backend.read_state(self.set.name()).await?;
        self.check_no_unknown_contract(backend, &state).await
    }

    /// Refuses a store *ahead* of this build whose lineage holds a contract revision this build
    /// does not know.
    async fn check_no_unknown_contract(
        &self,
        backend: &dyn MigrationBackend,
        state: &StoredState,
    ) -> Result<(), MigrateError> {
        let Some(lineage) = &state.lineage else {
            return Ok(());
        };
        for revision in backend.read_contracts(self.set.name()).await? {
            if self.set.position(&revision).is_none()
                && lineage.iter().any(|e| e.revision == revision)
            {
                return Err(MigrateError::ContractAhead {
                    set: self.set.name().into(),
                    revision,
                });
            }
        }
        Ok(())
    }

    /// The gate on the contract revisions among `pending`: for each, the live builds that lack
    /// it, read under the lock. Refuses when any does and the runner does not force.
    async fn gate_contracts(
        &self,
        tx: &mut dyn LockedMigration,
        pending: &[String],
    ) -> Result<Vec<AppliedContract>, MigrateError> {
        let contracts: Vec<&String> = pending
            .iter()
            .filter(|id| self.set.is_contract(id))
            .collect();
        if contracts.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.fleet.clock.now();
        let live = fleet::live(tx.read_fleet().await?, now, self.fleet.expiry);
        let mut out = Vec::with_capacity(contracts.len());
        for revision in contracts {
            let blockers = fleet::contract_blockers(
                &self.set,
                revision,
                &live,
                self.fleet.instance.as_deref(),
            );
            if !blockers.is_empty() && !self.fleet.force {
                return Err(MigrateError::ContractRefused {
                    set: self.set.name().into(),
                    revision: revision.clone(),
                    blockers,
                });
            }
            out.push(AppliedContract {
                revision: revision.clone(),
                forced: !blockers.is_empty(),
                blockers,
            });
        }
        Ok(out)
    }

    async fn migrate_locked(
        &self,
        dialect: Dialect,
        tx: &mut dyn LockedMigration,
    ) -> Result<OpenReport, MigrateError> {
        let name = self.set.name();
        // Second look: another build may have migrated while we waited for the lock.
        let state = tx.read_state(name).await?;
        let ours = self.set.lineage(dialect);
        let lineage = (!self.hooks.skip_lineage).then_some(ours.as_slice());
        let mut contracts = Vec::new();
        let opened = match classify(&self.set, dialect, &state) {
            Classification::AtHead {
                repair_lineage: false,
            } => {
                return Ok(OpenReport {
                    opened: Opened::AtHead,
                    contracts,
                })
            }
            Classification::Ahead { stamp } => {
                return Ok(OpenReport {
                    opened: Opened::Ahead { stamp },
                    contracts,
                })
            }
            Classification::Refused(refusal) => {
                return Err(MigrateError::Refused {
                    set: name.into(),
                    refusal,
                })
            }
            Classification::AtHead {
                repair_lineage: true,
            } => {
                if lineage.is_none() {
                    return Ok(OpenReport {
                        opened: Opened::AtHead,
                        contracts,
                    });
                }
                tx.write_state(name, &self.set.head().id, lineage).await?;
                Opened::LineageRepaired
            }
            Classification::Upgrade { from, pending } => {
                let revisions: Vec<_> = pending
                    .iter()
                    .map(|id| &self.set.revisions()[self.set.position(id).unwrap_or_default()])
                    .collect();
                // Refused before anything runs: a statement that would end the upgrade
                // transaction (see `LockedMigration::execute` for the check after each one).
                // Down SQL is checked the same way: it runs inside `down`'s transaction.
                for rev in &revisions {
                    let down = self.set.down(&rev.id, dialect).unwrap_or_default();
                    for (n, sql) in rev.up(dialect).iter().chain(down).enumerate() {
                        if let Some(control) = transaction_control(sql) {
                            return Err(MigrateError::RevisionFailed {
                                revision: rev.id.clone(),
                                source: ends_transaction(n, control),
                            });
                        }
                    }
                }
                // The fleet gate, before anything runs: a refusal changes nothing.
                contracts = self.gate_contracts(tx, &pending).await?;
                let at = self.fleet.clock.now();
                for (rev, id) in revisions.iter().zip(&pending) {
                    for sql in rev.up(dialect) {
                        tx.execute(sql)
                            .await
                            .map_err(|source| MigrateError::RevisionFailed {
                                revision: id.clone(),
                                source,
                            })?;
                    }
                    // Stored beside the lineage in the same transaction; a revision applied
                    // without down SQL clears any left by an earlier application.
                    let down = self.set.down(id, dialect).unwrap_or_default();
                    tx.store_down(name, id, down).await?;
                    if let Some(c) = contracts.iter().find(|c| &c.revision == id) {
                        tx.record_contract(name, id, at, c.forced, &c.blockers)
                            .await?;
                    }
                }
                tx.write_state(name, &self.set.head().id, lineage).await?;
                Opened::Upgraded {
                    from,
                    applied: pending,
                }
            }
        };
        if self.hooks.fail_after_lineage_write {
            return Err(MigrateError::RevisionFailed {
                revision: self.set.head().id.clone(),
                source: cairn_core::Error::backend(
                    "test",
                    "injected failure after the lineage write",
                ),
            });
        }
        Ok(OpenReport { opened, contracts })
    }
}

impl Runner {
    /// Rolls the store back to revision `to` (`cairn migrate down --to REV`): runs the stored
    /// down SQL of every revision after `to`, newest first, then rewrites the stamp to `to` and
    /// the lineage to the stored lineage up to `to`, all in one transaction under the migration
    /// lock, after a second look. Any build may run it — one that never had the revisions it
    /// undoes included: the SQL comes from the store, written there when each revision was
    /// applied. A build whose head is `to` classifies the store at head afterwards.
    ///
    /// A store already at `to` is neither locked nor written.
    ///
    /// # Errors
    /// [`MigrateError::NoDownSql`] naming the newest revision on the way down that has none,
    /// [`MigrateError::DownRefused`] for a `to` that is not before the stamp in the store's
    /// history (or a store without stamp or lineage), [`MigrateError::DownFailed`] when a
    /// down statement fails, [`MigrateError::LockTimeout`], store errors. Nothing is changed on
    /// any error.
    pub async fn down(
        &self,
        backend: &dyn MigrationBackend,
        to: &str,
    ) -> Result<Downgraded, MigrateError> {
        let name = self.set.name();
        let state = backend.read_state(name).await?;
        let (from, reverted, _) = down_plan(name, &state, to)?;
        if reverted.is_empty() {
            return Ok(Downgraded {
                from,
                to: to.into(),
                reverted,
            });
        }
        if let Some(signal) = &self.hooks.before_lock {
            signal();
        }
        let mut tx = backend.lock(self.lock_timeout).await?;
        let result = self.down_locked(tx.as_mut(), to).await;
        match result {
            Ok(done) if !done.reverted.is_empty() => {
                tx.commit().await?;
                self.committed();
                Ok(done)
            }
            other => {
                // Nothing to keep, or an error that matters more than a failed rollback.
                let _ = tx.rollback().await;
                other
            }
        }
    }

    async fn down_locked(
        &self,
        tx: &mut dyn LockedMigration,
        to: &str,
    ) -> Result<Downgraded, MigrateError> {
        let name = self.set.name();
        // Second look: another process may have moved the store while we waited.
        let state = tx.read_state(name).await?;
        let (from, reverted, lineage) = down_plan(name, &state, to)?;
        // Every revision's down SQL is read and checked before any of it runs.
        let mut plan = Vec::with_capacity(reverted.len());
        for id in &reverted {
            let Some(statements) = tx.read_down(name, id).await? else {
                return Err(MigrateError::NoDownSql {
                    set: name.into(),
                    revision: id.clone(),
                });
            };
            for (n, sql) in statements.iter().enumerate() {
                if let Some(control) = transaction_control(sql) {
                    return Err(MigrateError::DownFailed {
                        revision: id.clone(),
                        source: ends_transaction(n, control),
                    });
                }
            }
            plan.push((id, statements));
        }
        for (id, statements) in plan {
            for sql in &statements {
                tx.execute(sql)
                    .await
                    .map_err(|source| MigrateError::DownFailed {
                        revision: id.clone(),
                        source,
                    })?;
            }
            tx.store_down(name, id, &[]).await?;
        }
        tx.write_state(name, to, Some(&lineage)).await?;
        if self.hooks.fail_after_lineage_write {
            return Err(MigrateError::DownFailed {
                revision: from,
                source: cairn_core::Error::backend(
                    "test",
                    "injected failure after the lineage write",
                ),
            });
        }
        Ok(Downgraded {
            from,
            to: to.into(),
            reverted,
        })
    }
}

/// Whether `class` is a state [`Runner::repair`] has work in.
fn needs_repair(class: &Classification) -> bool {
    matches!(
        class,
        Classification::AtHead {
            repair_lineage: true
        } | Classification::Refused(Refusal::Inconsistent { .. })
    )
}

/// The error for statement `n` (0-based) of a revision, a transaction-control statement.
fn ends_transaction(n: usize, control: &str) -> cairn_core::Error {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::Checksum;

    fn entry(id: &str) -> LineageEntry {
        LineageEntry {
            revision: id.into(),
            checksum: Checksum([0; 32]),
        }
    }

    fn stored(stamp: Option<&str>, lineage: Option<&[&str]>) -> StoredState {
        StoredState {
            stamp: stamp.map(str::to_owned),
            lineage: lineage.map(|l| l.iter().map(|id| entry(id)).collect()),
            lineage_table_missing: false,
        }
    }

    #[test]
    fn down_undoes_the_revisions_after_the_target_newest_first() {
        let state = stored(Some("c"), Some(&["a", "b", "c", "d"]));
        let (from, reverted, lineage) = down_plan("app", &state, "a").unwrap();
        assert_eq!(from, "c");
        assert_eq!(reverted, ["c", "b"]);
        assert_eq!(lineage, vec![entry("a")]);
        let (_, none, kept) = down_plan("app", &state, "c").unwrap();
        assert!(none.is_empty());
        assert_eq!(kept, vec![entry("a"), entry("b"), entry("c")]);
    }

    #[test]
    fn down_refuses_targets_outside_the_stores_history() {
        let state = stored(Some("b"), Some(&["a", "b", "c"]));
        for (state, to) in [
            (state.clone(), "c"),
            (state.clone(), "zz"),
            (stored(None, Some(&["a"])), "a"),
            (stored(Some("b"), None), "a"),
            (stored(Some("x"), Some(&["a", "b"])), "a"),
        ] {
            let err = down_plan("app", &state, to).unwrap_err();
            assert!(matches!(err, MigrateError::DownRefused { .. }), "{err}");
        }
    }
}
