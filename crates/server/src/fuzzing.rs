//! The server's input handling, exposed for the fuzz targets in `crates/fuzz` (hidden from the
//! documentation: this is not an API and may change with the server).
//!
//! - [`decode_body`] runs what a route does with a request body before it touches the store:
//!   the same decoding as the `Body` extractor and the same conversion into core types as the
//!   handler (the functions the handlers call, not copies).
//! - [`check_config`] runs what `cairn serve` does with its configuration before it opens
//!   anything: figment loading of a config file's text (with the process environment, as the
//!   server reads it) and every check of `serve::prepare`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::config::{Config, LogFormat, Overrides};
use crate::serve;

/// The routes that take a JSON body: the handler's name, then the method and path of the
/// OpenAPI document.
pub const BODY_ROUTES: [(&str, &str); 9] = [
    ("append", "POST /v1/spaces/{space}/epochs"),
    ("import", "POST /v1/spaces/{space}/import"),
    ("enqueue", "POST /v1/queues/{queue}/runs"),
    ("claim", "POST /v1/queues/{queue}/claim"),
    ("append_event", "POST /v1/runs/{id}/events"),
    ("set_fact", "PUT /v1/runs/{id}/facts/{name}"),
    ("heartbeat", "POST /v1/runs/{id}/heartbeat"),
    ("ack", "POST /v1/runs/{id}/ack"),
    ("nack", "POST /v1/runs/{id}/nack"),
];

/// The space [`decode_body`] imports into (the handler takes it from the path).
pub const IMPORT_SPACE: &str = "fuzz";

/// A body a route accepted, as the core values the handler hands to the store.
#[derive(Debug)]
pub enum Decoded {
    /// `append`: the epoch's events.
    Append(Vec<cairn::Event>),
    /// `import`: the foreign epoch (in [`IMPORT_SPACE`]).
    Import(cairn::ForeignEpoch),
    /// `enqueue`.
    Enqueue {
        /// The dedup key.
        key: cairn::DedupKey,
        /// The payload.
        payload: Vec<u8>,
        /// The options.
        options: cairn::EnqueueOptions,
    },
    /// `claim`.
    Claim {
        /// Who claims.
        consumer: cairn::ConsumerId,
        /// The lease.
        lease: Duration,
        /// The most runs.
        limit: usize,
    },
    /// `append_event`.
    RunEvent {
        /// The event id.
        event_id: cairn::RunEventId,
        /// The payload.
        payload: Vec<u8>,
    },
    /// `set_fact`: the value.
    Fact(Vec<u8>),
    /// `heartbeat`.
    Heartbeat {
        /// The lease token.
        token: cairn::LeaseToken,
        /// The new lease.
        lease: Duration,
    },
    /// `ack`: the lease token.
    Ack(cairn::LeaseToken),
    /// `nack`.
    Nack {
        /// The lease token.
        token: cairn::LeaseToken,
        /// Where the run goes.
        kind: cairn::NackKind,
        /// The reason.
        reason: String,
    },
}

/// A body a route refused: the error response the handler would send.
#[derive(Debug)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The error code of the body.
    pub code: &'static str,
    /// The message of the body.
    pub message: String,
}

impl From<serve::ApiError> for Refusal {
    fn from(e: serve::ApiError) -> Self {
        Self {
            status: e.status.as_u16(),
            code: e.code,
            message: e.message,
        }
    }
}

