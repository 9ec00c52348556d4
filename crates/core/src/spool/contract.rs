//! The [`Spool`] trait, the contract every spool backend implements, and [`Wakeup`], the
//! handle its [`Spool::subscribe`] returns.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use super::clock::Clock;
use super::dedup::DedupKey;
use super::flow::{QueueFlow, QueueLimits};
use super::ids::{ConsumerId, FactName, LeaseToken, QueueName, RunEventId, RunId, ScheduleName};
use super::import::{ImportSource, ImportedRun, RunImportOutcome};
use super::limits::MAX_BATCH;
use super::retention::{RetentionBudget, RetentionPolicy, RetentionReport};
use super::schedule::{Schedule, ScheduleFired, ScheduleInfo};
use super::state::RunState;
use super::timestamp::Timestamp;
use super::types::{
    keep_events_within, CancelOutcome, Claimed, CloseOutcome, EnqueueItem, EnqueueOptions,
    Enqueued, EventAppended, FactOutcome, Heartbeat, NackKind, Nacked, RunEvent, RunFilter,
    RunInfo, SpoolStats, Unparked,
};
use crate::error::Result;

/// A handle that resolves when new work may exist in one queue; see [`Spool::subscribe`].
///
/// Implementations: the model uses an in-process watch channel; Postgres a `LISTEN` on a
/// channel that enqueues `NOTIFY` (reconnecting, with a fallback poll); SQLite a poll of
/// `PRAGMA data_version` (which changes when *another* connection commits, e.g. an offline
/// hook writing straight to the file) plus in-process notifications.
#[async_trait]
pub trait Wakeup: Send + Debug {
    /// Waits until work may have arrived since the handle was created or since the previous
    /// `wait` returned.
    ///
    /// # Contract
    /// - A wake-up that happens between two `wait` calls (or between `subscribe` and the first
    ///   `wait`) is not lost: the next `wait` returns at once.
    /// - Spurious returns are allowed; after each return the caller claims until the queue is
    ///   empty, then waits again.
    /// - Cancel safe: dropping the future loses nothing.
    ///
    /// # Errors
    /// [`crate::Error::Unavailable`] when the store is closed or its notifications cannot be
    /// restored.
    async fn wait(&mut self) -> Result<()>;
}

