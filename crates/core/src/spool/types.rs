//! The values the [`Spool`](super::Spool) trait takes and returns, its limits and input checks.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::backoff::BackoffPolicy;
use super::clock::Timestamp;
use super::dedup::{DedupKey, SupersedeGroup};
use super::ids::{ConsumerId, FactName, LeaseToken, QueueName, RunEventId, RunId};
use crate::error::{Error, Result};

/// Largest fact value, in bytes (64 KiB).
pub const MAX_FACT_VALUE: usize = 64 * 1024;
/// Largest run payload, in bytes (1 MiB).
pub const MAX_RUN_PAYLOAD: usize = 1024 * 1024;
/// Largest run event payload, in bytes (1 MiB).
pub const MAX_RUN_EVENT_PAYLOAD: usize = 1024 * 1024;
/// Longest nack reason kept, in bytes; longer reasons are cut at a character boundary (a nack
/// must not fail because its error text is long).
pub const MAX_REASON_LEN: usize = 4096;
/// Most runs one claim hands out, and most rows one listing or event read returns.
pub const MAX_BATCH: usize = 1000;
/// Most event ids one `acknowledge_events` call takes.
pub const MAX_ACK_IDS: usize = 1000;
/// Shortest lease a claim or heartbeat may ask for.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// Longest lease a claim or heartbeat may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// Largest `max_attempts` an enqueue may ask for.
pub const MAX_ATTEMPTS_LIMIT: u32 = 1000;
/// `max_attempts` when an enqueue names none.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;
/// Most items one [`Spool::enqueue_many`](super::Spool::enqueue_many) takes.
pub const MAX_ENQUEUE_BATCH: usize = 10_000;
/// Most payload bytes one [`Spool::enqueue_many`](super::Spool::enqueue_many) takes, all its
/// items together (64 MiB).
pub const MAX_ENQUEUE_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// Where a run is in its life. `Queued` and `Claimed` are live; the rest are terminal.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum RunState {
    /// Waiting to be claimed (possibly not before a retry time).
    Queued,
    /// Held by a consumer under a lease (possibly expired and not yet claimed again).
    Claimed,
    /// Acked by its lease holder.
    Succeeded,
    /// Finished by its lease holder with a failure outcome (`NackKind::Failed`): the work ran
    /// and its result is "failed"; nothing will retry it.
    Failed,
    /// Canceled: while queued, by its holder after a cancel request, or discarded by an
    /// operator while parked ([`Spool::discard`](super::Spool::discard)).
    Canceled,
    /// Replaced, while queued, by a newer run of its supersede group.
    Superseded,
    /// Given up on (permanent nack, attempts exhausted, or the last lease expired); carries the
    /// reason. Needs an operator's attention: [`Spool::retry_parked`] sends it back to its
    /// queue, [`Spool::discard`] ends it canceled.
    ///
    /// [`Spool::retry_parked`]: super::Spool::retry_parked
    /// [`Spool::discard`]: super::Spool::discard
    Parked,
}

impl RunState {
    /// Every state, in lifecycle order.
    pub const ALL: [RunState; 7] = [
        RunState::Queued,
        RunState::Claimed,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Canceled,
        RunState::Superseded,
        RunState::Parked,
    ];

