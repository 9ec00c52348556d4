//! The background retention pass of `cairn serve`: the library's
//! [`RetentionWorker`](cairn::spool::RetentionWorker) (what a service that embeds cairn runs
//! too) running [`cairn::Spool::retention_pass`] with the configured policy (`spool.retention_max_bytes`, `spool.retention_max_age_secs`), once at
//! start and then every `spool.retention_interval_secs`; a pass the budget cut short is followed
//! by the next one a second later, until one completes. Each pass starts no batch after
//! [`PASS_BUDGET`] (every batch is one short transaction), so a pass in flight holds shutdown
//! for about that long at most; the loop stops between passes on shutdown.
//!
//! Each pass that removed something or failed is logged (`cairn::retention` events: counts and
//! an error code only) and every pass is counted in the `cairn_retention_*` metrics.

use std::sync::Arc;
use std::time::Duration;

use cairn::spool::{RetentionPolicy, RetentionReport, RetentionWorker};
use cairn::Spool;

use super::metrics::Metrics;

/// The pass's settings (`[spool]`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetentionSettings {
    /// Whether the pass runs at all (`spool.retention_enabled`).
    pub(crate) enabled: bool,
    /// What it keeps.
    pub(crate) policy: RetentionPolicy,
    /// Time between two complete passes (`spool.retention_interval_secs`).
    pub(crate) interval: Duration,
}

/// How long one pass may start batches: short, so that a pass never delays shutdown for long;
/// a pass cut short is continued a second later.
const PASS_BUDGET: Duration = Duration::from_secs(2);

/// Starts the pass loop (when enabled; the metrics say whether it is); it stops once
/// `stopping` turns true, after the pass in flight (if any) ends.
pub(crate) fn spawn(
    spool: Arc<dyn Spool>,
    settings: RetentionSettings,
    metrics: Arc<Metrics>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    metrics.retention_enabled.set(i64::from(settings.enabled));
    if !settings.enabled {
        tracing::info!(target: "cairn::retention", "cairn retention: switched off");
        return None;
    }
    // The library's loop (cairn::spool::RetentionWorker), which also counts every pass through
    // the `metrics` facade; the server's own series and log lines come from its callback.
    let worker = RetentionWorker::new(spool, settings.policy)
        .interval(settings.interval)
        .pass_budget(PASS_BUDGET)
        .on_pass(move |result| match result {
            Ok(report) => record(&metrics, report),
            Err(e) => {
                metrics
                    .retention_passes
                    .with_label_values(&["failed"])
                    .inc();
                tracing::warn!(
                    target: "cairn::retention",
                    code = cairn::backfill::error_code(e),
                    "cairn retention: the pass failed; retrying at the next interval"
                );
            }
        })
        .spawn();
    Some(tokio::spawn(async move {
        let _ = stopping.wait_for(|s| *s).await;
        worker.shutdown().await;
    }))
}

/// Counts a pass in the metrics and logs it when it removed something or stopped short.
fn record(metrics: &Metrics, report: &RetentionReport) {
    let outcome = if report.complete {
        "complete"
    } else {
        "partial"
    };
    metrics.retention_passes.with_label_values(&[outcome]).inc();
    for (kind, n) in [
        ("events_expired", report.events_expired),
        ("events_over_cap", report.events_over_cap),
        ("runs", report.runs_removed),
    ] {
        metrics
            .retention_removed
            .with_label_values(&[kind])
            .inc_by(n);
    }
    metrics.retention_bytes_freed.inc_by(report.bytes_freed);
    let removed = report.events_expired + report.events_over_cap + report.runs_removed;
    if removed > 0 || !report.complete {
        tracing::info!(
            target: "cairn::retention",
            events_expired = report.events_expired,
            events_over_cap = report.events_over_cap,
            bytes_freed = report.bytes_freed,
            runs_removed = report.runs_removed,
            complete = report.complete,
            "cairn retention: pass done"
        );
    }
}
