//! Names, ids, limits and the values the [`Spool`](super::Spool) trait takes and returns.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::backoff::BackoffPolicy;
use super::clock::Timestamp;
use super::dedup::{DedupKey, SupersedeGroup};
use crate::error::{Error, Result};

/// Largest queue name, in bytes.
pub const MAX_QUEUE_LEN: usize = 128;
/// Largest consumer id, in bytes.
pub const MAX_CONSUMER_LEN: usize = 256;
/// Largest fact name, in bytes.
pub const MAX_FACT_NAME: usize = 128;
/// Largest fact value, in bytes (64 KiB).
pub const MAX_FACT_VALUE: usize = 64 * 1024;
/// Largest run event id, in bytes.
pub const MAX_RUN_EVENT_ID: usize = 256;
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

fn check_text(what: &'static str, max: usize, s: &str) -> Result<()> {
    if s.is_empty() {
        return Err(Error::invalid(what, "must not be empty"));
    }
    if s.len() > max {
        return Err(Error::invalid(
            what,
            format!("is {} bytes; the limit is {max}", s.len()),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::invalid(what, "must not contain control characters"));
    }
    Ok(())
}

macro_rules! text_name {
    ($(#[$doc:meta])* $name:ident, $what:literal, $max:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps the name.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when it is empty, holds a control character or is longer
            #[doc = concat!("than [`", stringify!($max), "`] bytes.")]
            pub fn new(s: impl Into<String>) -> Result<Self> {
                let s = s.into();
                check_text($what, $max, &s)?;
                Ok(Self(s))
            }

            /// The name.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_name!(
    /// A named stream of work (`telemetry`, `gate`): printable text of at most
    /// [`MAX_QUEUE_LEN`] bytes.
    QueueName,
    "queue name",
    MAX_QUEUE_LEN
);
text_name!(
    /// Who holds a lease (`host/pid/worker`), recorded on the run for operators: printable text
    /// of at most [`MAX_CONSUMER_LEN`] bytes.
    ConsumerId,
    "consumer id",
    MAX_CONSUMER_LEN
);
text_name!(
    /// The name of a run fact (`stage.build`, `review`, `merged`): printable text of at most
    /// [`MAX_FACT_NAME`] bytes.
    FactName,
    "fact name",
    MAX_FACT_NAME
);

/// The caller-chosen id of a run event; re-appending an id the run still holds is a no-op.
/// Non-empty bytes, at most [`MAX_RUN_EVENT_ID`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RunEventId(Vec<u8>);

impl RunEventId {
    /// Validates and wraps an event id.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is empty or longer than [`MAX_RUN_EVENT_ID`].
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(Error::invalid("run event id", "must not be empty"));
        }
        if bytes.len() > MAX_RUN_EVENT_ID {
            return Err(Error::invalid(
                "run event id",
                format!("is {} bytes; the limit is {MAX_RUN_EVENT_ID}", bytes.len()),
            ));
        }
        Ok(Self(bytes))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

macro_rules! id128 {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 16]);

        impl $name {
            /// The raw 16 bytes (what backends store).
            pub fn as_bytes(&self) -> &[u8; 16] {
                &self.0
            }

            /// Reads the value from exactly 16 bytes.
            ///
            /// # Errors
            /// [`Error::InvalidInput`] when `bytes` is not 16 bytes long.
            pub fn from_slice(bytes: &[u8]) -> Result<Self> {
                let arr: [u8; 16] = bytes.try_into().map_err(|_| {
                    Error::invalid($what, format!("must be 16 bytes, got {}", bytes.len()))
                })?;
                Ok(Self(arr))
            }

            /// Parses 32 hex digits, with or without the UUID hyphens (`8-4-4-4-12`).
            ///
            /// # Errors
            /// [`Error::InvalidInput`] for anything else.
            pub fn parse(s: &str) -> Result<Self> {
                let hyphens: Vec<usize> = s.match_indices('-').map(|(i, _)| i).collect();
                if !hyphens.is_empty() && hyphens != [8, 13, 18, 23] {
                    return Err(Error::invalid($what, "hyphens must be in UUID positions"));
                }
                let plain: String = s.chars().filter(|c| *c != '-').collect();
                let bytes = hex::decode(&plain)
                    .map_err(|_| Error::invalid($what, "must be 32 hex digits"))?;
                Self::from_slice(&bytes)
            }
        }

        impl fmt::Display for $name {
            /// The hyphenated UUID form.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let h = hex::encode(self.0);
                write!(f, "{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self)
            }
        }
    };
}

id128!(
    /// A run's id: 128 bits in the UUIDv7 layout (48-bit Unix milliseconds from the spool's
    /// clock, then random bits), so ids are unique across stores, roughly time-ordered for index
    /// locality, and any imported UUID can be kept as is.
    ///
    /// Backends create ids with [`RunId::generate`] *before* writing, so an enqueue is one
    /// upsert that returns the stored id: the run was created iff that id is the generated one.
    RunId,
    "run id"
);
id128!(
    /// The proof of holding a run's lease, random per claim. Every claim issues a new token;
    /// the previous holder's token is then stale.
    LeaseToken,
    "lease token"
);

impl RunId {
    /// A new id for a run enqueued at `now`.
    pub fn generate(now: Timestamp) -> Self {
        let mut b: [u8; 16] = rand::random::<u128>().to_be_bytes();
        let ms = now.as_unix_millis().clamp(0, (1 << 48) - 1) as u64;
        b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        b[6] = (b[6] & 0x0f) | 0x70;
        b[8] = (b[8] & 0x3f) | 0x80;
        Self(b)
    }
}

impl LeaseToken {
    /// A new random token.
    pub fn generate() -> Self {
        Self(rand::random::<u128>().to_be_bytes())
    }
}

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
    /// Whether a cancel was already requested (possible on a reclaimed run).
    pub cancel_requested: bool,
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
    /// When its state last changed.
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
    fn run_id_layout_and_round_trip() {
        let now = Timestamp::from_unix_micros(1_800_000_000_123_456);
        let id = RunId::generate(now);
        let ms = u64::from_be_bytes([0, 0, id.0[0], id.0[1], id.0[2], id.0[3], id.0[4], id.0[5]]);
        assert_eq!(ms, 1_800_000_000_123);
        assert_eq!(id.0[6] >> 4, 7, "UUID version 7");
        assert_eq!(id.0[8] >> 6, 0b10, "RFC 4122 variant");
        let s = id.to_string();
        assert_eq!(s.len(), 36);
        assert_eq!(RunId::parse(&s).unwrap(), id);
        assert_eq!(RunId::parse(&s.replace('-', "")).unwrap(), id);
        assert_ne!(RunId::generate(now), id);
        assert!(RunId::parse("0123").is_err());
        assert!(RunId::parse("0123456-78-9abc-def0-123456789abcdef").is_err());
    }

    #[test]
    fn names_are_validated() {
        assert!(QueueName::new("gate").is_ok());
        for bad in ["", "a\nb", &"q".repeat(MAX_QUEUE_LEN + 1)] {
            assert!(matches!(
                QueueName::new(bad),
                Err(Error::InvalidInput { .. })
            ));
        }
        assert!(RunEventId::new(Vec::new()).is_err());
        assert!(RunEventId::new(vec![0u8; MAX_RUN_EVENT_ID + 1]).is_err());
        assert!(FactName::new("merged").is_ok());
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
}
