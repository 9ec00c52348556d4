//! Accepting and serving connections (HTTP/1.1, hyper's connection builder under the axum
//! router), with the limits that keep slow, idle or numerous clients from starving the others:
//!
//! - **Header-read timeout** (`limits.header_read_timeout_secs`): a request's whole header must
//!   arrive within this time of the connection opening or of the previous answer, or the
//!   connection is closed (hyper's `header_read_timeout`, on tokio's timer). A client that
//!   dribbles an incomplete header is cut off however steadily it dribbles.
//! - **Keep-alive timeout** (`limits.keep_alive_timeout_secs`): a connection with no request in
//!   flight and no byte read or written for this long is closed. As hyper's header timer also
//!   runs while a connection waits for its next request, an idle connection is closed after
//!   the smaller of the two timeouts.
//! - **Connection cap** (`limits.max_connections`): at most this many connections are served at
//!   once. The next one is accepted only when one closes; until then it waits in the kernel's
//!   listen queue (or is refused by the kernel when that queue is full). The server itself
//!   never stops serving the connections it holds.
//!
//! Handler time and body size are the router's limits (`routes::Limits`).
//!
//! There is no TLS listener: `cairn serve` speaks plain HTTP and is put behind a TLS-terminating
//! proxy when it faces a network.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt;

use super::metrics::Metrics;

/// The connection limits (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnLimits {
    /// Longest wait for a request's whole header.
    pub(crate) header_read_timeout: Duration,
    /// Longest a connection may stay idle between requests.
    pub(crate) keep_alive_timeout: Duration,
    /// Most connections served at once.
    pub(crate) max_connections: usize,
}

/// When a connection last did something, and how many of its requests are in flight.
struct Activity {
    origin: Instant,
    /// Milliseconds from `origin` to the last byte read or written or request finished.
    last_ms: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }

    /// Resolves once the connection has had no request in flight and no traffic for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let due = self.last() + timeout;
            if Instant::now() < due {
                tokio::time::sleep_until(due).await;
            } else if self.in_flight.load(Ordering::Relaxed) > 0 {
                // A handler is running (the router's request timeout bounds it).
                tokio::time::sleep(timeout).await;
            } else {
                return;
            }
        }
    }
}

/// A request in flight on a connection, from the call of the router to its answer.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.touch();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP stream that records each successful read and write in its [`Activity`].
struct Tracked {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let filled = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > filled {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves; then stops accepting
/// and returns once every open connection has finished its request in flight and closed (the
/// caller bounds that wait by the drain timeout).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    metrics
        .http_connection_limit
        .set(i64::try_from(limits.max_connections).unwrap_or(i64::MAX));
    tokio::pin!(shutdown);
    loop {
        // A slot first: over the cap, the next connection stays in the listen queue.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let service = {
            let activity = activity.clone();
            let app = app.clone();
            hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let in_flight = InFlight::enter(activity.clone());
                let app = app.clone();
                async move {
                    let response = app.oneshot(req).await;
                    drop(in_flight);
                    response
                }
            })
        };
        let io = TokioIo::new(Tracked {
            io: stream,
            activity: activity.clone(),
        });
        let connection = graceful.watch(builder.serve_connection(io, service));
        let keep_alive = limits.keep_alive_timeout;
        let metrics = metrics.clone();
        metrics.http_connections.inc();
        tokio::spawn(async move {
            tokio::select! {
                // A header-read timeout, a closed or broken connection: hyper's error is the
                // client's doing and closes only this connection.
                _ = connection => {}
                () = activity.idle_for(keep_alive) => {
                    metrics.http_idle_closed.inc();
                }
            }
            metrics.http_connections.dec();
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A failed accept: a connection reset before it was accepted is skipped; anything else
/// (such as running out of file descriptors) is logged and retried after a second.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(target: "cairn::serve", error = %e, "cannot accept a connection; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
