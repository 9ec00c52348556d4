//! The server's counters (the `prometheus` crate; `GET /metrics` renders them, in
//! [`super::scrape`]), and the per-request layer that counts, times and logs every request.
//!
//! Labels never hold a space id, a queue name, a run id or a token, and never a value a client
//! chooses: routes are labelled by their template (`/v1/spaces/{space}/epochs`) and every path
//! no route matches by `unmatched`; methods outside the standard ones by `other`; statuses are
//! the server's own. So each label has a fixed set of values ([`method_label`],
//! [`route_label`], [`status_label`]) and the number of series stays bounded whatever clients
//! send.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use cairn::RunState;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use super::sync_metrics::SyncCounters;
use crate::logging::clip;

/// Every metric the server exports.
pub(crate) struct Metrics {
    registry: Registry,
    /// Requests by method, route template and status.
    pub(crate) http_requests: IntCounterVec,
    /// Request latency by method and route template, in seconds.
    pub(crate) http_latency: HistogramVec,
    /// Epochs appended through the API.
    pub(crate) appends: IntCounter,
    /// Enqueues through the API by outcome (`created`, `existing`).
    pub(crate) enqueues: IntCounterVec,
    /// Runs handed out by claims through the API.
    pub(crate) claims: IntCounter,
    /// Acks through the API.
    pub(crate) acks: IntCounter,
    /// Nacks through the API by kind (`retryable`, `permanent`, `failed`).
    pub(crate) nacks: IntCounterVec,
    /// Runs by state (`pending`, `claimed`, `parked`), read from the store on every scrape.
    pub(crate) runs: IntGaugeVec,
    /// Runs by queue and state (`queued`, `claimed`, `parked`), read from the store on every
    /// scrape; at most [`MAX_FLOW_QUEUES_SHOWN`] queues, by name.
    pub(crate) queue_runs: IntGaugeVec,
    /// 1 for each paused queue (running queues have no series), read from the store on every
    /// scrape; at most [`MAX_FLOW_QUEUES_SHOWN`] paused queues, by name.
    pub(crate) queue_paused: IntGaugeVec,
    /// How many queues are paused, all of them (the per-queue series above are capped).
    pub(crate) queues_paused: IntGauge,
    /// Stored schedules, read from the store on every scrape.
    pub(crate) schedules: IntGauge,
    /// Delivery outcomes (`ack`, `retry`, `park`, `refresh`).
    pub(crate) delivery: IntCounterVec,
    /// Whether the background backfill is switched on (1) or off (0).
    pub(crate) backfill_enabled: IntGauge,
    /// The background pass's counts (`visited`, `repaired`, `current`).
    pub(crate) backfill_spaces: IntGaugeVec,
    /// How the background pass stands: 0 not started or running, 1 complete (or already
    /// complete by its marker), 2 stopped by shutdown, 3 stopped at its first error.
    pub(crate) backfill_state: IntGauge,
    /// Connections open now.
    pub(crate) http_connections: IntGauge,
    /// The connection cap (`limits.max_connections`).
    pub(crate) http_connection_limit: IntGauge,
    /// Connections closed for idling past the keep-alive timeout.
    pub(crate) http_idle_closed: IntCounter,
    /// Whether the background retention pass is switched on (1) or off (0).
    pub(crate) retention_enabled: IntGauge,
    /// Retention passes by outcome (`complete`, `partial`: the budget ran out, `failed`).
    pub(crate) retention_passes: IntCounterVec,
    /// What retention removed, by kind (`events_expired`, `events_over_cap`, `runs`).
    pub(crate) retention_removed: IntCounterVec,
    /// Payload bytes of the run events retention removed.
    pub(crate) retention_bytes_freed: IntCounter,
    /// Epochs and bytes imported through the sync import route, per sending store.
    pub(crate) sync: SyncCounters,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// The run states the `cairn_spool_runs` gauge reports, with their label.
pub(crate) const RUN_STATES: [(RunState, &str); 3] = [
    (RunState::Queued, "pending"),
    (RunState::Claimed, "claimed"),
    (RunState::Parked, "parked"),
];

impl Metrics {
    /// A fresh registry holding every metric, at zero.
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let http_requests = IntCounterVec::new(
            Opts::new("cairn_http_requests_total", "HTTP requests answered"),
            &["method", "route", "status"],
        )?;
        let http_latency = HistogramVec::new(
            HistogramOpts::new(
                "cairn_http_request_duration_seconds",
                "Time from receiving a request to its answer",
            )
            .buckets(vec![
                0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            &["method", "route"],
        )?;
        let appends = IntCounter::new(
            "cairn_epoch_appends_total",
            "Epochs appended through the API",
        )?;
        let enqueues = IntCounterVec::new(
            Opts::new(
                "cairn_spool_enqueues_total",
                "Enqueues through the API, by whether they created a run",
            ),
            &["outcome"],
        )?;
        let claims = IntCounter::new(
            "cairn_spool_claimed_runs_total",
            "Runs handed out by claims through the API",
        )?;
        let acks = IntCounter::new("cairn_spool_acks_total", "Acks through the API")?;
        let nacks = IntCounterVec::new(
            Opts::new("cairn_spool_nacks_total", "Nacks through the API, by kind"),
            &["kind"],
        )?;
        let runs = IntGaugeVec::new(
            Opts::new(
                "cairn_spool_runs",
                "Runs in the store by state, read when scraped",
            ),
            &["state"],
        )?;
        let queue_runs = IntGaugeVec::new(
            Opts::new(
                "cairn_spool_queue_runs",
                "Runs by queue and state (queued: due now, scheduled: queued but not due yet, claimed, parked), read when scraped; at most 1000 queues, by name",
            ),
            &["queue", "state"],
        )?;
        let queue_paused = IntGaugeVec::new(
            Opts::new(
                "cairn_spool_queue_paused",
                "1 for each paused queue (a running queue has no series), read when scraped; at most 1000 paused queues, the first by name (cairn_spool_queues_paused counts them all)",
            ),
            &["queue"],
        )?;
        let queues_paused = IntGauge::new(
            "cairn_spool_queues_paused",
            "Paused queues in the store, all of them, read when scraped",
        )?;
        let schedules = IntGauge::new(
            "cairn_spool_schedules",
            "Schedules stored in the store, read when scraped",
        )?;
        let delivery = IntCounterVec::new(
            Opts::new(
                "cairn_delivery_outcomes_total",
                "Delivery worker outcomes (ack, retry, park, refresh)",
            ),
            &["outcome"],
        )?;
        let backfill_enabled = IntGauge::new(
            "cairn_backfill_enabled",
            "Whether the background head-cache backfill is switched on",
        )?;
        let backfill_spaces = IntGaugeVec::new(
            Opts::new(
                "cairn_backfill_spaces",
                "Spaces the background backfill pass visited, repaired and found current",
            ),
            &["kind"],
        )?;
        let backfill_state = IntGauge::new(
            "cairn_backfill_state",
            "0 running or not started, 1 complete, 2 stopped by shutdown, 3 stopped at an error",
        )?;
        registry.register(Box::new(http_requests.clone()))?;
        registry.register(Box::new(http_latency.clone()))?;
        registry.register(Box::new(appends.clone()))?;
        registry.register(Box::new(enqueues.clone()))?;
        registry.register(Box::new(claims.clone()))?;
        registry.register(Box::new(acks.clone()))?;
        registry.register(Box::new(nacks.clone()))?;
        registry.register(Box::new(runs.clone()))?;
        registry.register(Box::new(queue_runs.clone()))?;
        registry.register(Box::new(queue_paused.clone()))?;
        registry.register(Box::new(queues_paused.clone()))?;
        registry.register(Box::new(schedules.clone()))?;
        registry.register(Box::new(delivery.clone()))?;
        registry.register(Box::new(backfill_enabled.clone()))?;
        registry.register(Box::new(backfill_spaces.clone()))?;
        registry.register(Box::new(backfill_state.clone()))?;
        let http_connections =
            IntGauge::new("cairn_http_connections", "HTTP connections open now")?;
        let http_connection_limit = IntGauge::new(
            "cairn_http_connection_limit",
            "Most HTTP connections served at once (limits.max_connections)",
        )?;
        let http_idle_closed = IntCounter::new(
            "cairn_http_idle_connections_closed_total",
            "Connections closed after idling past the keep-alive timeout",
        )?;
        let retention_enabled = IntGauge::new(
            "cairn_retention_enabled",
            "Whether the background retention pass is switched on",
        )?;
        let retention_passes = IntCounterVec::new(
            Opts::new(
                "cairn_retention_passes_total",
                "Background retention passes by outcome (complete, partial, failed)",
            ),
            &["outcome"],
        )?;
        let retention_removed = IntCounterVec::new(
            Opts::new(
                "cairn_retention_removed_total",
                "What retention removed (events_expired, events_over_cap, runs)",
            ),
            &["kind"],
        )?;
        let retention_bytes_freed = IntCounter::new(
            "cairn_retention_bytes_freed_total",
            "Payload bytes of the run events retention removed",
        )?;
        registry.register(Box::new(http_connections.clone()))?;
        registry.register(Box::new(http_connection_limit.clone()))?;
        registry.register(Box::new(http_idle_closed.clone()))?;
        registry.register(Box::new(retention_enabled.clone()))?;
        registry.register(Box::new(retention_passes.clone()))?;
        registry.register(Box::new(retention_removed.clone()))?;
        registry.register(Box::new(retention_bytes_freed.clone()))?;
        let sync = SyncCounters::new(&registry)?;
        for outcome in ["complete", "partial", "failed"] {
            retention_passes.with_label_values(&[outcome]);
        }
        for kind in ["events_expired", "events_over_cap", "runs"] {
            retention_removed.with_label_values(&[kind]);
        }
        // Labelled series exist from the start, so a scrape before the first event shows 0.
        for outcome in ["created", "existing"] {
            enqueues.with_label_values(&[outcome]);
        }
        for kind in ["retryable", "permanent", "failed"] {
            nacks.with_label_values(&[kind]);
        }
        for outcome in ["ack", "retry", "park", "refresh"] {
            delivery.with_label_values(&[outcome]);
        }
        for kind in ["visited", "repaired", "current"] {
            backfill_spaces.with_label_values(&[kind]);
        }
        for (_, label) in RUN_STATES {
            runs.with_label_values(&[label]);
        }
        runs.with_label_values(&["scheduled"]);
        Ok(Self {
            registry,
            http_requests,
            http_latency,
            appends,
            enqueues,
            claims,
            acks,
            nacks,
            runs,
            queue_runs,
            queue_paused,
            queues_paused,
            schedules,
            delivery,
            backfill_enabled,
            backfill_spaces,
            backfill_state,
            http_connections,
            http_connection_limit,
            http_idle_closed,
            retention_enabled,
            retention_passes,
            retention_removed,
            retention_bytes_freed,
            sync,
        })
    }

    /// The registry in the Prometheus text format, then what the library recorded through
    /// the `metrics` facade (once [`install_library_recorder`] ran).
    pub(crate) fn render(&self) -> Result<Vec<u8>, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        if let Some(library) = LIBRARY.get() {
            out.extend_from_slice(library.render().as_bytes());
        }
        Ok(out)
    }
}

/// The handle of the process's `metrics` recorder, when `cairn serve` installed it.
static LIBRARY: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
    std::sync::OnceLock::new();

/// Installs the process's `metrics` recorder, so what the library records (the delivery
/// worker's consumer: `cairn_spool_consumer_*` per queue) is rendered in `/metrics` beside the
/// server's own series. Once per process; a recorder installed before (an embedding program's)
/// is left alone, and its series are then not rendered here.
pub(crate) fn install_library_recorder() {
    LIBRARY.get_or_init(|| {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::debug!(target: "cairn::serve", "a metrics recorder was installed already");
        }
        handle
    });
}

