//! The delivery worker: forwards pending runs' event batches to a collector.
//!
//! It is the spool's consumer loop ([`ConsumerBuilder`]) over one queue (default `telemetry`),
//! one run at a time so runs reach the collector in claim order (priority, then enqueue
//! order). It wakes on [`Spool::subscribe`](cairn::Spool::subscribe), so runs that another
//! process enqueued straight into the store (`cairn enqueue` with no server) are delivered
//! without a restart.
//!
//! Per run it POSTs JSON batches (the run and up to `--delivery-batch` of its unacknowledged
//! events, in seq order; one batch with no events for a run that has none) and decides from
//! the answer ([`verdict::classify`]): 2xx acknowledges the batch's events and, after the last
//! batch, acks the run; 401 re-reads the credentials and tries once more, then retries later;
//! 403, redirects and the other 4xx except 408/429 park the run with the reason; 408, 429,
//! 5xx, timeouts and connection errors nack it as retryable, so the spool's backoff (1 s
//! doubling to 60 s, with jitter, by default) decides when it is tried again. A run whose
//! attempts run out is parked by the spool like any other.
//!
//! Credential problems never park a run: a missing or refused token is this server's problem,
//! not the run's, and another server with working credentials may deliver it.
//!
//! Bounds: connect and request timeouts, at most `--delivery-max-response-bytes` of an answer
//! are read, redirects are not followed, and on shutdown the worker gets the server's drain
//! timeout; a run still in flight then stays claimed until its lease expires and is delivered
//! later.

mod verdict;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::spool::{
    BackoffPolicy, Consumer, ConsumerBuilder, ConsumerId, Job, Outcome, QueueName, RunEvent,
    SpoolConfig, MAX_ACK_IDS,
};
use serde::Serialize;

use self::verdict::{classify, excerpt, Verdict};
use super::json::{bytes_out, RunEventOut};
use super::metrics::Metrics;
use crate::error::CliError;

/// The longest excerpt of a collector's answer kept in a parked run's reason.
const REASON_EXCERPT: usize = 200;

/// The spool config the store is opened with: the delivery retry backoff of `[delivery]`.
pub(crate) fn spool_config(d: &crate::config::Delivery) -> SpoolConfig {
    SpoolConfig {
        backoff: BackoffPolicy {
            base: Duration::from_millis(d.retry_base_ms),
            cap: Duration::from_millis(d.retry_cap_ms),
        },
    }
}

/// Checks `[delivery]` and builds the worker's settings, or `None` when delivery is off (no
/// `url`). One line per problem, naming the key; never the URL or the token.
pub(crate) fn settings(d: &crate::config::Delivery) -> Result<Option<Settings>, Vec<String>> {
    let Some(url) = &d.url else {
        return Ok(None);
    };
    let mut problems = Vec::new();
    let parsed = reqwest::Url::parse(url).ok().filter(|u| {
        // No credential of either kind: a user alone, or a password alone (`http://:pw@…`).
        matches!(u.scheme(), "http" | "https")
            && u.host().is_some()
            && u.username().is_empty()
            && u.password().is_none()
    });
    if parsed.is_none() {
        // The URL itself is not repeated: it may hold a secret.
        problems.push(
            "delivery.url: not an http:// or https:// URL with a host and without credentials \
             (put the token in delivery.token, CAIRN_DELIVERY__TOKEN or delivery.token_file)"
                .to_owned(),
        );
    }
    let queue = QueueName::new(d.queue.clone());
    if let Err(e) = &queue {
        problems.push(format!("delivery.queue: {e}"));
    }
    if !(1..=MAX_ACK_IDS.min(cairn::spool::MAX_BATCH)).contains(&d.batch) {
        problems.push("delivery.batch: must be between 1 and 1000".into());
    }
    for (name, v) in [
        ("delivery.connect_timeout_ms", d.connect_timeout_ms),
        ("delivery.timeout_ms", d.timeout_ms),
        ("delivery.retry_base_ms", d.retry_base_ms),
        ("delivery.poll_ms", d.poll_ms),
        ("delivery.max_response_bytes", d.max_response_bytes as u64),
    ] {
        if v == 0 {
            problems.push(format!("{name}: must be at least 1"));
        }
    }
    if d.retry_cap_ms < d.retry_base_ms {
        problems.push("delivery.retry_cap_ms: must be at least delivery.retry_base_ms".into());
    }
    let credentials = match Credentials::load(d.token_file.clone(), d.token.clone()) {
        Ok(c) => Some(c),
        Err(e) => {
            problems.push(e);
            None
        }
    };
    match (parsed, queue, credentials) {
        (Some(url), Ok(queue), Some(credentials)) if problems.is_empty() => Ok(Some(Settings {
            url,
            queue,
            credentials,
            batch: d.batch,
            connect_timeout: Duration::from_millis(d.connect_timeout_ms),
            timeout: Duration::from_millis(d.timeout_ms),
            max_response_bytes: d.max_response_bytes,
            poll: Duration::from_millis(d.poll_ms),
        })),
        _ => Err(problems),
    }
}

