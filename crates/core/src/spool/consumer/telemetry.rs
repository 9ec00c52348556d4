//! What a consumer reports through the standard facades, so a service that embeds cairn sees
//! its workers with its own `tracing` subscriber and `metrics` recorder (and `cairn serve`
//! renders the same metrics in `/metrics`). Nothing is recorded when the service installs
//! neither.
//!
//! - A span per run, `cairn.spool.run` (target `cairn::spool`), around the handler and the
//!   settlement, with the fields `queue`, `run_id`, `attempt`, `consumer` and, once settled,
//!   `outcome` (one of [`OUTCOMES`]). Events the handler logs are inside it.
//! - Counters [`CLAIMED_METRIC`] (`queue`) and [`HANDLED_METRIC`] (`queue`, `outcome`), and
//!   the histogram [`HANDLER_SECONDS_METRIC`] (`queue`): the handler's wall time. The `queue`
//!   label is the consumer's queue, so the series are as many as the queues a process
//!   consumes.

use std::time::Duration;

use super::super::ids::QueueName;

/// Runs handed to the consumer by its claims, by queue.
pub const CLAIMED_METRIC: &str = "cairn_spool_consumer_claimed_total";
/// Runs the consumer handled, by queue and outcome (one of [`OUTCOMES`]).
pub const HANDLED_METRIC: &str = "cairn_spool_consumer_handled_total";
/// The handler's wall time per run, in seconds, by queue.
pub const HANDLER_SECONDS_METRIC: &str = "cairn_spool_consumer_handler_seconds";

/// The outcomes of a handled run, as the span's `outcome` field and the metric's label:
/// the state the run reached (`succeeded`, `failed`, `parked`, `canceled`; `queued`: a
/// retryable nack sent it back), `released` (given back), `lease_lost` (another claim or
/// an operator took it; nothing was settled) or `unsettled` (the ack or nack kept failing;
/// the lease's expiry redelivers it).
pub const OUTCOMES: [&str; 8] = [
    "succeeded",
    "failed",
    "parked",
    "canceled",
    "queued",
    "released",
    "lease_lost",
    "unsettled",
];

/// Counts runs a claim handed out.
pub(super) fn claimed(queue: &QueueName, n: usize) {
    if n > 0 {
        metrics::counter!(CLAIMED_METRIC, "queue" => queue.as_str().to_owned()).increment(n as u64);
    }
}

/// Records a handled run: its outcome on the run's span and the counters, and the handler's
/// time (`None` when the handler never ran: the lease was lost first).
pub(super) fn handled(queue: &QueueName, outcome: &'static str, handler: Option<Duration>) {
    tracing::Span::current().record("outcome", outcome);
    metrics::counter!(
        HANDLED_METRIC,
        "queue" => queue.as_str().to_owned(),
        "outcome" => outcome
    )
    .increment(1);
    if let Some(took) = handler {
        metrics::histogram!(HANDLER_SECONDS_METRIC, "queue" => queue.as_str().to_owned())
            .record(took.as_secs_f64());
    }
    tracing::debug!(target: "cairn::spool", outcome, "run handled");
}
