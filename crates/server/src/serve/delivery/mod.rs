//! The delivery worker: forwards pending runs' event batches to a collector.
//!
//! It is the spool's consumer loop ([`ConsumerBuilder`](cairn::spool::ConsumerBuilder)) over one queue (default `telemetry`),
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
//! ([`Outcome::Release`](cairn::spool::Outcome::Release): no attempt spent) and taken again after `delivery.poll_ms`, so
//! other runs are not held up behind it. A run written by an older build (or imported) carries
//! no close mark ([`EventStream::Unmarked`](cairn::spool::EventStream::Unmarked)): the worker closes it itself when it takes it, then
//! delivers it as above, so an append after that is refused rather than lost. A run is POSTed
//! when the worker first takes it even if it holds no event yet (a batch with no events), so
//! the collector learns of every run; a closed run is POSTed at least once.
//!
//! Credential problems never park a run and spend no attempt: a missing or refused token
//! (401, 403, and 431, since the token is the only header of ours that can be too large) is
//! this server's problem, not the run's. The worker gives the run back at once
//! ([`Outcome::Release`](cairn::spool::Outcome::Release), which returns the claim's attempt) with a wait taken from a refusal
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

mod batch;
mod config;
mod credentials;
mod deliverer;
#[cfg(test)]
mod tests;
mod verdict;
mod worker;

pub(crate) use self::config::{settings, spool_config, Settings};
pub(crate) use self::worker::Worker;
