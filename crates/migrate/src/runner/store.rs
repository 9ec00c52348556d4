//! What the runner asks of a store: the [`MigrationBackend`] each backend implements with its
//! own SQL, and the [`LockedMigration`] transaction it hands out under the migration lock.

use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_core::Blocker;

use crate::checksum::LineageEntry;
use crate::classify::StoredState;
use crate::error::MigrateError;
use crate::fleet::FleetEntry;

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

    /// What identifies the database this backend reaches, whatever URL reached it (Postgres:
    /// the server's start time and the database's oid), for a baseline to refuse a scratch
    /// server that is the store's own database under another spelling. `None` (the default):
    /// the backend cannot tell.
    ///
    /// # Errors
    /// Store errors (e.g. the server cannot be reached).
    async fn database_identity(&self) -> Result<Option<String>, MigrateError> {
        Ok(None)
    }

    /// Why this backend would refuse a no-transaction revision here
    /// ([`LockedMigration::outside_refusal`]), for a look without the lock (`up --dry-run`).
    /// `None` (the default): it would not.
    fn outside_refusal(&self) -> Option<cairn_core::Error> {
        None
    }

    /// The shape of the store's tables ([`crate::shape::SchemaShape`]), read from the
    /// catalog without locking or writing; what [`crate::Runner::baseline`] compares. The
    /// default: the backend cannot read it.
    ///
    /// # Errors
    /// Store errors.
    async fn shape(&self) -> Result<crate::shape::SchemaShape, MigrateError> {
        Err(unsupported("read its schema's shape"))
    }

    /// A new, empty throwaway store of the same engine (and, for a server, the same server),
    /// for [`crate::Runner::baseline`] to build a set on; [`MigrationBackend::discard`] removes
    /// it. The default: the backend cannot make one.
    ///
    /// # Errors
    /// Store errors.
    async fn scratch(&self) -> Result<Box<dyn MigrationBackend>, MigrateError> {
        Err(unsupported("make a throwaway store"))
    }

    /// Removes this store, when it is a throwaway one [`MigrationBackend::scratch`] made;
    /// does nothing otherwise (the default).
    ///
    /// # Errors
    /// Store errors.
    async fn discard(&self) -> Result<(), MigrateError> {
        Ok(())
    }
}

fn unsupported(what: &str) -> MigrateError {
    MigrateError::Store(cairn_core::Error::backend(
        "migrate",
        format!("this backend cannot {what}, which a baseline needs"),
    ))
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
    /// Whether this backend runs a revision marked no-transaction outside the upgrade
    /// transaction, through [`LockedMigration::execute_outside`]. `false` (the default): it runs
    /// such a revision in the transaction as any other (SQLite).
    fn runs_outside_transaction(&self) -> bool {
        false
    }
    /// Makes every statement of this upgrade transaction (and of the ones
    /// [`LockedMigration::execute_outside`] opens after it) give up waiting for a table lock
    /// after `timeout`. The default does nothing: the backend's statements wait for no lock
    /// (SQLite's upgrade holds the database's write lock from its start).
    async fn set_revision_lock_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<(), cairn_core::Error> {
        let _ = timeout;
        Ok(())
    }
    /// Whether `error`, from [`LockedMigration::execute`], is a statement that gave up waiting
    /// for a lock (the runner then rolls back and tries again). Default: never.
    fn gave_up_waiting_for_a_lock(&self, error: &cairn_core::Error) -> bool {
        let _ = error;
        false
    }
    /// Why this backend cannot run a no-transaction revision outside the transaction here, if
    /// it cannot (a Postgres store behind a transaction-mode pooler, where the migration lock
    /// ends with each transaction). The runner asks before anything runs, and refuses the
    /// upgrade with it. `None` (the default): it can, or runs them inside.
    fn outside_refusal(&self) -> Option<cairn_core::Error> {
        None
    }
    /// Commits the upgrade transaction so far (the migration lock stays held), runs
    /// `statements` one at a time outside any transaction, then opens the next upgrade
    /// transaction. With no statements it only commits and opens the next one.
    ///
    /// # Errors
    /// The first failing statement's error: what ran before it stays committed, and the runner
    /// ends with [`LockedMigration::rollback`], which must release the lock whether or not a
    /// transaction is open. The default refuses: the backend runs nothing outside.
    async fn execute_outside(&mut self, statements: &[String]) -> Result<(), cairn_core::Error> {
        let _ = statements;
        Err(cairn_core::Error::backend(
            "migrate",
            "this backend runs no statement outside the upgrade transaction",
        ))
    }
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