    /// Whether the run is finished (everything but `Queued` and `Claimed`): no consumer or
    /// producer moves it any more, and it takes no events. The one way out of a terminal
    /// state is an operator's: a `Parked` run may be retried or discarded
    /// ([`Spool::retry_parked`](super::Spool::retry_parked),
    /// [`Spool::discard`](super::Spool::discard)).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Claimed)
    }

    /// The lowercase name backends store and the CLI prints.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Claimed => "claimed",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Canceled => "canceled",
            RunState::Superseded => "superseded",
            RunState::Parked => "parked",
        }
    }

    /// Parses [`RunState::as_str`]'s form.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for any other string.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "run state",
                    "expected one of queued, claimed, succeeded, failed, canceled, superseded, parked",
                )
            })
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    /// Claims allowed before the run is parked (default [`DEFAULT_MAX_ATTEMPTS`]; 1 to
    /// [`MAX_ATTEMPTS_LIMIT`]).
    pub max_attempts: Option<u32>,
    /// Higher priorities are claimed first (default 0).
    pub priority: i32,
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

    /// Checks the options, as every backend's enqueue does, and returns the attempt limit to
    /// store.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the attempt limit is 0 or above [`MAX_ATTEMPTS_LIMIT`], or
    /// the not-before time is outside the range [`Timestamp::check`] accepts.
    pub fn effective_max_attempts(&self) -> Result<u32> {
        if let Some(t) = self.not_before {
            t.check("not-before time")?;
        }
        match self.max_attempts {
            None => Ok(DEFAULT_MAX_ATTEMPTS),
            Some(n) if (1..=MAX_ATTEMPTS_LIMIT).contains(&n) => Ok(n),
            Some(n) => Err(Error::invalid(
                "max attempts",
                format!("is {n}; it must be between 1 and {MAX_ATTEMPTS_LIMIT}"),
            )),
        }
    }
}

/// One run of a bulk enqueue ([`Spool::enqueue_many`](super::Spool::enqueue_many)): what
/// [`Spool::enqueue`](super::Spool::enqueue) takes, less the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueItem {
    /// The run's dedup key within the batch's queue.
    pub key: DedupKey,
    /// The run's payload (at most [`MAX_RUN_PAYLOAD`] bytes).
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

/// Checks a bulk enqueue before anything is written, as every backend must: at most
/// [`MAX_ENQUEUE_BATCH`] items and [`MAX_ENQUEUE_BATCH_BYTES`] payload bytes in all, each
/// item's payload and options valid. Returns each item's effective `max_attempts`.
///
/// # Errors
/// [`Error::InvalidInput`] for the batch as a whole; [`Error::InvalidBatchItem`] naming the
/// first invalid item's index (from 0) and its reason.
pub fn check_enqueue_batch(items: &[EnqueueItem]) -> Result<Vec<u32>> {
    if items.len() > MAX_ENQUEUE_BATCH {
        return Err(Error::invalid(
            "enqueue batch",
            format!(
                "holds {} items; the limit is {MAX_ENQUEUE_BATCH}",
                items.len()
            ),
        ));
    }
    let bytes = items
        .iter()
        .map(|i| i.payload.len())
        .fold(0usize, usize::saturating_add);
    if bytes > MAX_ENQUEUE_BATCH_BYTES {
        return Err(Error::invalid(
            "enqueue batch",
            format!("holds {bytes} payload bytes; the limit is {MAX_ENQUEUE_BATCH_BYTES}"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            check_payload("run payload", MAX_RUN_PAYLOAD, &item.payload)
                .and_then(|()| item.options.effective_max_attempts())
                .map_err(|e| Error::InvalidBatchItem {
                    index,
                    error: Box::new(e),
                })
        })
        .collect()
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

/// Whether a run's producer may still append events: the producer-side end of a run
/// ([`Spool::close_run`](super::Spool::close_run)).
///
/// The rule every backend keeps ([`check_append`]): an event is accepted only while the run is
/// live (`queued` or `claimed`) and not [`EventStream::Closed`], checked in the same
/// transaction (under the same row lock) as the insert and as [`Spool::close_run`]. So once a
/// reader has seen a run closed, its set of events is final: a consumer that then reads no
/// unacknowledged event has delivered every event ever accepted for it, and may finish it.
///
/// [`Spool::close_run`]: super::Spool::close_run
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum EventStream {
    /// Enqueued by a build that knows about closing: its producer appends events until it
    /// closes the run.
    Open,
    /// Closed by its producer, by an operator (`cairn run close`), or by a consumer that
    /// closed an [`EventStream::Unmarked`] run: no more events are accepted.
    Closed,
    /// Written by a build older than revision `0006_spool_run_close`, before that revision,
    /// or imported: no producer will close it. Events are accepted while it is live; a
    /// consumer that needs a final set of events (the delivery worker) closes it itself when
    /// it takes it, so later appends are refused instead of left undelivered.
    Unmarked,
}

impl EventStream {
    /// The lowercase name the CLI prints and the HTTP API returns.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStream::Open => "open",
            EventStream::Closed => "closed",
            EventStream::Unmarked => "unmarked",
        }
    }

    /// Whether appends are refused.
    pub fn is_closed(self) -> bool {
        self == EventStream::Closed
    }

    /// The stored form: `NULL` (unmarked), `false` (open), `true` (closed).
    pub fn to_stored(self) -> Option<bool> {
        match self {
            EventStream::Open => Some(false),
            EventStream::Closed => Some(true),
            EventStream::Unmarked => None,
        }
    }

    /// Reads [`EventStream::to_stored`]'s form.
    pub fn from_stored(closed: Option<bool>) -> Self {
        match closed {
            Some(false) => EventStream::Open,
            Some(true) => EventStream::Closed,
            None => EventStream::Unmarked,
        }
    }
}

/// What [`Spool::close_run`](super::Spool::close_run) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CloseOutcome {
    /// The run was open (or unmarked); now it takes no more events.
    Closed,
    /// The run was closed already; nothing was written.
    AlreadyClosed,
}