/// Decodes `body` as the route named `route` (a name of [`BODY_ROUTES`]) does and converts it
/// into core types as its handler does. `None` for an unknown route name.
pub fn decode_body(route: &str, body: &[u8]) -> Option<Result<Decoded, Refusal>> {
    use serve::json;
    let decoded = match route {
        "append" => serve::decode_body::<json::AppendRequest>(body)
            .and_then(|r| Ok(json::events_in(r.events)?))
            .map(Decoded::Append),
        "import" => serve::decode_body::<json::ImportRequest>(body).and_then(|r| {
            let space = cairn::SpaceId::new(IMPORT_SPACE.to_owned())?;
            r.into_epoch(space).map(Decoded::Import)
        }),
        "enqueue" => serve::decode_body::<json::EnqueueRequest>(body)
            .and_then(|r| Ok(r.into_enqueue()?))
            .map(|e| Decoded::Enqueue {
                key: e.key,
                payload: e.payload,
                options: e.options,
            }),
        "claim" => serve::decode_body::<json::ClaimRequest>(body)
            .and_then(json::ClaimRequest::into_claim)
            .map(|(consumer, lease, limit)| Decoded::Claim {
                consumer,
                lease,
                limit,
            }),
        "append_event" => serve::decode_body::<json::RunEventIn>(body)
            .and_then(|r| Ok(r.into_event()?))
            .map(|(event_id, payload)| Decoded::RunEvent { event_id, payload }),
        "set_fact" => serve::decode_body::<json::FactIn>(body)
            .and_then(json::FactIn::into_value)
            .map(Decoded::Fact),
        "heartbeat" => serve::decode_body::<json::HeartbeatRequest>(body)
            .and_then(json::HeartbeatRequest::into_heartbeat)
            .map(|(token, lease)| Decoded::Heartbeat { token, lease }),
        "ack" => serve::decode_body::<json::AckRequest>(body)
            .and_then(|r| json::lease_token(&r.token))
            .map(Decoded::Ack),
        "nack" => serve::decode_body::<json::NackRequest>(body)
            .and_then(json::NackRequest::into_nack)
            .map(|n| Decoded::Nack {
                token: n.token,
                kind: n.kind,
                reason: n.reason,
            }),
        _ => return None,
    };
    Some(decoded.map_err(Refusal::from))
}

/// The settings `cairn serve` would run with.
#[derive(Debug)]
pub struct AcceptedConfig {
    /// The listen address.
    pub listen: SocketAddr,
    /// The database URL of the file or environment.
    pub database: Option<String>,
    /// How many full-access tokens.
    pub full_tokens: usize,
    /// How many read-only tokens.
    pub read_tokens: usize,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Longest a request may take.
    pub request_timeout: Duration,
    /// Drain time on shutdown.
    pub drain: Duration,
    /// Whether delivery is on.
    pub delivery: bool,
    /// The backfill pass's configuration.
    pub backfill: cairn::backfill::BackfillConfig,
    /// The run-event retention cap doctor measures against.
    pub retention_max_bytes: u64,
    /// `text` or `json`.
    pub log_format: &'static str,
}

/// The path the config file's messages name in [`check_config`].
pub const CONFIG_PATH: &str = "cairn.toml";

/// Loads `text` as `cairn serve --config cairn.toml` would read that file (with the process's
/// `CAIRN_…` environment, no flags) and checks it as `cairn serve` does before opening
/// anything: the settings, or every problem line.
pub fn check_config(text: &str) -> Result<AcceptedConfig, Vec<String>> {
    let (config, problems) =
        Config::load_text(Some((Path::new(CONFIG_PATH), text)), Overrides::default());
    serve::check(config, problems)
        .map(|(settings, database)| accepted(&settings, database))
        .map_err(|p| p.0)
}

/// What the fuzz targets see of the settings.
fn accepted(settings: &serve::Settings, database: Option<String>) -> AcceptedConfig {
    let (full_tokens, read_tokens) = settings.tokens.counts();
    AcceptedConfig {
        listen: settings.listen,
        database,
        full_tokens,
        read_tokens,
        max_body_bytes: settings.limits.max_body_bytes,
        request_timeout: settings.limits.request_timeout,
        drain: settings.drain,
        delivery: settings.delivery.is_some(),
        backfill: settings.backfill.clone(),
        retention_max_bytes: settings.retention_max_bytes,
        log_format: match settings.log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        },
    }
}
