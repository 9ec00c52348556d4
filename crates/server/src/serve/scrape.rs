//! `GET /metrics`: Prometheus text exposition of the server's counters.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::json::ErrorBody;
use super::metrics::{MAX_FLOW_QUEUES_SHOWN, RUN_STATES};

/// The states `cairn_spool_queue_runs` shows per queue, with their labels.
const QUEUE_STATES: [(cairn::RunState, &str); 3] = [
    (cairn::RunState::Queued, "queued"),
    (cairn::RunState::Claimed, "claimed"),
    (cairn::RunState::Parked, "parked"),
];
use super::state::AppState;

/// The server's metrics in the Prometheus text format (version 0.0.4). The run counts by
/// state, the paused queues and the number of schedules are read from the store at each
/// scrape.
#[utoipa::path(
    get, path = "/metrics", tag = "meta",
    responses(
        (status = 200, description = "Prometheus text exposition", content_type = "text/plain"),
        (status = 401, description = "No valid token (a read-only token suffices)", body = ErrorBody),
        (status = 503, description = "The store does not answer", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(crate) async fn scrape(State(state): State<AppState>) -> Result<Response, ApiError> {
    let stats = state.spool.stats().await?;
    // Queued runs not due yet (a not-before or a retry's backoff ahead) are `scheduled`, not
    // part of the backlog a claim can take now (`pending`, `queued`).
    let scheduled: u64 = stats.queues.values().map(|q| q.scheduled).sum();
    for (s, label) in RUN_STATES {
        let mut n = stats.runs.get(&s).copied().unwrap_or(0);
        if s == cairn::RunState::Queued {
            n = n.saturating_sub(scheduled);
        }
        state
            .metrics
            .runs
            .with_label_values(&[label])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    state
        .metrics
        .runs
        .with_label_values(&["scheduled"])
        .set(i64::try_from(scheduled).unwrap_or(i64::MAX));
    state.metrics.queue_runs.reset();
    for (queue, q) in stats.queues.iter().take(MAX_FLOW_QUEUES_SHOWN) {
        for (s, label) in QUEUE_STATES {
            let mut n = q.runs.get(&s).copied().unwrap_or(0);
            if s == cairn::RunState::Queued {
                n = n.saturating_sub(q.scheduled);
            }
            state
                .metrics
                .queue_runs
                .with_label_values(&[queue.as_str(), label])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        state
            .metrics
            .queue_runs
            .with_label_values(&[queue.as_str(), "scheduled"])
            .set(i64::try_from(q.scheduled).unwrap_or(i64::MAX));
    }
    // Flow and schedules exist once the store is at revision 0009: on a store whose upgrade
    // stopped before it (a deferred contract revision), the run counts above still scrape.
    state.metrics.queue_paused.reset();
    match state.spool.queue_flows().await {
        Ok(flows) => {
            let (total, shown) = paused_queues(&flows, MAX_FLOW_QUEUES_SHOWN);
            for queue in shown {
                state
                    .metrics
                    .queue_paused
                    .with_label_values(&[queue])
                    .set(1);
            }
            state
                .metrics
                .queues_paused
                .set(i64::try_from(total).unwrap_or(i64::MAX));
        }
        Err(e) => tracing::debug!(target: "cairn::serve", error = %e, "queue flows not read"),
    }
    match state.spool.schedules().await {
        Ok(all) => state
            .metrics
            .schedules
            .set(i64::try_from(all.len()).unwrap_or(i64::MAX)),
        Err(e) => tracing::debug!(target: "cairn::serve", error = %e, "schedules not read"),
    }
    let body = state.metrics.render().map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot render the metrics: {e}"),
        )
    })?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response())
}

/// The paused queues among `flows`: how many there are, and the names of the first `cap` of
/// them by name (a running queue, limited or not, is never among them, so it cannot push a
/// paused one out).
fn paused_queues(
    flows: &[(cairn::spool::QueueName, cairn::spool::QueueFlow)],
    cap: usize,
) -> (usize, Vec<&str>) {
    let mut paused: Vec<&str> = flows
        .iter()
        .filter(|(_, flow)| flow.paused)
        .map(|(queue, _)| queue.as_str())
        .collect();
    paused.sort_unstable();
    let total = paused.len();
    paused.truncate(cap);
    (total, paused)
}

#[cfg(test)]
mod tests {
    use super::paused_queues;
    use cairn::spool::{QueueFlow, QueueName};

    fn flow(paused: bool) -> QueueFlow {
        QueueFlow {
            paused,
            ..QueueFlow::default()
        }
    }

    /// Running queues (limited ones keep a stored flow) sorting before the paused ones do not
    /// take the cap's places: the paused queues are listed, and all of them are counted.
    #[test]
    fn only_paused_queues_are_listed_and_all_are_counted() {
        let flows: Vec<(QueueName, QueueFlow)> = [
            ("a", false),
            ("b", false),
            ("y", true),
            ("z", true),
            ("zz", true),
        ]
        .into_iter()
        .map(|(q, p)| (QueueName::new(q).unwrap(), flow(p)))
        .collect();
        assert_eq!(paused_queues(&flows, 2), (3, vec!["y", "z"]));
        assert_eq!(paused_queues(&flows, 10), (3, vec!["y", "z", "zz"]));
        assert_eq!(paused_queues(&flows[..2], 10), (0, vec![]));
    }
}
