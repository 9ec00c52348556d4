//! The spool's input checks, written once for every backend: the checked constructors of its
//! names, ids, states and times (what turns outside input into a [`QueueName`], a [`RunId`],
//! a [`RunState`], a [`Timestamp`]), and the checks of payloads, leases, page limits, enqueues,
//! releases and appends. Each refuses with [`Error::InvalidInput`] (or the error its doc
//! names) before anything is read or written.
//!
//! The value types themselves are in leaf modules (`ids.rs`, `state.rs`, `timestamp.rs`): the
//! error type names some of them, so they cannot import it; their constructors that can fail
//! are here (those of [`ScheduleName`](super::ScheduleName) and
//! [`PartitionKey`](super::PartitionKey), which refuse more, in `checks/names.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::clock::Clock;
use super::dedup::DedupKey;
use super::ids::{
    ConsumerId, FactName, LeaseToken, QueueName, RunEventId, RunId, TraceParent, MAX_CONSUMER_LEN,
    MAX_FACT_NAME, MAX_QUEUE_LEN, MAX_RUN_EVENT_ID,
};
use super::limits::{
    DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_LIMIT, MAX_BATCH, MAX_ENQUEUE_BATCH,
    MAX_ENQUEUE_BATCH_BYTES, MAX_LEASE, MAX_REASON_LEN, MAX_RUN_PAYLOAD, MIN_LEASE,
};
use super::state::{EventStream, RunState};
use super::timestamp::Timestamp;
use super::types::{EnqueueItem, EnqueueOptions};
use crate::error::{Error, Result};

mod names;
mod text;
pub use names::is_bidi_control;
use text::check_text;

macro_rules! checked_text_name {
    ($name:ident, $what:literal, $max:ident) => {
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
        }
    };
}

checked_text_name!(QueueName, "queue name", MAX_QUEUE_LEN);
checked_text_name!(ConsumerId, "consumer id", MAX_CONSUMER_LEN);
checked_text_name!(FactName, "fact name", MAX_FACT_NAME);
// `ScheduleName` and `PartitionKey`, which operators read in listings, check more: `names.rs`.

impl TraceParent {
    /// Reads a W3C `traceparent` of version `00`: `00-<32 hex>-<16 hex>-<2 hex>`, lowercase,
    /// with a trace id and a parent id that are not all zeros.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for anything else (naming what is wrong, not echoing it).
    pub fn parse(s: &str) -> Result<Self> {
        let bad = |why: &str| Error::invalid("traceparent", why.to_owned());
        let parts: Vec<&str> = s.split('-').collect();
        let hex = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        match parts.as_slice() {
            [version, trace, parent, flags] => {
                if *version != "00" {
                    return Err(bad(
                        "must be version 00 (`00-<trace id>-<parent id>-<flags>`)",
                    ));
                }
                if !hex(trace, 32) || !hex(parent, 16) || !hex(flags, 2) {
                    return Err(bad(
                        "must be `00-` then 32, 16 and 2 lowercase hex digits, joined by `-`",
                    ));
                }
                if trace.bytes().all(|b| b == b'0') || parent.bytes().all(|b| b == b'0') {
                    return Err(bad("its trace id and parent id must not be all zeros"));
                }
                Ok(Self(s.to_owned()))
            }
            _ => Err(bad("must be `00-<trace id>-<parent id>-<flags>`")),
        }
    }
}

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
}

