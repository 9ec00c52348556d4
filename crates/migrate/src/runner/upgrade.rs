//! [`Runner::open`]: a look without the lock, and only when an upgrade or a lineage repair is
//! due, the lock, a second look, and the upgrade with its lineage in one transaction; and the
//! refusal of a store ahead of this build with a contract revision this build does not know.

use cairn_core::schema::Dialect;

use super::config::{ends_transaction, Runner};
use super::gate::{AppliedContract, DeferredContract};
use super::store::{LockedMigration, MigrationBackend};
use crate::classify::{classify, Classification, StoredState};
use crate::error::MigrateError;
use crate::transaction::transaction_control;

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
    /// How many times the upgrade ran under the migration lock: 0 when it needed no lock, more
    /// than 1 when a revision's statement gave up waiting for a table lock
    /// ([`Runner::with_revision_lock_timeout`]) and the upgrade was rolled back and run again.
    pub tries: u32,
    /// The time the tries that gave up spent, waiting and backing off before the next.
    pub lock_waits: std::time::Duration,
}

impl Runner {
    /// Classifies the store without locking or writing.
    ///
    /// # Errors
    /// [`MigrateError::UnsupportedDialect`] for a store of an engine the set is not for
    /// ([`MigrationSet::only_on`](crate::MigrationSet::only_on)); store errors.
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

    /// Opens a store: at head and ahead take no lock and write nothing; an upgrade or a lineage
    /// repair takes the lock, looks again, and applies everything with the lineage in one
    /// transaction.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] (nothing changed), [`MigrateError::UnsupportedDialect`] for a
    /// store of an engine the set is not for ([`MigrationSet::only_on`]; nothing read or
    /// changed), [`MigrateError::LockTimeout`], [`MigrateError::RevisionFailed`] (rolled back),
    /// [`MigrateError::RevisionFailedPartly`] (a no-transaction revision committed part),
    /// store errors.
    ///
    /// [`MigrationSet::only_on`]: crate::MigrationSet::only_on
    pub async fn open(&self, backend: &dyn MigrationBackend) -> Result<Opened, MigrateError> {
        Ok(self.open_with_report(backend).await?.opened)
    }