/// The append rule ([`EventStream`]): refuses an event for a run in a terminal state or
/// closed. Every backend calls it with what it read in the append's transaction.
///
/// # Errors
/// [`Error::RunClosed`].
pub fn check_append(run: RunId, state: RunState, stream: EventStream) -> Result<()> {
    if state.is_terminal() || stream.is_closed() {
        Err(Error::RunClosed {
            run,
            state,
            closed: stream.is_closed(),
        })
    } else {
        Ok(())
    }
}

/// Checks the delay of a [`Spool::release`](super::Spool::release): at most [`MAX_LEASE`].
///
/// # Errors
/// [`Error::InvalidInput`] for a longer delay.
pub fn check_release_delay(delay: Duration) -> Result<()> {
    if delay > MAX_LEASE {
        return Err(Error::invalid(
            "release delay",
            format!("is {delay:?}; it must be at most {MAX_LEASE:?}"),
        ));
    }
    Ok(())
}

/// Why [`Error::RunClosed`] refused an append, in words.
pub fn closed_reason(state: RunState, closed: bool) -> String {
    match (closed, state.is_terminal()) {
        (true, true) => format!("it was closed and is {state}"),
        (true, false) => "its producer closed it".to_owned(),
        (false, _) => format!("it is {state}"),
    }
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
}

impl SpoolStats {
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

/// Where an import came from: the completion marker [`Spool::import_runs`] records, so that
/// importing the same source again is a no-op.
///
/// [`Spool::import_runs`]: super::Spool::import_runs
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportSource {
    /// BLAKE3 over the source's content (for a legacy directory: the bytes the import
    /// accepted, see `docs/LEGACY_FORMAT.md`). The marker's key.
    pub fingerprint: [u8; 32],
    /// What the source was, for operators (`legacy directory /var/lib/made, generation 7`):
    /// printable text of at most [`MAX_IMPORT_DESCRIPTION`] bytes.
    pub description: String,
}

/// Longest [`ImportSource::description`], in bytes.
pub const MAX_IMPORT_DESCRIPTION: usize = 4096;

/// One run event carried into the spool by an import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedEvent {
    /// The event's id (unique within its run).
    pub event_id: RunEventId,
    /// Its payload (at most [`MAX_RUN_EVENT_PAYLOAD`] bytes).
    pub payload: Vec<u8>,
    /// When it was appended at the source.
    pub created_at: Timestamp,
}

