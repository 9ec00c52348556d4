//! `cairn serve`'s (and `cairn doctor`'s) configuration: a TOML file (`--config FILE` or
//! `CAIRN_CONFIG`), `CAIRN_…` environment variables (`__` for nesting:
//! `CAIRN_DELIVERY__URL`, `CAIRN_AUTH__TOKENS`, `CAIRN_BACKFILL__ENABLED`), and flags.
//!
//! Precedence: flags > environment > file > defaults, merged with figment. The merged
//! configuration is checked as a whole before anything is opened; every problem is one line
//! naming its key, and no line repeats a value (a token, or a URL that may hold a password).
//!
//! Tokens in the environment are taken as raw text: figment would read `CAIRN_AUTH__TOKENS=
//! 0123…` as a number and drop its leading zeros.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Deserializer, Serialize};

/// The environment variable naming the config file when `--config` is absent.
pub(crate) const CONFIG_ENV: &str = "CAIRN_CONFIG";
/// The prefix of every configuration variable.
const ENV_PREFIX: &str = "CAIRN_";
/// The top-level keys; other `CAIRN_…` variables (`CAIRN_URL`, `CAIRN_TOKEN`, …) belong to
/// other commands and are not configuration.
pub(crate) const SECTIONS: [&str; 12] = [
    "database",
    "listen",
    "auth",
    "delivery",
    "backfill",
    "spool",
    "limits",
    "log",
    "doctor",
    "ui",
    "otel",
    "scheduler",
];
/// Keys whose environment value is taken as raw text, never parsed.
const RAW_ENV: [(&str, &str); 3] = [
    ("CAIRN_AUTH__TOKENS", "auth.tokens"),
    ("CAIRN_AUTH__READ_TOKENS", "auth.read_tokens"),
    ("CAIRN_DELIVERY__TOKEN", "delivery.token"),
];

/// A list given as a TOML array or as one comma-separated string (the environment's form).
#[derive(Clone, Default, Serialize)]
#[serde(transparent)]
pub(crate) struct List(pub(crate) Vec<String>);

impl<'de> Deserialize<'de> for List {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            One(String),
            Many(Vec<String>),
        }
        Ok(match Form::deserialize(d)? {
            Form::One(s) => List(
                s.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            Form::Many(v) => List(v.into_iter().map(|t| t.trim().to_owned()).collect()),
        })
    }
}

impl std::fmt::Debug for List {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "List({} item(s))", self.0.len())
    }
}

/// `[auth]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Auth {
    /// Full-access bearer tokens.
    pub(crate) tokens: List,
    /// Read-only bearer tokens (GET and HEAD only).
    pub(crate) read_tokens: List,
    /// A file of full-access tokens, one a line.
    pub(crate) token_file: Option<PathBuf>,
    /// Serve without tokens (loopback only).
    pub(crate) insecure_no_auth: bool,
}

/// `[delivery]`.
#[derive(Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Delivery {
    /// The collector; delivery is off without it.
    pub(crate) url: Option<String>,
    /// The collector's bearer token.
    pub(crate) token: Option<String>,
    /// A file holding the collector's token, re-read on 401.
    pub(crate) token_file: Option<PathBuf>,
    /// The queue delivered.
    pub(crate) queue: String,
    /// Most events per POST.
    pub(crate) batch: usize,
    /// Most bytes of JSON a POST's events take (its first event always goes).
    pub(crate) max_batch_bytes: usize,
    /// Connect timeout.
    pub(crate) connect_timeout_ms: u64,
    /// Whole-request timeout.
    pub(crate) timeout_ms: u64,
    /// Most bytes of an answer read.
    pub(crate) max_response_bytes: usize,
    /// First retry delay (the spool's backoff base).
    pub(crate) retry_base_ms: u64,
    /// Longest retry delay.
    pub(crate) retry_cap_ms: u64,
    /// Poll interval without wake-ups.
    pub(crate) poll_ms: u64,
}

impl Default for Delivery {
    fn default() -> Self {
        Self {
            url: None,
            token: None,
            token_file: None,
            queue: "telemetry".into(),
            batch: 100,
            max_batch_bytes: 8 * 1024 * 1024,
            connect_timeout_ms: 5_000,
            timeout_ms: 10_000,
            max_response_bytes: 64 * 1024,
            retry_base_ms: 1_000,
            retry_cap_ms: 60_000,
            poll_ms: 1_000,
        }
    }
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("url", &self.url.as_ref().map(|_| "<set>"))
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// `[backfill]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Backfill {
    /// Whether the background pass runs.
    pub(crate) enabled: bool,
    /// Its pace.
    pub(crate) spaces_per_second: f64,
    /// Spaces between progress lines.
    pub(crate) progress_every: u64,
}

