//! The state a consumer's loop and its run tasks share ([`Ctx`]), and the rules both apply:
//! which errors mean the lease is gone or are worth a retry, and how long to wait.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use super::super::contract::Spool;
use super::super::ids::{ConsumerId, QueueName, RunId};
use super::super::timestamp::Timestamp;
use super::super::types::Claimed;
use super::handler::StopReason;
use super::report::ConsumerStats;
use crate::error::Error;

/// Aborts a task when dropped, so dropping the consumer (or a run) stops what it started.
#[derive(Debug)]
pub(super) struct AbortOnDrop<T>(pub(super) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) stats: ConsumerStats,
    /// Runs whose task has not finished, with the sender of their stop signal.
    pub(super) running: HashMap<RunId, watch::Sender<Option<StopReason>>>,
    /// Prefetched runs not started (nor released) yet.
    pub(super) held: HashSet<RunId>,
}

#[derive(Debug)]
pub(super) struct Ctx {
    pub(super) spool: Arc<dyn Spool>,
    pub(super) queue: QueueName,
    pub(super) consumer: ConsumerId,
    pub(super) concurrency: usize,
    pub(super) prefetch: usize,
    pub(super) batch: usize,
    pub(super) lease: Duration,
    pub(super) poll_interval: Duration,
    pub(super) claim_coalesce: Duration,
    /// What every job shares ([`super::ConsumerBuilder::context`]).
    pub(super) context: Option<super::handler::JobContext>,
    /// Poked by the wake-up listener, by finished runs and by shutdown. One stored permit
    /// keeps a poke that arrives while the loop is busy.
    pub(super) notify: Notify,
    /// Handlers running (a slot each): incremented when a run starts, decremented (before the
    /// poke of `notify`) when its handler returns or it is skipped.
    pub(super) handling: AtomicUsize,
    pub(super) shared: Mutex<Shared>,
}

impl Ctx {
    pub(super) fn handling(&self) -> usize {
        self.handling.load(Ordering::Acquire)
    }

    pub(super) fn shared(&self) -> MutexGuard<'_, Shared> {
        // Every update under this lock is a plain counter or map change: a panic elsewhere
        // cannot leave it half done.
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn error(&self, e: &Error) {
        let mut sh = self.shared();
        sh.stats.errors += 1;
        sh.stats.last_error = Some(e.to_string());
    }
}

/// Whether an error means the run is no longer this consumer's.
pub(super) fn lease_gone(e: &Error) -> bool {
    matches!(
        e,
        Error::LeaseLost { .. } | Error::InvalidTransition { .. } | Error::UnknownRun { .. }
    )
}

/// Whether trying the same call again may succeed.
pub(super) fn transient(e: &Error) -> bool {
    matches!(e, Error::Retryable { .. } | Error::Unavailable { .. })
}

/// A claimed run waiting in the prefetch for a slot, with the spool-clock time of its claim.
pub(super) struct Held {
    pub(super) claimed: Claimed,
    pub(super) at: Timestamp,
}

/// The shortest wait of the loop, so a backend that keeps reporting due work it then does not
/// hand out cannot make the consumer spin.
pub(super) const MIN_WAIT: Duration = Duration::from_millis(1);

/// How long to wait for the next due run: until `due` on the spool's clock, at most `poll`,
/// at least [`MIN_WAIT`].
pub(super) fn idle_wait(now: Timestamp, due: Option<Timestamp>, poll: Duration) -> Duration {
    due.map_or(poll, |t| t.duration_since(now).min(poll))
        .max(MIN_WAIT)
}
