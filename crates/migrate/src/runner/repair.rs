//! [`Runner::repair`]: restoring bookkeeping edited by hand (a missing stamp row, a dropped
//! lineage table, a missing or another history's lineage at head), under the migration lock,
//! after a second look, in one transaction.

use cairn_core::schema::Dialect;

use super::config::Runner;
use super::store::{LockedMigration, MigrationBackend};
use crate::classify::{classify, Classification, StoredState};
use crate::error::MigrateError;
use crate::refusal::Refusal;

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

impl Runner {
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
