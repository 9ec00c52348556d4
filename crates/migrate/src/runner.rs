//! The open protocol: a look without the lock, a second look under it, atomic upgrade with
//! lineage, and lineage repair.

use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;

use crate::classify::{classify, Classification, StoredState};
use crate::error::MigrateError;
use crate::revision::{LineageEntry, MigrationSet};

/// A store's side of the protocol. Each backend implements it with its own SQL.
#[async_trait]
pub trait MigrationBackend: Send + Sync {
    /// The SQL dialect revisions are rendered in.
    fn dialect(&self) -> Dialect;

    /// Reads the set's stamp and lineage without taking the write lock and without writing
    /// anything (missing bookkeeping tables read as an empty state).
    async fn read_state(&self, set: &str) -> Result<StoredState, MigrateError>;

    /// Takes the migration lock (waiting at most `timeout`) and opens the upgrade transaction,
    /// creating the bookkeeping tables inside it when missing.
    async fn lock(&self, timeout: Duration) -> Result<Box<dyn LockedMigration>, MigrateError>;
}

/// An open upgrade transaction holding the migration lock. Dropping it without
/// [`LockedMigration::commit`] rolls everything back.
#[async_trait]
pub trait LockedMigration: Send {
    /// Reads the state again, under the lock.
    async fn read_state(&mut self, set: &str) -> Result<StoredState, MigrateError>;
    /// Runs one statement of a revision.
    async fn execute(&mut self, sql: &str) -> Result<(), cairn_core::Error>;
    /// Records the stamp and, when given, replaces the lineage.
    async fn write_state(
        &mut self,
        set: &str,
        stamp: &str,
        lineage: Option<&[LineageEntry]>,
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
    /// Fail after writing the lineage, before commit (atomicity tests).
    pub fail_after_lineage_write: bool,
}

impl std::fmt::Debug for RunnerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerHooks")
            .field("before_lock", &self.before_lock.is_some())
            .field("skip_lineage", &self.skip_lineage)
            .field("fail_after_lineage_write", &self.fail_after_lineage_write)
            .finish()
    }
}

/// Opens stores for one build's migration set.
#[derive(Clone, Debug)]
pub struct Runner {
    set: MigrationSet,
    lock_timeout: Duration,
    hooks: RunnerHooks,
}

impl Runner {
    /// A runner for `set` with a 30 s lock timeout.
    pub fn new(set: MigrationSet) -> Self {
        Self {
            set,
            lock_timeout: Duration::from_secs(30),
            hooks: RunnerHooks::default(),
        }
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
    /// Store errors only.
    pub async fn status(
        &self,
        backend: &dyn MigrationBackend,
    ) -> Result<Classification, MigrateError> {
        Ok(classify(
            &self.set,
            &backend.read_state(self.set.name()).await?,
        ))
    }

    /// Opens a store: at head and ahead take no lock and write nothing; an upgrade or a lineage
    /// repair takes the lock, looks again, and applies everything with the lineage in one
    /// transaction.
    ///
    /// # Errors
    /// [`MigrateError::Refused`] (nothing changed), [`MigrateError::LockTimeout`],
    /// [`MigrateError::RevisionFailed`] (rolled back), store errors.
    pub async fn open(&self, backend: &dyn MigrationBackend) -> Result<Opened, MigrateError> {
        match self.status(backend).await? {
            Classification::AtHead {
                repair_lineage: false,
            } => return Ok(Opened::AtHead),
            Classification::Ahead { stamp } => return Ok(Opened::Ahead { stamp }),
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
            Ok(opened) => {
                tx.commit().await?;
                Ok(opened)
            }
            Err(e) => {
                // The error that stopped the upgrade matters more than a failed rollback; the
                // transaction is discarded either way.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    async fn migrate_locked(
        &self,
        dialect: Dialect,
        tx: &mut dyn LockedMigration,
    ) -> Result<Opened, MigrateError> {
        let name = self.set.name();
        // Second look: another build may have migrated while we waited for the lock.
        let state = tx.read_state(name).await?;
        let ours = self.set.lineage();
        let lineage = (!self.hooks.skip_lineage).then_some(ours.as_slice());
        let opened = match classify(&self.set, &state) {
            Classification::AtHead {
                repair_lineage: false,
            } => return Ok(Opened::AtHead),
            Classification::Ahead { stamp } => return Ok(Opened::Ahead { stamp }),
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
                    return Ok(Opened::AtHead);
                }
                tx.write_state(name, &self.set.head().id, lineage).await?;
                Opened::LineageRepaired
            }
            Classification::Upgrade { from, pending } => {
                for id in &pending {
                    let rev = &self.set.revisions()[self.set.position(id).unwrap_or_default()];
                    for sql in rev.up(dialect) {
                        tx.execute(sql)
                            .await
                            .map_err(|source| MigrateError::RevisionFailed {
                                revision: id.clone(),
                                source,
                            })?;
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
        Ok(opened)
    }
}
