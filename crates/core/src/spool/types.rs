//! The values the [`Spool`](super::Spool) trait takes and returns. Their limits are in
//! `limits.rs`, the checks every backend makes on them in `checks.rs`, the import's values in
//! `import.rs`.

use std::collections::BTreeMap;

use super::backoff::BackoffPolicy;
use super::dedup::{DedupKey, SupersedeGroup};
use super::ids::{
    ConsumerId, FactName, LeaseToken, PartitionKey, QueueName, RunEventId, RunId, TraceParent,
};
use super::state::{EventStream, RunState};
use super::timestamp::Timestamp;

/// Spool-wide settings a backend is opened with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpoolConfig {
    /// Delay before a retry after a retryable nack or an expired lease.
    pub backoff: BackoffPolicy,
}

/// Options of [`Spool::enqueue`](super::Spool::enqueue).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Older queued runs of this group (in the same queue) become superseded.
    pub supersede_group: Option<SupersedeGroup>,
    /// No claim takes the run before this time (default: now); within
    /// [`Timestamp::EARLIEST`]..=[`Timestamp::LATEST`] (1970-01-01 to 9999-12-31, UTC).
    pub not_before: Option<Timestamp>,
    /// Claims allowed before the run is parked (default [`DEFAULT_MAX_ATTEMPTS`](super::DEFAULT_MAX_ATTEMPTS); 1 to
    /// [`MAX_ATTEMPTS_LIMIT`](super::MAX_ATTEMPTS_LIMIT)).
    pub max_attempts: Option<u32>,
    /// Higher priorities are claimed first (default 0).
    pub priority: i32,
    /// The run's partition within its queue: the queue's per-partition limit
    /// ([`QueueLimits::per_partition`](super::QueueLimits)) caps how many runs sharing it are
    /// claimed at once. `None`: the run belongs to no partition.
    pub partition_key: Option<PartitionKey>,
    /// The enqueuer's W3C trace context, stored with the run and handed to every claim of it
    /// ([`Claimed::traceparent`]) so the consumer continues the enqueuer's trace. An enqueue
    /// that finds its key already present changes nothing: the run keeps the first
    /// enqueuer's. `None`: the run carries no trace. Stored in revision `0009_spool_flow`'s
    /// column: on a store whose upgrade stopped before it, an enqueue with one is refused with
    /// [`Error::Incompatible`](crate::Error::Incompatible)
    /// ([`flow_revision_missing`](super::flow_revision_missing)), as one with a partition key is.
    pub traceparent: Option<TraceParent>,
}

impl EnqueueOptions {
    /// Sets the supersede group.
    pub fn supersede(mut self, group: SupersedeGroup) -> Self {
        self.supersede_group = Some(group);
        self
    }

    /// Sets the earliest claim time.
    pub fn not_before(mut self, t: Timestamp) -> Self {
        self.not_before = Some(t);
        self
    }

    /// Sets the attempt limit.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }

    /// Sets the partition key.
    pub fn partition(mut self, key: PartitionKey) -> Self {
        self.partition_key = Some(key);
        self
    }

    /// Sets the enqueuer's trace context.
    pub fn traceparent(mut self, tp: TraceParent) -> Self {
        self.traceparent = Some(tp);
        self
    }
}

/// One run of a bulk enqueue ([`Spool::enqueue_many`](super::Spool::enqueue_many)): what
/// [`Spool::enqueue`](super::Spool::enqueue) takes, less the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueItem {
    /// The run's dedup key within the batch's queue.
    pub key: DedupKey,
    /// The run's payload (at most [`MAX_RUN_PAYLOAD`](super::MAX_RUN_PAYLOAD) bytes).
    pub payload: Vec<u8>,
    /// The run's options.
    pub options: EnqueueOptions,
}

impl EnqueueItem {
    /// An item with default options.
    pub fn new(key: DedupKey, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            key,
            payload: payload.into(),
            options: EnqueueOptions::default(),
        }
    }

    /// Sets the item's options.
    pub fn with_options(mut self, options: EnqueueOptions) -> Self {
        self.options = options;
        self
    }
}

/// What [`Spool::enqueue`](super::Spool::enqueue) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The run's id: new, or the existing run's for this `(queue, key)`.
    pub run_id: RunId,
    /// Whether this call created the run (false: the key was already present).
    pub created: bool,
}

/// A run handed to a consumer by [`Spool::claim`](super::Spool::claim).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Claimed {
    /// The run.
    pub run_id: RunId,
    /// The run's dedup key.
    pub dedup_key: DedupKey,
    /// The payload given at enqueue.
    pub payload: Vec<u8>,
    /// Which claim this is (1 for the first delivery).
    pub attempt: u32,
    /// The lease token for heartbeat, ack and nack.
    pub token: LeaseToken,
    /// When the lease expires unless extended.
    pub expires_at: Timestamp,
    /// The trace context the run was enqueued with
    /// ([`EnqueueOptions::traceparent`]): the consumer's span continues that trace. `None` for
    /// a run enqueued without one, an imported run and a schedule's run.
    pub traceparent: Option<TraceParent>,
}