/// Checked delivery settings.
pub(crate) struct Settings {
    url: reqwest::Url,
    queue: QueueName,
    credentials: Credentials,
    batch: usize,
    connect_timeout: Duration,
    timeout: Duration,
    max_response_bytes: usize,
    poll: Duration,
}

/// The collector's bearer token: from a file that is re-read on 401, or from the environment.
struct Credentials {
    file: Option<PathBuf>,
    current: Mutex<Option<String>>,
}

impl Credentials {
    fn load(file: Option<PathBuf>, token: Option<String>) -> Result<Self, String> {
        let current = match &file {
            Some(path) => Some(read_token_file(path)?),
            None => token.filter(|t| !t.trim().is_empty()),
        };
        if let Some(t) = &current {
            check_token(t)?;
        }
        Ok(Self {
            file,
            current: Mutex::new(current.map(|t| t.trim().to_owned())),
        })
    }

    fn current(&self) -> Option<String> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the token file; true when it now holds a different token than `used`.
    fn refresh(&self, used: Option<&str>) -> bool {
        let Some(path) = &self.file else { return false };
        let Ok(fresh) = read_token_file(path) else {
            return false;
        };
        if check_token(&fresh).is_err() || Some(fresh.as_str()) == used {
            return false;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
        true
    }
}

fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("delivery.token_file: cannot read {}: {e}", path.display()))?;
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| format!("delivery.token_file: {} is empty", path.display()))
}

fn check_token(token: &str) -> Result<(), String> {
    let t = token.trim();
    if t.chars().any(|c| c.is_whitespace() || c.is_control()) || !t.is_ascii() {
        return Err("delivery.token: must be one line of printable ASCII without spaces".into());
    }
    Ok(())
}

/// A running delivery worker.
pub(crate) struct Worker {
    consumer: Consumer,
}

impl Worker {
    /// Starts the worker on `spool`.
    pub(crate) async fn start(
        spool: Arc<dyn cairn::Spool>,
        settings: Settings,
        drain: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, CliError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            .no_proxy()
            .build()
            .map_err(|e| {
                CliError::Config(format!(
                    "cannot set up the delivery client: {}",
                    e.without_url()
                ))
            })?;
        let consumer_id = ConsumerId::new(format!("cairn-serve-delivery-{}", std::process::id()))?;
        let deliverer = Arc::new(Deliverer {
            http,
            settings,
            metrics,
        });
        let queue = deliverer.settings.queue.clone();
        let consumer = ConsumerBuilder::new(spool, queue, consumer_id)
            .poll_interval(deliverer.settings.poll)
            .shutdown_timeout(drain)
            .spawn(move |job: Job| {
                let d = deliverer.clone();
                async move {
                    let outcome = d.deliver(&job).await;
                    d.record(&outcome);
                    outcome
                }
            })
            .await?;
        Ok(Self { consumer })
    }

    /// Stops claiming and waits for the runs in flight, at most the drain bound; a run still
    /// in flight then stays claimed until its lease expires, and is delivered later.
    pub(crate) async fn stop(self) {
        let report = self.consumer.shutdown().await;
        if !report.is_clean() {
            tracing::warn!(
                target: "cairn::delivery",
                abandoned = report.abandoned.len(),
                "delivery did not finish within the drain timeout; those runs are delivered \
                 after their lease expires"
            );
        }
    }
}

/// The body of one POST.
#[derive(Serialize)]
struct Batch<'a> {
    run_id: String,
    queue: &'a str,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload_b64: Option<String>,
    events: Vec<RunEventOut>,
}

struct Deliverer {
    http: reqwest::Client,
    settings: Settings,
    metrics: Arc<Metrics>,
}

