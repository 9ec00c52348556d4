//! [`Runner::down`]: rolling a store back to an earlier revision with the down SQL the store
//! kept when each revision was applied, newest first, in one transaction.

use super::config::{ends_transaction, Runner};
use super::store::{LockedMigration, MigrationBackend};
use crate::checksum::LineageEntry;
use crate::classify::StoredState;
use crate::error::MigrateError;
use crate::transaction::transaction_control;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::Checksum;

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
