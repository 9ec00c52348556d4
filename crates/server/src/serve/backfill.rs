//! The background head-cache backfill of `cairn serve`: one paced pass
//! (`cairn::backfill::run_pass`) that honours the completion marker and stops on shutdown,
//! reporting through tracing (`cairn::backfill` events) and the `cairn_backfill_*` metrics.
//!
//! Its log lines carry counts and an error code only: never a payload, a space id or a URL.

use std::sync::Arc;

use cairn::backfill::{
    run_pass, BackfillConfig, BackfillObserver, BackfillOutcome, BackfillProgress, TokioPacer,
};
use cairn::EpochDiagnostics;

use super::metrics::Metrics;

/// Reports the pass as log events and gauges.
struct Observer {
    metrics: Arc<Metrics>,
}

impl Observer {
    fn gauges(&self, p: &BackfillProgress) {
        let set = |kind: &str, n: u64| {
            self.metrics
                .backfill_spaces
                .with_label_values(&[kind])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set("visited", p.visited);
        set("repaired", p.repaired);
        set("current", p.current);
    }
}

impl BackfillObserver for Observer {
    fn space_done(&self, p: &BackfillProgress) {
        self.gauges(p);
    }
    fn checkpoint(&self, p: &BackfillProgress) {
        tracing::info!(
            target: "cairn::backfill",
            visited = p.visited,
            repaired = p.repaired,
            current = p.current,
            "cairn backfill: progress"
        );
    }
    fn failed(&self, code: &'static str, p: &BackfillProgress) {
        self.gauges(p);
        self.metrics.backfill_state.set(3);
        tracing::error!(
            target: "cairn::backfill",
            code,
            visited = p.visited,
            "cairn backfill: stopped at the first error; the store's caches stay correct (every \
             append checks them); run `cairn backfill` to retry"
        );
    }
}

/// Starts the pass (when `config.enabled`; the metrics say whether it is) and stops it between
/// spaces when `stopping` turns true.
pub(crate) fn spawn(
    store: Arc<dyn EpochDiagnostics>,
    config: BackfillConfig,
    metrics: Arc<Metrics>,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<BackfillOutcome>> {
    metrics.backfill_enabled.set(i64::from(config.enabled));
    if !config.enabled {
        tracing::info!(target: "cairn::backfill", "cairn backfill: switched off");
        return None;
    }
    Some(tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopping.wait_for(|s| *s).await;
        };
        let observer = Observer {
            metrics: metrics.clone(),
        };
        let outcome = run_pass(
            store.as_ref(),
            &config,
            &TokioPacer::default(),
            &observer,
            true,
            shutdown,
        )
        .await;
        match &outcome {
            BackfillOutcome::Completed(p) => {
                observer.gauges(p);
                metrics.backfill_state.set(1);
                tracing::info!(
                    target: "cairn::backfill",
                    visited = p.visited,
                    repaired = p.repaired,
                    current = p.current,
                    "cairn backfill: pass complete"
                );
            }
            BackfillOutcome::AlreadyComplete => {
                metrics.backfill_state.set(1);
                tracing::info!(
                    target: "cairn::backfill",
                    "cairn backfill: already complete (marker found)"
                );
            }
            BackfillOutcome::Stopped(p) => {
                observer.gauges(p);
                metrics.backfill_state.set(2);
            }
            BackfillOutcome::Failed { .. } | BackfillOutcome::Disabled => {}
        }
        outcome
    }))
}
