//! Baseline: adopting a database whose schema already is what a set's revision makes
//! (`cairn migrate baseline --set NAME --source DIR --at REV`), without running its SQL.
//!
//! The set up to the revision is applied to a throwaway store of the same engine, which the
//! caller names: its SQL runs there, so on Postgres it must be on a scratch server that holds no
//! production data (a revision may name other schemas); a SQLite one is a temporary file
//! ([`MigrationBackend::scratch`] makes one beside any location). Its [`SchemaShape`] — the
//! tables the set made with their columns, constraints, indexes (valid or not) and triggers,
//! and its views, types, sequences and functions, read from the engine's catalog — is compared
//! with the store's own. Only when they agree is the store stamped at the revision with its
//! lineage (and the set's stored down SQL), under the migration lock, in one transaction;
//! otherwise the differences are listed and nothing is written. What the set does not make
//! (another set's tables, the application's own) is not compared.

use crate::classify::StoredState;
use crate::error::MigrateError;
use crate::revision::MigrationSet;
use crate::runner::{MigrationBackend, Runner};
pub use crate::shape::{SchemaShape, TableShape};

/// What [`Runner::baseline`] did.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Baselined {
    /// The revision the store is stamped at now.
    pub at: String,
    /// The tables compared.
    pub tables: Vec<String>,
}

impl Runner {
    /// Adopts the store at revision `at` of this runner's set without running any SQL of it on
    /// the store: builds the set up to `at` on `scratch` (a new, empty throwaway location of
    /// the same engine, on a server without production data; removed afterwards, whatever
    /// happens), compares what it made with the store's, and — when they agree and the store
    /// holds no stamp of the set — records the stamp, the lineage up to `at` and the set's down
    /// SQL under the migration lock, in one transaction.
    ///
    /// # Errors
    /// [`MigrateError::BaselineMismatch`] listing the differences,
    /// [`MigrateError::BaselineRefused`] for a store that already has a stamp of the set, an
    /// invalid-input store error for an unknown `at` or a set that makes nothing comparable up
    /// to it (nothing written in any of these); [`MigrateError::LockTimeout`]; store errors.
    pub async fn baseline(
        &self,
        backend: &dyn MigrationBackend,
        scratch: Box<dyn MigrationBackend>,
        at: &str,
    ) -> Result<Baselined, MigrateError> {
        let compared = self
            .compare_for_baseline(backend, scratch.as_ref(), at)
            .await;
        let discarded = scratch.discard().await;
        let (upto, tables) = compared?;
        discarded?;
        self.stamp_baseline(backend, &upto, at).await?;
        Ok(Baselined {
            at: at.into(),
            tables,
        })
    }

    /// Builds the set up to `at` on `scratch` and compares what it made with `backend`'s; the
    /// set up to `at` and the tables compared, when they agree.
    async fn compare_for_baseline(
        &self,
        backend: &dyn MigrationBackend,
        scratch: &dyn MigrationBackend,
        at: &str,
    ) -> Result<(MigrationSet, Vec<String>), MigrateError> {
        self.set.require(backend.dialect())?;
        let name = self.set.name();
        if self.set.position(at).is_none() {
            return Err(MigrateError::Store(cairn_core::Error::invalid(
                "baseline revision",
                format!(
                    "`{}` is not a revision of set {name}",
                    crate::text::escape_control(at)
                ),
            )));
        }
        let upto = self.set.up_to(at)?;
        let refuse_stamped = |state: &StoredState| match &state.stamp {
            Some(stamp) => Err(MigrateError::BaselineRefused {
                set: name.into(),
                stamp: stamp.clone(),
            }),
            None => Ok(()),
        };
        refuse_stamped(&backend.read_state(name).await?)?;
        Runner::new(upto.clone())
            .with_lock_timeout(self.lock_timeout)
            .open(scratch)
            .await?;
        let expected = scratch.shape().await?.without_bookkeeping();
        if expected.tables.is_empty() && expected.others.is_empty() {
            return Err(MigrateError::Store(cairn_core::Error::invalid(
                "baseline revision",
                format!(
                    "set {name} makes nothing a baseline can compare up to {at} (no table, \
                     view, type, sequence or function), so there is nothing to adopt; run `up`"
                ),
            )));
        }
        let differences = backend.shape().await?.differences(&expected);
        if !differences.is_empty() {
            return Err(MigrateError::BaselineMismatch {
                set: name.into(),
                revision: at.into(),
                differences,
            });
        }
        Ok((upto, expected.tables.into_keys().collect()))
    }

    /// Records the stamp at `at`, the lineage of `upto` and its down SQL, under the lock.
    async fn stamp_baseline(
        &self,
        backend: &dyn MigrationBackend,
        upto: &MigrationSet,
        at: &str,
    ) -> Result<(), MigrateError> {
        let name = self.set.name();
        let refuse_stamped = |state: &StoredState| match &state.stamp {
            Some(stamp) => Err(MigrateError::BaselineRefused {
                set: name.into(),
                stamp: stamp.clone(),
            }),
            None => Ok(()),
        };
        let dialect = backend.dialect();
        let mut tx = backend.lock(self.lock_timeout).await?;
        let written = async {
            refuse_stamped(&tx.read_state(name).await?)?;
            for rev in upto.revisions() {
                let down = self.set.down(&rev.id, dialect).unwrap_or_default();
                tx.store_down(name, &rev.id, down).await?;
            }
            tx.write_state(name, at, Some(&upto.lineage(dialect))).await
        }
        .await;
        match written {
            Ok(()) => tx.commit().await?,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        }
        Ok(())
    }
}