impl Default for Backfill {
    fn default() -> Self {
        let d = cairn::backfill::BackfillConfig::default();
        Self {
            enabled: d.enabled,
            spaces_per_second: d.spaces_per_second,
            progress_every: d.progress_every,
        }
    }
}

impl Backfill {
    /// The pass's configuration.
    pub(crate) fn config(&self) -> cairn::backfill::BackfillConfig {
        cairn::backfill::BackfillConfig {
            enabled: self.enabled,
            spaces_per_second: self.spaces_per_second,
            progress_every: self.progress_every,
            ..cairn::backfill::BackfillConfig::default()
        }
    }
}

/// `[spool]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SpoolSection {
    /// The retention cap on stored run-event bytes: `cairn serve`'s retention pass keeps the
    /// stored events under it, and doctor measures usage against it.
    pub(crate) retention_max_bytes: u64,
    /// How old a run event (and a finished run without events) may get before the retention
    /// pass removes it, in seconds.
    pub(crate) retention_max_age_secs: u64,
    /// Whether `cairn serve` runs the retention pass.
    pub(crate) retention_enabled: bool,
    /// Seconds between two retention passes of `cairn serve`.
    pub(crate) retention_interval_secs: u64,
}

impl Default for SpoolSection {
    fn default() -> Self {
        let policy = cairn::spool::RetentionPolicy::default();
        Self {
            retention_max_bytes: policy.max_bytes,
            retention_max_age_secs: policy.max_age.as_secs(),
            retention_enabled: true,
            retention_interval_secs: 60,
        }
    }
}

/// `[doctor]`: what `cairn doctor` and `/v1/doctor` count as unhealthy.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct DoctorSection {
    /// Parked runs are a warning (the store stays healthy: exit 0, HTTP 200) up to this many;
    /// more make the store unhealthy. Unset (the default): parked runs are only ever a
    /// warning; 0: any parked run is a problem.
    pub(crate) parked_threshold: Option<u64>,
}

/// `[ui]`: the operator dashboard `cairn serve` serves at `/ui`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct UiSection {
    /// Whether `/ui` is served (default true).
    pub(crate) enabled: bool,
    /// Whether the sign-in cookie carries `Secure`. cairn serves plain HTTP, so set it when a
    /// TLS-terminating proxy is in front (browsers then send the cookie over HTTPS only).
    pub(crate) secure_cookie: bool,
    /// How long a sign-in lasts, in seconds (default 8 hours); idle sessions end after an
    /// hour.
    pub(crate) session_secs: u64,
}

impl Default for UiSection {
    fn default() -> Self {
        Self {
            enabled: true,
            secure_cookie: false,
            session_secs: 8 * 3600,
        }
    }
}

/// `[limits]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Limits {
    /// Largest request body.
    pub(crate) max_body_bytes: usize,
    /// Largest page a read answers, in bytes of JSON (its first item always goes out).
    pub(crate) max_page_bytes: usize,
    /// Longest a request may take.
    pub(crate) request_timeout_secs: u64,
    /// How long in-flight requests get on shutdown.
    pub(crate) drain_timeout_secs: u64,
    /// Longest wait for a request's whole header, from the connection's start or the previous
    /// answer.
    pub(crate) header_read_timeout_secs: u64,
    /// How long a keep-alive connection may stay idle between requests.
    pub(crate) keep_alive_timeout_secs: u64,
    /// Most connections served at once; more wait to be accepted.
    pub(crate) max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 8 * 1024 * 1024,
            max_page_bytes: 8 * 1024 * 1024,
            request_timeout_secs: 30,
            drain_timeout_secs: 10,
            header_read_timeout_secs: 10,
            keep_alive_timeout_secs: 5,
            max_connections: 512,
        }
    }
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Log {
    /// A level (`error`, `warn`, `info`, `debug`, `trace`) or a tracing filter directive.
    pub(crate) level: String,
    /// `text` or `json`.
    pub(crate) format: LogFormat,
}

impl Default for Log {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// `[otel]`: traces over OTLP, off unless `endpoint` is set.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct OtelSection {
    /// The collector's OTLP/HTTP traces endpoint (`http://collector:4318/v1/traces`).
    pub(crate) endpoint: Option<String>,
    /// The `service.name` resource attribute of every span.
    pub(crate) service_name: String,
}

impl Default for OtelSection {
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: "cairn".into(),
        }
    }
}

/// `[scheduler]`: whether `cairn serve` runs a scheduler for the store's schedules.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct SchedulerSection {
    /// Run the scheduler (default true): each tick is enqueued once whichever servers run one.
    pub(crate) enabled: bool,
}

