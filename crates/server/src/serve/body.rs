//! Request bodies at the door: a body is refused on its declared length before a byte of it
//! is read, and reading it is bounded in time, so a client that announces a body and never
//! sends it cannot hold a connection slot (`limits.max_connections`) for the whole request
//! timeout.
//!
//! - **Declared length.** A `Content-Length` over the route's cap is answered 413
//!   `body_too_large` at once, before authentication and before any handler runs. The cap is
//!   `limits.max_body_bytes`, except `POST /ui/login`, which takes [`LOGIN_MAX_BODY`]: its
//!   form is a CSRF value, a token and a path, and it is read before anyone is known.
//! - **Pace.** The body must keep up with [`MIN_BODY_RATE`] after a grace of the header-read
//!   timeout (`limits.header_read_timeout_secs`), measured from the end of the header: by then
//!   plus one second per `MIN_BODY_RATE` bytes received, the next byte must have come. A client
//!   that stalls mid-body fails the read ([`BodyError::TooSlow`], answered 408
//!   `body_timeout` by the API and 400 by the sign-in form); its connection closes, as hyper
//!   does not reuse a connection whose request body was left unread.
//! - **Size while reading.** A body without a `Content-Length` (chunked) that grows past the
//!   cap fails the read ([`BodyError::TooLarge`]).
//!
//! The test is `tests/slow_body.rs`: twenty stalled sign-in bodies on a twenty-connection
//! server leave an authenticated request answered within the grace, and an announced body over
//! the cap is answered 413 before it is sent.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::error::ApiError;

/// The largest sign-in form (`POST /ui/login`) read, in bytes.
pub(crate) const LOGIN_MAX_BODY: usize = 4096;

/// The slowest pace a body may keep after its grace, in bytes per second.
pub(crate) const MIN_BODY_RATE: u64 = 64 * 1024;

/// What the guard enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BodyLimits {
    /// `limits.max_body_bytes`.
    pub(crate) max_body_bytes: usize,
    /// How long a body may take before [`MIN_BODY_RATE`] applies (the header-read timeout).
    pub(crate) grace: Duration,
}

/// Why a body read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// It grew past the route's cap.
    TooLarge,
    /// It did not keep the minimum pace.
    TooSlow,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::TooLarge => "the request body is over the server's limit",
            Self::TooSlow => "the request body arrived too slowly",
        })
    }
}

impl std::error::Error for BodyError {}

impl BodyError {
    /// The body error somewhere in `err`'s chain of causes, if any.
    pub(crate) fn find(err: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut next = Some(err);
        while let Some(e) = next {
            if let Some(b) = e.downcast_ref::<Self>() {
                return Some(*b);
            }
            next = e.source();
        }
        None
    }

    /// The API's answer to it.
    pub(crate) fn answer(self, cap: Option<usize>) -> ApiError {
        match self {
            Self::TooLarge => too_large(cap),
            Self::TooSlow => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body did not arrive in time (it must keep up {MIN_BODY_RATE} \
                     bytes a second after the header-read timeout); nothing was written, send \
                     it again"
                ),
            ),
        }
    }
}

fn too_large(cap: Option<usize>) -> ApiError {
    let limit = cap.map_or_else(
        || "the server's limit (--max-body-bytes)".to_owned(),
        |c| format!("this route's limit of {c} bytes"),
    );
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!("the request body is over {limit}; nothing was written"),
    )
}

/// The body cap of a path.
fn cap_for(path: &str, limits: BodyLimits) -> usize {
    if path == "/ui/login" {
        LOGIN_MAX_BODY.min(limits.max_body_bytes)
    } else {
        limits.max_body_bytes
    }
}

