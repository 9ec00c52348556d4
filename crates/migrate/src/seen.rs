//! [`RevisionSeen`]: whether a store holds a revision, as far as one handle knows — what every
//! backend asks before it uses a table a later revision adds (a store whose upgrade stopped
//! before it, behind a deferred contract revision, has no such table yet).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_core::Result;

/// How often a handle that has not seen the revision asks the store again.
pub const REVISION_RECHECK: Duration = Duration::from_secs(2);

/// Once seen applied, cached for good (a revision is never undone); until then the store is
/// asked at most once per [`REVISION_RECHECK`].
#[derive(Debug, Default)]
pub struct RevisionSeen {
    seen: AtomicBool,
    asked: Mutex<Option<Instant>>,
}

impl RevisionSeen {
    /// Whether the revision was seen applied already (no look at the store).
    pub fn seen(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }

    /// Whether the revision is applied; `ask` (the store's answer) runs at most once per
    /// [`REVISION_RECHECK`] until it says yes.
    ///
    /// # Errors
    /// `ask`'s.
    pub async fn applied<F, Fut>(&self, ask: F) -> Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        if self.seen() {
            return Ok(true);
        }
        let fresh = self
            .asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < REVISION_RECHECK);
        if fresh {
            return Ok(false);
        }
        let applied = ask().await?;
        if applied {
            self.seen.store(true, Ordering::Release);
        }
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(applied)
    }
}
