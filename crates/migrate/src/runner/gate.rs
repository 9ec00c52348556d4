//! The contract gate: which live builds in the store's fleet registry lack a pending contract
//! revision, read under the migration lock, and whether the runner may apply it.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::Clock;
use cairn_core::Blocker;

use super::store::LockedMigration;
use crate::error::MigrateError;
use crate::fleet;
use crate::revision::MigrationSet;

/// A contract revision an open applied.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct AppliedContract {
    /// The revision.
    pub revision: String,
    /// Whether it was forced ([`Runner::force_contract`]) past live builds that lack it.
    ///
    /// [`Runner::force_contract`]: crate::Runner::force_contract
    pub forced: bool,
    /// The live builds it was forced past (empty when not forced).
    pub blockers: Vec<Blocker>,
}

/// A contract revision an open left pending, and the live builds that lack it
/// ([`crate::Runner::open_deferring`]).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct DeferredContract {
    /// The contract revision (the set's first one that live builds lack).
    pub revision: String,
    /// The live builds that lack it.
    pub blockers: Vec<Blocker>,
}

/// How the runner gates contract revisions on the fleet registry.
#[derive(Clone, Debug)]
pub(super) struct FleetGate {
    /// Where the gate reads `now` from, to tell live registry entries from expired ones.
    pub(super) clock: Arc<dyn Clock>,
    /// How long an entry stays live without a heartbeat.
    pub(super) expiry: Duration,
    /// The caller's own registry instance, which never blocks its own contract revisions.
    pub(super) instance: Option<String>,
    /// Whether to apply a contract revision past the live builds that lack it.
    pub(super) force: bool,
}

impl FleetGate {
    /// The gate on the contract revisions among `pending`: for each, the live builds that lack
    /// it, read under the lock. Refuses when any does and the runner does not force.
    pub(super) async fn gate_contracts(
        &self,
        set: &MigrationSet,
        tx: &mut dyn LockedMigration,
        pending: &[String],
    ) -> Result<Vec<AppliedContract>, MigrateError> {
        let contracts: Vec<&String> = pending.iter().filter(|id| set.is_contract(id)).collect();
        if contracts.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        let live = fleet::live(tx.read_fleet().await?, now, self.expiry);
        let mut out = Vec::with_capacity(contracts.len());
        for revision in contracts {
            let blockers = fleet::contract_blockers(set, revision, &live, self.instance.as_deref());
            if !blockers.is_empty() && !self.force {
                return Err(MigrateError::ContractRefused {
                    set: set.name().into(),
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
}
