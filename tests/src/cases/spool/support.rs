//! Helpers every spool case shares: the lease, opening a spool, keys and consumers, enqueueing
//! a new run, reading a run, the default backoff ceiling, a deadline, and error variants by name.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{backoff_ceiling, BackoffPolicy};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, Error, QueueName, RunId, RunInfo, Spool};

use crate::SpoolHarness;

/// The lease the cases claim with.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// Opens a spool, panicking with the backend's message when it cannot.
pub(crate) async fn open_spool<H: SpoolHarness>(h: &H) -> Arc<dyn Spool> {
    h.open_spool()
        .await
        .unwrap_or_else(|e| panic!("{}: cannot open spool: {e}", h.backend()))
}

/// A dedup key from text parts.
pub(crate) fn key(parts: &[&str]) -> DedupKey {
    DedupKey::from_parts(parts).expect("valid dedup key")
}

/// A consumer id.
pub(crate) fn consumer(name: &str) -> ConsumerId {
    ConsumerId::new(name).expect("valid consumer id")
}

/// Enqueues a run that must be new, with default options; returns its id.
pub(crate) async fn enqueue_new(spool: &dyn Spool, q: &QueueName, k: &str) -> RunId {
    enqueue_with(spool, q, k, EnqueueOptions::default()).await
}

/// Enqueues a run that must be new; returns its id.
pub(crate) async fn enqueue_with(
    spool: &dyn Spool,
    q: &QueueName,
    k: &str,
    options: EnqueueOptions,
) -> RunId {
    let e = spool
        .enqueue(
            q,
            &key(&[k]),
            format!("payload of {k}").into_bytes(),
            options,
        )
        .await
        .unwrap_or_else(|e| panic!("enqueue {k}: {e}"));
    assert!(e.created, "enqueue {k}: a new key creates a run");
    e.run_id
}

/// The run's info; the run must exist.
pub(crate) async fn info(spool: &dyn Spool, run: RunId) -> RunInfo {
    spool
        .run(run)
        .await
        .unwrap_or_else(|e| panic!("run({run}): {e}"))
        .unwrap_or_else(|| panic!("run {run} is missing"))
}

/// The largest backoff of `attempt` under the default policy (what the harness's spools use).
pub(crate) fn max_backoff(attempt: u32) -> Duration {
    let p = BackoffPolicy::default();
    backoff_ceiling(attempt, p.base, p.cap)
}

/// Awaits `fut`, failing the case when it takes longer than 10 s (a deadline, not a sleep).
pub(crate) async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 10 s"))
}

/// The name of an error's variant, so outcomes are compared by meaning.
pub(crate) fn kind(e: &Error) -> &'static str {
    match e {
        Error::InvalidInput { .. } => "InvalidInput",
        Error::UnknownRun { .. } => "UnknownRun",
        Error::LeaseLost { .. } => "LeaseLost",
        Error::InvalidTransition { .. } => "InvalidTransition",
        Error::FactConflict { .. } => "FactConflict",
        Error::RunClosed { .. } => "RunClosed",
        Error::NotFound { .. } => "NotFound",
        Error::Conflict { .. } => "Conflict",
        Error::Retryable { .. } => "Retryable",
        Error::Unavailable { .. } => "Unavailable",
        Error::Corrupt { .. } => "Corrupt",
        Error::Backend { .. } => "Backend",
        _ => "other",
    }
}

/// Asserts `r` failed with the variant named `want`.
#[track_caller]
pub(crate) fn assert_err<T: std::fmt::Debug>(r: cairn_core::Result<T>, want: &str, ctx: &str) {
    match r {
        Err(e) if kind(&e) == want => {}
        Err(e) => panic!("{ctx}: expected {want}, got {} ({e})", kind(&e)),
        Ok(v) => panic!("{ctx}: expected {want}, got Ok({v:?})"),
    }
}