/// One run carried into the spool by an import, with its identity kept: its run id and its
/// `(queue, dedup_key)` are stored as given.
///
/// A lease cannot be carried over, so an imported run is never `Claimed`: the source's
/// running runs arrive `Queued` (or settled, as an expired lease would settle them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedRun {
    /// The run's id, kept.
    pub run_id: RunId,
    /// Its queue.
    pub queue: QueueName,
    /// Its dedup key, kept.
    pub dedup_key: DedupKey,
    /// Its supersede group.
    pub supersede_group: Option<SupersedeGroup>,
    /// The payload (at most [`MAX_RUN_PAYLOAD`] bytes).
    pub payload: Vec<u8>,
    /// Its state: anything but `Claimed`.
    pub state: RunState,
    /// Claims so far (at most `max_attempts`).
    pub attempts: u32,
    /// Claims allowed (1 to [`MAX_ATTEMPTS_LIMIT`]).
    pub max_attempts: u32,
    /// Its priority.
    pub priority: i32,
    /// When it was first submitted.
    pub enqueued_at: Timestamp,
    /// For a `Queued` run (and only then), the earliest time a claim may take it.
    pub due_at: Option<Timestamp>,
    /// For a terminal run (and only then), when it finished.
    pub finished_at: Option<Timestamp>,
    /// Why it was parked, failed or last retried (at most [`MAX_REASON_LEN`] bytes, without a
    /// NUL character).
    pub reason: Option<String>,
    /// Its facts (values at most [`MAX_FACT_VALUE`] bytes).
    pub facts: BTreeMap<FactName, Vec<u8>>,
    /// Its undelivered events in order; they get sequence numbers 1, 2, … as stored.
    pub events: Vec<ImportedEvent>,
}

/// When a source was imported and what that import did, as its completion marker records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportMarker {
    /// When the import committed (the spool's clock).
    pub imported_at: Timestamp,
    /// Runs it created.
    pub runs_created: u64,
    /// Runs it found already present (by `(queue, dedup_key)`) and left alone.
    pub runs_existing: u64,
}

/// An imported run whose `(queue, dedup_key)` the spool already held: the existing run was
/// left as it is and the imported one dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExistingRun {
    /// The imported run's id.
    pub imported: RunId,
    /// The id of the run already stored under its key (equal to `imported` when the same run
    /// came in before, e.g. from an earlier state of the same source).
    pub existing: RunId,
}

/// What [`Spool::import_runs`](super::Spool::import_runs) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunImportOutcome {
    /// The runs were imported and the source's completion marker recorded, in one
    /// transaction.
    Imported {
        /// Runs created, in the order given.
        created: Vec<RunId>,
        /// Runs not created because their key was present, in the order given.
        existing: Vec<ExistingRun>,
    },
    /// The source was imported before; nothing was written.
    AlreadyImported(ImportMarker),
}

