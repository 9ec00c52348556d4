//! Batched enqueues: concurrent enqueues of one spool instance share one statement, one
//! transaction and one WAL flush.
//!
//! Every enqueue without a supersede group is queued; one lane at a time drains the queue.
//! A lone enqueue takes the unbatched path ([`sql::ENQUEUE`], unchanged); several become one
//! [`sql::ENQUEUE_MANY`] — a multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING` over arrays,
//! committed on its own (autocommit), which also wakes each queue's subscribers once.
//!
//! Invariants (tests: `crates/backend-postgres/tests/spool/batch.rs`):
//! - **Answered after commit.** A caller gets its run id only after the statement that wrote it
//!   returned, i.e. committed.
//! - **One key, one id.** Two enqueues of one `(queue, key)` in one batch get the same run id,
//!   one of them `created`; a key another transaction holds is answered with that run's id.
//! - **Failures stay with their owner.** If the batch statement fails (an id collision, a
//!   dropped connection), nothing of it was written, and every enqueue of the batch runs again
//!   alone on the unbatched path, which reports its own outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cairn_core::spool::{DedupKey, Enqueued, QueueName, RunId};
use cairn_core::{Error, Result};
use tokio::sync::oneshot;

use super::ops::claim_jitter;
use super::row::{get, run_id};
use super::{sql, wake_channel, PgSpool};
use crate::error::map_sqlx;

/// Enqueues one batch takes at most (the statement binds 10 arrays of this length).
pub(super) const MAX_BATCH: usize = 256;

/// One enqueue to batch: everything the statement binds.
pub(super) struct PendingEnqueue {
    pub(super) id: RunId,
    pub(super) queue: QueueName,
    pub(super) key: DedupKey,
    pub(super) max_attempts: i32,
    pub(super) priority: i32,
    pub(super) now: i64,
    pub(super) due: i64,
    pub(super) payload: Vec<u8>,
}

/// Where a queued item's answer goes: `Some` when a batch settled it, `None` when its caller
/// must take the unbatched path.
pub(super) type Reply<A> = oneshot::Sender<Result<Option<A>>>;

/// A queue of items of type `T` (answered with `A`) and the lane that drains it: what
/// batched enqueues and batched acks ([`super::ack_batch`]) share.
///
/// A caller [`Lane::queue`]s its item, then spawns a drain that waits for the lane and takes
/// the next batch with [`Lane::next_batch`]. Only one batch of a lane is in flight at a time;
/// items queued meanwhile form the next one.
pub(super) struct Lane<T, A> {
    pending: Mutex<Vec<(T, Reply<A>)>>,
    lane: Arc<tokio::sync::Mutex<()>>,
    /// Batch statements that committed.
    pub(super) batches: AtomicU64,
    /// Batch statements that failed (their items ran alone).
    pub(super) fallbacks: AtomicU64,
    /// Test support: fail the next batch statement without sending it.
    pub(super) fail_next: AtomicBool,
}

impl<T, A> Default for Lane<T, A> {
    fn default() -> Self {
        Self {
            pending: Mutex::new(Vec::new()),
            lane: Arc::default(),
            batches: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            fail_next: AtomicBool::new(false),
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

    /// Whether the next batch statement is to fail without being sent (test support).
    pub(super) fn injected_failure(&self) -> bool {
        self.fail_next.swap(false, Ordering::Relaxed)
    }

    /// The batch statement failed, so nothing of it was written: every item goes back to its
    /// caller for the unbatched path.
    pub(super) fn fall_back(&self, batch: Vec<(T, Reply<A>)>) {
        self.fallbacks.fetch_add(1, Ordering::Relaxed);
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

/// The queue of enqueues and the lane that drains it.
pub(super) type Batcher = Lane<PendingEnqueue, Enqueued>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl PgSpool {
    /// Queues `e` for the next batch and waits for its answer: `Some` when the batch (or the
    /// lone statement) settled it, `None` when the caller must take the unbatched path.
    pub(super) async fn enqueue_batched(&self, e: PendingEnqueue) -> Result<Option<Enqueued>> {
        let rx = self.inner.batcher.queue(e);
        // The drain is a task of its own, so a caller that stops waiting strands nobody.
        let spool = self.clone();
        tokio::spawn(async move { spool.drain_enqueues().await });
        answer(rx).await
    }

    async fn drain_enqueues(&self) {
        let (_lane, batch) = self.inner.batcher.next_batch(MAX_BATCH).await;
        if !batch.is_empty() {
            self.enqueue_many(batch).await;
        }
    }

    /// Writes `batch` in one statement and answers each enqueue; on failure hands every one
    /// back to its caller for the unbatched path.
    async fn enqueue_many(&self, batch: Vec<(PendingEnqueue, Reply<Enqueued>)>) {
        let mut ids = Vec::with_capacity(batch.len());
        let mut queues = Vec::with_capacity(batch.len());
        let mut keys = Vec::with_capacity(batch.len());
        let mut attempts = Vec::with_capacity(batch.len());
        let mut priorities = Vec::with_capacity(batch.len());
        let mut nows = Vec::with_capacity(batch.len());
        let mut dues = Vec::with_capacity(batch.len());
        let mut lens = Vec::with_capacity(batch.len());
        let mut payloads = Vec::with_capacity(batch.len());
        let mut channels = Vec::with_capacity(batch.len());
        let mut jitters = Vec::with_capacity(batch.len());
        for (e, _) in &batch {
            ids.push(e.id.as_bytes().to_vec());
            queues.push(e.queue.as_str().to_owned());
            keys.push(e.key.as_bytes().to_vec());
            attempts.push(e.max_attempts);
            priorities.push(e.priority);
            nows.push(e.now);
            dues.push(e.due);
            lens.push(i64::try_from(e.payload.len()).unwrap_or(i64::MAX));
            payloads.push(e.payload.clone());
            channels.push(wake_channel(&self.inner.schema, &e.queue));
            jitters.push(claim_jitter(&e.queue, &e.key, 0));
        }
        let injected = self.inner.batcher.injected_failure();
        let rows = if injected {
            Err(Error::backend("postgres", "an injected batch failure"))
        } else {
            sqlx::query(sql::ENQUEUE_MANY)
                .bind(ids)
                .bind(queues)
                .bind(keys)
                .bind(attempts)
                .bind(priorities)
                .bind(nows)
                .bind(dues)
                .bind(lens)
                .bind(payloads)
                .bind(channels)
                .bind(jitters)
                .fetch_all(self.pool())
                .await
                .map_err(map_sqlx)
        };
        let stored = rows.and_then(|rows| {
            let mut by_key = HashMap::new();
            for row in &rows {
                let id = run_id(&get::<Vec<u8>>(row, 0)?)?;
                let queue: String = get(row, 1)?;
                let key: Vec<u8> = get(row, 2)?;
                by_key.insert((queue, key), id);
            }
            Ok(by_key)
        });
        match stored {
            Ok(by_key) => {
                self.inner.batcher.batches.fetch_add(1, Ordering::Relaxed);
                for (e, reply) in batch {
                    let found = by_key
                        .get(&(e.queue.as_str().to_owned(), e.key.as_bytes().to_vec()))
                        .copied();
                    // Not inserted by this batch: the key belongs to a run another transaction
                    // committed; the unbatched path returns its id.
                    let answer = found.map(|run_id| Enqueued {
                        run_id,
                        created: run_id == e.id,
                    });
                    let _ = reply.send(Ok(answer));
                }
            }
            // Nothing of the statement was written: each caller runs its enqueue alone.
            Err(_) => self.inner.batcher.fall_back(batch),
        }
    }
}
