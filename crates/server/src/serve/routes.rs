//! The router: which path goes to which handler, and the layers every request passes
//! (body limit and pace, handler timeout, auth).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use cairn::{EpochDiagnostics, EpochStore, Spool};

use super::auth::{require_token, Tokens};
use super::body::{self, BodyLimits};
use super::error::ApiError;
use super::json::{ErrorBody, Health};
use super::metrics::{self, Metrics};
use super::{batch, doctor, epochs, openapi, runs, storage};

/// What every handler reads: the store (for transactions) and its capabilities, the metrics
/// and what doctor needs.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) store: cairn::Store,
    pub(crate) epochs: Arc<dyn EpochStore>,
    pub(crate) spool: Arc<dyn Spool>,
    pub(crate) diagnostics: Arc<dyn EpochDiagnostics>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) doctor: Arc<doctor::Target>,
    /// The dashboard's sessions and rates, when `/ui` is served.
    pub(crate) ui: Option<Arc<super::ui::Ui>>,
    /// Most bytes of JSON a feed or run-events page holds before it ends early
    /// (`limits.max_page_bytes`); its first item always goes out.
    pub(crate) page_bytes: usize,
}

/// Limits the router enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Largest request body, in bytes.
    pub(crate) max_body_bytes: usize,
    /// Longest a handler may take before the request is answered 503 `timeout`.
    pub(crate) request_timeout: Duration,
    /// The grace a request body gets before it must keep [`super::body::MIN_BODY_RATE`] (the
    /// header-read timeout).
    pub(crate) body_grace: Duration,
}

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
        .route("/metrics", get(metrics::scrape))
        .route("/v1/doctor", get(doctor::doctor))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/v1/spaces/{space}/epochs", post(epochs::append))
        .route("/v1/spaces/{space}/heads", get(epochs::heads))
        .route("/v1/spaces/{space}/events", get(epochs::feed))
        .route("/v1/spaces/{space}/import", post(epochs::import))
        .route("/v1/queues/{queue}/runs", post(runs::enqueue))
        .route("/v1/queues/{queue}/runs/batch", post(batch::enqueue_batch))
        .route("/v1/batch", post(batch::batch))
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
        .route_layer(middleware::from_fn_with_state(tokens, require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(api)
        .merge(ui)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(limits, time_limit))
        .layer(middleware::from_fn_with_state(target, storage::observe))
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

/// Whether a `Host` header names this machine's loopback interface: `localhost`, an IPv4
/// loopback address or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, port)) if port.is_empty() || port.starts_with(':') => inside,
            _ => return false,
        },
        None => host.split_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Without tokens (`--insecure-no-auth`, loopback only) the server answers only requests whose
/// `Host` is a loopback name: a web page whose own name an attacker points at 127.0.0.1 (DNS
/// rebinding) sends its name as `Host` and is refused with 421, so a site a developer visits
/// cannot drive the unauthenticated server from the browser. A request with no `Host` or
/// with two is refused the same way.
async fn require_loopback_host(State(open): State<bool>, req: Request, next: Next) -> Response {
    if open {
        // Exactly one `Host`, and a loopback one: with two, which one a proxy or a
        // framework reads is anyone's guess.
        let mut hosts = req.headers().get_all(axum::http::header::HOST).iter();
        let host = match (hosts.next(), hosts.next()) {
            (Some(h), None) => h.to_str().ok(),
            _ => None,
        };
        if !host.is_some_and(is_loopback_host) {
            return ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected",
                "a server without tokens answers requests for localhost, 127.0.0.1 or [::1] only",
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// Runs the handler in its own task, so that a panic answers 500 `internal` instead of
/// dropping the connection, and answers 503 `timeout` when it takes longer than the limit.
/// The store operation a timeout abandons is atomic: it either committed or wrote nothing, so
/// reading the state or an idempotent retry tells which.
async fn time_limit(State(limits): State<Limits>, req: Request, next: Next) -> Response {
    let mut handler = tokio::spawn(next.run(req));
    match tokio::time::timeout(limits.request_timeout, &mut handler).await {
        Ok(Ok(response)) => response,
        Ok(Err(_)) => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed while handling this request (a bug; please report it); \
             read the state before retrying",
        )
        .into_response(),
        Err(_) => {
            handler.abort();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than {:?}; it may or may not have taken effect, \
                     read the state or retry (enqueues and facts are idempotent, and so is a run \
                     event while the run still holds it: a delivered one is removed, and its \
                     id then appends anew)",
                    limits.request_timeout
                ),
            )
            .into_response()
        }
    }
}

/// Liveness: the process answers.
#[utoipa::path(
    get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The server is up", body = Health))
)]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store answers a read, and no write was refused for a full store within the
/// last minute without a write storing something since (`storage_full`).
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "The store answers", body = Health),
        (status = 503, description = "The store does not answer, its file was replaced under the server (`store_replaced`), or its storage is full (`storage_full`: a write was refused for it within the last minute and none has stored anything since)", body = ErrorBody),
    )
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if let Some(r) = state.doctor.storage.refusals().filter(|r| r.current) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            super::error::STORAGE_FULL,
            format!(
                "the store's storage is full: {}; free disk space, then a write that stores \
                 something makes the server ready again",
                r.describe()
            ),
        ));
    }
    // A SQLite file replaced under the server answers 503 `store_replaced` (issue 21, item 13).
    state.diagnostics.check_ready().await?;
    state.epochs.list_spaces(None, 1).await?;
    Ok(Json(Health {
        status: "ok".into(),
    }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get_raw(addr: std::net::SocketAddr, path: &str) -> String {
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.unwrap();
        answer
    }

    async fn panicking() -> &'static str {
        panic!("a handler bug")
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for ok in [
            "localhost",
            "LOCALHOST:7878",
            "127.0.0.1",
            "127.0.0.1:7878",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:7878",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "rebind.evil.example:7878",
            "localhost.evil.example",
            "10.0.0.1:7878",
            "[::2]:7878",
            "[::1]x",
            "",
            "0.0.0.0:7878",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_handler_times_out_and_a_panicking_one_answers_500() {
        let limits = Limits {
            max_body_bytes: 1024,
            request_timeout: Duration::from_millis(50),
            body_grace: Duration::from_secs(1),
        };
        let app = Router::new()
            .route("/pending", get(std::future::pending::<&'static str>))
            .route("/panic", get(panicking))
            .route("/fine", get(|| async { "fine" }))
            .layer(middleware::from_fn_with_state(limits, time_limit));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let slow = get_raw(addr, "/pending").await;
        assert!(slow.starts_with("HTTP/1.1 503"), "{slow}");
        assert!(slow.contains(r#""code":"timeout""#), "{slow}");
        let bug = get_raw(addr, "/panic").await;
        assert!(bug.starts_with("HTTP/1.1 500"), "{bug}");
        assert!(bug.contains(r#""code":"internal""#), "{bug}");
        assert!(
            get_raw(addr, "/fine").await.ends_with("fine"),
            "still serving"
        );
        server.abort();
    }
}
