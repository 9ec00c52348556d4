//! What a consumer reports: its counters ([`ConsumerStats`]) and what its shutdown left
//! behind ([`ShutdownReport`]).

use std::collections::BTreeMap;

use super::super::ids::RunId;
use super::super::state::RunState;

/// Counters of a consumer, for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    /// Runs handed to this consumer.
    pub claimed: u64,
    /// Claims this consumer sent to the spool (each may take several runs, or none).
    pub claims: u64,
    /// Runs settled by this consumer's acks and nacks, by the state the ack or nack left them
    /// in (`Succeeded`, `Queued` for a retry, `Parked`, `Failed`, `Canceled`). A release is not
    /// a settlement: it counts under [`ConsumerStats::released`].
    pub settled: BTreeMap<RunState, u64>,
    /// Heartbeats that extended a lease.
    pub heartbeats: u64,
    /// Runs whose lease was lost (a heartbeat, ack or nack found another claim had taken it).
    pub lease_lost: u64,
    /// Handlers that panicked (their runs were nacked as retryable).
    pub panics: u64,
    /// Runs given back to the queue with their attempt returned ([`Spool::release`](crate::spool::Spool::release)): by a
    /// handler's [`Outcome::Release`](crate::spool::Outcome::Release), and prefetched runs unstarted at shutdown. A release
    /// that found a cancel request (and so canceled the run) counts here too.
    pub released: u64,
    /// Spool calls that failed for another reason (the loop carries on).
    pub errors: u64,
    /// The latest such error's message.
    pub last_error: Option<String>,
}

/// What [`Consumer::shutdown`](crate::spool::Consumer::shutdown) leaves behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// The consumer's counters at the end.
    pub stats: ConsumerStats,
    /// Runs whose handler (or whose ack or nack) had not finished by the deadline, and
    /// prefetched runs that could not be released by then. They were dropped without a word
    /// to the spool: each stays claimed until its lease expires and is then claimable again
    /// (or was settled by a write that raced the deadline).
    pub abandoned: Vec<RunId>,
}

impl ShutdownReport {
    /// Whether every run this consumer claimed was settled before the deadline.
    pub fn is_clean(&self) -> bool {
        self.abandoned.is_empty()
    }
}
