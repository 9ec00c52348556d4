//! `cairn serve`: the store over HTTP (axum on tokio).
//!
//! Startup order: the configuration is read and checked, then the store is opened through the
//! migration runner (a refused store ends the command with one line), then the address is
//! bound and `listening on ADDR` is printed as the first stdout line. On SIGINT or SIGTERM the
//! listener stops accepting, in-flight requests get `--drain-timeout` to finish, and the store
//! is closed.
//!
//! Auth choice: with no token configured the server refuses to start, unless
//! `--insecure-no-auth` is given *and* the listen address is a loopback address, so an
//! unauthenticated server is never reachable from another machine by accident (and it answers
//! loopback `Host` names only, against DNS rebinding). `/metrics` and
//! `/v1/doctor` need a token like the API (a read-only token suffices); only `/healthz` and
//! `/readyz` are open.
//!
//! Configuration (`crate::config`) is read and checked as a whole before the store is opened;
//! the binary reports every problem on its own line and exits 2.
//!
//! Connections are served by [`connections::serve`] with a header-read timeout, a keep-alive
//! timeout and a connection cap (`[limits]`); a background retention pass keeps the spool
//! within `[spool]`'s retention policy ([`retention`]), beside the head-cache backfill and the
//! delivery worker. All three stop on shutdown before the store is closed.

mod auth;
mod backfill;
mod batch;
mod body;
mod connections;
mod delivery;
mod doctor;
mod epochs;
mod error;
mod integer;
pub(crate) mod json;
mod metrics;
mod openapi;
mod page;
mod retention;
mod routes;
mod runs;
pub(crate) mod storage;
mod ui;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn::DatabaseUrl;

#[cfg(feature = "fuzzing")]
pub(crate) use self::error::{decode_body, ApiError};
use crate::config::{Config, LogFormat, Overrides, Problems};
use crate::error::CliError;
use crate::open::{open_with, IfMissing};

/// Default listen address: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The longest header-read or keep-alive timeout accepted, in seconds.
const MAX_CONNECTION_TIMEOUT_SECS: u64 = 86_400;

