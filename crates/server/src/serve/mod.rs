//! `cairn serve`: the store over HTTP (axum on tokio).
//!
//! Startup order: the tokens are read and checked, then the store is opened through the
//! migration runner (a refused store ends the command with one line), then the address is
//! bound and `listening on ADDR` is printed as the first stdout line. On SIGINT or SIGTERM the
//! listener stops accepting, in-flight requests get `--drain-timeout` to finish, and the store
//! is closed.
//!
//! Auth choice: with no token configured the server refuses to start, unless
//! `--insecure-no-auth` is given *and* the listen address is a loopback address, so an
//! unauthenticated server is never reachable from another machine by accident.

mod auth;
mod delivery;
mod epochs;
mod error;
mod json;
mod openapi;
mod routes;
mod runs;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn::DatabaseUrl;

use crate::error::CliError;
use crate::open::{open_with, IfMissing};

/// Default listen address: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// `cairn serve`'s options.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port); the bound address is printed as
    /// `listening on ADDR`, the first line on stdout.
    #[arg(long, env = "CAIRN_LISTEN", default_value = DEFAULT_LISTEN, value_name = "ADDR")]
    listen: SocketAddr,
    /// A file of full-access bearer tokens, one a line (`#` comments and blank lines ignored),
    /// in addition to `CAIRN_AUTH__TOKENS` (comma-separated). Read-only tokens come from
    /// `CAIRN_AUTH__READ_TOKENS`. Tokens are at least 16 characters, without whitespace.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Serve without any token check. Allowed only on a loopback address, for local
    /// development; without it, a server with no token configured refuses to start.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Largest request body in bytes; larger bodies are answered 413 and write nothing.
    #[arg(long, default_value_t = 8 * 1024 * 1024, value_name = "BYTES")]
    max_body_bytes: usize,
    /// Longest a request may take, in seconds, before it is answered 503 `timeout`.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    request_timeout: u64,
    /// On SIGINT/SIGTERM, how long in-flight requests get to finish, in seconds.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    drain_timeout: u64,
    /// The background head-cache backfill (on unless switched off).
    #[command(flatten)]
    backfill: crate::backfill::BackfillArgs,
    /// Delivery to a collector (off unless `--delivery-url` is given).
    #[command(flatten)]
    delivery: delivery::DeliveryArgs,
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(target: &DatabaseUrl, args: ServeArgs) -> Result<(), CliError> {
    let tokens = auth::Tokens::load(args.token_file.as_deref())?;
    if tokens.is_empty() {
        if !args.insecure_no_auth {
            return Err(CliError::Config(format!(
                "no bearer token is configured: set {} (and {} for read-only clients) or pass \
                 --token-file; for local development only, --insecure-no-auth serves without \
                 tokens on a loopback address",
                auth::TOKENS_ENV,
                auth::READ_TOKENS_ENV
            )));
        }
        if !args.listen.ip().is_loopback() {
            return Err(CliError::Config(format!(
                "--insecure-no-auth is allowed on a loopback address only, not {}; configure \
                 tokens to listen elsewhere",
                args.listen
            )));
        }
    }
    if args.max_body_bytes == 0 || args.request_timeout == 0 {
        return Err(CliError::Config(
            "--max-body-bytes and --request-timeout must be at least 1".into(),
        ));
    }
    let backfill_config = args.backfill.config()?;
    let delivery = args.delivery.validate()?;
    let store = open_with(target, IfMissing::Create, args.delivery.spool_config()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::Config(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Config(format!("cannot read the bound address: {e}")))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    let state = routes::AppState {
        epochs: store.epochs(),
        spool: store.spool(),
    };
    let limits = routes::Limits {
        max_body_bytes: args.max_body_bytes,
        request_timeout: Duration::from_secs(args.request_timeout),
    };
    let app = routes::router(state, Arc::new(tokens), limits);
    let drain = Duration::from_secs(args.drain_timeout);
    let worker = match delivery {
        Some(settings) => Some(delivery::Worker::start(store.spool(), settings, drain).await?),
        None => None,
    };
    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    let backfill = backfill_config
        .enabled
        .then(|| crate::backfill::spawn(store.diagnostics(), backfill_config, stopping.clone()));
    // The worker stops with the HTTP side (or when the server ends and drops the sender), so
    // both drains share the one `--drain-timeout` bound.
    let worker = worker.map(|w| {
        let mut signal = stopping.clone();
        tokio::spawn(async move {
            let _ = signal.wait_for(|s| *s).await;
            w.stop().await;
        })
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown_signal().await;
        let _ = stopping_tx.send(true);
    });
    let mut server = tokio::spawn(std::future::IntoFuture::into_future(server));
    let served = tokio::select! {
        joined = &mut server => joined
            .map_err(|e| CliError::Config(format!("the server task failed: {e}")))?
            .map_err(|e| CliError::Config(format!("the server failed: {e}"))),
        () = async {
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(drain).await;
        } => {
            server.abort();
            let _ = writeln!(
                std::io::stderr().lock(),
                "cairn: in-flight requests did not finish within {drain:?}; closing the store anyway"
            );
            Ok(())
        }
    };
    if let Some(worker) = worker {
        let _ = worker.await;
    }
    if let Some(backfill) = backfill {
        // It stops between spaces once `stopping` is true; a repair in flight is one short
        // transaction.
        let _ = backfill.await;
    }
    store.close().await?;
    served
}

/// Resolves on SIGINT or (on Unix) SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
