//! The runner's test hooks (fault injection, runners that predate lineage), installed only
//! with the `testkit` feature.

/// Test hooks for the runner (fault injection, runners that predate lineage). Only with the
/// `testkit` feature: a user's runner never carries hooks.
#[derive(Clone, Default)]
#[cfg_attr(not(feature = "testkit"), allow(unreachable_pub))]
pub struct RunnerHooks {
    /// Called after the first look found work to do, just before waiting for the lock (lets a
    /// test interleave another migration deterministically); in an upgrade, before each try
    /// (a try that gave up waiting for a table lock is followed by another).
    pub before_lock: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
    /// Upgrade without recording a lineage, as a runner that predates lineage does.
    pub skip_lineage: bool,
    /// Fail after writing the stamp and lineage, before commit (atomicity tests): in an
    /// upgrade, a `repair` and a `down`.
    pub fail_after_lineage_write: bool,
    /// Called right after the runner's COMMIT succeeded (an open that took the lock, a
    /// `repair` that wrote, a `down`), before it returns: lets a test die at that point, as a
    /// process killed right after the commit would (the work is durable, the caller never
    /// hears of it).
    pub after_commit: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for RunnerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerHooks")
            .field("before_lock", &self.before_lock.is_some())
            .field("skip_lineage", &self.skip_lineage)
            .field("fail_after_lineage_write", &self.fail_after_lineage_write)
            .field("after_commit", &self.after_commit.is_some())
            .finish()
    }
}
