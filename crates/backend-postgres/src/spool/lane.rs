//! The batching lane: concurrent calls of one spool instance share one statement, one
//! transaction and one WAL flush. Batched enqueues ([`super::enqueue`]) and batched acks
//! ([`super::settle`]) are lanes; this module knows neither (it imports no sibling).
//!
//! A caller [`Lane::queue`]s its item, then spawns a drain that waits for the lane and takes
//! the next batch with [`Lane::next_batch`]. Only one batch of a lane is in flight at a time;
//! items queued meanwhile form the next one. A lone item is handed back at once (its caller
//! runs its own single statement); a batch whose statement failed is handed back whole
//! ([`Lane::fall_back`]), so failures stay with their owners.

use std::sync::{Arc, Mutex};

use cairn_core::{Error, Result};
use tokio::sync::oneshot;

/// Where a queued item's answer goes: `Some` when a batch settled it, `None` when its caller
/// must take the unbatched path.
pub(super) type Reply<A> = oneshot::Sender<Result<Option<A>>>;

/// A queue of items of type `T` (answered with `A`) and the lane that drains it.
pub(super) struct Lane<T, A> {
    pending: Mutex<Vec<(T, Reply<A>)>>,
    lane: Arc<tokio::sync::Mutex<()>>,
    /// Test support: what the lane did, and a failure to inject.
    #[cfg(feature = "testkit")]
    pub(super) hooks: LaneHooks,
}

/// A lane's test support (feature `testkit`): counters and an injected failure.
#[cfg(feature = "testkit")]
#[derive(Default)]
pub(super) struct LaneHooks {
    /// Batch statements that committed.
    pub(super) batches: std::sync::atomic::AtomicU64,
    /// Batch statements that failed (their items ran alone).
    pub(super) fallbacks: std::sync::atomic::AtomicU64,
    /// Fail the next batch statement without sending it.
    pub(super) fail_next: std::sync::atomic::AtomicBool,
}

impl<T, A> Default for Lane<T, A> {
    fn default() -> Self {
        Self {
            pending: Mutex::new(Vec::new()),
            lane: Arc::default(),
            #[cfg(feature = "testkit")]
            hooks: LaneHooks::default(),
        }
    }
}

#[cfg(feature = "testkit")]
impl<T, A> Lane<T, A> {
    /// Items queued for the next batch.
    pub(super) fn pending(&self) -> usize {
        lock(&self.pending).len()
    }

    /// The lane, held: no batch runs until the guard drops.
    pub(super) async fn hold(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.lane.clone().lock_owned().await
    }
}

impl<T, A> Lane<T, A> {
    /// Queues `item`; its answer arrives on the returned receiver (see [`answer`]).
    pub(super) fn queue(&self, item: T) -> oneshot::Receiver<Result<Option<A>>> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).push((item, tx));
        rx
    }

    /// Waits for the lane and takes up to `max` queued items. A lone item is answered `None`
    /// at once (its caller runs the unbatched statement itself) and an empty batch returned;
    /// a batch of two or more is returned with the lane's guard, which the caller holds until
    /// every item is answered.
    pub(super) async fn next_batch(
        &self,
        max: usize,
    ) -> (tokio::sync::MutexGuard<'_, ()>, Vec<(T, Reply<A>)>) {
        let guard = self.lane.lock().await;
        let mut batch: Vec<(T, Reply<A>)> = {
            let mut pending = lock(&self.pending);
            let n = pending.len().min(max);
            pending.drain(..n).collect()
        };
        if batch.len() == 1 {
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Ok(None));
            }
        }
        (guard, batch)
    }

    /// Whether the next batch statement is to fail without being sent (test support; never
    /// without the `testkit` feature).
    pub(super) fn injected_failure(&self) -> bool {
        #[cfg(feature = "testkit")]
        {
            self.hooks
                .fail_next
                .swap(false, std::sync::atomic::Ordering::Relaxed)
        }
        #[cfg(not(feature = "testkit"))]
        {
            false
        }
    }

    /// The batch statement committed (counted for tests).
    pub(super) fn committed(&self) {
        #[cfg(feature = "testkit")]
        self.hooks
            .batches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The batch statement failed, so nothing of it was written: every item goes back to its
    /// caller for the unbatched path.
    pub(super) fn fall_back(&self, batch: Vec<(T, Reply<A>)>) {
        #[cfg(feature = "testkit")]
        self.hooks
            .fallbacks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for (_, reply) in batch {
            let _ = reply.send(Ok(None));
        }
    }
}

/// Waits for a queued item's answer.
pub(super) async fn answer<A>(rx: oneshot::Receiver<Result<Option<A>>>) -> Result<Option<A>> {
    rx.await
        .map_err(|_| Error::backend("postgres", "a batched statement ended without an answer"))?
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
