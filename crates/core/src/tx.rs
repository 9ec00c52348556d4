//! [`Transaction`]: cairn's writes inside one database transaction, committed together with
//! the application's own.

use std::any::Any;
use std::fmt::Debug;

use async_trait::async_trait;

use crate::spool::{
    CancelOutcome, CloseOutcome, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, EventAppended,
    FactName, FactOutcome, QueueName, RunEventId, RunId,
};
use crate::{Appended, Event, Result, SpaceId};

/// An open database transaction of a store, holding cairn's writes (and, through the engine's
/// own handle, the application's): all of them commit together or none does.
///
/// Each method does what the [`crate::Spool`] or [`crate::EpochStore`] method of the same name
/// does, with the same checks and results, except that nothing is durable, visible to other
/// connections or announced (no subscriber is woken) until [`Transaction::commit`] returns
/// `Ok`. A transaction dropped without `commit` is rolled back.
///
/// # Contract
/// - **All or nothing.** After `commit` returns `Ok`, every write made through the transaction
///   is durable; after `rollback`, an error of `commit`, a drop, or a process killed before
///   the commit, none is.
/// - **Wake-ups on commit only.** An enqueue's wake-up reaches subscribers after the commit; a
///   rolled-back enqueue wakes nobody.
/// - **One run per key.** The id an enqueue answers is the id the commit makes durable: a key
///   another open transaction holds makes the enqueue wait for it (and answer its run if it
///   commits), bounded by the engine's lock or busy timeout ([`crate::Error::Retryable`]).
/// - **A failed operation fails the transaction.** After any method returned an error, the
///   transaction can only be rolled back: `commit` rolls it back and returns
///   [`crate::Error::Conflict`]. (On Postgres the database itself aborts the transaction on a
///   failed statement.)
/// - Locks taken inside (a space's write lock for `append` and `lock_spaces`, the run row for
///   `cancel`, `append_event` and `close_run`, the writer on SQLite) are held until the
///   transaction ends: keep it short.
/// - **Lock order.** Two transactions that take the same locks in different orders can
///   deadlock (Postgres then aborts one with SQLSTATE 40P01, [`crate::Error::Retryable`]). A
///   transaction that writes to several spaces takes their locks up front with
///   [`Transaction::lock_spaces`] (one global order on every node); `enqueue_many` writes its
///   keys in one global order (dedup-key order within a queue); a caller that orders the rest
///   of its writes (queues by name, runs by id) cannot form a cycle with another that does.
#[async_trait]
pub trait Transaction: Send + Debug {
    /// The engine's name (`"sqlite"`, `"postgres"`, …), as [`crate::spool::Spool`]'s store
    /// names it.
    fn engine(&self) -> &str;

    /// [`crate::Spool::enqueue`] inside the transaction.
    async fn enqueue(
        &mut self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued>;

    /// [`crate::Spool::enqueue_many`] inside the transaction.
    async fn enqueue_many(
        &mut self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>>;

    /// [`crate::Spool::cancel`] inside the transaction.
    async fn cancel(&mut self, run: RunId) -> Result<CancelOutcome>;

    /// [`crate::Spool::append_event`] inside the transaction.
    async fn append_event(
        &mut self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended>;

    /// [`crate::Spool::close_run`] inside the transaction: the run row's lock is held until
    /// the transaction ends, so appends to the run from elsewhere wait for the commit (and are
    /// then refused) or the rollback.
    async fn close_run(&mut self, run: RunId) -> Result<CloseOutcome>;

    /// [`crate::Spool::set_fact`] inside the transaction: first writer wins among committed
    /// ones; another transaction setting the same fact waits for this one to end.
    async fn set_fact(
        &mut self,
        run: RunId,
        name: &FactName,
        value: Vec<u8>,
    ) -> Result<FactOutcome>;

    /// [`crate::EpochStore::append`] inside the transaction: the space's write lock is held
    /// until the transaction ends, so seqs follow commit order.
    async fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended>;

    /// Takes the write locks of `spaces` now, in the one global order every writer of the store
    /// uses, and holds them until the transaction ends; later appends of the transaction to
    /// these spaces wait for nothing.
    ///
    /// # Contract
    /// - Two transactions that each call it with all the spaces they will append to, before
    ///   their first append, never deadlock on space locks, whatever the order of their
    ///   appends and however their sets overlap.
    /// - Writes nothing; repeated spaces and spaces already locked are fine. An engine whose
    ///   transaction holds the whole store's writer (SQLite) has nothing more to take.
    ///
    /// # Errors
    /// The engine's lock errors ([`crate::Error::Retryable`] after its lock timeout).
    async fn lock_spaces(&mut self, spaces: &[SpaceId]) -> Result<()>;

    /// Commits every write of the transaction, then wakes the subscribers of each queue that
    /// got a run.
    ///
    /// # Errors
    /// [`crate::Error::Conflict`] when an operation of the transaction had failed (it was
    /// rolled back instead); the engine's commit errors (nothing was committed).
    async fn commit(self: Box<Self>) -> Result<()>;

    /// Rolls every write of the transaction back.
    ///
    /// # Errors
    /// The engine's errors; the transaction is gone either way.
    async fn rollback(self: Box<Self>) -> Result<()>;

    /// The engine's own transaction type (`cairn_sqlite::SqliteTransaction`,
    /// `cairn_postgres::PgTransaction`), to run the application's statements on it.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The error [`Transaction::commit`] returns after an operation of the transaction failed.
pub fn failed_transaction() -> crate::Error {
    crate::Error::conflict(
        "an operation of this transaction failed, so it was rolled back instead of committed",
    )
}
