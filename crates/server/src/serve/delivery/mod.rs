//! The delivery worker: forwards pending runs' event batches to a collector.
//!
//! It is the spool's consumer loop ([`ConsumerBuilder`]) over one queue (default `telemetry`),
//! one run at a time so runs reach the collector in claim order (priority, then enqueue
//! order). It wakes on [`Spool::subscribe`](cairn::Spool::subscribe), so runs that another
//! process enqueued straight into the store (`cairn enqueue` with no server) are delivered
//! without a restart.
//!
//! Per run it POSTs JSON batches (the run and up to `--delivery-batch` of its unacknowledged
//! events, in seq order; see *Bounds* for their size in bytes) and decides from the answer ([`verdict::classify`]): 2xx acknowledges
//! the batch's events; 401 and 403 re-read the credentials and try once more, then give the
//! run back and pause (see below); redirects and the other 4xx except 408/429 park the run
//! with the reason; 408, 429, 5xx, timeouts and connection errors nack it as retryable, so the
//! spool's backoff (1 s doubling to 60 s, with jitter, by default) decides when it is tried
//! again. A run whose attempts run out is parked by the spool like any other.
//!
//! # When a run is finished
//! A run is acked only once its producer *closed* it ([`cairn::Spool::close_run`]) and every
//! event is acknowledged. The invariant this rests on: the spool accepts an event only while
//! the run is live and not closed, in the same transaction as the close (see
//! [`cairn::spool::EventStream`]). The worker reads the run's closed flag *before* it reads the
//! events; so when it saw the run closed and then read no unacknowledged event, no event can
//! arrive any more and every event ever accepted was delivered — an append that raced the
//! worker's last read either committed before the close (and is read) or is refused with 409.
//! A run that is not closed yet is given back once its events so far are delivered
//! ([`Outcome::Release`]: no attempt spent) and taken again after `delivery.poll_ms`, so
//! other runs are not held up behind it. A run written by an older build (or imported) carries
//! no close mark ([`EventStream::Unmarked`]): the worker closes it itself when it takes it, then
//! delivers it as above, so an append after that is refused rather than lost. A run is POSTed
//! when the worker first takes it even if it holds no event yet (a batch with no events), so
//! the collector learns of every run; a closed run is POSTed at least once.
//!
//! Credential problems never park a run and spend no attempt: a missing or refused token
//! (401, 403, and 431, since the token is the only header of ours that can be too large) is
//! this server's problem, not the run's. The worker gives the run back at once
//! ([`Outcome::Release`], which returns the claim's attempt) with a wait taken from a refusal
//! streak shared by all runs (the collector refuses the server's token, not a run): it starts
//! at `delivery.retry_base_ms` and doubles to `delivery.retry_cap_ms`, and is reset by any
//! delivered batch. Until the wait is over deliveries pause: a run taken meanwhile is given
//! back at once with the rest of the wait, without a POST. No claim is held while the worker
//! waits, so a crash during an outage spends no attempt either. The token file is re-read on
//! each refusal, as at start (`crate::small_file`: a regular file of at most 64 KiB, a token of
//! at most 4096 bytes); a file that holds no usable token then keeps the token in use.
//!
//! Bounds: a batch's events take at most `delivery.max_batch_bytes` of JSON (default
//! 8 MiB; the `events` array; JSON can write a stored byte as six, `\u0001`): an event
//! that would take the array past it waits for the next POST, and the first event of a batch
//! always goes however large, so a run always progresses. Connect and request timeouts, at
//! most `--delivery-max-response-bytes` of an answer are read, redirects are not followed, and
//! on shutdown the worker gets the server's drain timeout; a run still in flight then stays
//! claimed until its lease expires and is delivered later.

