//! What the sync routes share across requests ([`SyncHub`]): the in-process wake-up that the
//! server's own writes fire, the bound on concurrent long polls, and the limits a client reads.
//! A leaf: it names no handler.
//!
//! `GET /v1/spaces/{space}/sync/wait` answers as soon as the space holds an epoch above the
//! caller's `seen`. A write through this server (append, import, a batch's append, a sync
//! import) calls [`SyncHub::changed`], which wakes every waiter at once; a writer in another
//! process (another server, `cairn append` on the same file) is seen by each waiter's slow
//! look at the store every [`STORE_CHECK`]. At most [`MAX_WAITERS`] requests wait at once, so
//! idle clients cannot pin the server's connections and store reads.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// Most long polls waiting at once; one more is answered 429.
pub(crate) const MAX_WAITERS: usize = 64;
/// Longest a long poll waits, whatever it asks.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting long poll looks at the store itself (writers in other processes).
pub(crate) const STORE_CHECK: Duration = Duration::from_millis(500);

/// The sync routes' shared state.
#[derive(Debug)]
pub(crate) struct SyncHub {
    changes: watch::Sender<u64>,
    waiters: Arc<Semaphore>,
    /// Longest a long poll waits here: [`MAX_WAIT`], or less under a short
    /// `limits.request_timeout_secs` (a poll answers before the handler timeout would).
    pub(crate) longest_wait: Duration,
    /// `limits.max_body_bytes`, which `GET /v1/sync/id` tells clients.
    pub(crate) max_body_bytes: usize,
}

impl SyncHub {
    /// The hub of a server whose handlers time out after `request_timeout` and whose bodies
    /// are at most `max_body_bytes`.
    pub(crate) fn new(request_timeout: Duration, max_body_bytes: usize) -> Self {
        let margin = Duration::from_secs(1).min(request_timeout / 2);
        Self {
            changes: watch::Sender::new(0),
            waiters: Arc::new(Semaphore::new(MAX_WAITERS)),
            longest_wait: MAX_WAIT.min(request_timeout.saturating_sub(margin)),
            max_body_bytes,
        }
    }

    /// Something was written through this server: every waiter looks again.
    pub(crate) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that [`SyncHub::changed`] wakes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A waiter's place, unless [`MAX_WAITERS`] wait already.
    pub(crate) fn try_wait(&self) -> Option<OwnedSemaphorePermit> {
        self.waiters.clone().try_acquire_owned().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_stays_under_the_handler_timeout_and_the_waiters_are_bounded() {
        let hub = SyncHub::new(Duration::from_secs(30), 1024);
        assert_eq!(hub.longest_wait, Duration::from_secs(29));
        assert_eq!(
            SyncHub::new(Duration::from_secs(300), 1).longest_wait,
            MAX_WAIT
        );
        assert_eq!(
            SyncHub::new(Duration::from_secs(1), 1).longest_wait,
            Duration::from_millis(500)
        );
        let held: Vec<_> = (0..MAX_WAITERS).map(|_| hub.try_wait().unwrap()).collect();
        assert!(hub.try_wait().is_none());
        drop(held);
        assert!(hub.try_wait().is_some());
        let rx = hub.subscribe();
        hub.changed();
        assert!(rx.has_changed().unwrap());
    }
}