/// `cairn serve`'s options. Every one is also a key of the config file (`--config FILE` or
/// `CAIRN_CONFIG`) and an environment variable (`CAIRN_` + the key in capitals, `__` between
/// section and key); a flag wins over the environment, which wins over the file.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// A TOML config file (sections `[auth]`, `[delivery]`, `[backfill]`, `[spool]`,
    /// `[limits]`, `[log]`; top-level `database` and `listen`). Default: `CAIRN_CONFIG`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on (`127.0.0.1:0` picks a free port); the bound address is printed as
    /// `listening on ADDR`, the first line on stdout. Key `listen`, env `CAIRN_LISTEN`;
    /// default 127.0.0.1:7878.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// A file of full-access bearer tokens, one a line (`#` comments and blank lines ignored),
    /// in addition to `auth.tokens` (`CAIRN_AUTH__TOKENS`, comma-separated). Read-only tokens
    /// come from `auth.read_tokens` (`CAIRN_AUTH__READ_TOKENS`). Tokens are at least 16
    /// characters, without whitespace.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Serve without any token check. Allowed only on a loopback address, for local
    /// development; without it, a server with no token configured refuses to start.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Largest request body in bytes; larger bodies are answered 413 and write nothing
    /// (`limits.max_body_bytes`; default 8 MiB).
    #[arg(long, value_name = "BYTES")]
    max_body_bytes: Option<usize>,
    /// Longest a request may take, in seconds, before it is answered 503 `timeout`
    /// (`limits.request_timeout_secs`; default 30).
    #[arg(long, value_name = "SECS")]
    request_timeout: Option<u64>,
    /// On SIGINT/SIGTERM, how long in-flight requests get to finish, in seconds
    /// (`limits.drain_timeout_secs`; default 10).
    #[arg(long, value_name = "SECS")]
    drain_timeout: Option<u64>,
    /// Longest wait for a request's whole header, in seconds from the connection's start or the
    /// previous answer; a slower client is disconnected (`limits.header_read_timeout_secs`;
    /// default 10). A request body gets the same grace, then must keep up 64 KiB a second, or
    /// it is answered 408 and its connection closed.
    #[arg(long, value_name = "SECS")]
    header_read_timeout: Option<u64>,
    /// How long a keep-alive connection may idle between requests, in seconds
    /// (`limits.keep_alive_timeout_secs`; default 5).
    #[arg(long, value_name = "SECS")]
    keep_alive_timeout: Option<u64>,
    /// Most connections served at once; more wait in the listen queue until one closes
    /// (`limits.max_connections`; default 512).
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Whether the background retention pass runs (`spool.retention_enabled`; default true).
    #[arg(long = "retention-enabled", value_name = "BOOL", action = clap::ArgAction::Set)]
    retention_enabled: Option<bool>,
    /// Seconds between two retention passes (`spool.retention_interval_secs`; default 60).
    #[arg(long = "retention-interval", value_name = "SECS")]
    retention_interval: Option<u64>,
    /// Whether the background head-cache backfill runs (`backfill.enabled`; default true).
    #[arg(long = "backfill-enabled", value_name = "BOOL", action = clap::ArgAction::Set)]
    backfill_enabled: Option<bool>,
    /// The most spaces the backfill visits per second (`backfill.spaces_per_second`; default 2).
    #[arg(long = "backfill-spaces-per-second", value_name = "RATE")]
    backfill_spaces_per_second: Option<f64>,
    /// Spaces between two backfill progress lines (`backfill.progress_every`; default 500).
    #[arg(long = "backfill-progress-every", value_name = "N")]
    backfill_progress_every: Option<u64>,
    /// The collector to forward run event batches to (`delivery.url`, `CAIRN_DELIVERY__URL`).
    /// Without it the server delivers nothing and claims no run. Its token comes from
    /// `delivery.token` (`CAIRN_DELIVERY__TOKEN`) or `--delivery-token-file`, never a flag.
    #[arg(long, value_name = "URL")]
    delivery_url: Option<String>,
    /// A file holding the collector's bearer token (first non-empty line), read at start and
    /// again whenever the collector answers 401 (`delivery.token_file`).
    #[arg(long, value_name = "FILE")]
    delivery_token_file: Option<PathBuf>,
    /// The queue whose runs are delivered (`delivery.queue`; default telemetry).
    #[arg(long, value_name = "QUEUE")]
    delivery_queue: Option<String>,
    /// Most events per POST, 1 to 1000 (`delivery.batch`; default 100).
    #[arg(long, value_name = "N")]
    delivery_batch: Option<usize>,
    /// Longest wait for a connection to the collector (`delivery.connect_timeout_ms`; 5000).
    #[arg(long, value_name = "MS")]
    delivery_connect_timeout_ms: Option<u64>,
    /// Longest a whole POST may take; past it the run is retried (`delivery.timeout_ms`;
    /// 10000).
    #[arg(long, value_name = "MS")]
    delivery_timeout_ms: Option<u64>,
    /// Most bytes of a collector's answer that are read (`delivery.max_response_bytes`; 64 KiB).
    #[arg(long, value_name = "BYTES")]
    delivery_max_response_bytes: Option<usize>,
    /// Most bytes of JSON one POST's events take; the rest of a run's events go in the next
    /// POST, and a first event larger than this goes alone (`delivery.max_batch_bytes`; 8 MiB).
    #[arg(long, value_name = "BYTES")]
    delivery_max_batch_bytes: Option<usize>,
    /// Delay before the first retry, doubling per attempt up to the cap, with jitter: the
    /// spool's backoff for every retryable nack this server records (`delivery.retry_base_ms`;
    /// 1000). Lower it only in tests.
    #[arg(long, value_name = "MS")]
    delivery_retry_base_ms: Option<u64>,
    /// The longest retry delay (`delivery.retry_cap_ms`; 60000).
    #[arg(long, value_name = "MS")]
    delivery_retry_cap_ms: Option<u64>,
    /// How often the delivery worker looks at the queue without a wake-up
    /// (`delivery.poll_ms`; 1000).
    #[arg(long, value_name = "MS")]
    delivery_poll_ms: Option<u64>,
    /// Whether the operator dashboard is served at `/ui` (`ui.enabled`; default true). Its
    /// sign-in takes the same tokens as the API; see docs/OPERATIONS.md.
    #[arg(long = "ui", value_name = "BOOL", action = clap::ArgAction::Set)]
    ui: Option<bool>,
    /// Log level or tracing filter directive (`log.level`; default info).
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Log line format (`log.format`; default text).
    #[arg(long, value_enum, value_name = "FORMAT")]
    log_format: Option<LogFormat>,
    /// The checked settings, filled by [`prepare`].
    #[arg(skip)]
    prepared: Option<Box<Settings>>,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        let mut o = Overrides::default();
        o.set("listen", self.listen.clone());
        o.set("auth.token_file", self.token_file.clone());
        o.set(
            "auth.insecure_no_auth",
            self.insecure_no_auth.then_some(true),
        );
        o.set("limits.max_body_bytes", self.max_body_bytes);
        o.set("limits.request_timeout_secs", self.request_timeout);
        o.set("limits.drain_timeout_secs", self.drain_timeout);
        o.set("limits.header_read_timeout_secs", self.header_read_timeout);
        o.set("limits.keep_alive_timeout_secs", self.keep_alive_timeout);
        o.set("limits.max_connections", self.max_connections);
        o.set("spool.retention_enabled", self.retention_enabled);
        o.set("spool.retention_interval_secs", self.retention_interval);
        o.set("backfill.enabled", self.backfill_enabled);
        o.set(
            "backfill.spaces_per_second",
            self.backfill_spaces_per_second,
        );
        o.set("backfill.progress_every", self.backfill_progress_every);
        o.set("delivery.url", self.delivery_url.clone());
        o.set("delivery.token_file", self.delivery_token_file.clone());
        o.set("delivery.queue", self.delivery_queue.clone());
        o.set("delivery.batch", self.delivery_batch);
        o.set(
            "delivery.connect_timeout_ms",
            self.delivery_connect_timeout_ms,
        );
        o.set("delivery.timeout_ms", self.delivery_timeout_ms);
        o.set(
            "delivery.max_response_bytes",
            self.delivery_max_response_bytes,
        );
        o.set("delivery.max_batch_bytes", self.delivery_max_batch_bytes);
        o.set("delivery.retry_base_ms", self.delivery_retry_base_ms);
        o.set("delivery.retry_cap_ms", self.delivery_retry_cap_ms);
        o.set("delivery.poll_ms", self.delivery_poll_ms);
        o.set("ui.enabled", self.ui);
        o.set("log.level", self.log_level.clone());
        o.set("log.format", self.log_format);
        o
    }
}