impl Default for SchedulerSection {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// Most bytes a config file may hold; a larger one (or a device, a FIFO) is refused unread.
pub(crate) const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// The merged configuration, before its values are checked (see [`Config::check`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Config {
    /// The store's URL (`--database` and `CAIRN_DATABASE` win over the file).
    pub(crate) database: Option<String>,
    /// The listen address.
    pub(crate) listen: Option<String>,
    /// `[auth]`.
    pub(crate) auth: Auth,
    /// `[delivery]`.
    pub(crate) delivery: Delivery,
    /// `[backfill]`.
    pub(crate) backfill: Backfill,
    /// `[spool]`.
    pub(crate) spool: SpoolSection,
    /// `[limits]`.
    pub(crate) limits: Limits,
    /// `[log]`.
    pub(crate) log: Log,
    /// `[doctor]`.
    pub(crate) doctor: DoctorSection,
    /// `[ui]`.
    pub(crate) ui: UiSection,
    /// `[otel]`.
    pub(crate) otel: OtelSection,
    /// `[scheduler]`.
    pub(crate) scheduler: SchedulerSection,
}

/// Flag values that override the file and the environment, as `(dotted key, value)`.
#[derive(Default)]
pub(crate) struct Overrides(Vec<(&'static str, figment::value::Value)>);

impl Overrides {
    /// Sets `key` when the flag was given.
    pub(crate) fn set<T: Serialize>(&mut self, key: &'static str, value: Option<T>) {
        if let Some(v) = value {
            if let Ok(v) = figment::value::Value::serialize(v) {
                self.0.push((key, v));
            }
        }
    }
}

/// The problems found, one line each.
#[derive(Debug)]
pub(crate) struct Problems(pub(crate) Vec<String>);

impl Config {
    /// Reads `file` (or the one `CAIRN_CONFIG` names), then the environment, then `flags`.
    /// Every problem in the sources is collected, one line each.
    pub(crate) fn load(file: Option<&Path>, flags: Overrides) -> Result<Self, Problems> {
        match Self::load_partial(file, flags) {
            (config, problems) if problems.is_empty() => Ok(config),
            (_, problems) => Err(Problems(problems)),
        }
    }

    /// As [`Config::load`], but also returns what could be read when there are problems (a
    /// section that does not read stays at its defaults), so that the caller's own checks can
    /// add their lines to the same report.
    pub(crate) fn load_partial(file: Option<&Path>, flags: Overrides) -> (Self, Vec<String>) {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from));
        match &file {
            Some(path) => match crate::small_file::read(path, MAX_CONFIG_FILE_BYTES) {
                Ok(text) => Self::load_text(Some((path, &text)), flags),
                Err(e) => {
                    let (config, mut problems) = Self::load_text(None, flags);
                    problems.insert(
                        0,
                        format!("{}: cannot read the config file: {e}", path.display()),
                    );
                    (config, problems)
                }
            },
            None => Self::load_text(None, flags),
        }
    }

    /// As [`Config::load_partial`], with the config file already read: `file` is its path (for
    /// the messages) and its text. The environment is the process's.
    pub(crate) fn load_text(file: Option<(&Path, &str)>, flags: Overrides) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let mut figment = Figment::new();
        if let Some((path, text)) = file {
            match toml::from_str::<toml::Table>(text) {
                Ok(_) => figment = figment.merge(Toml::string(text)),
                Err(e) => {
                    // The message only: the toml crate's rendering quotes the line, which
                    // may hold a token.
                    let line = e
                        .span()
                        .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
                    problems.push(format!(
                        "{}: not valid TOML{}: {}",
                        path.display(),
                        line.map(|l| format!(" (line {l})")).unwrap_or_default(),
                        e.message()
                    ));
                }
            }
        }
        figment = figment.merge(Env::prefixed(ENV_PREFIX).split("__").filter(|k| {
            // Depending on figment's order of key maps, `k` is `backfill.enabled` or
            // `backfill__enabled`.
            let k = k.as_str().to_ascii_lowercase().replace("__", ".");
            let top = k.split('.').next().unwrap_or_default();
            SECTIONS.contains(&top) && !RAW_ENV.iter().any(|(_, key)| *key == k)
        }));
        // `CAIRN_<SECTION>__<KEY>` names a setting; one whose section does not exist is a
        // mistake (a typo of a section, say), not someone else's variable.
        for (var, _) in std::env::vars_os() {
            let Some(var) = var.to_str() else { continue };
            // Matched as figment matches the prefix: in any case (`cairn_limit__…` too).
            let rest = var
                .get(..ENV_PREFIX.len())
                .filter(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
                .map(|_| &var[ENV_PREFIX.len()..]);
            if let Some((section, _)) = rest.and_then(|rest| rest.split_once("__")) {
                let section = section.to_ascii_lowercase();
                if !SECTIONS.contains(&section.as_str()) {
                    problems.push(format!(
                        "{var}: `{section}` is not a section (the sections are {}); nothing was \
                         read from it",
                        SECTIONS.join(", ")
                    ));
                }
            }
        }
        for (var, key) in RAW_ENV {
            if let Some(v) = std::env::var_os(var) {
                match v.into_string() {
                    Ok(v) => figment = figment.merge(Serialized::default(key, v)),
                    Err(_) => problems.push(format!("{key} ({var}): not valid UTF-8")),
                }
            }
        }
        for (key, value) in flags.0 {
            figment = figment.merge(Serialized::default(key, value));
        }
        let mut config = Config::default();
        // Each section is read on its own, so a mistake in one does not hide those in others.
        // A section holding unknown keys is read again without them, so that its other
        // problems are reported too (serde stops at the first unknown key).
        macro_rules! read {
            ($field:ident, $key:literal) => {
                if figment.contains($key) {
                    match figment.extract_inner($key) {
                        Ok(v) => config.$field = v,
                        Err(e) => {
                            let unknown = unknown_keys(&e);
                            problems.extend(describe(e, $key));
                            if !unknown.is_empty() {
                                if let Ok(mut section) =
                                    figment.extract_inner::<figment::value::Dict>($key)
                                {
                                    section.retain(|k, _| !unknown.contains(k));
                                    match Figment::from(Serialized::defaults(section)).extract() {
                                        Ok(v) => config.$field = v,
                                        Err(e) => problems.extend(describe(e, $key)),
                                    }
                                }
                            }
                        }
                    }
                }
            };
        }
        read!(database, "database");
        read!(listen, "listen");
        read!(auth, "auth");
        read!(delivery, "delivery");
        read!(backfill, "backfill");
        read!(spool, "spool");
        read!(limits, "limits");
        read!(log, "log");
        read!(doctor, "doctor");
        read!(ui, "ui");
        read!(otel, "otel");
        read!(scheduler, "scheduler");
        if let Ok(top) =
            figment.extract::<std::collections::BTreeMap<String, figment::value::Value>>()
        {
            for key in top.keys() {
                if !SECTIONS.contains(&key.as_str()) {
                    problems.push(format!("{key}: unknown key"));
                }
            }
        }
        (config, problems)
    }
}

