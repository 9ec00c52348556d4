//! What a handler sees of the consumer: the [`Job`] it is handed, the [`Outcome`] it returns,
//! the [`StopSignal`] that asks it to stop (and [`raise`], the loop's side of that signal).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::super::contract::Spool;
use super::super::dedup::DedupKey;
use super::super::ids::{QueueName, RunId};
use super::super::types::{Claimed, NackKind};

/// What a handler decided about its run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The work is done: ack the run (it becomes `succeeded`).
    Done,
    /// A transient failure: nack as [`NackKind::Retryable`] (retried after backoff while
    /// attempts remain, else parked).
    Retry(String),
    /// A transient failure whose retry is due after the handler's own delay instead of the
    /// queue's backoff (a rate limit's `Retry-After`): [`Spool::retry_after`]. It spends the
    /// attempt as [`Outcome::Retry`] does, so the last attempt parks the run. A delay over
    /// [`MAX_LEASE`](crate::spool::MAX_LEASE) (the longest a spool takes) is cut to it.
    RetryAfter(Duration, String),
    /// A failure retrying cannot fix: nack as [`NackKind::Permanent`] (parked with the reason
    /// for an operator).
    Fail(String),
    /// Any nack, e.g. [`NackKind::Failed`] for work that ran and whose result is failure.
    Nack(NackKind, String),
    /// Give the run back without spending an attempt ([`Spool::release`]): it is due again
    /// after the delay. For work that cannot go on for a reason that is not the run's fault
    /// (waiting for its producer to close it, refused credentials); it never parks a run.
    Release(Duration),
}

/// Why a running handler is asked to stop, in rising order of urgency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StopReason {
    /// The consumer is shutting down. Finish soon or return [`Outcome::Retry`]; a handler
    /// still running at the shutdown deadline is dropped and its run is claimed again later.
    Shutdown,
    /// Someone canceled the run ([`Spool::cancel`]). Stop and return any nack: the run ends
    /// `canceled` (an ack still records success).
    CancelRequested,
    /// The lease is gone (it expired and another claim took the run). Stop at once: nothing
    /// this handler returns is recorded.
    LeaseLost,
}

/// Tells a handler when to stop. Clones observe the same signal.
#[derive(Clone, Debug)]
pub struct StopSignal {
    pub(super) rx: watch::Receiver<Option<StopReason>>,
}

impl StopSignal {
    /// The most urgent reason raised so far, if any.
    pub fn reason(&self) -> Option<StopReason> {
        *self.rx.borrow()
    }

    /// Whether any stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.reason().is_some()
    }

    /// Resolves once a stop is asked for (at once if it already was) with the most urgent
    /// reason at that moment. Cancel safe.
    pub async fn stopped(&self) -> StopReason {
        let mut rx = self.rx.clone();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(r) => *r,
            // The consumer dropped the run's sender: it is gone, which is a shutdown.
            Err(_) => None,
        };
        reason.unwrap_or(StopReason::Shutdown)
    }
}

/// What [`ConsumerBuilder::context`](super::ConsumerBuilder::context) shares with every
/// [`Job`].
pub(crate) type JobContext = Arc<dyn std::any::Any + Send + Sync>;

/// One claimed run, handed to a [`Handler`].
#[derive(Debug)]
pub struct Job {
    pub(super) queue: QueueName,
    pub(super) claimed: Claimed,
    pub(super) spool: Arc<dyn Spool>,
    pub(super) stop: StopSignal,
    pub(super) context: Option<JobContext>,
}

impl Job {
    /// The run.
    pub fn run_id(&self) -> RunId {
        self.claimed.run_id
    }

    /// The run's queue.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The run's dedup key.
    pub fn dedup_key(&self) -> &DedupKey {
        &self.claimed.dedup_key
    }

    /// The payload given at enqueue.
    pub fn payload(&self) -> &[u8] {
        &self.claimed.payload
    }

    /// The value [`ConsumerBuilder::context`](super::ConsumerBuilder::context) shared, when it
    /// is a `T` (`None` when none was given, or one of another type).
    pub fn context<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.context.clone()?.downcast::<T>().ok()
    }

    /// The enqueuer's trace context, when the run was enqueued with one (the run's span
    /// continues it with the feature `otel`).
    pub fn traceparent(&self) -> Option<&super::super::ids::TraceParent> {
        self.claimed.traceparent.as_ref()
    }

    /// Which delivery this is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.claimed.attempt
    }

    /// The spool, for the run's events and facts ([`Spool::append_event`],
    /// [`Spool::set_fact`]). The consumer acks and nacks; a handler must not.
    pub fn spool(&self) -> &Arc<dyn Spool> {
        &self.spool
    }

    /// The signal that asks this handler to stop.
    pub fn stop(&self) -> &StopSignal {
        &self.stop
    }
}

/// The work a [`Consumer`](crate::spool::Consumer) does per run. Closures `Fn(Job) -> impl Future<Output = Outcome>`
/// are handlers.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Does the run's work and says how it went. Runs on its own task; a panic is reported as
    /// [`Outcome::Retry`].
    async fn handle(&self, job: Job) -> Outcome;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn handle(&self, job: Job) -> Outcome {
        (self)(job).await
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Shutdown => "the consumer is shutting down",
            StopReason::CancelRequested => "the run was canceled",
            StopReason::LeaseLost => "the lease on the run is lost",
        })
    }
}

/// Raises a stop reason unless a more urgent one is already raised.
pub(super) fn raise(tx: &watch::Sender<Option<StopReason>>, reason: StopReason) {
    tx.send_if_modified(|cur| {
        if cur.is_none_or(|c| c < reason) {
            *cur = Some(reason);
            true
        } else {
            false
        }
    });
}