macro_rules! checked_id128 {
    ($name:ident, $what:literal) => {
        impl $name {
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
    };
}

checked_id128!(RunId, "run id");
checked_id128!(LeaseToken, "lease token");

impl RunState {
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

impl Timestamp {
    /// Checks a time given to cairn (a run's not-before time, an imported run's times):
    /// [`Timestamp::EARLIEST`] to [`Timestamp::LATEST`], both included. Every entry — the
    /// library's enqueue and import, the HTTP API, the CLI — goes through this check, so a
    /// stored time is always one RFC 3339 can print.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming `what` and the range, for a time outside it.
    pub fn check(self, what: &'static str) -> Result<Self> {
        if (Self::EARLIEST..=Self::LATEST).contains(&self) {
            Ok(self)
        } else {
            Err(Error::invalid(
                what,
                format!(
                    "is {} µs since the Unix epoch; it must be between {} and {} \
                     ({} to {} µs)",
                    self.as_unix_micros(),
                    Self::EARLIEST,
                    Self::LATEST,
                    Self::EARLIEST.as_unix_micros(),
                    Self::LATEST.as_unix_micros()
                ),
            ))
        }
    }

    /// A timestamp from a [`SystemTime`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a time before 1970 or too far in the future to fit.
    pub fn from_system_time(t: SystemTime) -> Result<Self> {
        let since = t
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::invalid("timestamp", "is before 1970"))?;
        i64::try_from(since.as_micros())
            .map(Self::from_unix_micros)
            .map_err(|_| Error::invalid("timestamp", "is too far in the future"))
    }
}

impl EnqueueOptions {
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

/// What [`check_enqueue`] returns: an enqueue's input, checked and normalised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckedEnqueue {
    /// The run's attempt limit ([`EnqueueOptions::effective_max_attempts`]).
    pub max_attempts: u32,
    /// The time of the enqueue, read once from the spool's clock: the run's enqueue time, its
    /// due time unless `not_before` says otherwise, and the time its id is generated from.
    pub now: Timestamp,
}

/// The checks of a [`Spool::enqueue`](super::Spool::enqueue), written once for every backend
/// and made before anything is read or written: the payload is at most [`MAX_RUN_PAYLOAD`]
/// bytes and the options are valid ([`EnqueueOptions::effective_max_attempts`]); then the
/// spool's clock is read once.
///
/// # Errors
/// [`Error::InvalidInput`] for an oversized payload or invalid options (the clock is not read).
pub fn check_enqueue(
    key: &DedupKey,
    payload: &[u8],
    options: &EnqueueOptions,
    clock: &dyn Clock,
) -> Result<CheckedEnqueue> {
    check_producer_key(key)?;
    check_payload("run payload", MAX_RUN_PAYLOAD, payload)?;
    let max_attempts = options.effective_max_attempts()?;
    Ok(CheckedEnqueue {
        max_attempts,
        now: clock.now(),
    })
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
            check_producer_key(&item.key)
                .and_then(|()| check_payload("run payload", MAX_RUN_PAYLOAD, &item.payload))
                .and_then(|()| item.options.effective_max_attempts())
                .map_err(|e| Error::InvalidBatchItem {
                    index,
                    error: Box::new(e),
                })
        })
        .collect()
}

/// The first dedup-key part of a schedule's tick runs ([`schedule_tick_key`](super::schedule_tick_key)).
pub const SCHEDULE_KEY_PART: &str = "cairn:schedule";

