//! What the spool's two lanes carry ([`super::lane`]): one pending enqueue (everything
//! [`super::sql::ENQUEUE_MANY`] binds of it) and one pending ack, and the lane types the spool
//! holds. A leaf: the spool's handle owns the lanes, `enqueue` and `settle` fill and drain them.

use cairn_core::spool::{DedupKey, Enqueued, LeaseToken, QueueName, RunId, Timestamp};

use super::lane::Lane;

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

/// The queue of enqueues and the lane that drains it.
pub(super) type EnqueueLane = Lane<PendingEnqueue, Enqueued>;

/// One ack to batch.
pub(super) struct PendingAck {
    pub(super) run: RunId,
    pub(super) token: LeaseToken,
    pub(super) now: Timestamp,
}

/// The queue of acks and the lane that drains it.
pub(super) type AckLane = Lane<PendingAck, ()>;
