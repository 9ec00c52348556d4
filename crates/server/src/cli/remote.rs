//! `cairn enqueue --url`: the server path of the offline hook (one run, or a whole
//! `--from-file` batch through `POST /v1/queues/{queue}/runs/batch`).
//!
//! The run goes through a running `cairn serve` when one answers at the URL, and straight to
//! the store otherwise — but only to a store named explicitly (`--database` or
//! `CAIRN_DATABASE`) that already exists: a fallback to the platform default, or to a store it
//! would have to create, writes where no server reads, so the command fails instead and
//! writes nothing ([`fallback_store`]). Both paths build the same dedup key from the same
//! parts, so the same key gives the same run id whichever path took it. Only "nobody answers"
//! (no connection) falls back to the store: a server that answers with an error (a refused
//! token, bad input) is reported, never bypassed.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CliError;
use crate::open::{open, IfMissing};

/// Environment variable with the bearer token sent to the server.
pub(crate) const TOKEN_ENV: &str = "CAIRN_TOKEN";
/// How long to wait for a connection before taking the direct path.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the whole request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes of an answer read.
const MAX_ANSWER: usize = 64 * 1024;
/// Most bytes of a batch enqueue's answer read: a result of at most 100 bytes per item.
const MAX_BATCH_ANSWER: usize = 100 * cairn::spool::MAX_ENQUEUE_BATCH + MAX_ANSWER;

/// Whether a connect error means nothing accepted the connection (refused, unreachable, timed
/// out, a name that does not resolve) — the only case the direct path may be taken. Something
/// that accepted the connection and then failed the exchange (a TLS handshake with a plain-text
/// listener, a reset or a closed connection) is somebody answering: the command fails instead.
fn nobody_answered(e: &reqwest::Error) -> bool {
    use std::io::ErrorKind;
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        // An I/O error wraps others (tokio-rustls: `Other` around `InvalidData`), and its
        // `source()` skips the wrapped error itself: look inside each one.
        let mut io = err.downcast_ref::<std::io::Error>();
        while let Some(inner) = io {
            if matches!(
                inner.kind(),
                ErrorKind::InvalidData
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::BrokenPipe
            ) {
                return false;
            }
            io = inner
                .get_ref()
                .and_then(|wrapped| wrapped.downcast_ref::<std::io::Error>());
        }
        source = err.source();
    }
    true
}

/// The enqueue as the server's `POST /v1/queues/{queue}/runs` takes it.
#[derive(Serialize)]
pub(crate) struct EnqueueBody {
    pub(crate) key_parts: Vec<String>,
    pub(crate) payload: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) supersede_group: Option<Vec<String>>,
    pub(crate) priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition_key: Option<String>,
}

#[derive(Deserialize)]
struct Answer {
    run_id: String,
    created: bool,
}

/// A batch enqueue as `POST /v1/queues/{queue}/runs/batch` takes it.
#[derive(Serialize)]
struct BatchBody<'a> {
    items: &'a [Box<serde_json::value::RawValue>],
}

#[derive(Deserialize)]
struct BatchAnswer {
    results: Vec<Answer>,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    message: String,
}

/// Enqueues through the server at `url`. `Ok(None)`: no server answered (take the direct
/// path); `Ok(Some((run id, created)))`: the server's answer.
///
/// # Errors
/// A URL that is not http(s); a server that answered with an error (its code and message).
pub(crate) async fn enqueue(
    url: &str,
    queue: &str,
    body: &EnqueueBody,
) -> Result<Option<(String, bool)>, CliError> {
    let body = serde_json::to_vec(body)
        .map_err(|e| CliError::Config(format!("cannot encode the enqueue: {e}")))?;
    let Some(bytes) = post(url, &["v1", "queues", queue, "runs"], body, MAX_ANSWER).await? else {
        return Ok(None);
    };
    let answer: Answer = serde_json::from_slice(&bytes).map_err(|_| not_a_result())?;
    Ok(Some((answer.run_id, answer.created)))
}

