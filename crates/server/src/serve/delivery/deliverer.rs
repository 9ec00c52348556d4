//! Delivering one run: POST its batches, read the collector's answer, decide the run's outcome
//! (module docs of [`super`]).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use cairn::spool::{EventStream, Job, Outcome, RunEvent, RunId, MAX_LEASE};
use hyper::body::Bytes;

use super::batch::{take_batch, Batch};
use super::config::Settings;
use super::verdict::{excerpt, verdict, Verdict};
use crate::serve::json::bytes_out;
use crate::serve::metrics::Metrics;

/// The longest excerpt of a collector's answer kept in a parked run's reason.
pub(super) const REASON_EXCERPT: usize = 200;

pub(super) struct Deliverer {
    pub(super) http: reqwest::Client,
    pub(super) settings: Settings,
    pub(super) metrics: Arc<Metrics>,
    /// Open runs this process has POSTed at least once, so a run waiting for its producer is
    /// not POSTed again with no events each time it is taken. Held in memory only: after a
    /// restart a waiting run is announced once more (harmless, the collector sees the same run
    /// id again). Bounded by [`MAX_ANNOUNCED`].
    pub(super) announced: Mutex<HashSet<RunId>>,
    /// Refusals (401/403) since the last delivered batch, over all runs: the collector
    /// refuses this server's token, not a run. Sets the length of the next pause.
    pub(super) refusals: AtomicU32,
    /// Until when deliveries pause after a refusal; `None` when not paused.
    pub(super) paused_until: Mutex<Option<Instant>>,
}

/// Most open runs remembered as announced; past it the memory is cleared (some waiting runs
/// are then announced once more).
pub(super) const MAX_ANNOUNCED: usize = 100_000;

impl Deliverer {
    pub(super) fn announced(&self, run: RunId) -> bool {
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&run)
    }

    pub(super) fn announce(&self, run: RunId) {
        let mut set = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        if set.len() >= MAX_ANNOUNCED {
            set.clear();
        }
        set.insert(run);
    }

    pub(super) fn forget(&self, run: RunId) {
        self.announced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&run);
    }

    /// What is left of the pause after a refusal, or `None` when deliveries may go on.
    pub(super) fn paused(&self) -> Option<Duration> {
        let until = (*self.paused_until.lock().unwrap_or_else(|e| e.into_inner()))?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Records a refusal: lengthens the streak and pauses deliveries for the streak's backoff,
    /// which it returns.
    pub(super) fn refused(&self, job: &Job) -> Duration {
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
    pub(super) fn delivered(&self) {
        self.refusals.store(0, Ordering::SeqCst);
        *self.paused_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Counts the outcome and logs it (its kind only: the reason may quote the collector).
    pub(super) fn record(&self, outcome: &Outcome) {
        let label = match outcome {
            Outcome::Done => "ack",
            Outcome::Retry(_) | Outcome::RetryAfter(..) => "retry",
            Outcome::Fail(_) | Outcome::Nack(..) => "park",
            Outcome::Release(_) => "release",
        };
        self.metrics.delivery.with_label_values(&[label]).inc();
        tracing::info!(target: "cairn::delivery", outcome = label, "delivery");
    }

    /// Delivers one claimed run, batch by batch, and acks it only once it is closed and
    /// drained (see the module docs for the invariant).
    pub(super) async fn deliver(&self, job: &Job) -> Outcome {
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
                Verdict::RetryAfter(why, wait) => return Outcome::RetryAfter(wait, why),
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
    pub(super) async fn post(&self, body: Bytes) -> Verdict {
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

    pub(super) async fn send(&self, body: Bytes, token: Option<&str>) -> Verdict {
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
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
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
        verdict(
            status,
            &excerpt(&head, REASON_EXCERPT),
            retry_after.as_deref(),
            SystemTime::now(),
        )
    }
}

/// Whether the run's producer closed it. A run no producer will close (written by an older
/// build, or imported) is closed here, so that from now on an append to it is refused rather
/// than left undelivered.
pub(super) async fn is_closed(spool: &dyn cairn::Spool, run: RunId) -> cairn::Result<bool> {
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
pub(super) fn describe(e: &reqwest::Error) -> String {
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
