//! What the spool's two lanes carry ([`super::lane`]): one pending enqueue (everything
//! [`super::sql_enqueue::ENQUEUE_MANY`] binds of it, and what of its options the enqueue
//! statements bind) and one pending ack, and the lane types the spool holds. A leaf: the
//! spool's handle owns the lanes, `enqueue` and `settle` fill and drain them.

use cairn_core::spool::{
    DedupKey, EnqueueOptions, Enqueued, LeaseToken, QueueName, RunId, Timestamp,
};

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
    /// The partition key (revision `0009_spool_flow`'s column; checked applied by the caller).
    pub(super) partition: Option<String>,
    /// The trace context (as `partition`).
    pub(super) traceparent: Option<String>,
}

/// What an enqueue carrying `options` needs of revision `0009_spool_flow`'s columns, named
/// for the refusal on a store without them: `None` when it carries neither a partition key nor
/// a trace context.
pub(super) fn flow_columns_refusal(options: &EnqueueOptions) -> Option<&'static str> {
    match (&options.partition_key, &options.traceparent) {
        (None, None) => None,
        (Some(_), _) => Some("an enqueue with a partition key"),
        (None, Some(_)) => Some("an enqueue with a traceparent"),
    }
}

/// The partition key as bound.
pub(super) fn partition_text(options: &EnqueueOptions) -> Option<String> {
    options
        .partition_key
        .as_ref()
        .map(|p| p.as_str().to_owned())
}

/// The trace context as bound.
pub(super) fn traceparent_text(options: &EnqueueOptions) -> Option<String> {
    options.traceparent.as_ref().map(|t| t.as_str().to_owned())
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
