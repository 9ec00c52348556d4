//! Flow control of a queue, stored in the store: pause and resume, a cap on the runs claimed
//! at once (per queue and per partition key) and a cap on claims per interval.
//!
//! Every backend enforces a queue's flow inside the claim itself, serialized with every other
//! claim of that queue (SQLite: its one writer; Postgres: a transaction-scoped advisory lock
//! on the queue, taken only when the queue has a limit), so two concurrent claims never both
//! see room for the same slot. The decisions are the pure functions of this module
//! ([`claim_allowance`], [`pick_within_partitions`]), which every backend calls alike.
//!
//! What counts as *claimed at once*: runs in state `claimed` whose `due_at` (lease expiry plus
//! backoff) is still ahead. An expired lease keeps its slot until its backoff has passed (its
//! holder may still be working), then is due, and reclaiming or settling it frees the slot: a
//! limit is never exceeded, and a dead worker's runs do not hold their slots forever.

use std::collections::BTreeMap;
use std::time::Duration;

use super::ids::PartitionKey;
use super::timestamp::Timestamp;
use crate::error::{Error, Result};

/// The revision of cairn's migration set that stores flow control and partition keys. A build
/// at or past it may run on a store whose upgrade stopped before it (a contract revision before
/// it deferred while older builds are live): claims then ignore flow (there is none stored),
/// and what needs the revision's tables refuses with [`flow_revision_missing`].
pub const FLOW_REVISION: &str = "0009_spool_flow";

/// The refusal of an operation that needs [`FLOW_REVISION`] on a store that has not applied
/// it: [`Error::Incompatible`], naming the revision; nothing was written.
pub fn flow_revision_missing(what: &str) -> Error {
    Error::Incompatible {
        detail: format!(
            "{what} needs cairn's revision {FLOW_REVISION}, which this store has not applied \
             yet (an upgrade stopped before it, e.g. a contract revision deferred while older \
             builds are live); nothing was written. Open the store again once those builds \
             are gone, or run `cairn migrate up`"
        ),
        blockers: Vec::new(),
    }
}

/// Largest value of any flow limit (runs claimed at once, claims per interval).
pub const MAX_FLOW_LIMIT: u32 = 1_000_000;
/// Shortest interval of a rate limit.
pub const MIN_RATE_INTERVAL: Duration = Duration::from_millis(1);
/// Longest interval of a rate limit (one day).
pub const MAX_RATE_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// At most `claims` runs handed out by claims of the queue in any window of length `per`
/// (a sliding window over the claims' times on the spool's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Runs handed out per window, 1..=[`MAX_FLOW_LIMIT`].
    pub claims: u32,
    /// The window, [`MIN_RATE_INTERVAL`]..=[`MAX_RATE_INTERVAL`], in whole microseconds.
    pub per: Duration,
}

/// A queue's limits; `None` is no limit. Set with
/// [`Spool::set_queue_limits`](super::Spool::set_queue_limits); a change takes effect at the
/// next claim in every process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// At most this many runs of the queue claimed at once, across all consumers and
    /// processes (1..=[`MAX_FLOW_LIMIT`]).
    pub max_claimed: Option<u32>,
    /// At most this many runs sharing one [`PartitionKey`] claimed at once (1..=
    /// [`MAX_FLOW_LIMIT`]); runs enqueued without a partition key are not limited by it.
    pub per_partition: Option<u32>,
    /// At most so many runs handed out per interval.
    pub rate: Option<RateLimit>,
}

impl QueueLimits {
    /// Whether any limit is set (claims of the queue then serialize).
    pub fn any(&self) -> bool {
        self.max_claimed.is_some() || self.per_partition.is_some() || self.rate.is_some()
    }
}

/// A queue's stored flow state: what [`Spool::queue_flow`](super::Spool::queue_flow) returns.
/// A queue nobody set anything for is running and unlimited ([`QueueFlow::default`]), and so
/// is a queue set back to that: the store keeps a flow only for a queue that is paused or
/// has a limit ([`QueueFlow::is_default`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueFlow {
    /// Whether the queue is paused: claims hand out nothing (in-flight runs still heartbeat,
    /// ack and nack; enqueues still land).
    pub paused: bool,
    /// The queue's limits.
    pub limits: QueueLimits,
    /// When the queue's stored flow was last changed (`None`: none is stored — never set, or
    /// set back to running and unlimited).
    pub updated_at: Option<Timestamp>,
}

impl QueueFlow {
    /// Whether a claim of this queue must serialize with the queue's other claims and count
    /// what is in flight (a limit is set); a paused queue hands out nothing either way.
    pub fn limited(&self) -> bool {
        self.limits.any()
    }

    /// Whether this is the default flow, running and unlimited (whatever `updated_at` says):
    /// a queue whose flow returns to it keeps no stored flow.
    pub fn is_default(&self) -> bool {
        !self.paused && !self.limits.any()
    }
}

