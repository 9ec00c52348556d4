//! `cairn serve`'s command-line options ([`ServeArgs`]) and [`prepare`], which reads and checks
//! them with the config file and the environment before anything is opened.

use std::path::PathBuf;

use super::settings::{check, Settings};
use crate::config::{Config, LogFormat, Overrides, Problems};

/// `cairn serve`'s options. Every one is also a key of the config file (`--config FILE` or
/// `CAIRN_CONFIG`) and an environment variable (`CAIRN_` + the key in capitals, `__` between
/// section and key); a flag wins over the environment, which wins over the file.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// A TOML config file (sections `[auth]`, `[delivery]`, `[backfill]`, `[spool]`,
    /// `[limits]`, `[log]`, `[doctor]`, `[ui]`, `[otel]` — `endpoint` exports spans over
    /// OTLP/HTTP, `service_name` — and `[scheduler]` — `enabled`, default true, runs the
    /// schedules; top-level `database` and `listen`). Each key also reads from `CAIRN_…`
    /// (`CAIRN_OTEL__ENDPOINT`, `CAIRN_SCHEDULER__ENABLED`). Default: `CAIRN_CONFIG`.
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
    pub(crate) prepared: Option<Box<Settings>>,
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

/// Reads and checks the configuration (file, environment, flags) into `args`; returns the
/// database URL of the file or environment, for when `--database` is absent. Every problem is
/// one line naming its key.
pub(crate) fn prepare(args: &mut ServeArgs) -> Result<Option<String>, Problems> {
    let (config, problems) = Config::load_partial(args.config.as_deref(), args.overrides());
    let (settings, database) = check(config, problems)?;
    args.prepared = Some(Box::new(settings));
    Ok(database)
}

#[cfg(test)]
mod tests {
    use super::ServeArgs;

    /// `cairn serve --help` names every section a config file may hold.
    #[test]
    fn the_config_help_names_every_section() {
        use clap::Args as _;
        let mut cmd = ServeArgs::augment_args(clap::Command::new("serve"));
        let help = cmd.render_long_help().to_string();
        for section in crate::config::SECTIONS {
            if matches!(section, "database" | "listen") {
                assert!(help.contains(&format!("`{section}`")), "{section}: {help}");
            } else {
                assert!(help.contains(&format!("[{section}]")), "{section}: {help}");
            }
        }
    }
}