mod verdict;

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::spool::{
    BackoffPolicy, Consumer, ConsumerBuilder, ConsumerId, EventStream, Job, Outcome, QueueName,
    RunEvent, RunEventId, RunId, SpoolConfig, MAX_ACK_IDS, MAX_LEASE,
};
use hyper::body::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

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
        ("delivery.max_batch_bytes", d.max_batch_bytes as u64),
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
            max_batch_bytes: d.max_batch_bytes,
            connect_timeout: Duration::from_millis(d.connect_timeout_ms),
            timeout: Duration::from_millis(d.timeout_ms),
            max_response_bytes: d.max_response_bytes,
            poll: Duration::from_millis(d.poll_ms),
            backoff: spool_config(d).backoff,
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
    /// Most bytes of JSON of a batch's events, its first event aside.
    max_batch_bytes: usize,
    connect_timeout: Duration,
    timeout: Duration,
    max_response_bytes: usize,
    poll: Duration,
    /// The pause after a refused token (`delivery.retry_base_ms` doubling to `retry_cap_ms`).
    backoff: BackoffPolicy,
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

    /// Re-reads the token file; true when it now holds a different, usable token than `used`.
    /// A file that cannot be read or holds no usable token (a device, an oversized file, a
    /// line with spaces) changes nothing: the refusal stands, and the run it came from is
    /// given back without spending an attempt.
    fn refresh(&self, used: Option<&str>) -> bool {
        let Some(path) = &self.file else { return false };
        let fresh = match read_token_file(path).and_then(|t| check_token(&t).map(|()| t)) {
            Ok(t) => t,
            Err(why) => {
                tracing::warn!(
                    target: "cairn::delivery",
                    "{why}; the token in use stays until the file holds a usable one"
                );
                return false;
            }
        };
        if Some(fresh.as_str()) == used {
            return false;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(fresh);
        true
    }
}

/// Most bytes the delivery token file may hold; a larger one (or a device, a FIFO) is refused
/// unread, at start and at every re-read.
const MAX_DELIVERY_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// Most bytes of a delivery token: it travels in the `Authorization` header, and collectors
/// commonly refuse request headers past 8 KiB.
const MAX_DELIVERY_TOKEN_BYTES: usize = 4096;

fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = crate::small_file::read(path, MAX_DELIVERY_TOKEN_FILE_BYTES)
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
    if t.len() > MAX_DELIVERY_TOKEN_BYTES {
        return Err(format!(
            "delivery.token: longer than {MAX_DELIVERY_TOKEN_BYTES} bytes (it is sent as a \
             request header)"
        ));
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
            announced: Mutex::new(HashSet::new()),
            refusals: AtomicU32::new(0),
            paused_until: Mutex::new(None),
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
    /// Each a [`RunEventOut`], encoded by [`take_batch`].
    events: Vec<Box<RawValue>>,
}

/// The events of one POST, taken from the front of those read.
#[derive(Debug, Default)]
struct Slice {
    /// Their ids, to acknowledge once delivered.
    ids: Vec<RunEventId>,
    /// The seq of the last; `None` for a batch with no events.
    last: Option<u64>,
    /// Each one's JSON.
    events: Vec<Box<RawValue>>,
}

/// Takes events from the front of `pending` for one POST, each encoded as JSON: as many as
/// keep the `events` array (`[…]`) within `budget` bytes, and always the first however large,
/// so that a run always progresses. The rest stay in `pending` for the next POST (the first of
/// them is encoded once more then).
fn take_batch(pending: &mut VecDeque<RunEvent>, budget: usize) -> serde_json::Result<Slice> {
    let mut slice = Slice::default();
    // The brackets.
    let mut size = 2;
    while let Some(event) = pending.front() {
        let json = serde_json::value::to_raw_value(&RunEventOut::from(event))?;
        let comma = usize::from(!slice.events.is_empty());
        let grown = size + comma + json.get().len();
        if !slice.events.is_empty() && grown > budget {
            break;
        }
        size = grown;
        slice.events.push(json);
        let event = pending.pop_front().expect("the front event was just read");
        slice.last = Some(event.seq);
        slice.ids.push(event.event_id);
    }
    Ok(slice)
}

struct Deliverer {
    http: reqwest::Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    /// Open runs this process has POSTed at least once, so a run waiting for its producer is
    /// not POSTed again with no events each time it is taken. Held in memory only: after a
    /// restart a waiting run is announced once more (harmless, the collector sees the same run
    /// id again). Bounded by [`MAX_ANNOUNCED`].
    announced: Mutex<HashSet<RunId>>,
    /// Refusals (401/403) since the last delivered batch, over all runs: the collector
    /// refuses this server's token, not a run. Sets the length of the next pause.
    refusals: AtomicU32,
    /// Until when deliveries pause after a refusal; `None` when not paused.
    paused_until: Mutex<Option<Instant>>,
}

/// Most open runs remembered as announced; past it the memory is cleared (some waiting runs
/// are then announced once more).
const MAX_ANNOUNCED: usize = 100_000;