impl Deliverer {
    /// Counts the outcome and logs it (its kind only: the reason may quote the collector).
    fn record(&self, outcome: &Outcome) {
        let label = match outcome {
            Outcome::Done => "ack",
            Outcome::Retry(_) => "retry",
            Outcome::Fail(_) | Outcome::Nack(..) => "park",
        };
        self.metrics.delivery.with_label_values(&[label]).inc();
        tracing::info!(target: "cairn::delivery", outcome = label, "delivery");
    }

    /// Delivers one claimed run, batch by batch.
    async fn deliver(&self, job: &Job) -> Outcome {
        let run = job.run_id();
        let spool = job.spool();
        let (payload, payload_b64) = bytes_out(job.payload());
        let mut after = 0;
        let mut sent_any = false;
        loop {
            if job.stop().is_stopped() {
                return Outcome::Retry(format!(
                    "delivery was interrupted: {}",
                    job.stop().stopped().await
                ));
            }
            let events: Vec<RunEvent> = match spool.events(run, after, self.settings.batch).await {
                Ok(e) => e,
                Err(e) => return Outcome::Retry(format!("cannot read the run's events: {e}")),
            };
            if events.is_empty() && sent_any {
                return Outcome::Done;
            }
            let body = Batch {
                run_id: run.to_string(),
                queue: job.queue().as_str(),
                attempt: job.attempt(),
                payload: payload.clone(),
                payload_b64: payload_b64.clone(),
                events: events.iter().map(RunEventOut::from).collect(),
            };
            let body = match serde_json::to_vec(&body) {
                Ok(b) => b,
                Err(e) => return Outcome::Fail(format!("cannot encode the batch: {e}")),
            };
            match self.post(body).await {
                Verdict::Delivered => {}
                Verdict::Unauthorized => {
                    return Outcome::Retry(
                        "the collector answered 401 to the current delivery token (re-read \
                         when a token file is configured); set a valid token in \
                         CAIRN_DELIVERY__TOKEN or --delivery-token-file"
                            .into(),
                    )
                }
                Verdict::Retry(why) => return Outcome::Retry(why),
                Verdict::Park(why) => return Outcome::Fail(why),
            }
            sent_any = true;
            let ids: Vec<_> = events.iter().map(|e| e.event_id.clone()).collect();
            if !ids.is_empty() {
                if let Err(e) = spool.acknowledge_events(run, &ids).await {
                    // The collector has the batch; it sees it again on the retry (event ids
                    // let it drop the repeat).
                    return Outcome::Retry(format!("cannot record the delivered events: {e}"));
                }
            }
            match events.last() {
                Some(last) if events.len() == self.settings.batch => after = last.seq,
                _ => return Outcome::Done,
            }
        }
    }

    /// One POST, with one more try after a 401 when the credentials changed on re-reading.
    async fn post(&self, body: Vec<u8>) -> Verdict {
        let token = self.settings.credentials.current();
        let first = self.send(body.clone(), token.as_deref()).await;
        if first != Verdict::Unauthorized || !self.settings.credentials.refresh(token.as_deref()) {
            return first;
        }
        self.metrics.delivery.with_label_values(&["refresh"]).inc();
        tracing::info!(target: "cairn::delivery", outcome = "refresh", "delivery");
        let token = self.settings.credentials.current();
        self.send(body, token.as_deref()).await
    }

    async fn send(&self, body: Vec<u8>, token: Option<&str>) -> Verdict {
        let mut request = self
            .http
            .post(self.settings.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Verdict::Retry(describe(&e)),
        };
        let status = response.status().as_u16();
        // Read at most the cap; the rest is dropped with the connection.
        let mut head = Vec::new();
        while head.len() < self.settings.max_response_bytes {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    let room = self.settings.max_response_bytes - head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                Ok(None) => break,
                // A 2xx whose body broke off still delivered the batch: the status decides.
                Err(_) => break,
            }
        }
        classify(status, &excerpt(&head, REASON_EXCERPT))
    }
}

/// A transport error in words, without the URL (which may hold a secret).
fn describe(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "the collector did not answer in time"
    } else if e.is_connect() {
        "cannot connect to the collector"
    } else {
        "the request to the collector failed"
    };
    let mut source = std::error::Error::source(e);
    let mut detail = String::new();
    while let Some(s) = source {
        detail = s.to_string();
        source = s.source();
    }
    if detail.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {detail}")
    }
}