    /// [`Runner::open_with_report`], leaving a contract revision that live builds lack pending
    /// instead of refusing the open: the revisions before it are applied (the gate runs again
    /// for any earlier contract revision, and refuses it as usual), the store stays stamped at
    /// the one before, and the deferred revision comes back with the builds that block it. A
    /// later open, once none of them is live, applies it. This is how a release that ships a
    /// contract revision rolls out while the previous release still runs: cairn's own set
    /// opens this way in both backends, and an application's sets do when
    /// [`crate::OpenOptions::defer_blocked_contracts`] (the default).
    ///
    /// # Errors
    /// As [`Runner::open_with_report`], except [`MigrateError::ContractRefused`] for the first
    /// contract revision blocked.
    pub async fn open_deferring(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<(OpenReport, Option<DeferredContract>), MigrateError> {
        match self.open_with_report(backend).await {
            Err(MigrateError::ContractRefused {
                revision, blockers, ..
            }) => {
                // A contract revision is never the base, so it has a parent: apply up to it.
                let at = self.set.position(&revision).unwrap_or_default();
                let parent = &self.set.revisions()[at.saturating_sub(1)].id;
                let mut before = self.clone();
                before.set = self.set.up_to(parent)?;
                let report = before.open_with_report(backend).await?;
                Ok((report, Some(DeferredContract { revision, blockers })))
            }
            other => Ok((other?, None)),
        }
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
    ///
    /// [`MigrationSet::with_contract`]: crate::MigrationSet::with_contract
    /// [`fleet::contract_blockers`]: crate::fleet::contract_blockers
    pub async fn open_with_report(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<OpenReport, MigrateError> {
        let plain = |opened| OpenReport {
            opened,
            contracts: Vec::new(),
            tries: 0,
            lock_waits: std::time::Duration::ZERO,
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
            Classification::Upgrade {
                from: Some(stamp),
                pending,
            } if !self.upgrade => return Err(self.not_upgrading(backend, stamp, &pending).await),
            Classification::AtHead {
                repair_lineage: true,
            }
            | Classification::Upgrade { .. } => {}
        }
        let mut tries = 0;
        let mut lock_waits = std::time::Duration::ZERO;
        loop {
            tries += 1;
            // Before every try: a test may act between two tries.
            if let Some(signal) = &self.hooks.before_lock {
                signal();
            }
            let started = std::time::Instant::now();
            let mut tx = backend.lock(self.lock_timeout).await?;
            let result = match tx
                .set_revision_lock_timeout(self.revision_lock_timeout)
                .await
            {
                Ok(()) => self.migrate_locked(backend.dialect(), tx.as_mut()).await,
                Err(e) => Err(e.into()),
            };
            match result {
                Ok(mut report) => {
                    tx.commit().await?;
                    self.committed();
                    // The second look found the store ahead (another build migrated
                    // meanwhile): the same refusal as on the first look.
                    if matches!(report.opened, Opened::Ahead { .. }) {
                        self.check_contracts_known(backend).await?;
                    }
                    report.tries = tries;
                    report.lock_waits = lock_waits;
                    return Ok(report);
                }
                Err(e) => {
                    let again = tries < self.revision_tries
                        && revision_error(&e).is_some_and(|s| tx.gave_up_waiting_for_a_lock(s));
                    // The error that stopped the upgrade matters more than a failed rollback;
                    // the transaction is discarded either way (and the lock released, so that
                    // what it queued behind can finish).
                    let _ = tx.rollback().await;
                    if !again {
                        return Err(e);
                    }
                    let pause = self.retry_pause(tries);
                    tokio::time::sleep(pause).await;
                    lock_waits += started.elapsed();
                }
            }
        }
    }

    /// What a runner that may not upgrade ([`Runner::upgrade`]) answers for a store stamped at
    /// `stamp` with `pending` revisions: when the next one is a contract revision that live
    /// builds lack, the refusal an upgrading open meets first ([`MigrateError::ContractRefused`],
    /// which [`Runner::open_deferring`] turns into serving the store at its stamp, as it does
    /// for every build during a rolling deploy); otherwise [`MigrateError::Behind`].
    async fn not_upgrading(
        &self,
        backend: &dyn MigrationBackend,
        stamp: String,
        pending: &[String],
    ) -> MigrateError {
        let next = pending.first().filter(|id| self.set.is_contract(id));
        if let (Some(revision), false) = (next, self.fleet.force) {
            let entries = match backend.read_fleet().await {
                Ok(entries) => entries,
                Err(e) => return e,
            };
            let live = crate::fleet::live(entries, self.fleet.clock.now(), self.fleet.expiry);
            let blockers = crate::fleet::contract_blockers(
                &self.set,
                revision,
                &live,
                self.fleet.instance.as_deref(),
            );
            if !blockers.is_empty() {
                return MigrateError::ContractRefused {
                    set: self.set.name().into(),
                    revision: revision.clone(),
                    blockers,
                };
            }
        }
        self.behind(stamp)
    }

    /// The refusal of a store stamped at `stamp`, behind this build, by a runner that may not
    /// upgrade ([`Runner::upgrade`]).
    fn behind(&self, stamp: String) -> MigrateError {
        MigrateError::Behind {
            set: self.set.name().into(),
            stamp,
            head: self.set.head().id.clone(),
        }
    }

    /// The pause before try `tries + 1` of an upgrade whose revision gave up waiting for a
    /// lock: 250 ms doubled per try, at most 8 s.
    fn retry_pause(&self, tries: u32) -> std::time::Duration {
        std::time::Duration::from_millis(250)
            .saturating_mul(1 << tries.saturating_sub(1).min(5))
            .min(std::time::Duration::from_secs(8))
    }

    /// Refuses, without locking or writing, a store whose lineage holds a contract revision of
    /// this set that this build does not know. [`Runner::open`] checks it on a store it finds
    /// ahead; a build checks it again once registered in the fleet registry, which closes the
    /// window between its open and its registration (a registration waits for a migration
    /// transaction that read the registry, see [`fleet::FleetSql::lock_for_gate`]).
    ///
    /// # Errors
    /// [`MigrateError::ContractAhead`], store errors.
    ///
    /// [`fleet::FleetSql::lock_for_gate`]: crate::fleet::FleetSql::lock_for_gate
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

    /// The lineage a store stamped at `revision` records (the set up to it), unless this
    /// runner records none.
    fn lineage_to(
        &self,
        revision: &str,
        dialect: Dialect,
    ) -> Result<Option<Vec<crate::LineageEntry>>, MigrateError> {
        if self.hooks.skip_lineage {
            return Ok(None);
        }
        Ok(Some(self.set.up_to(revision)?.lineage(dialect)))
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
                    tries: 1,
                    lock_waits: std::time::Duration::ZERO,
                })
            }
            Classification::Ahead { stamp } => {
                return Ok(OpenReport {
                    opened: Opened::Ahead { stamp },
                    contracts,
                    tries: 1,
                    lock_waits: std::time::Duration::ZERO,
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
                        tries: 1,
                        lock_waits: std::time::Duration::ZERO,
                    });
                }
                tx.write_state(name, &self.set.head().id, lineage).await?;
                Opened::LineageRepaired
            }
            // The first look found no store; another process created one at an older head
            // while this one waited for the lock.
            Classification::Upgrade {
                from: Some(stamp), ..
            } if !self.upgrade => return Err(self.behind(stamp)),
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
                // A backend that cannot run a no-transaction revision here refuses before
                // anything runs.
                if let Some(id) = pending
                    .iter()
                    .find(|id| self.set.is_no_transaction(id, dialect))
                {
                    if let Some(source) = tx.outside_refusal() {
                        return Err(MigrateError::RevisionFailed {
                            revision: id.clone(),
                            source,
                        });
                    }
                }
                // The fleet gate, before anything runs: a refusal changes nothing.
                contracts = self.fleet.gate_contracts(&self.set, tx, &pending).await?;
                let at = self.fleet.clock.now();
                // The stamp a commit before a no-transaction revision made durable, if any.
                let mut committed: Option<Option<String>> = None;
                let failed =
                    |committed: &Option<Option<String>>, id: &String, source| match committed {
                        Some(stamp) => MigrateError::RevisionFailedPartly {
                            revision: id.clone(),
                            stamp: stamp.clone(),
                            source,
                        },
                        None => MigrateError::RevisionFailed {
                            revision: id.clone(),
                            source,
                        },
                    };
                let outside = tx.runs_outside_transaction();
                for (i, (rev, id)) in revisions.iter().zip(&pending).enumerate() {
                    let alone = outside && self.set.is_no_transaction(id, dialect);
                    if alone {
                        // What ran before it commits, stamped at its parent; then it runs
                        // statement by statement, outside any transaction.
                        let stamp = if i == 0 {
                            from.clone()
                        } else {
                            let parent = rev.parent.clone().unwrap_or_default();
                            let upto = self.lineage_to(&parent, dialect)?;
                            tx.write_state(name, &parent, upto.as_deref()).await?;
                            Some(parent)
                        };
                        committed = Some(stamp);
                        tx.execute_outside(rev.up(dialect))
                            .await
                            .map_err(|source| failed(&committed, id, source))?;
                    } else {
                        for sql in rev.up(dialect) {
                            tx.execute(sql)
                                .await
                                .map_err(|source| failed(&committed, id, source))?;
                        }
                    }
                    // Stored beside the lineage in the same transaction; a revision applied
                    // without down SQL clears any left by an earlier application.
                    let down = self.set.down(id, dialect).unwrap_or_default();
                    tx.store_down(name, id, down).await?;
                    if let Some(c) = contracts.iter().find(|c| &c.revision == id) {
                        tx.record_contract(name, id, at, c.forced, &c.blockers)
                            .await?;
                    }
                    if alone {
                        // Its stamp commits now: a later revision that fails must not leave the
                        // store stamped before an index that exists.
                        let upto = self.lineage_to(id, dialect)?;
                        tx.write_state(name, id, upto.as_deref()).await?;
                        tx.execute_outside(&[])
                            .await
                            .map_err(|source| failed(&committed, id, source))?;
                        committed = Some(Some(id.clone()));
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
        Ok(OpenReport {
            opened,
            contracts,
            tries: 1,
            lock_waits: std::time::Duration::ZERO,
        })
    }
}

/// The store error of a revision that failed, if `e` is one.
fn revision_error(e: &MigrateError) -> Option<&cairn_core::Error> {
    match e {
        MigrateError::RevisionFailed { source, .. }
        | MigrateError::RevisionFailedPartly { source, .. } => Some(source),
        _ => None,
    }
}
