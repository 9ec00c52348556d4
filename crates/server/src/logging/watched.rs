//! A span exporter that says when exports fail. The OpenTelemetry SDK's batch processor drops
//! a batch its exporter could not send and reports it only through the SDK's internal logs,
//! which cairn does not enable: an unreachable collector would lose every span silently.
//! [`Watched`] wraps the OTLP exporter, forwards everything to it, and counts the exports that
//! failed: the first failure is a warning in cairn's log at once, later ones at most one
//! warning per [`WARN_EVERY`], with the failures and spans lost since the previous warning.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// At most one warning about failed exports per this interval (the first failure is warned
/// about at once).
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(60);

/// What a warning about failed exports reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lost {
    /// Exports that failed since the previous warning (this one included).
    pub(crate) exports: u64,
    /// Spans in them.
    pub(crate) spans: u64,
    /// Exports that failed since the process started.
    pub(crate) total: u64,
}

/// The count of failed exports and when the last warning was written.
#[derive(Debug, Default)]
pub(crate) struct Failures {
    state: Mutex<FailureState>,
}

#[derive(Debug, Default)]
struct FailureState {
    exports: u64,
    spans: u64,
    total: u64,
    warned_at: Option<Instant>,
}

impl Failures {
    /// Counts an export of `spans` spans that failed at `now`; returns what to warn about
    /// when a warning is due (the first failure, then at most one per [`WARN_EVERY`]).
    pub(crate) fn failed(&self, spans: usize, now: Instant) -> Option<Lost> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.exports += 1;
        s.spans += u64::try_from(spans).unwrap_or(u64::MAX);
        s.total += 1;
        let due = s
            .warned_at
            .is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY);
        if !due {
            return None;
        }
        let lost = Lost {
            exports: s.exports,
            spans: s.spans,
            total: s.total,
        };
        s.exports = 0;
        s.spans = 0;
        s.warned_at = Some(now);
        Some(lost)
    }
}

/// `inner`, with each failed export counted and warned about (see the module docs).
/// The warning names neither the endpoint nor a response body (like every cairn log line, it
/// carries no URL); the exporter's errors say what failed (`network error`, a status code).
#[derive(Debug)]
pub(crate) struct Watched<E> {
    inner: E,
    failures: Failures,
}

impl<E> Watched<E> {
    /// Watches `inner`.
    pub(crate) fn new(inner: E) -> Self {
        Self {
            inner,
            failures: Failures::default(),
        }
    }
}

impl<E: SpanExporter> SpanExporter for Watched<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            if let Some(lost) = self.failures.failed(spans, Instant::now()) {
                tracing::warn!(
                    target: "cairn::otel",
                    error = %e,
                    failed_exports = lost.exports,
                    spans_lost = lost.spans,
                    failed_exports_total = lost.total,
                    "span export to the [otel] endpoint failed: the spans are dropped (at most one such warning a minute)"
                );
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn shutdown(&self) -> OTelSdkResult {
        self.inner.shutdown()
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_warns_then_at_most_one_warning_a_minute_with_the_count() {
        let f = Failures::default();
        let t0 = Instant::now();
        assert_eq!(
            f.failed(3, t0),
            Some(Lost {
                exports: 1,
                spans: 3,
                total: 1
            })
        );
        for i in 1..=10 {
            assert_eq!(f.failed(2, t0 + Duration::from_secs(i)), None, "{i}");
        }
        assert_eq!(
            f.failed(1, t0 + WARN_EVERY - Duration::from_millis(1)),
            None
        );
        assert_eq!(
            f.failed(4, t0 + WARN_EVERY),
            Some(Lost {
                exports: 12,
                spans: 25,
                total: 13
            }),
            "the failures since the last warning, this one included"
        );
        assert_eq!(f.failed(1, t0 + WARN_EVERY + Duration::from_secs(1)), None);
        assert_eq!(
            f.failed(1, t0 + 3 * WARN_EVERY),
            Some(Lost {
                exports: 2,
                spans: 2,
                total: 15
            })
        );
    }
}