/// `cairn serve`'s settings, checked before anything is opened.
pub(crate) struct Settings {
    listen: SocketAddr,
    tokens: auth::Tokens,
    limits: routes::Limits,
    connections: connections::ConnLimits,
    drain: Duration,
    backfill: cairn::backfill::BackfillConfig,
    delivery: Option<delivery::Settings>,
    spool: cairn::spool::SpoolConfig,
    retention_max_bytes: u64,
    page_bytes: usize,
    parked_threshold: Option<u64>,
    retention: retention::RetentionSettings,
    ui: ui::UiSettings,
    log_filter: tracing_subscriber::EnvFilter,
    log_format: LogFormat,
}

impl Settings {
    /// What the fuzz targets see of the settings (`crate::fuzzing`).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn accepted(&self, database: Option<String>) -> crate::fuzzing::AcceptedConfig {
        let (full_tokens, read_tokens) = self.tokens.counts();
        crate::fuzzing::AcceptedConfig {
            listen: self.listen,
            database,
            full_tokens,
            read_tokens,
            max_body_bytes: self.limits.max_body_bytes,
            request_timeout: self.limits.request_timeout,
            drain: self.drain,
            delivery: self.delivery.is_some(),
            backfill: self.backfill.clone(),
            retention_max_bytes: self.retention_max_bytes,
            log_format: match self.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            },
        }
    }
}

