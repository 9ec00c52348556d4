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
    /// Canceled: while queued, or by its holder after a cancel request.
    Canceled,
    /// Replaced, while queued, by a newer run of its supersede group.
    Superseded,
    /// Given up on (permanent nack, attempts exhausted, or the last lease expired); carries the
    /// reason. Needs an operator's attention.
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

    /// Whether no transition leaves this state (everything but `Queued` and `Claimed`).
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
    /// No claim takes the run before this time (default: now).
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

    /// The attempt limit to store, validated.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is 0 or above [`MAX_ATTEMPTS_LIMIT`].
    pub fn effective_max_attempts(&self) -> Result<u32> {
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

/// What [`Spool::set_fact`](super::Spool::set_fact) did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FactOutcome {
    /// The fact was not set; now it is.
    Set,
    /// The fact already had exactly this value; nothing was written.
    AlreadySet,
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

/// Cuts a nack reason to at most [`MAX_REASON_LEN`] bytes at a character boundary.
pub fn clip_reason(reason: &str) -> String {
    if reason.len() <= MAX_REASON_LEN {
        return reason.to_owned();
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
}