/// What [`Spool::heartbeat`](super::Spool::heartbeat) returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Heartbeat {
    /// The lease's new expiry.
    pub expires_at: Timestamp,
    /// Whether someone asked to cancel the run: the holder should stop and nack it.
    pub cancel_requested: bool,
}

/// How a lease holder gives a run back.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NackKind {
    /// A transient failure: retry after backoff while attempts remain, else park.
    Retryable,
    /// A failure retrying cannot fix (bad input, refused): park with the reason.
    Permanent,
    /// The work ran and its outcome is failure: the run ends `Failed`, nothing retries it.
    Failed,
}

/// Where a nack left the run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Nacked {
    /// `Queued` (a retry), `Parked`, `Failed` or `Canceled` (a cancel had been requested).
    pub state: RunState,
    /// For a retry, when the next claim may take the run.
    pub retry_at: Option<Timestamp>,
}

/// What [`Spool::cancel`](super::Spool::cancel) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CancelOutcome {
    /// The run was queued and is now canceled.
    Canceled,
    /// The run is claimed: a cancel is requested (again, if it already was) and its holder
    /// sees it on the next heartbeat.
    Requested,
}

/// What an operator's action on a parked run did ([`Spool::retry_parked`],
/// [`Spool::discard`]).
///
/// [`Spool::retry_parked`]: super::Spool::retry_parked
/// [`Spool::discard`]: super::Spool::discard
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Unparked {
    /// Where the run is now: `Queued` (retried, due at once) or `Canceled` (discarded).
    pub state: RunState,
    /// Why it had been parked; the run keeps this reason, and the action's event repeats it.
    pub parked_reason: Option<String>,
    /// The seq of the run event that records the action (see
    /// [`operator_event`](super::operator_event)).
    pub event_seq: u64,
    /// When the action happened (the spool's clock): the retried run's due time.
    pub at: Timestamp,
}

/// What [`Spool::set_fact`](super::Spool::set_fact) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FactOutcome {
    /// The fact was not set; now it is.
    Set,
    /// The fact already had exactly this value; nothing was written.
    AlreadySet,
}

/// What [`Spool::close_run`](super::Spool::close_run) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CloseOutcome {
    /// The run was open (or unmarked); now it takes no more events.
    Closed,
    /// The run was closed already; nothing was written.
    AlreadyClosed,
}

/// What [`Spool::append_event`](super::Spool::append_event) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EventAppended {
    /// The event's sequence number in its run (from 1, +1 per new event).
    pub seq: u64,
    /// False when the run already held an event with this id (its seq is returned).
    pub created: bool,
}

/// One stored run event.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RunEvent {
    /// Sequence number in the run.
    pub seq: u64,
    /// The caller's event id.
    pub event_id: RunEventId,
    /// The payload.
    pub payload: Vec<u8>,
    /// When it was appended.
    pub created_at: Timestamp,
}

/// Keeps the longest run of `events` from the start whose payloads total at most `max_bytes`,
/// and at least the first ([`Spool::events_within`](crate::spool::Spool::events_within)).
pub fn keep_events_within(events: &mut Vec<RunEvent>, max_bytes: usize) {
    let mut bytes = 0usize;
    let keep = events
        .iter()
        .position(|e| {
            bytes = bytes.saturating_add(e.payload.len());
            bytes > max_bytes
        })
        .map_or(events.len(), |i| i.max(1));
    events.truncate(keep);
}

/// The lease on a claimed run.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct LeaseInfo {
    /// Who holds it.
    pub consumer: ConsumerId,
    /// When it expires (may be past: an expired lease stays until a claim takes the run).
    pub expires_at: Timestamp,
}

/// Everything about one run (without its payload and events).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct RunInfo {
    /// The run.
    pub run_id: RunId,
    /// Its queue.
    pub queue: QueueName,
    /// Its dedup key.
    pub dedup_key: DedupKey,
    /// Its supersede group, if it has one.
    pub supersede_group: Option<SupersedeGroup>,
    /// Its state.
    pub state: RunState,
    /// Claims so far.
    pub attempts: u32,
    /// Claims allowed before it is parked.
    pub max_attempts: u32,
    /// Its priority.
    pub priority: i32,
    /// Size of its payload in bytes.
    pub payload_bytes: u64,
    /// When it was enqueued.
    pub enqueued_at: Timestamp,
    /// When it last changed state or was claimed (heartbeats and cancel requests do not count).
    pub updated_at: Timestamp,
    /// For a live run, the earliest time a claim may take it (for a claimed run: its lease
    /// expiry plus backoff).
    pub due_at: Option<Timestamp>,
    /// When it reached a terminal state.
    pub finished_at: Option<Timestamp>,
    /// The lease, while claimed.
    pub lease: Option<LeaseInfo>,
    /// Whether a cancel is requested (claimed runs only).
    pub cancel_requested: bool,
    /// The reason given by the last nack (why it is parked or failed, or why it was retried),
    /// or the spool's own reason for parking it.
    pub reason: Option<String>,
    /// Its facts.
    pub facts: BTreeMap<FactName, Vec<u8>>,
    /// How many events it currently holds.
    pub events: u64,
    /// Whether its producer may still append events.
    pub stream: EventStream,
    /// Its partition key, if it was enqueued with one.
    pub partition_key: Option<PartitionKey>,
    /// The trace context it was enqueued with ([`EnqueueOptions::traceparent`]), if any.
    pub traceparent: Option<TraceParent>,
}