/// A durable work queue: deduplicated runs, leases, retries, supersession, cancellation,
/// per-run events and facts, retention and wake-up.
///
/// Object safe: hold it as `Arc<dyn Spool>`. Every time the spool uses comes from its
/// [`Clock`]. The conformance suite (`cairn-conformance`, cases `s1_…` to `s19_…`, and `q1_…`
/// to `q4_…` for flow control) is the executable form of the contracts below; a backend is
/// correct when it passes it and agrees with [`MemorySpool`](crate::spool::MemorySpool) on
/// random operation sequences.
///
/// Unless stated otherwise every method is atomic (on error nothing was written) and durable
/// on return (no false success: a failed durable write returns an error). Every method may also
/// fail with [`crate::Error::Retryable`] (busy past the timeout; nothing was written) or
/// [`crate::Error::Unavailable`].
#[async_trait]
pub trait Spool: Send + Sync + Debug + 'static {
    /// The clock this spool reads time from.
    fn clock(&self) -> &dyn Clock;

    /// Submits a run to `queue` under `key`, or finds the run already there.
    ///
    /// # Contract
    /// - At most one run per `(queue, key)`, across processes and nodes: enqueueing an existing
    ///   key returns the existing run's id with `created: false` and changes nothing (whatever
    ///   its state, payload or options). A run removed by retention no longer deduplicates.
    /// - A new run is `queued`, with `due_at = options.not_before` (default now), `attempts`
    ///   0, and its id is durable before this returns.
    /// - With `options.supersede_group`, in the same transaction every *other* `queued` run of
    ///   the same queue and group becomes `superseded`; claimed and terminal runs are never
    ///   touched. Nothing is superseded when the key already existed.
    /// - A created run wakes the queue's subscribers.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for a payload over [`MAX_RUN_PAYLOAD`](crate::spool::MAX_RUN_PAYLOAD) or invalid
    /// options ([`EnqueueOptions::effective_max_attempts`]: an attempt limit out of range, a
    /// `not_before` outside [`Timestamp::EARLIEST`]..=[`Timestamp::LATEST`]); nothing is
    /// written.
    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<Enqueued>;

    /// Submits every item of `items` to `queue` in one transaction and one durable commit:
    /// each as [`Spool::enqueue`] would, in input order.
    ///
    /// # Contract
    /// - One result per item, in input order.
    /// - Atomic: on error nothing of the batch was written (and nobody was woken).
    /// - A key repeated inside the batch is one run: its first item creates it (or finds the
    ///   stored run), later items answer the same id with `created: false` and their payload
    ///   and options are ignored. A key already stored answers its run's id, `created: false`.
    /// - Items with a supersede group supersede as [`Spool::enqueue`] does, in input order (an
    ///   item supersedes the queued runs of its group that earlier items created).
    /// - Each queue that got a run wakes its subscribers once, after the commit.
    /// - An empty batch writes nothing and returns an empty list.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for a batch over [`MAX_ENQUEUE_BATCH`](crate::spool::MAX_ENQUEUE_BATCH) items or
    /// [`MAX_ENQUEUE_BATCH_BYTES`](crate::spool::MAX_ENQUEUE_BATCH_BYTES) bytes, [`crate::Error::InvalidBatchItem`] (with the item's
    /// index) for an invalid item; nothing is written.
    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<EnqueueItem>,
    ) -> Result<Vec<Enqueued>>;

    /// Hands up to `limit` due runs of `queue` to `consumer`, each under a new lease of
    /// length `lease`.
    ///
    /// # Contract
    /// - Due runs: `queued` with `due_at <= now`, and `claimed` whose lease expired with
    ///   `due_at` (expiry plus backoff) `<= now`.
    /// - First, every due expired run that must not be handed out again is settled
    ///   ([`expiry_action`](crate::spool::expiry_action)): cancel requested → `canceled`; attempts exhausted → `parked`
    ///   ([`expired_park_reason`](crate::spool::expired_park_reason)). These do not count towards `limit`.
    /// - Then runs are taken in order `priority` descending, `due_at` ascending, enqueue order
    ///   ascending. Each becomes `claimed` with `attempts + 1`, a new random [`LeaseToken`]
    ///   (the previous holder's token becomes stale), `expires_at = now + lease`, and
    ///   `due_at = expires_at + backoff(attempts)`.
    /// - Concurrent claims never hand out the same run; a run is handed to exactly one
    ///   consumer per attempt.
    /// - An empty result means nothing is due now.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for `limit` outside 1..=[`MAX_BATCH`] or a lease outside
    /// [`MIN_LEASE`](crate::spool::MIN_LEASE)..=[`MAX_LEASE`](crate::spool::MAX_LEASE).
    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>>;

    /// Extends the lease on a claimed run to `now + lease`.
    ///
    /// # Contract
    /// - The token must be the one the run's latest claim issued. An expired lease that no
    ///   claim has taken over yet is still held and is extended.
    /// - `due_at` moves to the new expiry plus backoff.
    /// - Returns whether a cancel was requested: the holder should then stop and nack.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::LeaseLost`] for a stale token;
    /// [`crate::Error::InvalidTransition`] when the run is no longer claimed (e.g. a claim
    /// parked it after its last lease expired); [`crate::Error::InvalidInput`] for a lease
    /// outside [`MIN_LEASE`](crate::spool::MIN_LEASE)..=[`MAX_LEASE`](crate::spool::MAX_LEASE).
    async fn heartbeat(&self, run: RunId, token: LeaseToken, lease: Duration) -> Result<Heartbeat>;

    /// Reports success: the run becomes `succeeded`.
    ///
    /// # Contract
    /// - Token checked as for [`Spool::heartbeat`].
    /// - The reason an earlier attempt's nack left is cleared: a `succeeded` run has none.
    /// - Idempotent: acking a `succeeded` run with the token that acked it succeeds and writes
    ///   nothing.
    /// - A requested cancel does not stop an ack: the work is done.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::LeaseLost`] for a stale token;
    /// [`crate::Error::InvalidTransition`] when the run ended otherwise.
    async fn ack(&self, run: RunId, token: LeaseToken) -> Result<()>;

    /// Gives a claimed run back ([`nack_action`](crate::spool::nack_action) decides what happens).
    ///
    /// # Contract
    /// - Token checked as for [`Spool::heartbeat`].
    /// - Cancel requested → `canceled`, whatever the kind.
    /// - [`NackKind::Retryable`] with `attempts < max_attempts` → `queued` with
    ///   `due_at = now + backoff(attempts, jitter_seed(queue, key, attempts))`; the queue's
    ///   subscribers are woken. On the last attempt → `parked` ([`exhausted_park_reason`](crate::spool::exhausted_park_reason)).
    /// - [`NackKind::Permanent`] → `parked`; [`NackKind::Failed`] → `failed`.
    /// - `reason`, normalized by [`clip_reason`](crate::spool::clip_reason) (each NUL replaced by U+FFFD, cut to
    ///   [`MAX_REASON_LEN`](crate::spool::MAX_REASON_LEN)), is recorded on the run.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::LeaseLost`] for a stale token;
    /// [`crate::Error::InvalidTransition`] when the run is no longer claimed.
    async fn nack(
        &self,
        run: RunId,
        token: LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<Nacked>;

    /// A retryable nack whose retry is due after the caller's `delay` instead of the queue's
    /// backoff: for a handler that knows when trying again makes sense (a rate limit's
    /// `Retry-After`, a dependency's maintenance window).
    ///
    /// # Contract
    /// - As [`Spool::nack`] with [`NackKind::Retryable`], except that a run queued again is due
    ///   at `now + delay` (`delay` may be zero: due at once). The attempt is spent: on the last
    ///   attempt the run is parked ([`exhausted_park_reason`](crate::spool::exhausted_park_reason)),
    ///   and a requested cancel ends it `canceled`, whatever the delay.
    /// - A delay over [`MAX_LEASE`](crate::spool::MAX_LEASE) is refused before anything is
    ///   read or written ([`check_retry_delay`](crate::spool::check_retry_delay)).
    ///
    /// # Errors
    /// As [`Spool::nack`]; [`crate::Error::InvalidInput`] for a delay over
    /// [`MAX_LEASE`](crate::spool::MAX_LEASE).
    async fn retry_after(
        &self,
        run: RunId,
        token: LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<Nacked>;

    /// Cancels a run.
    ///
    /// # Contract
    /// - `queued` → `canceled` ([`CancelOutcome::Canceled`]).
    /// - `claimed` → stays claimed with `cancel_requested`, which the holder sees on its next
    ///   heartbeat ([`CancelOutcome::Requested`]; repeating it is allowed). The run ends
    ///   `canceled` when its holder nacks it or its lease expires, `succeeded` if it acks.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::InvalidTransition`] for a terminal run.
    async fn cancel(&self, run: RunId) -> Result<CancelOutcome>;

    /// Everything about one run, or `None` when there is no such run.
    ///
    /// # Errors
    /// Backend errors only.
    async fn run(&self, run: RunId) -> Result<Option<RunInfo>>;

    /// The run's payload as it was enqueued, or `None` when there is no such run (never
    /// enqueued, or removed by retention). A read: it writes nothing and needs no lease
    /// (operators' tools show it; consumers get the payload with their claim).
    ///
    /// # Errors
    /// Backend errors only.
    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>>;

    /// Runs matching `filter`, in run id byte order, strictly after `filter.after`, at most
    /// `limit`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for `limit` outside 1..=[`MAX_BATCH`].
    async fn runs(&self, filter: &RunFilter, limit: usize) -> Result<Vec<RunInfo>>;

    /// Counts for `cairn doctor` and metrics.
    ///
    /// # Errors
    /// Backend errors only.
    async fn stats(&self) -> Result<SpoolStats>;

    /// Appends an event to a run's stream.
    ///
    /// # Contract
    /// - Sequence numbers start at 1 and rise by exactly 1 per new event of the run, never
    ///   reused (also after events are acknowledged or removed).
    /// - Re-appending an id the run still holds is a no-op returning the original seq with
    ///   `created: false` (the first payload stays). Once an event is acknowledged or removed
    ///   by retention its id may be appended again as a new event.
    /// - A new event is accepted only while the run is live (`queued` or `claimed`) and not
    ///   closed ([`check_append`](crate::spool::check_append)), decided in the same transaction as the insert: an event is
    ///   refused, never accepted and then left undelivered.
    /// - Ids starting with [`OPERATOR_EVENT_PREFIX`](crate::spool::OPERATOR_EVENT_PREFIX) (`cairn:`) are the spool's own
    ///   ([`operator_event`](crate::spool::operator_event)): refused before anything is read ([`check_producer_event_id`](crate::spool::check_producer_event_id)).
    ///
    /// # Errors
    /// [`crate::Error::Reserved`] for an id starting with `cairn:` (nothing is written);
    /// [`crate::Error::UnknownRun`]; [`crate::Error::RunClosed`] for a new event id on a closed
    /// or finished run (nothing is written); [`crate::Error::InvalidInput`] for a payload over
    /// [`MAX_RUN_EVENT_PAYLOAD`](crate::spool::MAX_RUN_EVENT_PAYLOAD).
    async fn append_event(
        &self,
        run: RunId,
        event_id: &RunEventId,
        payload: Vec<u8>,
    ) -> Result<EventAppended>;

    /// Closes the run's event stream: its producer has appended its last event.
    ///
    /// # Contract
    /// - Allowed in every state. An [`EventStream::Open`](crate::spool::EventStream::Open) or [`EventStream::Unmarked`](crate::spool::EventStream::Unmarked) run
    ///   becomes [`EventStream::Closed`](crate::spool::EventStream::Closed) ([`CloseOutcome::Closed`]); closing a closed run
    ///   writes nothing ([`CloseOutcome::AlreadyClosed`]).
    /// - Serialized with [`Spool::append_event`] on the run (one transaction, the run row's
    ///   lock): every append that returned before the close is stored, and every append that
    ///   starts after it is refused with [`crate::Error::RunClosed`]. So "closed and no
    ///   unacknowledged event", read in that order, stays true: the invariant the delivery
    ///   worker finishes a run on.
    /// - Changes nothing else (state, schedule, lease) and wakes no one.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`].
    async fn close_run(&self, run: RunId) -> Result<CloseOutcome>;

    /// Gives a claimed run back to its queue without spending an attempt: for a holder that
    /// cannot make progress for a reason that is not the run's fault (its producer has not
    /// closed it yet, the collector refuses this server's credentials).
    ///
    /// # Contract
    /// - Token checked as for [`Spool::heartbeat`].
    /// - Cancel requested → `canceled` ([`release_action`](crate::spool::release_action)).
    /// - Otherwise → `queued` with `attempts` one less (the claim's attempt is given back, so
    ///   releasing never parks a run), no lease, `due_at = now + delay`, the reason unchanged.
    ///   Wakes no one: the run becomes due by time.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::LeaseLost`] for a stale token;
    /// [`crate::Error::InvalidTransition`] when the run is no longer claimed;
    /// [`crate::Error::InvalidInput`] for a delay over [`MAX_LEASE`](crate::spool::MAX_LEASE).
    async fn release(&self, run: RunId, token: LeaseToken, delay: Duration) -> Result<Nacked>;

    /// An operator's retry of a parked run: it goes back to its queue with a fresh attempt
    /// budget, due at once.
    ///
    /// # Contract
    /// - Only a `parked` run ([`transition`](crate::spool::transition) with [`Action::Requeue`](crate::spool::Action::Requeue)). It becomes `queued`
    ///   with `attempts` 0 (the whole `max_attempts` budget again: whatever parked it is
    ///   taken to be fixed), `due_at = now`, no lease, no cancel request, no `finished_at`;
    ///   its `reason` stays (why it was last parked) and its token stays stale.
    /// - In the same transaction the spool appends one event to the run's stream recording
    ///   the action ([`operator_event`](crate::spool::operator_event) with [`Action::Requeue`](crate::spool::Action::Requeue): who asked, the parked
    ///   reason, the attempts spent), although a parked run refuses producers' appends
    ///   ([`check_append`](crate::spool::check_append)): the spool's own event is written by this method, never through
    ///   [`Spool::append_event`], and only on this transition, when no consumer holds the run.
    ///   So a lease holder's view of a closed stream stays final; the event is delivered like
    ///   any other once the run is claimed again. A closed stream stays closed.
    /// - Wakes the queue's subscribers after commit.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::InvalidTransition`] (carrying the run's
    /// state) for a run that is not parked: nothing is written; [`crate::Error::InvalidInput`]
    /// for a `by` that [`check_operator`](crate::spool::check_operator) refuses.
    async fn retry_parked(&self, run: RunId, by: &str) -> Result<Unparked>;

    /// An operator's discard of a parked run: it ends `canceled` for good.
    ///
    /// # Contract
    /// - Only a `parked` run ([`transition`](crate::spool::transition) with [`Action::Discard`](crate::spool::Action::Discard)). It becomes
    ///   `canceled` with `finished_at = now` (retention counts from the discard); its `reason`
    ///   stays.
    /// - In the same transaction the spool appends one event recording the action
    ///   ([`operator_event`](crate::spool::operator_event) with [`Action::Discard`](crate::spool::Action::Discard)), as for [`Spool::retry_parked`].
    /// - Wakes no one.
    ///
    /// # Errors
    /// As [`Spool::retry_parked`].
    async fn discard(&self, run: RunId, by: &str) -> Result<Unparked>;

    /// The run's stored events with seq greater than `after`, in seq order, at most `limit`.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::InvalidInput`] for `limit` outside
    /// 1..=[`MAX_BATCH`].
    async fn events(&self, run: RunId, after: u64, limit: usize) -> Result<Vec<RunEvent>>;

    /// As [`Spool::events`], and stops before the event that would take their payloads' bytes
    /// past `max_bytes`; the first event goes whatever its size. A server answering untrusted
    /// readers bounds a page's memory with it, not only its count.
    ///
    /// # Contract
    /// The events are the longest prefix of [`Spool::events`]'s (same `after` and `limit`)
    /// whose payloads total at most `max_bytes`, and at least the first. The default reads
    /// those events and cuts them; a backend overrides it to read no more than it returns.
    ///
    /// # Errors
    /// As [`Spool::events`].
    async fn events_within(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<RunEvent>> {
        let mut events = self.events(run, after, limit).await?;
        keep_events_within(&mut events, max_bytes);
        Ok(events)
    }

    /// Removes delivered events from the run's stream and returns how many were removed.
    ///
    /// # Contract
    /// Ids the run does not hold are ignored, so repeating a call is harmless.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`]; [`crate::Error::InvalidInput`] for more than
    /// [`MAX_ACK_IDS`](crate::spool::MAX_ACK_IDS) ids.
    async fn acknowledge_events(&self, run: RunId, event_ids: &[RunEventId]) -> Result<u64>;

    /// Sets a named fact on a run, once.
    ///
    /// # Contract
    /// First writer wins: setting an unset fact stores it ([`FactOutcome::Set`]); setting it
    /// again to the same bytes writes nothing ([`FactOutcome::AlreadySet`]). Allowed in every
    /// state.
    ///
    /// # Errors
    /// [`crate::Error::FactConflict`] carrying the stored value when it differs;
    /// [`crate::Error::UnknownRun`]; [`crate::Error::InvalidInput`] for a value over
    /// [`MAX_FACT_VALUE`](crate::spool::MAX_FACT_VALUE).
    async fn set_fact(&self, run: RunId, name: &FactName, value: Vec<u8>) -> Result<FactOutcome>;

    /// The run's facts.
    ///
    /// # Errors
    /// [`crate::Error::UnknownRun`].
    async fn facts(&self, run: RunId) -> Result<std::collections::BTreeMap<FactName, Vec<u8>>>;

    /// Removes old events and finished runs, in bounded batches.
    ///
    /// # Contract
    /// - Driven by [`RetentionPass`](crate::spool::RetentionPass): expired events first, then the oldest events while the
    ///   total event payload is over `policy.max_bytes`, then terminal runs that hold no event
    ///   and finished more than `policy.max_age` ago (with their facts).
    /// - Each batch is one transaction deleting at most `budget.batch_size` rows; no batch
    ///   starts after the budget is spent. A failure between batches leaves every batch before
    ///   it committed and the store consistent.
    /// - After a complete pass (`report.complete`), no event is older than `max_age` and the
    ///   total event payload is at most `max_bytes`.
    /// - Live runs and their events' sequence counters are never touched.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for an invalid budget.
    async fn retention_pass(
        &self,
        policy: &RetentionPolicy,
        budget: &RetentionBudget,
    ) -> Result<RetentionReport>;

    /// A handle that resolves when new work may exist in `queue`.
    ///
    /// # Contract
    /// - Wakes for runs created in or returned to `queue` (retryable nacks) after this call,
    ///   by this or any other process; see [`Wakeup::wait`]. A process that writes straight to
    ///   the store (an offline hook) wakes a running subscriber within a second.
    /// - Runs that become due by time alone (`not_before`, backoff, expired leases) wake no
    ///   one: a consumer also polls at an interval of its choosing.
    ///
    /// # Errors
    /// [`crate::Error::Unavailable`] when notifications cannot be set up.
    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>>;

    /// Imports runs from another system (the legacy importer, [`legacy`](crate::spool::legacy)), keeping their ids
    /// and dedup keys, once per source.
    ///
    /// # Contract
    /// - Atomic: one transaction writes every created run (with its events, numbered 1, 2, …
    ///   in the order given, and its facts) and the source's completion marker, keyed by
    ///   `source.fingerprint`; on any error nothing was written.
    /// - Once: when a marker for the fingerprint exists, nothing is written and the result is
    ///   [`RunImportOutcome::AlreadyImported`] with what the marker recorded. Two concurrent
    ///   imports of one source create its runs once.
    /// - A run whose `(queue, dedup_key)` is present already is not created (not duplicated,
    ///   the present run untouched) and is reported in `existing`.
    /// - Created runs keep every field given; `updated_at` is the import time, they hold no
    ///   lease, and their enqueue order is the order given. Nothing is superseded. Created
    ///   queued runs wake their queues' subscribers.
    ///
    /// The provided body refuses: a backend without import support says so rather than
    /// pretending.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for a batch [`check_import`](crate::spool::check_import) refuses;
    /// [`crate::Error::Conflict`] when a run id to be created is stored already under another
    /// key; [`crate::Error::Backend`] from a backend that does not implement imports.
    async fn import_runs(
        &self,
        source: &ImportSource,
        runs: Vec<ImportedRun>,
    ) -> Result<RunImportOutcome> {
        let _ = (source, runs);
        Err(crate::Error::backend(
            "spool",
            "importing runs is not implemented by this backend yet; nothing was written",
        ))
    }

    /// The earliest time a run of `queue` is or becomes due (see [`Spool::claim`]): the
    /// smallest `due_at` of its live runs, or `None` when it has none. The consumer loop
    /// sleeps until then when a claim found nothing, since time alone wakes no subscriber.
    ///
    /// # Contract
    /// - Counts `queued` runs (their not-before or retry time) and `claimed` runs (lease
    ///   expiry plus backoff), whether or not that time has passed.
    /// - Read only; a hint, not a reservation: another consumer may claim the run first.
    ///
    /// The provided body pages through [`Spool::runs`], which is correct for any backend and
    /// linear in the queue's live runs; backends override it with one indexed query
    /// (`SELECT min(due_at) … WHERE queue = ? AND due_at IS NOT NULL`).
    ///
    /// # Errors
    /// Backend errors only.
    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        let mut earliest: Option<Timestamp> = None;
        for state in [RunState::Queued, RunState::Claimed] {
            let mut filter = RunFilter {
                queue: Some(queue.clone()),
                state: Some(state),
                after: None,
            };
            loop {
                let page = self.runs(&filter, MAX_BATCH).await?;
                for due in page.iter().filter_map(|r| r.due_at) {
                    earliest = Some(earliest.map_or(due, |e| e.min(due)));
                }
                match page.last() {
                    Some(last) if page.len() == MAX_BATCH => filter.after = Some(last.run_id),
                    _ => break,
                }
            }
        }
        Ok(earliest)
    }

    /// Pauses or resumes `queue` in every process; returns its flow as stored.
    ///
    /// # Contract
    /// - While paused, [`Spool::claim`] of the queue hands out nothing and settles nothing.
    ///   Claimed runs keep their leases and heartbeat, ack, nack and release as usual;
    ///   enqueues land as usual.
    /// - Stored: it survives restarts and is seen by every process's next claim.
    /// - Resuming wakes the queue's subscribers (as an enqueue does), in every process.
    /// - Idempotent; the queue's limits are untouched.
    /// - Resuming a queue without limits leaves it at the defaults, which the store does not
    ///   keep: the answer is [`QueueFlow::default`] (`updated_at` `None`) and
    ///   [`Spool::queue_flows`] no longer lists the queue.
    ///
    /// The provided body refuses, as for every flow and schedule method: a backend without
    /// flow control says so rather than ignoring it.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend that does not implement flow control.
    async fn set_queue_paused(&self, queue: &QueueName, paused: bool) -> Result<QueueFlow> {
        let _ = (queue, paused);
        Err(flow_unsupported())
    }

    /// Replaces `queue`'s limits (every field; `None` removes that limit); returns its flow as
    /// stored.
    ///
    /// # Contract
    /// - Enforced by every later claim of the queue, in every process, inside the claim
    ///   itself: concurrent claims never together exceed a limit (see
    ///   the module docs of `flow.rs`). Runs claimed before a limit was lowered keep their
    ///   leases; no new claim is made until the queue is under the new limit.
    /// - A claim under [`QueueLimits::max_claimed`] or [`QueueLimits::per_partition`] counts
    ///   the runs claimed at once: state `claimed` with `due_at` ahead of now.
    /// - [`QueueLimits::rate`]: the runs handed out in any window of its length are at most
    ///   its `claims` (windows over the spool's clock).
    /// - The pause state is untouched. Raising or removing a limit wakes the queue's
    ///   subscribers.
    /// - Removing the rate limit forgets its window (a rate limit set again starts with an
    ///   empty one). Removing every limit of a running queue leaves it at the defaults, which
    ///   the store does not keep: the answer is [`QueueFlow::default`] (`updated_at` `None`)
    ///   and [`Spool::queue_flows`] no longer lists the queue.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for limits [`check_limits`](crate::spool::check_limits)
    /// refuses; [`crate::Error::Backend`] from a backend without flow control.
    async fn set_queue_limits(&self, queue: &QueueName, limits: &QueueLimits) -> Result<QueueFlow> {
        let _ = (queue, limits);
        Err(flow_unsupported())
    }

    /// `queue`'s stored flow: running and unlimited ([`QueueFlow::default`]) when none is
    /// stored (nothing was ever set, or the queue was set back to running and unlimited).
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend without flow control.
    async fn queue_flow(&self, queue: &QueueName) -> Result<QueueFlow> {
        let _ = queue;
        Err(flow_unsupported())
    }

    /// Every queue with a stored flow — paused, or with a limit — by queue name. A queue set
    /// back to running and unlimited is not listed.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend without flow control.
    async fn queue_flows(&self) -> Result<Vec<(QueueName, QueueFlow)>> {
        Err(flow_unsupported())
    }

    /// Stores a schedule, creating it or replacing the one of its name.
    ///
    /// # Contract
    /// - Created: the high-water mark is now, so the first tick enqueued is the first after
    ///   now; the revision is 1.
    /// - Replaced: every field is replaced, the revision is bumped, the creation time and the
    ///   high-water mark are kept (so an edit never re-enqueues a past tick) — except that an
    ///   edit of the cron expression or time zone moves the mark up to now, so none of the new
    ///   expression's ticks before the edit is enqueued, whatever the catch-up policy;
    ///   schedulers see the new version at their next tick.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for a cron expression or time zone that does not parse
    /// or an expression that never fires, a payload or options an enqueue would refuse,
    /// options with `not_before`, or a `CatchUp::All` cap outside
    /// 1..=[`MAX_CATCH_UP`](crate::spool::MAX_CATCH_UP) (all of them
    /// [`check_schedule`](crate::spool::check_schedule));
    /// [`crate::Error::Backend`] from a backend without schedules;
    /// [`crate::Error::Incompatible`] from a store older than revision `0009_spool_flow`
    /// ([`schedules_need_revision`](crate::spool::schedules_need_revision)).
    async fn put_schedule(&self, schedule: &Schedule) -> Result<ScheduleInfo> {
        let _ = schedule;
        Err(flow_unsupported())
    }

    /// The schedule of `name`, if stored.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend without schedules;
    /// [`crate::Error::Incompatible`] from a store older than revision `0009_spool_flow`
    /// ([`schedules_need_revision`](crate::spool::schedules_need_revision)).
    async fn schedule(&self, name: &ScheduleName) -> Result<Option<ScheduleInfo>> {
        let _ = name;
        Err(flow_unsupported())
    }

    /// Every stored schedule, by name.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend without schedules;
    /// [`crate::Error::Incompatible`] from a store older than revision `0009_spool_flow`
    /// ([`schedules_need_revision`](crate::spool::schedules_need_revision)).
    async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        Err(flow_unsupported())
    }

    /// Removes the schedule of `name`; whether one was stored. Runs it enqueued stay.
    ///
    /// # Errors
    /// [`crate::Error::Backend`] from a backend without schedules;
    /// [`crate::Error::Incompatible`] from a store older than revision `0009_spool_flow`
    /// ([`schedules_need_revision`](crate::spool::schedules_need_revision)).
    async fn remove_schedule(&self, name: &ScheduleName) -> Result<bool> {
        let _ = name;
        Err(flow_unsupported())
    }

    /// Enqueues the runs of a schedule's `ticks` that lie after its high-water mark, and moves
    /// the mark to the latest of them, in one transaction.
    ///
    /// # Contract
    /// - Only when the stored schedule's revision is `revision`; otherwise (edited or removed
    ///   since the caller read it) nothing is written and the result is
    ///   [`ScheduleFired::Stale`].
    /// - Each tick after the mark is enqueued on the schedule's queue under
    ///   [`schedule_tick_key`](crate::spool::schedule_tick_key), with the stored payload and
    ///   options; ticks at or before the mark are skipped. So a tick is enqueued at most once
    ///   across all processes and all time, even after retention removed its run.
    /// - Atomic: the runs and the mark commit together; created runs wake their queue.
    ///
    /// # Errors
    /// [`crate::Error::InvalidInput`] for more than
    /// [`MAX_FIRE_TICKS`](crate::spool::MAX_FIRE_TICKS) ticks or ticks not strictly ascending;
    /// [`crate::Error::Backend`] from a backend without schedules;
    /// [`crate::Error::Incompatible`] from a store older than revision `0009_spool_flow`
    /// ([`schedules_need_revision`](crate::spool::schedules_need_revision)).
    async fn fire_schedule(
        &self,
        name: &ScheduleName,
        revision: u64,
        ticks: &[Timestamp],
    ) -> Result<ScheduleFired> {
        let _ = (name, revision, ticks);
        Err(flow_unsupported())
    }
}

/// The refusal of the provided flow-control and schedule methods.
fn flow_unsupported() -> crate::Error {
    crate::Error::backend(
        "spool",
        "queue flow control and schedules are not implemented by this backend yet; nothing was written",
    )
}
