//! Which table a claim finds runs through: `spool_ready` once the store holds the contract
//! revision `0008_spool_ready_contract`, else `spool_run`'s own claim indexes. (The same
//! [`Layout`] also follows revision `0009_spool_flow`, which flow control needs: `spool::flow`.)
//!
//! Invariant: a spool claims through `spool_ready` only after it read, from the store, that
//! the contract revision was applied. Before that revision `spool_ready` is not complete (builds
//! older than `0007_spool_ready` may be live and do not write it), and every build claims
//! through `spool_run`, whose claim indexes exist until that revision drops them. The revision
//! is never undone, so once seen it is cached for good; until then the spool looks again at
//! most every [`RECHECK`] (a store contracted meanwhile by another process is still claimed
//! correctly through `spool_run`, only without its index, until the next look).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_core::Result;

/// How often a spool that has not yet seen the contract revision looks again.
pub(super) const RECHECK: Duration = Duration::from_secs(2);

/// What a spool knows of its store's layout.
#[derive(Default)]
pub(super) struct Layout {
    /// The contract revision was seen applied.
    ready: AtomicBool,
    /// When the store was last asked (None: never).
    asked: Mutex<Option<Instant>>,
}

impl Layout {
    /// Whether the revision was seen applied already (no look at the store).
    pub(super) fn seen(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Whether claims find runs through `spool_ready`: true once `ask` (the store's answer to
    /// `sql_record::READY_LAYOUT`) said so; `ask` runs at most once per [`RECHECK`] until then.
    pub(super) async fn ready<F, Fut>(&self, ask: F) -> Result<bool>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        if self.ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let fresh = self
            .asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < RECHECK);
        if fresh {
            return Ok(false);
        }
        let applied = ask().await?;
        if applied {
            self.ready.store(true, Ordering::Release);
        }
        *self.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Before the revision is seen the store is asked at most once per [`RECHECK`]; once it
    /// answered yes it is never asked again.
    #[tokio::test]
    async fn asks_until_it_sees_the_contract_then_never_again() {
        let layout = Layout::default();
        let asked = AtomicUsize::new(0);
        let ask = |answer: bool| {
            let asked = &asked;
            move || async move {
                asked.fetch_add(1, Ordering::SeqCst);
                Ok(answer)
            }
        };
        assert!(!layout.ready(ask(false)).await.unwrap());
        assert!(
            !layout.ready(ask(true)).await.unwrap(),
            "asked again too soon"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // The last look is older than RECHECK: the next call asks.
        *layout.asked.lock().unwrap() = Instant::now().checked_sub(RECHECK);
        assert!(layout.ready(ask(true)).await.unwrap());
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        *layout.asked.lock().unwrap() = None;
        assert!(
            layout.ready(ask(false)).await.unwrap(),
            "a seen revision stays seen"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    /// A failed look is an error, and the next call asks again.
    #[tokio::test]
    async fn a_failed_look_is_not_cached() {
        let layout = Layout::default();
        let failed = layout
            .ready(|| async { Err(cairn_core::Error::backend("postgres", "down")) })
            .await;
        assert!(failed.is_err());
        assert!(layout.ready(|| async { Ok(true) }).await.unwrap());
    }
}