/// Checks limits before anything is written.
///
/// # Errors
/// [`Error::InvalidInput`] for a limit of 0 or over [`MAX_FLOW_LIMIT`], a rate interval
/// outside [`MIN_RATE_INTERVAL`]..=[`MAX_RATE_INTERVAL`] or not a whole number of
/// microseconds.
pub fn check_limits(limits: &QueueLimits) -> Result<()> {
    let bound = |what: &'static str, n: Option<u32>| match n {
        Some(n) if n == 0 || n > MAX_FLOW_LIMIT => Err(Error::invalid(
            what,
            format!("is {n}; it must be 1 to {MAX_FLOW_LIMIT} (omit it for no limit)"),
        )),
        _ => Ok(()),
    };
    bound("max claimed", limits.max_claimed)?;
    bound("per-partition limit", limits.per_partition)?;
    if let Some(rate) = limits.rate {
        bound("rate limit", Some(rate.claims))?;
        if rate.per < MIN_RATE_INTERVAL || rate.per > MAX_RATE_INTERVAL {
            return Err(Error::invalid(
                "rate interval",
                format!(
                    "is {:?}; it must be {MIN_RATE_INTERVAL:?} to {MAX_RATE_INTERVAL:?}",
                    rate.per
                ),
            ));
        }
        if rate.per.subsec_nanos() % 1000 != 0 {
            return Err(Error::invalid(
                "rate interval",
                "must be a whole number of microseconds",
            ));
        }
    }
    Ok(())
}

/// How many runs one claim asking for `requested` may hand out under `flow`, given the runs of
/// the queue claimed at once now (`in_flight`, see the module docs) and the runs handed out in
/// the rate window ending now (`in_window`; 0 without a rate limit). 0 when the queue is
/// paused or full.
pub fn claim_allowance(
    flow: &QueueFlow,
    in_flight: u64,
    in_window: u64,
    requested: usize,
) -> usize {
    if flow.paused {
        return 0;
    }
    let mut room = requested as u64;
    if let Some(max) = flow.limits.max_claimed {
        room = room.min(u64::from(max).saturating_sub(in_flight));
    }
    if let Some(rate) = flow.limits.rate {
        room = room.min(u64::from(rate.claims).saturating_sub(in_window));
    }
    usize::try_from(room).unwrap_or(requested)
}

/// Which of a claim's candidates (in claim order, each with its partition key) to take: at
/// most `allowance` of them, skipping a candidate whose partition already has `per_partition`
/// runs claimed at once (`busy`, counting those taken earlier in the same pick). Returns the
/// candidates' indexes, ascending.
pub fn pick_within_partitions<'a>(
    candidates: impl IntoIterator<Item = Option<&'a PartitionKey>>,
    busy: &BTreeMap<PartitionKey, u64>,
    per_partition: Option<u32>,
    allowance: usize,
) -> Vec<usize> {
    let mut taken_per: BTreeMap<&PartitionKey, u64> = BTreeMap::new();
    let mut picked = Vec::new();
    for (i, partition) in candidates.into_iter().enumerate() {
        if picked.len() >= allowance {
            break;
        }
        if let (Some(limit), Some(p)) = (per_partition, partition) {
            let taken = taken_per.entry(p).or_insert(0);
            if busy.get(p).copied().unwrap_or(0) + *taken >= u64::from(limit) {
                continue;
            }
            *taken += 1;
        }
        picked.push(i);
    }
    picked
}

/// The start of a rate window ending at `now` (exclusive): claims at times `> start` count.
pub fn rate_window_start(now: Timestamp, rate: &RateLimit) -> Timestamp {
    now.saturating_sub(rate.per)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PartitionKey {
        PartitionKey::new(s).unwrap()
    }

    #[test]
    fn allowance_is_the_smallest_room() {
        let mut flow = QueueFlow::default();
        assert_eq!(claim_allowance(&flow, 100, 100, 7), 7);
        flow.limits.max_claimed = Some(3);
        assert_eq!(claim_allowance(&flow, 1, 0, 7), 2);
        assert_eq!(claim_allowance(&flow, 5, 0, 7), 0);
        flow.limits.rate = Some(RateLimit {
            claims: 10,
            per: Duration::from_secs(1),
        });
        assert_eq!(claim_allowance(&flow, 0, 9, 7), 1);
        flow.paused = true;
        assert_eq!(claim_allowance(&flow, 0, 0, 7), 0);
    }

    #[test]
    fn partitions_take_at_most_their_limit_counting_this_pick() {
        let busy = BTreeMap::from([(p("a"), 1)]);
        let (a, b) = (p("a"), p("b"));
        let cands = [Some(&a), Some(&b), Some(&b), None, Some(&a), None];
        assert_eq!(
            pick_within_partitions(cands, &busy, Some(1), 10),
            vec![1, 3, 5]
        );
        assert_eq!(
            pick_within_partitions(cands, &busy, Some(2), 10),
            vec![0, 1, 2, 3, 5]
        );
        assert_eq!(pick_within_partitions(cands, &busy, Some(2), 2), vec![0, 1]);
        assert_eq!(
            pick_within_partitions(cands, &busy, None, 10),
            vec![0, 1, 2, 3, 4, 5]
        );
    }

    #[test]
    fn limits_are_checked() {
        let ok = QueueLimits {
            max_claimed: Some(1),
            per_partition: Some(MAX_FLOW_LIMIT),
            rate: Some(RateLimit {
                claims: 5,
                per: Duration::from_millis(1),
            }),
        };
        check_limits(&ok).unwrap();
        for bad in [
            QueueLimits {
                max_claimed: Some(0),
                ..ok
            },
            QueueLimits {
                per_partition: Some(MAX_FLOW_LIMIT + 1),
                ..ok
            },
            QueueLimits {
                rate: Some(RateLimit {
                    claims: 5,
                    per: Duration::from_nanos(1_000_500),
                }),
                ..ok
            },
            QueueLimits {
                rate: Some(RateLimit {
                    claims: 5,
                    per: MAX_RATE_INTERVAL + Duration::from_secs(1),
                }),
                ..ok
            },
        ] {
            assert!(check_limits(&bad).is_err(), "{bad:?}");
        }
    }
}
