//! Which table a claim finds runs through: `spool_ready` once the store holds the contract
//! revision `0008_spool_ready_contract`, else `spool_run`'s own claim indexes.
//!
//! Invariant: a spool claims through `spool_ready` only after it read, from the store, that
//! the contract revision was applied. Before that revision `spool_ready` is not complete (builds
//! older than `0007_spool_ready` may be live and do not write it), and every build claims
//! through `spool_run`, whose claim indexes exist until that revision drops them. The revision
//! is never undone, so once seen it is cached for good; until then the spool looks again at
//! most every [`RECHECK`] (a store contracted meanwhile by another process is still claimed
//! correctly through `spool_run`, only without its index, until the next look).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_core::Result;

use super::handle::PgSpool;
use super::sql;
use crate::error::map;

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

impl PgSpool {
    /// Whether claims find runs through `spool_ready` (the contract revision is applied).
    pub(super) async fn ready_layout(&self) -> Result<bool> {
        let layout = &self.inner.layout;
        if layout.ready.load(Ordering::Acquire) {
            return Ok(true);
        }
        let fresh = layout
            .asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|at| at.elapsed() < RECHECK);
        if fresh {
            return Ok(false);
        }
        let applied: bool = autocommit!(self, |on| sqlx::query_scalar(sql::READY_LAYOUT)
            .fetch_one(on)
            .await
            .map_err(map))?;
        if applied {
            layout.ready.store(true, Ordering::Release);
        }
        *layout.asked.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        Ok(applied)
    }
}