impl Deliverer {
    fn announced(&self, run: RunId) -> bool {
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&run)
    }

    fn announce(&self, run: RunId) {
        let mut set = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        if set.len() >= MAX_ANNOUNCED {
            set.clear();
        }
        set.insert(run);
    }

    fn forget(&self, run: RunId) {
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&run);
    }

    /// What is left of the pause after a refusal, or `None` when deliveries may go on.
    fn paused(&self) -> Option<Duration> {
        let until = (*self.paused_until.lock().unwrap_or_else(|e| e.into_inner()))?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Records a refusal: lengthens the streak and pauses deliveries for the streak's backoff,
    /// which it returns.
    fn refused(&self, job: &Job) -> Duration {
        let streak = self
            .refusals
            .fetch_add(1, Ordering::SeqCst)
            .saturating_add(1);
        let wait = self
            .settings
            .backoff
            .delay_for(job.queue(), job.dedup_key(), streak)
            .min(MAX_LEASE);
        let until = Instant::now() + wait;
        let mut paused = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        *paused = Some(paused.map_or(until, |p| p.max(until)));
        wait
    }

    /// Ends the refusal streak and the pause: the collector took a batch.
    fn delivered(&self) {
        self.refusals.store(0, Ordering::SeqCst);
        *self.paused_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Counts the outcome and logs it (its kind only: the reason may quote the collector).
    fn record(&self, outcome: &Outcome) {
        let label = match outcome {
            Outcome::Done => "ack",
            Outcome::Retry(_) => "retry",
            Outcome::Fail(_) | Outcome::Nack(..) => "park",
            Outcome::Release(_) => "release",
        };
        self.metrics.delivery.with_label_values(&[label]).inc();
        tracing::info!(target: "cairn::delivery", outcome = label, "delivery");
    }

    /// Delivers one claimed run, batch by batch, and acks it only once it is closed and
    /// drained (see the module docs for the invariant).
    async fn deliver(&self, job: &Job) -> Outcome {
        let run = job.run_id();
        let spool = job.spool();
        let (payload, payload_b64) = bytes_out(job.payload());
        let mut after = 0;
        let mut sent_any = false;
        let mut closed = false;
        // Events read but not POSTed yet: one read of `batch` events may hold more bytes than
        // one POST carries.
        let mut pending: VecDeque<RunEvent> = VecDeque::new();
        // Whether the read whose events `pending` holds saw the run closed and returned fewer
        // events than asked: then, once they are delivered, no event is left.
        let mut last_read = false;
        loop {
            if job.stop().is_stopped() {
                // Shutdown, a cancel (the spool then ends the run canceled) or a lost lease:
                // give the run back without spending its attempt.
                return Outcome::Release(Duration::ZERO);
            }
            if let Some(left) = self.paused() {
                // The collector refused the token a moment ago: no POST until the pause is
                // over, and no claim held meanwhile (the release gives the attempt back).
                return Outcome::Release(left);
            }
            // The closed flag is read before the events: once closed, no event can arrive.
            if !closed {
                closed = match is_closed(spool.as_ref(), run).await {
                    Ok(c) => c,
                    Err(e) => {
                        return Outcome::Retry(format!("cannot read the run: {}", e.report()))
                    }
                };
            }
            if pending.is_empty() {
                let asked = self.settings.batch;
                let events = match spool.events(run, after, asked).await {
                    Ok(e) => e,
                    Err(e) => {
                        return Outcome::Retry(format!(
                            "cannot read the run's events: {}",
                            e.report()
                        ))
                    }
                };
                // How many the store returned, not how many one POST carries: a batch cut by
                // bytes is short, yet events remain.
                last_read = closed && events.len() < asked;
                if events.is_empty() {
                    if closed && sent_any {
                        return Outcome::Done;
                    }
                    if !closed && (sent_any || self.announced(run)) {
                        // Every event so far is delivered; more may come. Look again later.
                        return Outcome::Release(self.settings.poll);
                    }
                    // Not POSTed yet: the run itself goes out in a batch with no events, so the
                    // collector learns of it when the worker first takes it.
                }
                pending.extend(events);
            }
            let slice = match take_batch(&mut pending, self.settings.max_batch_bytes) {
                Ok(s) => s,
                Err(e) => return Outcome::Fail(format!("cannot encode the batch: {e}")),
            };
            let body = Batch {
                run_id: run.to_string(),
                queue: job.queue().as_str(),
                attempt: job.attempt(),
                payload: payload.clone(),
                payload_b64: payload_b64.clone(),
                events: slice.events,
            };
            let body = match serde_json::to_vec(&body) {
                Ok(b) => Bytes::from(b),
                Err(e) => return Outcome::Fail(format!("cannot encode the batch: {e}")),
            };
            match self.post(body).await {
                Verdict::Delivered => self.delivered(),
                Verdict::Refused(status) => {
                    let wait = self.refused(job);
                    self.metrics.delivery.with_label_values(&["refused"]).inc();
                    tracing::warn!(
                        target: "cairn::delivery",
                        status,
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        "the collector refused the delivery token; the run is given back \
                         without spending an attempt and deliveries pause (set a valid token \
                         in CAIRN_DELIVERY__TOKEN or delivery.token_file)"
                    );
                    return Outcome::Release(wait);
                }
                Verdict::Retry(why) => return Outcome::Retry(why),
                Verdict::Park(why) => {
                    self.forget(run);
                    return Outcome::Fail(why);
                }
            }
            sent_any = true;
            self.announce(run);
            let Some(last) = slice.last else {
                // A batch with no events: the run itself is delivered.
                if closed {
                    self.forget(run);
                    return Outcome::Done;
                }
                // Its producer may have closed it (or appended) meanwhile: look again.
                continue;
            };
            if let Err(e) = spool.acknowledge_events(run, &slice.ids).await {
                // The collector has the batch; it sees it again on the retry (event ids
                // let it drop the repeat).
                return Outcome::Retry(format!(
                    "cannot record the delivered events: {}",
                    e.report()
                ));
            }
            after = last;
            if last_read && pending.is_empty() {
                // The rest of a short read of a closed run: no event is left, as the next read
                // would say.
                self.forget(run);
                return Outcome::Done;
            }
        }
    }

    /// One POST, with one more try after a 401 or 403 when the credentials changed on
    /// re-reading (the body is shared, not copied).
    async fn post(&self, body: Bytes) -> Verdict {
        let token = self.settings.credentials.current();
        let first = self.send(body.clone(), token.as_deref()).await;
        if !matches!(first, Verdict::Refused(_))
            || !self.settings.credentials.refresh(token.as_deref())
        {
            return first;
        }
        self.metrics.delivery.with_label_values(&["refresh"]).inc();
        tracing::info!(target: "cairn::delivery", outcome = "refresh", "delivery");
        let token = self.settings.credentials.current();
        self.send(body, token.as_deref()).await
    }

    async fn send(&self, body: Bytes, token: Option<&str>) -> Verdict {
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

/// Whether the run's producer closed it. A run no producer will close (written by an older
/// build, or imported) is closed here, so that from now on an append to it is refused rather
/// than left undelivered.
async fn is_closed(spool: &dyn cairn::Spool, run: RunId) -> cairn::Result<bool> {
    let info = spool
        .run(run)
        .await?
        .ok_or(cairn::Error::UnknownRun { run })?;
    match info.stream {
        EventStream::Closed => Ok(true),
        EventStream::Open => Ok(false),
        EventStream::Unmarked => {
            spool.close_run(run).await?;
            Ok(true)
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Delivery;

    const GOOD_URL: &str = "http://127.0.0.1:9/ingest";

    fn delivery(url: &str) -> Delivery {
        Delivery {
            url: Some(url.to_owned()),
            ..Delivery::default()
        }
    }

    fn run_id(n: u128) -> RunId {
        RunId::from_slice(&n.to_be_bytes()).unwrap()
    }

    fn deliverer() -> Deliverer {
        Deliverer {
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            settings: settings(&delivery(GOOD_URL)).unwrap().unwrap(),
            metrics: Arc::new(Metrics::new().unwrap()),
            announced: Mutex::new(HashSet::new()),
            refusals: AtomicU32::new(0),
            paused_until: Mutex::new(None),
        }
    }

    #[test]
    fn no_url_means_no_delivery() {
        assert!(matches!(settings(&Delivery::default()), Ok(None)));
    }

    #[test]
    fn the_url_must_be_http_or_https_with_a_host_and_without_credentials() {
        for good in [GOOD_URL, "https://collector.example/v1/runs"] {
            let s = settings(&delivery(good))
                .unwrap_or_else(|p| panic!("{good} refused: {p:?}"))
                .expect("delivery is on");
            assert_eq!(s.url.as_str(), good);
        }
        for bad in [
            // Another scheme, though with a host and no credentials.
            "ftp://collector.example/ingest",
            "ws://collector.example/ingest",
            // No host.
            "unix:/run/collector.sock",
            "file:///srv/collector",
            // A user, a password, or both.
            "http://user@collector.example/ingest",
            "http://:secret-pw@collector.example/ingest",
            "https://user:secret-pw@collector.example/ingest",
            // Not a URL at all.
            "collector.example/ingest",
        ] {
            let problems = settings(&delivery(bad))
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert!(
                problems[0].starts_with("delivery.url: "),
                "{bad}: {problems:?}"
            );
            assert!(
                !problems[0].contains(bad) && !problems[0].contains("secret-pw"),
                "the URL is not repeated: {problems:?}"
            );
        }
    }

    #[test]
    fn any_problem_refuses_the_settings_even_with_a_good_url() {
        type Change = fn(&mut Delivery);
        let cases: [(&str, Change); 9] = [
            ("delivery.batch", |d| d.batch = 0),
            ("delivery.batch", |d| d.batch = 1001),
            ("delivery.connect_timeout_ms", |d| d.connect_timeout_ms = 0),
            ("delivery.timeout_ms", |d| d.timeout_ms = 0),
            ("delivery.retry_base_ms", |d| {
                d.retry_base_ms = 0;
            }),
            ("delivery.poll_ms", |d| d.poll_ms = 0),
            ("delivery.max_response_bytes", |d| d.max_response_bytes = 0),
            ("delivery.retry_cap_ms", |d| {
                d.retry_cap_ms = d.retry_base_ms - 1
            }),
            ("delivery.queue", |d| d.queue = String::new()),
        ];
        for (key, change) in cases {
            let mut d = delivery(GOOD_URL);
            change(&mut d);
            let problems = settings(&d)
                .err()
                .unwrap_or_else(|| panic!("accepted with a bad {key}"));
            assert!(
                problems.iter().any(|p| p.starts_with(&format!("{key}: "))),
                "{key}: {problems:?}"
            );
        }
    }

    #[test]
    fn a_blank_token_is_no_token_and_a_set_one_is_trimmed() {
        let set = Credentials::load(None, Some("  tok-123  ".into())).unwrap();
        assert_eq!(set.current().as_deref(), Some("tok-123"));
        for blank in ["", "   ", "\t\n"] {
            let c = Credentials::load(None, Some(blank.into())).unwrap();
            assert_eq!(c.current(), None, "{blank:?}");
        }
        assert_eq!(Credentials::load(None, None).unwrap().current(), None);
    }

    #[test]
    fn a_token_must_be_one_word_of_printable_ascii() {
        for good in ["tok-123_ABC.~+/=", "  padded-token \n"] {
            assert_eq!(check_token(good), Ok(()), "{good:?}");
        }
        for bad in [
            "two words",
            "tab\tinside",
            "nul\u{0}inside",
            "bell\u{7}",
            "del\u{7f}",
            "t\u{f6}k\u{e9}n",
            "no\u{a0}break",
        ] {
            let e = check_token(bad).expect_err(bad);
            assert!(e.starts_with("delivery.token: "), "{e}");
            assert!(!e.contains(bad), "the token is not repeated: {e}");
        }
        // The settings refuse it, naming the key and never the token.
        let mut d = delivery(GOOD_URL);
        d.token = Some("secret with space".into());
        let problems = settings(&d).err().expect("a bad token is refused");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("delivery.token: "), "{problems:?}");
        assert!(!problems[0].contains("secret"), "{problems:?}");
    }

    #[test]
    fn a_rewritten_token_file_is_taken_only_when_it_holds_a_good_new_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "first-token-1234\n").unwrap();
        let c = Credentials::load(Some(file.clone()), None).unwrap();
        assert_eq!(c.current().as_deref(), Some("first-token-1234"));
        assert!(!c.refresh(Some("first-token-1234")), "unchanged");
        std::fs::write(&file, "bad token here\n").unwrap();
        assert!(!c.refresh(Some("first-token-1234")), "a bad token");
        assert_eq!(c.current().as_deref(), Some("first-token-1234"));
        std::fs::write(&file, "\n  second-token-5678  \n").unwrap();
        assert!(c.refresh(Some("first-token-1234")));
        assert_eq!(c.current().as_deref(), Some("second-token-5678"));
    }

    fn event(seq: u64, payload: &str) -> RunEvent {
        RunEvent {
            seq,
            event_id: RunEventId::new(format!("e{seq}")).unwrap(),
            payload: payload.as_bytes().to_vec(),
            created_at: cairn::spool::Timestamp::from_unix_micros(1),
        }
    }

    fn json_len(e: &RunEvent) -> usize {
        serde_json::to_string(&RunEventOut::from(e)).unwrap().len()
    }

    /// What `take_batch` took, as the `events` array of the POST.
    fn array(slice: &Slice) -> String {
        let parts: Vec<&str> = slice.events.iter().map(|e| e.get()).collect();
        format!("[{}]", parts.join(","))
    }

    #[test]
    fn a_batch_takes_the_events_that_fit_its_byte_budget_in_order() {
        // A control byte takes six bytes of JSON (`\u0001`).
        let events: Vec<RunEvent> = (1..=5).map(|n| event(n, "x\u{1}y")).collect();
        let one = json_len(&events[0]);
        assert!(one > 6 + 2, "{one}");
        let two = 2 + one + 1 + one;

        // Exactly two fit: `[a,b]` is the budget.
        let mut pending: VecDeque<RunEvent> = events.iter().cloned().collect();
        let slice = take_batch(&mut pending, two).unwrap();
        assert_eq!(array(&slice).len(), two);
        assert_eq!(slice.last, Some(2));
        assert_eq!(
            slice.ids,
            [events[0].event_id.clone(), events[1].event_id.clone()]
        );
        let want: Vec<String> = events[..2]
            .iter()
            .map(|e| serde_json::to_string(&RunEventOut::from(e)).unwrap())
            .collect();
        assert_eq!(array(&slice), format!("[{}]", want.join(",")));
        assert_eq!(pending.front().map(|e| e.seq), Some(3), "the rest wait");

        // A byte less: only one.
        let slice = take_batch(&mut pending, two - 1).unwrap();
        assert_eq!((slice.last, slice.ids.len()), (Some(3), 1));
        // `[a,b,c]` holds two commas: with a byte less than it, two events go.
        let three = two + 1 + one;
        for (budget, taken) in [(three, 3), (three - 1, 2)] {
            let mut pending: VecDeque<RunEvent> = events.iter().cloned().collect();
            let slice = take_batch(&mut pending, budget).unwrap();
            assert_eq!(slice.ids.len(), taken, "within {budget} bytes");
            assert!(array(&slice).len() <= budget);
        }
        // The rest, within a large budget, then nothing.
        let slice = take_batch(
            &mut pending,
            crate::config::Delivery::default().max_batch_bytes,
        )
        .unwrap();
        assert_eq!((slice.last, slice.ids.len()), (Some(5), 2));
        assert!(pending.is_empty());
        let slice = take_batch(
            &mut pending,
            crate::config::Delivery::default().max_batch_bytes,
        )
        .unwrap();
        assert_eq!(
            (slice.last, slice.ids.len(), slice.events.len()),
            (None, 0, 0)
        );
    }

    #[test]
    fn the_first_event_of_a_batch_goes_however_large() {
        let big = "z".repeat(100);
        let mut pending: VecDeque<RunEvent> = [event(1, &big), event(2, "a"), event(3, "b")]
            .into_iter()
            .collect();
        let slice = take_batch(&mut pending, 10).unwrap();
        assert_eq!((slice.last, slice.ids.len()), (Some(1), 1));
        assert!(array(&slice).len() > 100);
        let slice = take_batch(&mut pending, 1).unwrap();
        assert_eq!((slice.last, slice.ids.len()), (Some(2), 1));
        let slice = take_batch(&mut pending, 1).unwrap();
        assert_eq!((slice.last, slice.ids.len()), (Some(3), 1));
    }

    /// A run waiting for its producer is announced once; finished runs leave the memory, so
    /// however many finish meanwhile, it is not announced again.
    #[test]
    fn a_waiting_run_stays_announced_however_many_runs_finish_meanwhile() {
        let d = deliverer();
        let waiting = run_id(u128::MAX);
        d.announce(waiting);
        for n in 0..=MAX_ANNOUNCED as u128 {
            let finished = run_id(n);
            d.announce(finished);
            assert!(d.announced(finished));
            d.forget(finished);
            assert!(!d.announced(finished));
        }
        assert!(d.announced(waiting));
    }

    /// The memory keeps every waiting run up to its bound; past it, it starts over.
    #[test]
    fn the_announced_memory_holds_up_to_its_bound() {
        let d = deliverer();
        for n in 0..MAX_ANNOUNCED as u128 {
            d.announce(run_id(n));
        }
        assert!((0..MAX_ANNOUNCED as u128).all(|n| d.announced(run_id(n))));
        let newest = run_id(u128::MAX);
        d.announce(newest);
        assert!(d.announced(newest));
        assert!(!d.announced(run_id(0)), "cleared past the bound");
        assert_eq!(d.announced.lock().unwrap().len(), 1);
    }
}
