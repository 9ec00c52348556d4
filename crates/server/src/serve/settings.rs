//! `cairn serve`'s settings ([`Settings`]): the configuration checked as a whole, every problem
//! one line naming its key, before anything is opened or bound.

use std::net::SocketAddr;
use std::time::Duration;

use cairn::DatabaseUrl;

use super::layers::Limits;
use super::ui::UiSettings;
use super::{auth, connections, delivery, retention};
use crate::config::{Config, LogFormat, Problems};

/// Default listen address: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// The longest header-read or keep-alive timeout accepted, in seconds.
const MAX_CONNECTION_TIMEOUT_SECS: u64 = 86_400;

/// `cairn serve`'s settings, checked before anything is opened.
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) tokens: auth::Tokens,
    pub(crate) limits: Limits,
    pub(crate) connections: connections::ConnLimits,
    pub(crate) drain: Duration,
    pub(crate) backfill: cairn::backfill::BackfillConfig,
    pub(crate) delivery: Option<delivery::Settings>,
    pub(crate) spool: cairn::spool::SpoolConfig,
    pub(crate) retention_max_bytes: u64,
    pub(crate) page_bytes: usize,
    pub(crate) parked_threshold: Option<u64>,
    pub(crate) retention: retention::RetentionSettings,
    pub(crate) ui: UiSettings,
    pub(crate) log_filter: tracing_subscriber::EnvFilter,
    pub(crate) log_format: LogFormat,
    /// Where spans go over OTLP, when `[otel] endpoint` is set.
    pub(crate) otel: Option<crate::logging::OtelSettings>,
    /// Whether the server runs a scheduler (`[scheduler] enabled`).
    pub(crate) scheduler: bool,
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
    let otel = crate::logging::check_otel(&config.otel).unwrap_or_else(|p| {
        problems.push(p);
        None
    });
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
                limits: Limits {
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
                ui: UiSettings {
                    enabled: config.ui.enabled,
                    secure_cookie: config.ui.secure_cookie,
                    session: Duration::from_secs(config.ui.session_secs),
                },
                log_filter,
                log_format: config.log.format,
                otel,
                scheduler: config.scheduler.enabled,
            },
            config.database,
        )),
        _ => Err(Problems(problems)),
    }
}
