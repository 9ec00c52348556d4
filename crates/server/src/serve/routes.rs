//! The router: which path goes to which handler, and the layers every request passes
//! (body limit and pace, handler timeout, auth; the layers themselves are in
//! [`super::layers`], [`super::body`], [`super::auth`] and [`super::metrics`]).

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware;
use axum::routing::{get, post, put};
use axum::Router;

use super::auth::{require_token, Tokens};
use super::body::{self, BodyLimits};
use super::error::ApiError;
use super::layers::{require_loopback_host, time_limit, watch_storage, Limits};
use super::metrics;
use super::state::AppState;
use super::{batch, doctor, epochs, flow, health, openapi, runs, scrape, sync};

/// The whole API. `/healthz` and `/readyz` need no token; everything else does (`/metrics`
/// and `/v1/doctor` included; a read-only token suffices for them). The dashboard's `/ui`
/// routes, when served, take a session cookie instead of a bearer header ([`super::ui`]). Every request, refused
/// ones included, is counted, timed and logged by [`metrics::observe`].
pub(crate) fn router(state: AppState, tokens: Arc<Tokens>, limits: Limits) -> Router {
    let meter = state.metrics.clone();
    let target = state.doctor.clone();
    let open = tokens.is_empty();
    let ui = match state.ui {
        Some(_) => super::ui::router(state.clone()),
        None => Router::new(),
    };
    let api = Router::new()
        .route("/metrics", get(scrape::scrape))
        .route("/v1/doctor", get(doctor::doctor))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/v1/spaces/{space}/epochs", post(epochs::append))
        .route("/v1/spaces/{space}/heads", get(epochs::heads))
        .route("/v1/spaces/{space}/events", get(epochs::feed))
        .route("/v1/spaces/{space}/import", post(epochs::import))
        .route("/v1/sync/id", get(sync::store_id))
        .route("/v1/sync/spaces", get(sync::spaces))
        .route("/v1/spaces/{space}/sync/summaries", get(sync::summaries))
        .route("/v1/spaces/{space}/sync/epochs", post(sync::epochs))
        .route("/v1/spaces/{space}/sync/missing", post(sync::missing))
        .route("/v1/spaces/{space}/sync/peers", get(sync::peers))
        .route("/v1/spaces/{space}/sync/import", post(sync::import))
        .route("/v1/spaces/{space}/sync/wait", get(sync::wait))
        .route("/v1/queues/{queue}/runs", post(runs::enqueue))
        .route(
            "/v1/queues/{queue}/runs/batch",
            post(batch::handlers::enqueue_batch),
        )
        .route("/v1/batch", post(batch::handlers::batch))
        .route("/v1/queues/{queue}/claim", post(runs::claim))
        .route("/v1/runs/{id}", get(runs::run))
        .route(
            "/v1/runs/{id}/events",
            post(runs::append_event).get(runs::events),
        )
        .route("/v1/runs/{id}/facts", get(runs::facts))
        .route("/v1/runs/{id}/facts/{name}", put(runs::set_fact))
        .route("/v1/runs/{id}/heartbeat", post(runs::heartbeat))
        .route("/v1/runs/{id}/ack", post(runs::ack))
        .route("/v1/runs/{id}/nack", post(runs::nack))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/close", post(runs::close))
        .route("/v1/runs/{id}/retry", post(runs::retry))
        .route("/v1/runs/{id}/discard", post(runs::discard))
        .route("/v1/queues/{queue}/parked/retry", post(runs::retry_parked))
        .route("/v1/queues", get(flow::queues))
        .route("/v1/queues/{queue}/flow", get(flow::flow))
        .route("/v1/queues/{queue}/pause", post(flow::pause))
        .route("/v1/queues/{queue}/resume", post(flow::resume))
        .route("/v1/queues/{queue}/limits", put(flow::limits))
        .route("/v1/schedules", get(flow::schedules))
        .route(
            "/v1/schedules/{name}",
            get(flow::schedule)
                .put(flow::put_schedule)
                .delete(flow::remove_schedule),
        )
        .route_layer(middleware::from_fn_with_state(tokens, require_token));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(api)
        .merge(ui)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(limits, time_limit))
        .layer(middleware::from_fn_with_state(target, watch_storage))
        .layer(DefaultBodyLimit::max(limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(
            BodyLimits {
                max_body_bytes: limits.max_body_bytes,
                grace: limits.body_grace,
            },
            body::guard,
        ))
        .layer(middleware::from_fn_with_state(open, require_loopback_host))
        .layer(middleware::from_fn_with_state(meter, metrics::observe))
        .with_state(state)
}

async fn no_route() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; the API is described at /v1/openapi.json",
    )
}

async fn wrong_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method; see /v1/openapi.json",
    )
}