/// The unknown keys an extraction error names.
fn unknown_keys(err: &figment::Error) -> Vec<String> {
    err.clone()
        .into_iter()
        .filter_map(|e| match e.kind {
            figment::error::Kind::UnknownField(f, _) => Some(f),
            _ => None,
        })
        .collect()
}

/// figment's errors as lines naming the key, never the value.
fn describe(err: figment::Error, section: &str) -> Vec<String> {
    use figment::error::{Actual, Kind};
    err.into_iter()
        .map(|e| {
            // figment's path may or may not hold the section, and not always first.
            let mut key = std::iter::once(section)
                .chain(e.path.iter().map(String::as_str).filter(|p| *p != section))
                .collect::<Vec<_>>()
                .join(".");
            let found = |a: &Actual| match a {
                Actual::Bool(_) => "a boolean",
                Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
                Actual::Float(_) => "a number",
                Actual::Char(_) | Actual::Str(_) => "a string",
                Actual::Seq => "a list",
                Actual::Map => "a table",
                _ => "another kind of value",
            };
            let what = match &e.kind {
                Kind::InvalidType(a, expected) => {
                    format!("expected {expected}, found {}", found(a))
                }
                Kind::InvalidValue(a, expected) => {
                    format!("expected {expected}, found {}", found(a))
                }
                Kind::UnknownField(f, _) => {
                    // figment's path may already end with the field.
                    if !key.ends_with(&format!(".{f}")) {
                        key = format!("{key}.{f}");
                    }
                    "unknown key".to_owned()
                }
                Kind::UnknownVariant(_, expected) => {
                    format!("expected one of {}", expected.join(", "))
                }
                Kind::MissingField(f) => format!("missing {f}"),
                Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "out of range".to_owned(),
                Kind::InvalidLength(_, expected) => format!("expected {expected}"),
                _ => "not a valid value".to_owned(),
            };
            format!("{key}: {what}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_come_as_arrays_or_comma_separated_text() {
        let l: List = serde_json::from_str(r#"" a, b ,,c""#).unwrap();
        assert_eq!(l.0, ["a", "b", "c"]);
        let l: List = serde_json::from_str(r#"["a", "b"]"#).unwrap();
        assert_eq!(l.0, ["a", "b"]);
        assert!(!format!("{l:?}").contains('a'));
    }
}