/// Which runs [`Spool::runs`](super::Spool::runs) lists. Results come in run id order,
/// strictly after `after`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only this queue.
    pub queue: Option<QueueName>,
    /// Only this state.
    pub state: Option<RunState>,
    /// Only ids after this one (the last id of the previous page).
    pub after: Option<RunId>,
}

/// Counts for `cairn doctor` and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Runs per state (states with no run are absent).
    pub runs: BTreeMap<RunState, u64>,
    /// Stored run events.
    pub events: u64,
    /// Their total payload bytes (what the retention cap bounds).
    pub event_bytes: u64,
    /// Enqueue time of the oldest queued run.
    pub oldest_queued: Option<Timestamp>,
    /// Append time of the oldest stored event.
    pub oldest_event: Option<Timestamp>,
    /// The same run counts for each queue that holds at least one stored run (a queue whose
    /// runs were all removed by retention is absent). Read at the same committed state as the
    /// totals: per state, the queues' counts add up to [`SpoolStats::runs`], and the earliest
    /// of their `oldest_queued` is [`SpoolStats::oldest_queued`].
    pub queues: BTreeMap<QueueName, QueueStats>,
}

/// One queue's part of [`SpoolStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue's runs per state (states with no run of the queue are absent).
    pub runs: BTreeMap<RunState, u64>,
    /// Enqueue time of the queue's oldest queued run (`None` when none is queued).
    pub oldest_queued: Option<Timestamp>,
    /// Of its queued runs, those not due yet at the time of the read (a `not_before` or a
    /// retry's backoff ahead): the rest are the backlog a claim can take now.
    pub scheduled: u64,
}

impl SpoolStats {
    /// Records that `n` of `queue`'s queued runs are not due yet ([`QueueStats::scheduled`]).
    pub fn add_scheduled(&mut self, queue: QueueName, n: u64) {
        if n > 0 {
            self.queues.entry(queue).or_default().scheduled += n;
        }
    }

    /// Adds `n` runs of `queue` in `state`, the oldest of them (for `Queued`) enqueued at
    /// `oldest`, to the queue's counts and to the totals. Backends build their stats from
    /// per-queue, per-state groups with it, so the totals are the sums by construction.
    pub fn add_runs(
        &mut self,
        queue: QueueName,
        state: RunState,
        n: u64,
        oldest: Option<Timestamp>,
    ) {
        if n == 0 {
            return;
        }
        let earliest =
            |a: Option<Timestamp>, b: Option<Timestamp>| [a, b].into_iter().flatten().min();
        *self.runs.entry(state).or_default() += n;
        let q = self.queues.entry(queue).or_default();
        *q.runs.entry(state).or_default() += n;
        if state == RunState::Queued {
            q.oldest_queued = earliest(q.oldest_queued, oldest);
            self.oldest_queued = earliest(self.oldest_queued, oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_runs_count_in_their_queue_and_in_the_totals() {
        let (a, b) = (QueueName::new("a").unwrap(), QueueName::new("b").unwrap());
        let t = Timestamp::from_unix_micros;
        let mut stats = SpoolStats::default();
        stats.add_runs(a.clone(), RunState::Queued, 2, Some(t(20)));
        stats.add_runs(b.clone(), RunState::Queued, 1, Some(t(10)));
        stats.add_runs(a.clone(), RunState::Queued, 1, Some(t(30)));
        stats.add_runs(a.clone(), RunState::Succeeded, 3, Some(t(1)));
        stats.add_runs(b.clone(), RunState::Parked, 0, None);
        assert_eq!(
            stats.runs,
            BTreeMap::from([(RunState::Queued, 4), (RunState::Succeeded, 3)])
        );
        assert_eq!(stats.oldest_queued, Some(t(10)));
        assert_eq!(
            stats.queues[&a],
            QueueStats {
                runs: BTreeMap::from([(RunState::Queued, 3), (RunState::Succeeded, 3)]),
                oldest_queued: Some(t(20)),
                scheduled: 0,
            },
            "only queued runs' times count"
        );
        assert_eq!(
            stats.queues[&b],
            QueueStats {
                runs: BTreeMap::from([(RunState::Queued, 1)]),
                oldest_queued: Some(t(10)),
                scheduled: 0,
            },
            "no zero counts"
        );
    }
}