/// Most queues `cairn_spool_queue_runs` and `cairn_spool_queue_paused` show (the first by
/// name; `cairn_spool_queue_paused` shows paused queues only): a label per queue, so a store with very many queues does not grow the exposition
/// without bound.
pub(crate) const MAX_FLOW_QUEUES_SHOWN: usize = 1000;

/// The methods that are label values of their own; every other method is `other`.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE",
];

/// The method's label: a standard method's name, or `other` for any method a client made up.
pub(crate) fn method_label(method: &Method) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method.as_str())
        .copied()
        .unwrap_or("other")
}

/// The route's label: the template of the route that matched (a fixed set: the router's
/// routes), or `unmatched` for any path no route matches.
pub(crate) fn route_label(matched: Option<&MatchedPath>) -> &str {
    matched.map_or("unmatched", MatchedPath::as_str)
}

/// The status's label: the code, which the server chooses (never the client), within the
/// 100..=999 that `StatusCode` allows in any case.
pub(crate) fn status_label(status: &StatusCode) -> &str {
    status.as_str()
}

/// Counts, times and logs every request: one `request` log line with the method's and the
/// route's labels, the status, the latency, and the client's user agent clipped to
/// [`crate::logging::FIELD_MAX`] bytes (a method outside the standard ones also as sent,
/// clipped). Never another header (the token is one), the path or its values, or the body.
pub(crate) async fn observe(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    let invented = (method == "other").then(|| clip(req.method().as_str()).into_owned());
    let route = route_label(req.extensions().get::<MatchedPath>()).to_owned();
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .map(|v| clip(&String::from_utf8_lossy(v.as_bytes())).into_owned());
    let response = next.run(req).await;
    let elapsed = started.elapsed();
    let status = response.status();
    metrics
        .http_requests
        .with_label_values(&[method, route.as_str(), status_label(&status)])
        .inc();
    metrics
        .http_latency
        .with_label_values(&[method, route.as_str()])
        .observe(elapsed.as_secs_f64());
    tracing::info!(
        target: "cairn::http",
        method,
        method_sent = invented.as_deref(),
        route = route.as_str(),
        status = status.as_u16(),
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        user_agent = user_agent.as_deref(),
        "request"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_renders_from_the_start() {
        let m = Metrics::new().unwrap();
        m.appends.inc();
        let text = String::from_utf8(m.render().unwrap()).unwrap();
        assert!(text.contains("cairn_epoch_appends_total 1"), "{text}");
        assert!(
            text.contains(r#"cairn_spool_enqueues_total{outcome="existing"} 0"#),
            "{text}"
        );
        assert!(text.contains("cairn_backfill_enabled 0"), "{text}");
    }
}
