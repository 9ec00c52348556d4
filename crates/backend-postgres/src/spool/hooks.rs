//! The spool's test hooks (feature `testkit`; one field of the spool's handle). A leaf, so the
//! handle that holds them and the steps that consult them import nothing else for them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use cairn_core::spool::RunId;

/// The spool's test hooks (one field of the spool, only with `testkit`): run ids forced on
/// the next unbatched enqueue attempts, the claim path counters and the switch that sends every
/// claim to the transaction. Without `testkit` none of this exists, and nothing on an
/// operation's path looks at it.
#[derive(Default)]
pub(super) struct TestHooks {
    /// Ids the next unbatched enqueue attempts take before generating fresh ones (a test makes
    /// a new id collide with them).
    pub(super) forced_ids: Mutex<VecDeque<RunId>>,
    /// Claims answered by the one-statement path ([`super::sql::CLAIM_QUEUED`]) and by the
    /// transaction ([`super::sql::CLAIM_PICK`] + [`super::sql::CLAIM_APPLY`]).
    pub(super) claim_paths: [AtomicU64; 2],
    /// Whether every claim takes the transaction (default `false`: the one statement first).
    pub(super) transaction_claims_only: AtomicBool,
}

impl TestHooks {
    /// The next forced run id, if a test queued one.
    pub(super) fn next_forced_id(&self) -> Option<RunId> {
        lock(&self.forced_ids).pop_front()
    }

    /// Counts a claim answered by `path` (0: the one statement, 1: the transaction).
    pub(super) fn claimed_by(&self, path: usize) {
        self.claim_paths[path].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether claims try the one statement first.
    pub(super) fn one_statement_claims(&self) -> bool {
        !self.transaction_claims_only.load(Ordering::Relaxed)
    }
}

/// `m`, locked, whether or not a holder panicked.
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
