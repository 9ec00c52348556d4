//! The layers every request passes besides auth and metrics: the limits the router enforces
//! (handler timeout, a panicking handler answered 500), the loopback `Host` check of a server
//! without tokens, and the note of each `storage_full` answer and each write that stored.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::Target;
use super::storage::FullAnswer;

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
pub(crate) async fn require_loopback_host(
    State(open): State<bool>,
    req: Request,
    next: Next,
) -> Response {
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
pub(crate) async fn time_limit(State(limits): State<Limits>, req: Request, next: Next) -> Response {
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
/// The layer that notes each `storage_full` answer and each answer 201.
pub(crate) async fn watch_storage(
    State(target): State<Arc<Target>>,
    req: Request,
    next: Next,
) -> Response {
    // Only writes tell: `/readyz` answers `storage_full` too, from what is noted here.
    let write = !matches!(*req.method(), Method::GET | Method::HEAD);
    let res = next.run(req).await;
    if !write {
        return res;
    }
    if let Some(FullAnswer(detail)) = res.extensions().get::<FullAnswer>() {
        target.storage.refused(detail);
    } else if res.status() == StatusCode::CREATED {
        target.storage.stored();
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::middleware;
    use axum::routing::get;
    use axum::Router;
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