/// Checks an import batch before anything is written: what every backend's
/// [`Spool::import_runs`](super::Spool::import_runs) refuses.
///
/// # Errors
/// [`Error::InvalidInput`] for a description that is empty, too long or holds control
/// characters; a `Claimed` run; `due_at` set other than on a `Queued` run (or missing on
/// one); `finished_at` set other than on a terminal run (or missing on one); attempts above
/// `max_attempts` or `max_attempts` outside 1..=[`MAX_ATTEMPTS_LIMIT`]; a time (enqueue, due,
/// finish, event) outside the range [`Timestamp::check`] accepts; an oversized payload,
/// event payload, fact value or reason; a reason holding a NUL character (U+0000, which
/// [`clip_reason`] would have replaced); two runs with one id or one `(queue, dedup_key)`; two
/// events of a run with one id.
pub fn check_import(source: &ImportSource, runs: &[ImportedRun]) -> Result<()> {
    let d = &source.description;
    if d.is_empty() || d.len() > MAX_IMPORT_DESCRIPTION || d.chars().any(char::is_control) {
        return Err(Error::invalid(
            "import source description",
            format!("must be 1 to {MAX_IMPORT_DESCRIPTION} bytes of printable text"),
        ));
    }
    let mut ids = std::collections::HashSet::new();
    let mut keys = std::collections::HashSet::new();
    for r in runs {
        let bad =
            |reason: String| Error::invalid("imported run", format!("{}: {reason}", r.run_id));
        if !ids.insert(r.run_id) {
            return Err(bad("appears twice in the batch".into()));
        }
        if !keys.insert((&r.queue, &r.dedup_key)) {
            return Err(bad(format!(
                "its key {} in queue {} is another imported run's too",
                r.dedup_key, r.queue
            )));
        }
        if r.state == RunState::Claimed {
            return Err(bad("a lease cannot be imported; import it queued".into()));
        }
        if r.due_at.is_some() != (r.state == RunState::Queued) {
            return Err(bad("a due time is set exactly on a queued run".into()));
        }
        if r.finished_at.is_some() != r.state.is_terminal() {
            return Err(bad("a finish time is set exactly on a terminal run".into()));
        }
        let times = [Some(r.enqueued_at), r.due_at, r.finished_at];
        let event_times = r.events.iter().map(|e| Some(e.created_at));
        for t in times.into_iter().chain(event_times).flatten() {
            t.check("imported run time")
                .map_err(|e| bad(e.to_string()))?;
        }
        if !(1..=MAX_ATTEMPTS_LIMIT).contains(&r.max_attempts) || r.attempts > r.max_attempts {
            return Err(bad(format!(
                "attempts {} of {} (max attempts must be 1 to {MAX_ATTEMPTS_LIMIT})",
                r.attempts, r.max_attempts
            )));
        }
        check_payload("run payload", MAX_RUN_PAYLOAD, &r.payload)?;
        if r.reason.as_ref().is_some_and(|x| x.len() > MAX_REASON_LEN) {
            return Err(bad(format!("its reason is over {MAX_REASON_LEN} bytes")));
        }
        if r.reason.as_ref().is_some_and(|x| x.contains('\0')) {
            return Err(bad("its reason holds a NUL character (U+0000)".into()));
        }
        for v in r.facts.values() {
            check_payload("fact value", MAX_FACT_VALUE, v)?;
        }
        let mut event_ids = std::collections::HashSet::new();
        for e in &r.events {
            check_payload("run event payload", MAX_RUN_EVENT_PAYLOAD, &e.payload)?;
            if !event_ids.insert(&e.event_id) {
                return Err(bad("two of its events share an id".into()));
            }
        }
    }
    Ok(())
}

/// Checks a lease length.
///
/// # Errors
/// [`Error::InvalidInput`] outside [`MIN_LEASE`]..=[`MAX_LEASE`].
pub fn check_lease(lease: Duration) -> Result<()> {
    if (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        Ok(())
    } else {
        Err(Error::invalid(
            "lease",
            format!("is {lease:?}; it must be between {MIN_LEASE:?} and {MAX_LEASE:?}"),
        ))
    }
}