/// Enqueues `items` (each an item of `POST /v1/queues/{queue}/runs/batch`) through the server
/// at `url`, in one batch. `Ok(None)`: no server answered (take the direct path);
/// `Ok(Some(results))`: one `(run id, created)` per item, in order.
///
/// # Errors
/// As [`enqueue`]; an answer without one result per item.
pub(crate) async fn enqueue_batch(
    url: &str,
    queue: &str,
    items: &[Box<serde_json::value::RawValue>],
) -> Result<Option<Vec<(String, bool)>>, CliError> {
    let body = serde_json::to_vec(&BatchBody { items })
        .map_err(|e| CliError::Config(format!("cannot encode the enqueue: {e}")))?;
    let path = ["v1", "queues", queue, "runs", "batch"];
    let Some(bytes) = post(url, &path, body, MAX_BATCH_ANSWER).await? else {
        return Ok(None);
    };
    let answer: BatchAnswer = serde_json::from_slice(&bytes).map_err(|_| not_a_result())?;
    if answer.results.len() != items.len() {
        return Err(CliError::Config(format!(
            "the server answered {} results for {} items; is --url a cairn server?",
            answer.results.len(),
            items.len()
        )));
    }
    Ok(Some(
        answer
            .results
            .into_iter()
            .map(|a| (a.run_id, a.created))
            .collect(),
    ))
}

fn not_a_result() -> CliError {
    CliError::Config(
        "the server answered with a body that is not an enqueue result; is --url a cairn server?"
            .into(),
    )
}

/// POSTs the JSON `body` to `path` under the server at `url`. `Ok(None)`: no server answered;
/// `Ok(Some(bytes))`: a 2xx answer's body, read up to `max_answer` bytes.
///
/// # Errors
/// A URL that is not http(s); a server that answered with an error (its code and message).
async fn post(
    url: &str,
    path: &[&str],
    body: Vec<u8>,
    max_answer: usize,
) -> Result<Option<Vec<u8>>, CliError> {
    let base = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            // The URL is not repeated: it may hold a secret.
            CliError::Config(
                "--url (or CAIRN_URL) is not an http:// or https:// URL with a host".into(),
            )
        })?;
    let mut endpoint = base;
    endpoint
        .path_segments_mut()
        .map_err(|()| CliError::Config("--url (or CAIRN_URL) cannot take a path".into()))?
        .pop_if_empty()
        .extend(path);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .no_proxy()
        .build()
        .map_err(|e| {
            CliError::Config(format!(
                "cannot set up the HTTP client: {}",
                e.without_url()
            ))
        })?;
    let mut request = client
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(token) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()) {
        request = request.bearer_auth(token);
    }
    let mut response = match request.send().await {
        Ok(r) => r,
        // Nobody answered: the direct path. A request sent that then failed is different:
        // the server may have taken the run, so only connection failures fall back.
        Err(e) if e.is_connect() && nobody_answered(&e) => return Ok(None),
        Err(e) if e.is_connect() => {
            return Err(CliError::Config(
                "something accepted the connection at --url (or CAIRN_URL) but the exchange \
                 failed before the enqueue was sent (a TLS handshake, or not a cairn server); \
                 nothing was written"
                    .into(),
            ))
        }
        Err(e) => {
            return Err(CliError::Config(format!(
                "the server did not answer the enqueue ({}); it may or may not be stored: \
                 repeat the same command, whose keys give the same run ids",
                if e.is_timeout() {
                    "timed out"
                } else {
                    "the connection failed"
                }
            )))
        }
    };
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while bytes.len() < max_answer {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk[..]),
            _ => break,
        }
    }
    if (200..300).contains(&status) {
        return Ok(Some(bytes));
    }
    Err(CliError::Config(
        match serde_json::from_slice::<ErrorAnswer>(&bytes) {
            Ok(e) => format!(
                "the server refused the enqueue ({status} {}): {}",
                e.error.code, e.error.message
            ),
            Err(_) => {
                format!("the server answered {status} to the enqueue; is --url a cairn server?")
            }
        },
    ))
}

/// The store a `cairn enqueue --url` whose server did not answer writes to: the one `target`
/// names, when `named` (it came from `--database` or `CAIRN_DATABASE`, not the platform
/// default) and it already exists. Opening it never creates it.
///
/// # Errors
/// One line saying the server was unreachable and nothing was written, when no store was
/// named or the named one does not exist; the open's own error otherwise.
pub(crate) async fn fallback_store(
    target: &cairn::DatabaseUrl,
    named: bool,
) -> Result<cairn::Store, CliError> {
    const UNREACHABLE: &str = "no cairn server answered at --url (or CAIRN_URL)";
    if !named {
        return Err(CliError::Config(format!(
            "{UNREACHABLE}, and no store was named with --database or CAIRN_DATABASE to take \
             the run instead; nothing was written"
        )));
    }
    match open(target, IfMissing::Refuse).await {
        Err(CliError::NoStore(_) | CliError::Store(cairn::Error::NotFound { .. })) => {
            Err(CliError::Config(format!(
                "{UNREACHABLE}, and the store --database (or CAIRN_DATABASE) names does not \
                 exist; nothing was written"
            )))
        }
        other => other,
    }
}