/// The declared `Content-Length`, when there is exactly one that reads as a number; a
/// malformed one is hyper's to refuse.
fn declared(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(header::CONTENT_LENGTH).iter();
    match (values.next(), values.next()) {
        (Some(v), None) => v.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// The layer: refuses an announced body over the cap, and paces and caps the rest.
pub(crate) async fn guard(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let cap = cap_for(req.uri().path(), limits);
    if declared(req.headers()).is_some_and(|n| n > cap as u64) {
        let mut res = too_large(Some(cap)).into_response();
        // The body stays unread: the connection cannot serve another request.
        res.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
        return res;
    }
    let (parts, body) = req.into_parts();
    let paced = Paced::new(body, cap, limits.grace);
    next.run(Request::from_parts(parts, Body::new(paced))).await
}

/// A body read under the cap and the pace.
struct Paced {
    inner: Body,
    cap: u64,
    received: u64,
    start: Instant,
    grace: Duration,
    deadline: Pin<Box<Sleep>>,
    failed: bool,
}

impl Paced {
    fn new(inner: Body, cap: usize, grace: Duration) -> Self {
        let start = Instant::now();
        Self {
            inner,
            cap: cap as u64,
            received: 0,
            start,
            grace,
            deadline: Box::pin(tokio::time::sleep_until(start + grace)),
            failed: false,
        }
    }

    /// When the next byte is due, with `received` bytes in.
    fn due(&self) -> Instant {
        let earned = Duration::from_secs_f64(self.received as f64 / MIN_BODY_RATE as f64);
        self.start + self.grace + earned
    }
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.received = self.received.saturating_add(data.len() as u64);
                    if self.received > self.cap {
                        self.failed = true;
                        return Poll::Ready(Some(Err(axum::Error::new(BodyError::TooLarge))));
                    }
                    let due = self.due();
                    self.deadline.as_mut().reset(due);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.failed = true;
                    Poll::Ready(Some(Err(axum::Error::new(BodyError::TooSlow))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a body to its end or its first error.
    async fn collect(mut body: Paced) -> Result<Vec<u8>, axum::Error> {
        let mut out = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            if let Some(d) = frame?.data_ref() {
                out.extend_from_slice(d);
            }
        }
        Ok(out)
    }

    fn limits() -> BodyLimits {
        BodyLimits {
            max_body_bytes: 1 << 20,
            grace: Duration::from_secs(2),
        }
    }

    #[test]
    fn the_sign_in_form_has_its_own_small_cap() {
        assert_eq!(cap_for("/ui/login", limits()), LOGIN_MAX_BODY);
        assert_eq!(cap_for("/v1/batch", limits()), 1 << 20);
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_LENGTH, "99999999999".parse().unwrap());
        assert_eq!(declared(&h), Some(99_999_999_999));
        h.append(header::CONTENT_LENGTH, "1".parse().unwrap());
        assert_eq!(declared(&h), None, "two lengths are hyper's to refuse");
    }

    #[tokio::test]
    async fn a_stalled_body_fails_after_the_grace_and_a_whole_one_reads() {
        const GRACE: Duration = Duration::from_millis(300);
        let whole = Paced::new(Body::from("csrf=x&token=y"), 4096, GRACE);
        assert_eq!(collect(whole).await.unwrap(), b"csrf=x&token=y");
        // A body whose first bytes come and whose rest never does.
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        tx.send(Ok(Frame::data(Bytes::from_static(b"csrf="))))
            .await
            .unwrap();
        let stream = channel_body(rx);
        let started = Instant::now();
        let err = collect(Paced::new(stream, 4096, GRACE)).await.unwrap_err();
        assert_eq!(BodyError::find(&err), Some(BodyError::TooSlow));
        // Five bytes in earn 76 µs past the grace.
        assert!(started.elapsed() >= GRACE, "{:?}", started.elapsed());
        drop(tx);
        let big = Paced::new(Body::from(vec![0u8; 5000]), 4096, GRACE);
        let err = collect(big).await.unwrap_err();
        assert_eq!(BodyError::find(&err), Some(BodyError::TooLarge));
    }

    /// A body fed from a channel.
    fn channel_body(rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>) -> Body {
        struct Chan(tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>);
        impl HttpBody for Chan {
            type Data = Bytes;
            type Error = std::io::Error;
            fn poll_frame(
                mut self: Pin<&mut Self>,
                cx: &mut Context<'_>,
            ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
                self.0.poll_recv(cx)
            }
        }
        Body::new(Chan(rx))
    }
}
