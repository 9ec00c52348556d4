//! [`Transaction`]: cairn's writes inside one database transaction, committed together with
//! the application's own.

use std::any::Any;
use std::fmt::Debug;

use async_trait::async_trait;

use crate::spool::{
    CancelOutcome, DedupKey, EnqueueItem, EnqueueOptions, Enqueued, EventAppended, QueueName,
    RunEventId, RunId,
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
/// - Locks taken inside (a space's write lock for `append`, the run row for `cancel` and
///   `append_event`, the writer on SQLite) are held until the transaction ends: keep it short.
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

    /// [`crate::EpochStore::append`] inside the transaction: the space's write lock is held
    /// until the transaction ends, so seqs follow commit order.
    async fn append(&mut self, space: &SpaceId, events: Vec<Event>) -> Result<Appended>;

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