/// Refuses a producer's dedup key in the spool's own namespace: keys whose first part is
/// [`SCHEDULE_KEY_PART`] are the schedules' ticks, which only
/// [`Spool::fire_schedule`](super::Spool::fire_schedule) enqueues — a producer's run under one
/// would take a tick's place.
///
/// # Errors
/// [`Error::Reserved`].
pub fn check_producer_key(key: &DedupKey) -> Result<()> {
    let first = key.parts().and_then(|p| p.into_iter().next());
    if first.as_deref() == Some(SCHEDULE_KEY_PART.as_bytes()) {
        return Err(Error::Reserved {
            what: "dedup key",
            name: format!("starting with the part {SCHEDULE_KEY_PART:?}"),
        });
    }
    Ok(())
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

/// Checks the delay of a [`Spool::retry_after`](super::Spool::retry_after): at most
/// [`MAX_LEASE`], as a release's.
///
/// # Errors
/// [`Error::InvalidInput`] for a longer delay.
pub fn check_retry_delay(delay: Duration) -> Result<()> {
    check_delay("retry delay", delay)
}

/// Checks the delay of a [`Spool::release`](super::Spool::release): at most [`MAX_LEASE`].
///
/// # Errors
/// [`Error::InvalidInput`] for a longer delay.
pub fn check_release_delay(delay: Duration) -> Result<()> {
    check_delay("release delay", delay)
}

/// A delay a run waits before it is due again: at most [`MAX_LEASE`].
fn check_delay(what: &'static str, delay: Duration) -> Result<()> {
    if delay > MAX_LEASE {
        return Err(Error::invalid(
            what,
            format!("is {delay:?}; it must be at most {MAX_LEASE:?}"),
        ));
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
    use crate::spool::{Clock, MAX_QUEUE_LEN, MAX_RUN_EVENT_ID};

    #[test]
    fn traceparents_are_w3c_version_00() {
        let tp =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(tp.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id(), "00f067aa0ba902b7");
        assert!(tp.sampled());
        assert!(
            !TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap()
                .sampled()
        );
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7+01",
        ] {
            let e = TraceParent::parse(bad).unwrap_err().to_string();
            assert!(e.contains("traceparent"), "{bad}: {e}");
        }
    }

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
    fn the_accepted_range_is_1970_to_9999_inclusive() {
        assert_eq!(
            Timestamp::EARLIEST.check("t").unwrap(),
            Timestamp::UNIX_EPOCH
        );
        assert_eq!(Timestamp::LATEST.check("t").unwrap(), Timestamp::LATEST);
        assert_eq!(
            Timestamp::from_utc(9999, 12, 31, 23, 59, 59, 999_999),
            Some(Timestamp::LATEST)
        );
        assert_eq!(
            Timestamp::from_utc(1970, 1, 1, 0, 0, 0, 0),
            Some(Timestamp::EARLIEST)
        );
        for bad in [
            -1,
            i64::MIN,
            Timestamp::LATEST.as_unix_micros() + 1,
            i64::MAX,
        ] {
            let err = Timestamp::from_unix_micros(bad)
                .check("not-before time")
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "not-before time",
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn every_limit_admits_its_bound_and_refuses_one_more() {
        let q = "q".repeat(MAX_QUEUE_LEN);
        assert_eq!(QueueName::new(q.clone()).unwrap().as_str(), q);
        assert!(RunEventId::new(vec![1u8; MAX_RUN_EVENT_ID]).is_ok());
        assert!(check_release_delay(MAX_LEASE).is_ok());
        assert!(check_release_delay(MAX_LEASE + Duration::from_nanos(1)).is_err());
        assert!(check_payload("p", 3, b"abc").is_ok());
        assert!(check_payload("p", 3, b"abcd").is_err());
        assert_eq!(
            EnqueueOptions::default()
                .max_attempts(MAX_ATTEMPTS_LIMIT)
                .effective_max_attempts()
                .unwrap(),
            MAX_ATTEMPTS_LIMIT
        );
        assert!(EnqueueOptions::default()
            .max_attempts(MAX_ATTEMPTS_LIMIT + 1)
            .effective_max_attempts()
            .is_err());
    }

    #[test]
    fn an_enqueue_is_checked_before_the_clock_is_read() {
        let clock = crate::spool::ManualClock::default();
        let k = DedupKey::from_parts(["k"]).unwrap();
        let ok = check_enqueue(
            &k,
            b"{}",
            &EnqueueOptions::default().max_attempts(3),
            &clock,
        )
        .unwrap();
        assert_eq!(
            ok,
            CheckedEnqueue {
                max_attempts: 3,
                now: clock.now()
            }
        );
        let big = vec![0u8; MAX_RUN_PAYLOAD + 1];
        assert!(check_enqueue(&k, &big, &EnqueueOptions::default(), &clock).is_err());
        let zero = EnqueueOptions::default().max_attempts(0);
        assert!(check_enqueue(&k, b"", &zero, &clock).is_err());
        let tick = DedupKey::from_parts(["cairn:schedule", "s", "2026-01-01T00:00:00Z"]).unwrap();
        assert!(matches!(
            check_enqueue(&tick, b"", &EnqueueOptions::default(), &clock),
            Err(Error::Reserved { .. })
        ));
        let near = DedupKey::from_parts(["cairn:schedules", "s"]).unwrap();
        check_enqueue(&near, b"", &EnqueueOptions::default(), &clock).unwrap();
    }

    #[test]
    fn a_bulk_enqueue_is_bounded_in_items_and_bytes() {
        let key = crate::spool::DedupKey::from_parts(["k"]).unwrap();
        let item = |payload: Vec<u8>| EnqueueItem::new(key.clone(), payload);
        let mixed = [
            item(vec![]),
            item(vec![]).with_options(EnqueueOptions::default().max_attempts(3)),
        ];
        assert_eq!(
            check_enqueue_batch(&mixed).unwrap(),
            vec![DEFAULT_MAX_ATTEMPTS, 3]
        );
        let full = vec![item(vec![]); MAX_ENQUEUE_BATCH];
        assert_eq!(check_enqueue_batch(&full).unwrap().len(), MAX_ENQUEUE_BATCH);
        let over = vec![item(vec![]); MAX_ENQUEUE_BATCH + 1];
        assert!(matches!(
            check_enqueue_batch(&over),
            Err(Error::InvalidInput { .. })
        ));
        let per_item = MAX_ENQUEUE_BATCH_BYTES / MAX_RUN_PAYLOAD;
        let mut heavy = vec![item(vec![0u8; MAX_RUN_PAYLOAD]); per_item];
        assert!(
            check_enqueue_batch(&heavy).is_ok(),
            "exactly the byte limit"
        );
        heavy.push(item(vec![0u8; 1]));
        assert!(matches!(
            check_enqueue_batch(&heavy),
            Err(Error::InvalidInput { .. })
        ));
        let bad_item = [item(vec![]), item(vec![0u8; MAX_RUN_PAYLOAD + 1])];
        assert!(matches!(
            check_enqueue_batch(&bad_item),
            Err(Error::InvalidBatchItem { index: 1, .. })
        ));
    }
}