/// Checks a batch or page limit.
///
/// # Errors
/// [`Error::InvalidInput`] outside 1..=[`MAX_BATCH`].
pub fn check_limit(limit: usize) -> Result<()> {
    if (1..=MAX_BATCH).contains(&limit) {
        Ok(())
    } else {
        Err(Error::invalid(
            "limit",
            format!("is {limit}; it must be between 1 and {MAX_BATCH}"),
        ))
    }
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

/// Checks a payload's size against `max`.
///
/// # Errors
/// [`Error::InvalidInput`] when it is larger.
pub fn check_payload(what: &'static str, max: usize, payload: &[u8]) -> Result<()> {
    if payload.len() > max {
        Err(Error::invalid(
            what,
            format!("is {} bytes; the limit is {max}", payload.len()),
        ))
    } else {
        Ok(())
    }
}

/// Normalizes a nack or park reason as every backend stores it: each NUL character (U+0000),
/// which a Postgres `TEXT` column cannot hold, is replaced by U+FFFD (a reason is never
/// refused: a worker must always be able to nack), then the result is cut to at most
/// [`MAX_REASON_LEN`] bytes at a character boundary.
pub fn clip_reason(reason: &str) -> String {
    let reason = if reason.contains('\0') {
        std::borrow::Cow::Owned(reason.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(reason)
    };
    if reason.len() <= MAX_REASON_LEN {
        return reason.into_owned();
    }
    let mut end = MAX_REASON_LEN;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
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
            },
            "only queued runs' times count"
        );
        assert_eq!(
            stats.queues[&b],
            QueueStats {
                runs: BTreeMap::from([(RunState::Queued, 1)]),
                oldest_queued: Some(t(10)),
            },
            "no zero counts"
        );
    }

    #[test]
    fn state_names_round_trip() {
        for s in RunState::ALL {
            assert_eq!(RunState::parse(s.as_str()).unwrap(), s);
        }
        assert!(RunState::parse("done").is_err());
        let terminal: Vec<RunState> = RunState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal.len(), 5);
    }

    #[test]
    fn limits() {
        assert!(check_lease(MIN_LEASE).is_ok());
        assert!(check_lease(MAX_LEASE).is_ok());
        assert!(check_lease(Duration::from_millis(999)).is_err());
        assert!(check_limit(0).is_err());
        assert!(check_limit(MAX_BATCH + 1).is_err());
        assert!(EnqueueOptions::default()
            .max_attempts(0)
            .effective_max_attempts()
            .is_err());
        assert_eq!(
            EnqueueOptions::default().effective_max_attempts().unwrap(),
            DEFAULT_MAX_ATTEMPTS
        );
        let long = "é".repeat(MAX_REASON_LEN);
        let clipped = clip_reason(&long);
        assert!(clipped.len() <= MAX_REASON_LEN && long.starts_with(&clipped));
    }

    #[test]
    fn a_nul_in_a_reason_is_replaced_not_refused() {
        assert_eq!(clip_reason("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(clip_reason("plain"), "plain");
        // The replacement is longer than a NUL: the result is still cut to the limit.
        let clipped = clip_reason(&"\0".repeat(MAX_REASON_LEN));
        assert!(clipped.len() <= MAX_REASON_LEN && clipped.len() > MAX_REASON_LEN - 3);
        assert!(clipped.chars().all(|c| c == '\u{FFFD}'));
        let exhausted = crate::spool::exhausted_park_reason(3, "x\0y");
        assert!(!exhausted.contains('\0') && exhausted.contains("x\u{FFFD}y"));
    }

    #[test]
    fn an_imported_reason_holding_a_nul_is_refused() {
        let source = ImportSource {
            fingerprint: [7; 32],
            description: "a test source".into(),
        };
        let now = Timestamp::from_unix_micros(1_000_000);
        let run = |reason: &str| ImportedRun {
            run_id: RunId::generate(now),
            queue: QueueName::new("q").unwrap(),
            dedup_key: DedupKey::from_parts(["k"]).unwrap(),
            supersede_group: None,
            payload: vec![],
            state: RunState::Failed,
            attempts: 1,
            max_attempts: 1,
            priority: 0,
            enqueued_at: now,
            due_at: None,
            finished_at: Some(now),
            reason: Some(reason.into()),
            facts: BTreeMap::new(),
            events: vec![],
        };
        assert!(check_import(&source, &[run("a\u{FFFD}b")]).is_ok());
        let err = check_import(&source, &[run("a\0b")]).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }) && err.to_string().contains("NUL"),
            "{err}"
        );
    }
}