/// Reads and checks the configuration (file, environment, flags) into `args`; returns the
/// database URL of the file or environment, for when `--database` is absent. Every problem is
/// one line naming its key.
pub(crate) fn prepare(args: &mut ServeArgs) -> Result<Option<String>, Problems> {
    let (config, problems) = Config::load_partial(args.config.as_deref(), args.overrides());
    let (settings, database) = check(config, problems)?;
    args.prepared = Some(Box::new(settings));
    Ok(database)
}

/// Checks a loaded configuration (`problems` are those loading found) into the settings and
/// the database URL of the file or environment; every problem is one line naming its key.
/// Nothing is opened or bound (a token file is read).
pub(crate) fn check(
    config: Config,
    mut problems: Vec<String>,
) -> Result<(Settings, Option<String>), Problems> {
    let listen = config.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen = match listen.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            problems.push("listen: expected an address such as 127.0.0.1:7878".to_owned());
            None
        }
    };
    if let Some(url) = &config.database {
        if let Err(e) = DatabaseUrl::parse(url) {
            problems.push(format!(
                "database: {}",
                crate::error::one_line(&e.to_string())
            ));
        }
    }
    let tokens = auth::Tokens::from_config(&config.auth).unwrap_or_else(|p| {
        problems.extend(p);
        auth::Tokens::default()
    });
    if tokens.is_empty() && problems.iter().all(|p| !p.starts_with("auth.")) {
        if !config.auth.insecure_no_auth {
            problems.push(format!(
                "auth.tokens: no bearer token is configured: set {} (and {} for read-only \
                 clients), auth.tokens in the config file, or --token-file; for local \
                 development only, --insecure-no-auth serves without tokens on a loopback \
                 address",
                auth::TOKENS_ENV,
                auth::READ_TOKENS_ENV
            ));
        } else if let Some(a) = listen.filter(|a| !a.ip().is_loopback()) {
            problems.push(format!(
                "auth.insecure_no_auth: allowed on a loopback address only, not {a}; configure \
                 tokens to listen elsewhere"
            ));
        }
    }
    let l = &config.limits;
    let sp = &config.spool;
    for (key, v) in [
        ("limits.max_body_bytes", l.max_body_bytes as u64),
        ("limits.max_page_bytes", l.max_page_bytes as u64),
        ("limits.request_timeout_secs", l.request_timeout_secs),
        (
            "limits.header_read_timeout_secs",
            l.header_read_timeout_secs,
        ),
        ("limits.keep_alive_timeout_secs", l.keep_alive_timeout_secs),
        ("limits.max_connections", l.max_connections as u64),
        ("spool.retention_interval_secs", sp.retention_interval_secs),
        ("spool.retention_max_age_secs", sp.retention_max_age_secs),
    ] {
        if v == 0 {
            problems.push(format!("{key}: must be at least 1"));
        }
    }
    let backfill = config.backfill.config();
    if let Err(p) = backfill.validate() {
        problems.extend(p);
    }
    let delivery = delivery::settings(&config.delivery).unwrap_or_else(|p| {
        problems.extend(p);
        None
    });
    let log_filter = match crate::logging::check_level(&config.log.level) {
        Ok(f) => Some(f),
        Err(p) => {
            problems.push(p);
            None
        }
    };
    // Timers past a day are a mistake, and far enough deadlines overflow `Instant`.
    for (key, v) in [
        (
            "limits.header_read_timeout_secs",
            l.header_read_timeout_secs,
        ),
        ("limits.keep_alive_timeout_secs", l.keep_alive_timeout_secs),
    ] {
        if v > MAX_CONNECTION_TIMEOUT_SECS {
            problems.push(format!(
                "{key}: at most {MAX_CONNECTION_TIMEOUT_SECS} (one day)"
            ));
        }
    }
    // A sign-in lasts from a minute to 30 days.
    if !(60..=30 * 86_400).contains(&config.ui.session_secs) {
        problems.push("ui.session_secs: from 60 to 2592000 (30 days)".to_owned());
    }
    // tokio's semaphore holds at most `Semaphore::MAX_PERMITS` permits.
    if l.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
        problems.push(format!(
            "limits.max_connections: at most {}",
            tokio::sync::Semaphore::MAX_PERMITS
        ));
    }
    match (listen, log_filter) {
        (Some(listen), Some(log_filter)) if problems.is_empty() => Ok((
            Settings {
                listen,
                tokens,
                limits: routes::Limits {
                    max_body_bytes: l.max_body_bytes,
                    request_timeout: Duration::from_secs(l.request_timeout_secs),
                    body_grace: Duration::from_secs(l.header_read_timeout_secs),
                },
                connections: connections::ConnLimits {
                    header_read_timeout: Duration::from_secs(l.header_read_timeout_secs),
                    keep_alive_timeout: Duration::from_secs(l.keep_alive_timeout_secs),
                    max_connections: l.max_connections,
                },
                drain: Duration::from_secs(l.drain_timeout_secs),
                backfill,
                delivery,
                spool: delivery::spool_config(&config.delivery),
                retention_max_bytes: config.spool.retention_max_bytes,
                page_bytes: l.max_page_bytes,
                parked_threshold: config.doctor.parked_threshold,
                retention: retention::RetentionSettings {
                    enabled: sp.retention_enabled,
                    policy: cairn::spool::RetentionPolicy {
                        max_age: Duration::from_secs(sp.retention_max_age_secs),
                        max_bytes: sp.retention_max_bytes,
                    },
                    interval: Duration::from_secs(sp.retention_interval_secs),
                },
                ui: ui::UiSettings {
                    enabled: config.ui.enabled,
                    secure_cookie: config.ui.secure_cookie,
                    session: Duration::from_secs(config.ui.session_secs),
                },
                log_filter,
                log_format: config.log.format,
            },
            config.database,
        )),
        _ => Err(Problems(problems)),
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) async fn run(target: &DatabaseUrl, mut args: Box<ServeArgs>) -> Result<(), CliError> {
    if args.prepared.is_none() {
        prepare(&mut args).map_err(|p| CliError::Config(p.0.join("; ")))?;
    }
    let Some(settings) = args.prepared.take() else {
        return Err(CliError::Config("the settings were not prepared".into()));
    };
    crate::logging::init(settings.log_filter, settings.log_format);
    let metrics = Arc::new(
        metrics::Metrics::new()
            .map_err(|e| CliError::Config(format!("cannot set up the metrics: {e}")))?,
    );
    let store = open_with(target, IfMissing::Create, settings.spool).await?;
    let signal = shutdown_signal();
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| CliError::Config(format!("cannot listen on {}: {e}", settings.listen)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CliError::Config(format!("cannot read the bound address: {e}")))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {addr}")?;
        out.flush()?;
    }
    tracing::info!(target: "cairn::serve", %addr, "listening");
    let tokens = Arc::new(settings.tokens);
    let rates = Arc::new(ui::Rates::default());
    let state = routes::AppState {
        store: store.clone(),
        epochs: store.epochs(),
        spool: store.spool(),
        diagnostics: store.diagnostics(),
        metrics: metrics.clone(),
        doctor: Arc::new(doctor::Target {
            url: target.clone(),
            retention_max_bytes: settings.retention_max_bytes,
            parked_threshold: settings.parked_threshold,
            store: store.store_diagnostics(),
            migrations: cairn::migrate::Migrations::of(&store),
            storage: storage::Watch::default(),
        }),
        ui: settings
            .ui
            .enabled
            .then(|| Arc::new(ui::Ui::new(tokens.clone(), &settings.ui, rates.clone()))),
        page_bytes: settings.page_bytes,
    };
    let ui_enabled = state.ui.is_some();
    let app = routes::router(state, tokens, settings.limits);
    let conn_limits = settings.connections;
    let drain = settings.drain;
    let worker = match settings.delivery {
        Some(d) => Some(delivery::Worker::start(store.spool(), d, drain, metrics.clone()).await?),
        None => None,
    };
    let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
    let backfill = backfill::spawn(
        store.diagnostics(),
        settings.backfill,
        metrics.clone(),
        stopping.clone(),
    );
    let sampler = ui_enabled.then(|| rates.spawn(metrics.clone(), stopping.clone()));
    let retention = retention::spawn(
        store.spool(),
        settings.retention,
        metrics.clone(),
        stopping.clone(),
    );
    // The worker stops with the HTTP side (or when the server ends and drops the sender), so
    // both drains share the one drain bound.
    let worker = worker.map(|w| {
        let mut signal = stopping.clone();
        tokio::spawn(async move {
            let _ = signal.wait_for(|s| *s).await;
            w.stop().await;
        })
    });
    let server = connections::serve(listener, app, conn_limits, metrics.clone(), async move {
        signal.await;
        tracing::info!(target: "cairn::serve", "shutting down");
        let _ = stopping_tx.send(true);
    });
    let mut server = tokio::spawn(server);
    let served = tokio::select! {
        joined = &mut server => joined
            .map_err(|e| CliError::Config(format!("the server task failed: {e}"))),
        () = async {
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(drain).await;
        } => {
            server.abort();
            tracing::warn!(
                target: "cairn::serve",
                drain_secs = drain.as_secs_f64(),
                "in-flight requests did not finish within the drain timeout; closing the store \
                 anyway"
            );
            Ok(())
        }
    };
    if let Some(worker) = worker {
        let _ = worker.await;
    }
    if let Some(sampler) = sampler {
        let _ = sampler.await;
    }
    if let Some(retention) = retention {
        // It stops after the pass in flight, whose batches start within a short budget.
        let _ = retention.await;
    }
    if let Some(backfill) = backfill {
        // It stops between spaces once `stopping` is true; a repair in flight is one short
        // transaction.
        let _ = backfill.await;
    }
    // Closing waits for the connections in use (behind a transaction-mode pooler, for every
    // checkout to commit first); bounded, so that a connection that never comes back cannot
    // keep the process from exiting: what was still open is rolled back by the database when
    // the process's connections end.
    let bound = drain.max(CLOSE_FLOOR);
    match tokio::time::timeout(bound, store.close()).await {
        Ok(closed) => closed?,
        Err(_) => tracing::warn!(
            target: "cairn::serve",
            close_secs = bound.as_secs_f64(),
            "the store did not close in time (a connection was still in use); exiting anyway"
        ),
    }
    served
}

/// The least time closing the store gets on shutdown, whatever `--drain-timeout` says (an
/// orderly close takes milliseconds).
const CLOSE_FLOOR: Duration = Duration::from_secs(5);

/// Registers for SIGINT and (on Unix) SIGTERM at once, so that a signal sent as soon as the
/// address is printed is not lost to the default action; the future resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            async fn recv(s: Option<Signal>) {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = recv(interrupt) => {},
                () = recv(terminate) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
