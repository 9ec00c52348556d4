//! The consumer loop over [`MemorySpool`] on a [`ManualClock`]: every wait is a condition with
//! a deadline, never a fixed sleep.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Semaphore;

use super::ctx::idle_wait;
use super::handler::raise;
use super::run::SETTLE_TRIES;
use super::*;
use crate::spool::{
    backoff_ceiling, BackoffPolicy, CancelOutcome, Claimed, Clock, DedupKey, EnqueueOptions,
    ManualClock, MemorySpool, NackKind, RunState, SystemClock, Timestamp, Wakeup, MAX_LEASE,
};

const LEASE: Duration = Duration::from_secs(30);
const TICK: Duration = Duration::from_millis(2);

/// The largest backoff after `attempt` under the default policy (the model's).
fn max_backoff_for_tests(attempt: u32) -> Duration {
    let p = BackoffPolicy::default();
    backoff_ceiling(attempt, p.base, p.cap)
}

fn setup() -> (ManualClock, Arc<dyn Spool>, QueueName) {
    let clock = ManualClock::default();
    let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(clock.clone())));
    (clock, spool, QueueName::new("work").unwrap())
}

fn builder(spool: &Arc<dyn Spool>, q: &QueueName) -> ConsumerBuilder {
    ConsumerBuilder::new(spool.clone(), q.clone(), ConsumerId::new("c1").unwrap())
        .lease(LEASE)
        .poll_interval(TICK)
}

async fn enqueue(spool: &Arc<dyn Spool>, q: &QueueName, k: &str) -> RunId {
    enqueue_with(spool, q, k, EnqueueOptions::default()).await
}

async fn enqueue_with(
    spool: &Arc<dyn Spool>,
    q: &QueueName,
    k: &str,
    options: EnqueueOptions,
) -> RunId {
    let e = spool
        .enqueue(q, &DedupKey::from_parts([k]).unwrap(), k.into(), options)
        .await
        .unwrap();
    assert!(e.created);
    e.run_id
}

async fn state(spool: &Arc<dyn Spool>, run: RunId) -> RunState {
    spool.run(run).await.unwrap().unwrap().state
}

/// Waits until `cond` holds, failing after 10 s (a deadline, not a sleep).
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_map_to_ack_and_nack_kinds() {
    let (_clock, spool, q) = setup();
    let ids = [
        enqueue(&spool, &q, "done").await,
        enqueue(&spool, &q, "retry").await,
        enqueue(&spool, &q, "fail").await,
        enqueue(&spool, &q, "failed").await,
    ];
    let consumer = builder(&spool, &q)
        .concurrency(4)
        .spawn(|job: Job| async move {
            match job.payload() {
                b"done" => Outcome::Done,
                b"retry" => Outcome::Retry("flaky".into()),
                b"fail" => Outcome::Fail("bad input".into()),
                _ => Outcome::Nack(NackKind::Failed, "tests failed".into()),
            }
        })
        .await
        .unwrap();
    eventually("all four settled", || async {
        consumer.stats().settled.values().sum::<u64>() == 4
    })
    .await;
    let report = consumer.shutdown().await;
    assert!(report.is_clean());
    let want = [
        RunState::Succeeded,
        RunState::Queued,
        RunState::Parked,
        RunState::Failed,
    ];
    for (id, want) in ids.iter().zip(want) {
        assert_eq!(state(&spool, *id).await, want);
    }
    let info = spool.run(ids[1]).await.unwrap().unwrap();
    assert_eq!(info.reason.as_deref(), Some("flaky"));
    assert_eq!(report.stats.claimed, 4);
    assert_eq!(report.stats.settled[&RunState::Queued], 1);
}

/// `Outcome::RetryAfter` requeues the run due after the handler's own delay (not the
/// backoff), spending the attempt; a delay over the longest the spool takes is cut to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_requeues_after_the_handlers_delay() {
    let (clock, spool, q) = setup();
    let soon = enqueue(&spool, &q, "soon").await;
    let far = enqueue(&spool, &q, "far").await;
    let t0 = clock.now();
    let consumer = builder(&spool, &q)
        .concurrency(2)
        .spawn(|job: Job| async move {
            match (job.attempt(), job.payload()) {
                (1, b"soon") => Outcome::RetryAfter(Duration::from_secs(45), "limited".into()),
                (1, _) => Outcome::RetryAfter(MAX_LEASE * 3, "much later".into()),
                _ => Outcome::Done,
            }
        })
        .await
        .unwrap();
    eventually("both requeued", || async {
        consumer.stats().settled.get(&RunState::Queued) == Some(&2)
    })
    .await;
    let info = spool.run(soon).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Queued);
    assert_eq!(
        info.due_at,
        Some(t0.saturating_add(Duration::from_secs(45)))
    );
    assert_eq!(info.reason.as_deref(), Some("limited"));
    assert_eq!(info.attempts, 1, "the attempt was spent");
    let info = spool.run(far).await.unwrap().unwrap();
    assert_eq!(
        info.due_at,
        Some(t0.saturating_add(MAX_LEASE)),
        "cut to the longest delay a spool takes"
    );
    clock.advance(Duration::from_secs(45));
    eventually("the near retry ran again and succeeded", || async {
        state(&spool, soon).await == RunState::Succeeded
    })
    .await;
    assert_eq!(state(&spool, far).await, RunState::Queued);
    clock.advance(MAX_LEASE);
    eventually("the far retry ran again and succeeded", || async {
        state(&spool, far).await == RunState::Succeeded
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_bounded_and_slots_refill() {
    let (_clock, spool, q) = setup();
    for i in 0..10 {
        enqueue(&spool, &q, &format!("r{i}")).await;
    }
    let gate = Arc::new(Semaphore::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (g, r, p) = (gate.clone(), running.clone(), peak.clone());
    let consumer = builder(&spool, &q)
        .concurrency(3)
        .spawn(move |_job: Job| {
            let (g, r, p) = (g.clone(), r.clone(), p.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                g.acquire().await.unwrap().forget();
                r.fetch_sub(1, Ordering::SeqCst);
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("three handlers run", || async {
        running.load(Ordering::SeqCst) == 3
    })
    .await;
    assert_eq!(consumer.in_flight(), 3);
    assert_eq!(
        consumer.stats().claimed,
        3,
        "no claim beyond the free slots"
    );
    gate.add_permits(10);
    eventually("all ten succeed", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&10)
    })
    .await;
    assert_eq!(
        peak.load(Ordering::SeqCst),
        3,
        "never more than three at once"
    );
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_the_lease_and_carry_a_cancel_to_the_handler() {
    let (clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "long").await;
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                let why = job.stop().stopped().await;
                *s.lock().unwrap() = Some(why);
                Outcome::Retry(format!("stopped: {why}"))
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    let first = spool
        .run(id)
        .await
        .unwrap()
        .unwrap()
        .lease
        .unwrap()
        .expires_at;

    // Well past the original lease, in thirds: every third brings a heartbeat.
    for beat in 1..=4u64 {
        clock.advance(LEASE / 3 + Duration::from_millis(1));
        eventually("a heartbeat per third of the lease", || async {
            consumer.stats().heartbeats >= beat
        })
        .await;
    }
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Claimed);
    assert!(info.lease.unwrap().expires_at > first.saturating_add(LEASE));
    assert_eq!(*seen.lock().unwrap(), None);

    assert_eq!(spool.cancel(id).await.unwrap(), CancelOutcome::Requested);
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    eventually("the cancel ends the run", || async {
        state(&spool, id).await == RunState::Canceled
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), Some(StopReason::CancelRequested));
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_wakes_an_idle_consumer() {
    let (_clock, spool, q) = setup();
    // Polling is an hour apart: only the subscription can explain a prompt claim.
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_secs(3600))
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    let id = enqueue(&spool, &q, "wake").await;
    eventually("the woken consumer acks", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    drop(consumer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_wakes_when_the_earliest_due_time_passes() {
    // The system clock here: the due time is the only thing that moves the consumer (polling
    // is an hour apart and the enqueue happened before it subscribed).
    let spool: Arc<dyn Spool> = Arc::new(MemorySpool::new(Arc::new(SystemClock)));
    let q = QueueName::new("later").unwrap();
    let at = SystemClock.now().saturating_add(Duration::from_millis(150));
    let id = enqueue_with(
        &spool,
        &q,
        "later",
        EnqueueOptions::default().not_before(at),
    )
    .await;
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_secs(3600))
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    eventually("claimed once due", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    let info = spool.run(id).await.unwrap().unwrap();
    assert!(info.finished_at.unwrap() >= at);
    drop(consumer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_bounded_and_leaves_unfinished_runs_claimable() {
    let (clock, spool, q) = setup();
    let stuck = enqueue(&spool, &q, "stuck").await;
    let polite = enqueue(&spool, &q, "polite").await;
    let consumer = builder(&spool, &q)
        .concurrency(2)
        .spawn(|job: Job| async move {
            if job.payload() == b"stuck" {
                // Ignores every stop request.
                std::future::pending::<()>().await;
            }
            let why = job.stop().stopped().await;
            Outcome::Retry(why.to_string())
        })
        .await
        .unwrap();
    eventually("both claimed", || async { consumer.in_flight() == 2 }).await;
    let started = Instant::now();
    let report = consumer.shutdown_within(Duration::from_millis(200)).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown keeps its bound"
    );
    assert_eq!(report.abandoned, vec![stuck]);
    assert!(
        !report.is_clean(),
        "a run left behind makes the shutdown unclean"
    );
    assert_eq!(state(&spool, polite).await, RunState::Queued);
    assert_eq!(state(&spool, stuck).await, RunState::Claimed);
    // Nothing is lost: once the lease (plus backoff) runs out, another consumer gets it.
    clock.advance(LEASE + max_backoff_for_tests(1) + Duration::from_secs(1));
    let other = ConsumerId::new("c2").unwrap();
    let again = spool.claim(&q, &other, LEASE, 10).await.unwrap();
    let mut ids: Vec<RunId> = again.iter().map(|c| c.run_id).collect();
    ids.sort();
    let mut want = vec![stuck, polite];
    want.sort();
    assert_eq!(ids, want);
    assert!(again.iter().all(|c| c.attempt == 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_retried() {
    let (_clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "boom").await;
    let consumer = builder(&spool, &q)
        .spawn(|_job: Job| async { panic!("handler bug") })
        .await
        .unwrap();
    eventually("the panic is settled", || async {
        consumer.stats().panics == 1 && consumer.stats().settled.values().sum::<u64>() == 1
    })
    .await;
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Queued);
    assert_eq!(info.reason.as_deref(), Some("the handler panicked"));
    drop(consumer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_handler_and_records_nothing() {
    let (clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "slow").await;
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let lease = Duration::from_secs(3);
    // Polling an hour apart: the run's task looks at the clock only when its next heartbeat
    // is due in real time (a second), long after the thief below has taken the run.
    let consumer = builder(&spool, &q)
        .lease(lease)
        .poll_interval(Duration::from_secs(3600))
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                *s.lock().unwrap() = Some(job.stop().stopped().await);
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    let other = ConsumerId::new("thief").unwrap();
    clock.advance(lease + max_backoff_for_tests(1) + Duration::from_secs(1));
    let stolen = spool.claim(&q, &other, LEASE, 1).await.unwrap();
    assert_eq!(stolen.len(), 1, "the expired run is claimable");
    eventually("the handler is told", || async {
        *seen.lock().unwrap() == Some(StopReason::LeaseLost)
    })
    .await;
    eventually("counted", || async { consumer.stats().lease_lost == 1 }).await;
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!(
        info.state,
        RunState::Claimed,
        "the handler's ack is not recorded"
    );
    assert_eq!(info.lease.unwrap().consumer, other);
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test]
async fn invalid_options_are_refused_before_anything_runs() {
    let (_clock, spool, q) = setup();
    let noop = |_job: Job| async { Outcome::Done };
    for b in [
        builder(&spool, &q).concurrency(0),
        builder(&spool, &q).concurrency(MAX_BATCH + 1),
        builder(&spool, &q).concurrency(2).claim_batch(3),
        builder(&spool, &q).lease(Duration::from_millis(10)),
        builder(&spool, &q).poll_interval(Duration::ZERO),
    ] {
        assert!(matches!(
            b.spawn(noop).await,
            Err(Error::InvalidInput { .. })
        ));
    }
}

#[test]
fn idle_wait_is_clamped() {
    let now = Timestamp::from_unix_micros(1_000_000);
    let poll = Duration::from_secs(1);
    assert_eq!(idle_wait(now, None, poll), poll);
    assert_eq!(
        idle_wait(
            now,
            Some(now.saturating_add(Duration::from_millis(5))),
            poll
        ),
        Duration::from_millis(5)
    );
    assert_eq!(
        idle_wait(now, Some(now.saturating_add(Duration::from_secs(9))), poll),
        poll
    );
    assert_eq!(idle_wait(now, Some(now), poll), MIN_WAIT);
    assert_eq!(
        idle_wait(now, Some(now.saturating_sub(Duration::from_secs(1))), poll),
        MIN_WAIT
    );
}

#[tokio::test]
async fn next_due_default_body_agrees_with_the_model() {
    // The provided body (paging through `runs`) against the model's own answer.
    #[derive(Debug)]
    struct Paging(MemorySpool);
    #[async_trait]
    impl Spool for Paging {
        fn clock(&self) -> &dyn Clock {
            self.0.clock()
        }
        async fn enqueue(
            &self,
            queue: &QueueName,
            key: &DedupKey,
            payload: Vec<u8>,
            options: EnqueueOptions,
        ) -> Result<crate::spool::Enqueued> {
            self.0.enqueue(queue, key, payload, options).await
        }
        async fn enqueue_many(
            &self,
            queue: &QueueName,
            items: Vec<crate::spool::EnqueueItem>,
        ) -> Result<Vec<crate::spool::Enqueued>> {
            self.0.enqueue_many(queue, items).await
        }
        async fn claim(
            &self,
            queue: &QueueName,
            consumer: &ConsumerId,
            lease: Duration,
            limit: usize,
        ) -> Result<Vec<Claimed>> {
            self.0.claim(queue, consumer, lease, limit).await
        }
        async fn heartbeat(
            &self,
            run: RunId,
            token: crate::spool::LeaseToken,
            lease: Duration,
        ) -> Result<crate::spool::Heartbeat> {
            self.0.heartbeat(run, token, lease).await
        }
        async fn ack(&self, run: RunId, token: crate::spool::LeaseToken) -> Result<()> {
            self.0.ack(run, token).await
        }
        async fn nack(
            &self,
            run: RunId,
            token: crate::spool::LeaseToken,
            kind: NackKind,
            reason: &str,
        ) -> Result<crate::spool::Nacked> {
            self.0.nack(run, token, kind, reason).await
        }
        async fn retry_after(
            &self,
            run: RunId,
            token: crate::spool::LeaseToken,
            reason: &str,
            delay: Duration,
        ) -> Result<crate::spool::Nacked> {
            self.0.retry_after(run, token, reason, delay).await
        }
        async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
            self.0.cancel(run).await
        }
        async fn close_run(&self, run: RunId) -> Result<crate::spool::CloseOutcome> {
            self.0.close_run(run).await
        }
        async fn retry_parked(&self, run: RunId, by: &str) -> Result<crate::spool::Unparked> {
            self.0.retry_parked(run, by).await
        }
        async fn discard(&self, run: RunId, by: &str) -> Result<crate::spool::Unparked> {
            self.0.discard(run, by).await
        }
        async fn release(
            &self,
            run: RunId,
            token: crate::spool::LeaseToken,
            delay: Duration,
        ) -> Result<crate::spool::Nacked> {
            self.0.release(run, token, delay).await
        }
        async fn run(&self, run: RunId) -> Result<Option<crate::spool::RunInfo>> {
            self.0.run(run).await
        }
        async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
            self.0.payload(run).await
        }
        async fn runs(
            &self,
            filter: &crate::spool::RunFilter,
            limit: usize,
        ) -> Result<Vec<crate::spool::RunInfo>> {
            self.0.runs(filter, limit).await
        }
        async fn stats(&self) -> Result<crate::spool::SpoolStats> {
            self.0.stats().await
        }
        async fn append_event(
            &self,
            run: RunId,
            event_id: &crate::spool::RunEventId,
            payload: Vec<u8>,
        ) -> Result<crate::spool::EventAppended> {
            self.0.append_event(run, event_id, payload).await
        }
        async fn events(
            &self,
            run: RunId,
            after: u64,
            limit: usize,
        ) -> Result<Vec<crate::spool::RunEvent>> {
            self.0.events(run, after, limit).await
        }
        async fn acknowledge_events(
            &self,
            run: RunId,
            event_ids: &[crate::spool::RunEventId],
        ) -> Result<u64> {
            self.0.acknowledge_events(run, event_ids).await
        }
        async fn set_fact(
            &self,
            run: RunId,
            name: &crate::spool::FactName,
            value: Vec<u8>,
        ) -> Result<crate::spool::FactOutcome> {
            self.0.set_fact(run, name, value).await
        }
        async fn facts(
            &self,
            run: RunId,
        ) -> Result<std::collections::BTreeMap<crate::spool::FactName, Vec<u8>>> {
            self.0.facts(run).await
        }
        async fn retention_pass(
            &self,
            policy: &crate::spool::RetentionPolicy,
            budget: &crate::spool::RetentionBudget,
        ) -> Result<crate::spool::RetentionReport> {
            self.0.retention_pass(policy, budget).await
        }
        async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
            self.0.subscribe(queue).await
        }
    }

    let clock = ManualClock::default();
    let model = MemorySpool::new(Arc::new(clock.clone()));
    let paging = Paging(model.clone());
    let q = QueueName::new("q").unwrap();
    let other = QueueName::new("other").unwrap();
    assert_eq!(paging.next_due(&q).await.unwrap(), None);
    let now = clock.now();
    for i in 0..(MAX_BATCH as i64 + 5) {
        let at = now.saturating_add(Duration::from_secs(1000 - (i % 997) as u64));
        let key = DedupKey::from_parts([format!("k{i}")]).unwrap();
        model
            .enqueue(
                &q,
                &key,
                Vec::new(),
                EnqueueOptions::default().not_before(at),
            )
            .await
            .unwrap();
    }
    model
        .enqueue(
            &other,
            &DedupKey::from_parts(["x"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let want = model.next_due(&q).await.unwrap();
    assert!(want.is_some());
    assert_eq!(paging.next_due(&q).await.unwrap(), want);
    assert_eq!(
        paging.next_due(&other).await.unwrap(),
        model.next_due(&other).await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_coalesced_so_one_claim_fills_several_slots() {
    let (_clock, spool, q) = setup();
    for i in 0..60 {
        enqueue(&spool, &q, &format!("r{i}")).await;
    }
    // Runs finish one at a time (one gate permit each), so without coalescing every finished
    // run would free one slot and cost one claim.
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    // A window far longer than the test: a claim happens only once half the batch is free.
    let consumer = builder(&spool, &q)
        .concurrency(10)
        .claim_coalesce(Duration::from_secs(60))
        .spawn(move |_job: Job| {
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                Outcome::Done
            }
        })
        .await
        .unwrap();
    let mut claims_while_queued = 0;
    for done in 1..=60u64 {
        gate.add_permits(1);
        eventually("the released run succeeds", || async {
            consumer.stats().settled.get(&RunState::Succeeded) == Some(&done)
        })
        .await;
        if done == 50 {
            // By now every run has been claimed; later claims find the queue empty (polls).
            eventually("all 60 claimed", || async {
                consumer.stats().claimed == 60
            })
            .await;
            claims_while_queued = consumer.stats().claims;
        }
    }
    assert_eq!(consumer.stats().claimed, 60);
    // The first claim takes 10; each later one waits for 5 free slots: 1 + 50 / 5 = 11.
    assert!(
        claims_while_queued <= 12,
        "{claims_while_queued} claims for 60 runs finishing one by one: not coalesced"
    );
    assert!(consumer.shutdown().await.is_clean());
}

/// A consumer with 4 slots and claim coalescing `window` whose handler finishes runs at once,
/// except runs whose payload starts with `blocked`: those hold their slot until the returned
/// gate gets a permit each.
async fn gated_consumer(
    spool: &Arc<dyn Spool>,
    q: &QueueName,
    window: Duration,
) -> (Consumer, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let consumer = builder(spool, q)
        .concurrency(4)
        .claim_coalesce(window)
        .spawn(move |job: Job| {
            let g = g.clone();
            async move {
                if job.payload().starts_with(b"blocked") {
                    g.acquire().await.unwrap().forget();
                }
                Outcome::Done
            }
        })
        .await
        .unwrap();
    (consumer, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_free_slot_is_filled_once_the_coalescing_window_ends() {
    let (_clock, spool, q) = setup();
    for i in 0..3 {
        enqueue(&spool, &q, &format!("blocked{i}")).await;
    }
    let (consumer, gate) = gated_consumer(&spool, &q, Duration::from_millis(50)).await;
    eventually("three handlers hold their slots", || async {
        consumer.in_flight() == 3
    })
    .await;
    // One slot free (fewer than half of 4): the window delays its claim, but not forever.
    let late = enqueue(&spool, &q, "late").await;
    eventually("the free slot takes the new run", || async {
        state(&spool, late).await == RunState::Succeeded
    })
    .await;
    assert_eq!(
        consumer.in_flight(),
        3,
        "the blocked runs still hold their slots"
    );
    gate.add_permits(3);
    eventually("all four succeed", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&4)
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

// ---------------------------------------------------------------------------------------------
// What the mutation run of this module found unpinned (docs/RELIABILITY.md, scope `consumer`):
// each test below names the behaviour a user relies on, and fails with the mutant it kills.

/// What a [`Faulty`] spool's next calls do, and what it saw.
#[derive(Debug, Default)]
struct Script {
    /// Errors the next acks, nacks and releases return, in order; then they go through.
    settle: std::collections::VecDeque<Error>,
    /// Errors the next heartbeats return, in order; then they go through.
    heartbeat: std::collections::VecDeque<Error>,
    /// When each ack, nack or release was tried.
    settle_calls: Vec<Instant>,
    /// Heartbeats tried.
    heartbeat_calls: usize,
    /// Acks that reached the spool (before waiting at [`Faulty::acks`]).
    ack_calls: usize,
    /// Claims that have returned.
    claims_returned: u64,
    /// Looks at the earliest due time that have returned.
    next_due_returned: u64,
}

/// A [`MemorySpool`] whose settles and heartbeats fail as the test scripts them.
#[derive(Debug)]
struct Faulty {
    inner: MemorySpool,
    script: Mutex<Script>,
    /// Every ack waits for a read guard: a test holding the write guard holds the acks back.
    acks: tokio::sync::RwLock<()>,
}

impl Faulty {
    fn new(clock: &ManualClock) -> Arc<Self> {
        Arc::new(Self {
            inner: MemorySpool::new(Arc::new(clock.clone())),
            script: Mutex::new(Script::default()),
            acks: tokio::sync::RwLock::new(()),
        })
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }

    fn settle_fault(&self) -> Result<()> {
        let mut s = self.script();
        s.settle_calls.push(Instant::now());
        s.settle.pop_front().map_or(Ok(()), Err)
    }
}

#[async_trait]
impl Spool for Faulty {
    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }
    async fn enqueue(
        &self,
        queue: &QueueName,
        key: &DedupKey,
        payload: Vec<u8>,
        options: EnqueueOptions,
    ) -> Result<crate::spool::Enqueued> {
        self.inner.enqueue(queue, key, payload, options).await
    }
    async fn enqueue_many(
        &self,
        queue: &QueueName,
        items: Vec<crate::spool::EnqueueItem>,
    ) -> Result<Vec<crate::spool::Enqueued>> {
        self.inner.enqueue_many(queue, items).await
    }
    async fn claim(
        &self,
        queue: &QueueName,
        consumer: &ConsumerId,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Claimed>> {
        let claimed = self.inner.claim(queue, consumer, lease, limit).await;
        self.script().claims_returned += 1;
        claimed
    }
    async fn heartbeat(
        &self,
        run: RunId,
        token: crate::spool::LeaseToken,
        lease: Duration,
    ) -> Result<crate::spool::Heartbeat> {
        let fault = {
            let mut s = self.script();
            s.heartbeat_calls += 1;
            s.heartbeat.pop_front()
        };
        match fault {
            Some(e) => Err(e),
            None => self.inner.heartbeat(run, token, lease).await,
        }
    }
    async fn ack(&self, run: RunId, token: crate::spool::LeaseToken) -> Result<()> {
        self.script().ack_calls += 1;
        let _open = self.acks.read().await;
        self.settle_fault()?;
        self.inner.ack(run, token).await
    }
    async fn nack(
        &self,
        run: RunId,
        token: crate::spool::LeaseToken,
        kind: NackKind,
        reason: &str,
    ) -> Result<crate::spool::Nacked> {
        self.settle_fault()?;
        self.inner.nack(run, token, kind, reason).await
    }
    async fn retry_after(
        &self,
        run: RunId,
        token: crate::spool::LeaseToken,
        reason: &str,
        delay: Duration,
    ) -> Result<crate::spool::Nacked> {
        self.settle_fault()?;
        self.inner.retry_after(run, token, reason, delay).await
    }
    async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
        self.inner.cancel(run).await
    }
    async fn close_run(&self, run: RunId) -> Result<crate::spool::CloseOutcome> {
        self.inner.close_run(run).await
    }
    async fn retry_parked(&self, run: RunId, by: &str) -> Result<crate::spool::Unparked> {
        self.inner.retry_parked(run, by).await
    }
    async fn discard(&self, run: RunId, by: &str) -> Result<crate::spool::Unparked> {
        self.inner.discard(run, by).await
    }
    async fn release(
        &self,
        run: RunId,
        token: crate::spool::LeaseToken,
        delay: Duration,
    ) -> Result<crate::spool::Nacked> {
        self.settle_fault()?;
        self.inner.release(run, token, delay).await
    }
    async fn run(&self, run: RunId) -> Result<Option<crate::spool::RunInfo>> {
        self.inner.run(run).await
    }
    async fn payload(&self, run: RunId) -> Result<Option<Vec<u8>>> {
        self.inner.payload(run).await
    }
    async fn runs(
        &self,
        filter: &crate::spool::RunFilter,
        limit: usize,
    ) -> Result<Vec<crate::spool::RunInfo>> {
        self.inner.runs(filter, limit).await
    }
    async fn stats(&self) -> Result<crate::spool::SpoolStats> {
        self.inner.stats().await
    }
    async fn append_event(
        &self,
        run: RunId,
        event_id: &crate::spool::RunEventId,
        payload: Vec<u8>,
    ) -> Result<crate::spool::EventAppended> {
        self.inner.append_event(run, event_id, payload).await
    }
    async fn events(
        &self,
        run: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<crate::spool::RunEvent>> {
        self.inner.events(run, after, limit).await
    }
    async fn acknowledge_events(
        &self,
        run: RunId,
        event_ids: &[crate::spool::RunEventId],
    ) -> Result<u64> {
        self.inner.acknowledge_events(run, event_ids).await
    }
    async fn set_fact(
        &self,
        run: RunId,
        name: &crate::spool::FactName,
        value: Vec<u8>,
    ) -> Result<crate::spool::FactOutcome> {
        self.inner.set_fact(run, name, value).await
    }
    async fn facts(
        &self,
        run: RunId,
    ) -> Result<std::collections::BTreeMap<crate::spool::FactName, Vec<u8>>> {
        self.inner.facts(run).await
    }
    async fn retention_pass(
        &self,
        policy: &crate::spool::RetentionPolicy,
        budget: &crate::spool::RetentionBudget,
    ) -> Result<crate::spool::RetentionReport> {
        self.inner.retention_pass(policy, budget).await
    }
    async fn subscribe(&self, queue: &QueueName) -> Result<Box<dyn Wakeup>> {
        self.inner.subscribe(queue).await
    }
    async fn next_due(&self, queue: &QueueName) -> Result<Option<Timestamp>> {
        let due = self.inner.next_due(queue).await;
        self.script().next_due_returned += 1;
        due
    }
}

/// A faulty spool on a manual clock, as `Arc<dyn Spool>` too.
fn faulty_setup() -> (ManualClock, Arc<Faulty>, Arc<dyn Spool>, QueueName) {
    let clock = ManualClock::default();
    let faulty = Faulty::new(&clock);
    let spool: Arc<dyn Spool> = faulty.clone();
    (clock, faulty, spool, QueueName::new("work").unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_ack_failure_is_retried_until_the_ack_lands() {
    let (_clock, faulty, spool, q) = faulty_setup();
    let id = enqueue(&spool, &q, "flaky-store").await;
    faulty.script().settle.extend([
        Error::retryable("the writer is busy"),
        Error::unavailable("the connection dropped"),
    ]);
    let consumer = builder(&spool, &q)
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    eventually("the third ack lands", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    eventually("the run's task ends", || async {
        consumer.in_flight() == 0
    })
    .await;
    assert_eq!(
        faulty.script().settle_calls.len(),
        3,
        "two failures, then the ack"
    );
    let stats = consumer.stats();
    assert_eq!(stats.errors, 2, "each failed try is counted");
    assert_eq!(
        stats.last_error.as_deref(),
        Some(
            Error::unavailable("the connection dropped")
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        stats.lease_lost, 0,
        "a transient failure is not a lost lease"
    );
    assert_eq!(stats.settled.get(&RunState::Succeeded), Some(&1));
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_retrying_cannot_fix_is_tried_once_and_the_run_comes_back_after_its_lease() {
    let (clock, faulty, spool, q) = faulty_setup();
    let id = enqueue(&spool, &q, "corrupt-reply").await;
    faulty
        .script()
        .settle
        .push_back(Error::corrupt("the ack's reply did not parse"));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let a = attempts.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(job.attempt());
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("the failed ack is given up", || async {
        consumer.stats().errors == 1 && consumer.in_flight() == 0
    })
    .await;
    assert_eq!(faulty.script().settle_calls.len(), 1, "not retried");
    assert_eq!(consumer.stats().lease_lost, 0);
    assert_eq!(
        state(&spool, id).await,
        RunState::Claimed,
        "left to its lease"
    );

    // The lease runs out: the run is delivered again, as its second attempt, and acked.
    clock.advance(LEASE + max_backoff_for_tests(1) + Duration::from_secs(1));
    eventually("redelivered and acked", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    assert_eq!(*attempts.lock().unwrap(), vec![1, 2]);
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settling_gives_up_after_four_tries_with_doubling_pauses() {
    let (_clock, faulty, spool, q) = faulty_setup();
    let id = enqueue(&spool, &q, "always-busy").await;
    faulty
        .script()
        .settle
        .extend((0..SETTLE_TRIES).map(|i| Error::retryable(format!("busy {i}"))));
    // Polling slower than the longest pause, so no pause is cut to the poll interval.
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_millis(500))
        .spawn(|_job: Job| async { Outcome::Retry("try later".into()) })
        .await
        .unwrap();
    eventually("the settle gives up", || async {
        consumer.stats().errors == u64::from(SETTLE_TRIES) && consumer.in_flight() == 0
    })
    .await;
    let calls = faulty.script().settle_calls.clone();
    assert_eq!(calls.len(), SETTLE_TRIES as usize, "no fifth try");
    for (i, pair) in calls.windows(2).enumerate() {
        let want = Duration::from_millis(20) * 2u32.pow(i as u32);
        let gap = pair[1] - pair[0];
        assert!(gap >= want, "pause {i}: {gap:?} < {want:?}");
    }
    assert_eq!(
        state(&spool, id).await,
        RunState::Claimed,
        "left to its lease"
    );
    assert_eq!(consumer.stats().settled.values().sum::<u64>(), 0);
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_before_the_ack_is_counted_lost_and_not_acked() {
    let (clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "slow").await;
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    // Polling an hour apart and beats 10 s apart in real time: the run's task does not look at
    // the clock again before its handler returns, so only the ack can find the lease gone.
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_secs(3600))
        .spawn(move |_job: Job| {
            let g = g.clone();
            async move {
                g.acquire().await.unwrap().forget();
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    clock.advance(LEASE + max_backoff_for_tests(1) + Duration::from_secs(1));
    let thief = ConsumerId::new("thief").unwrap();
    assert_eq!(spool.claim(&q, &thief, LEASE, 1).await.unwrap().len(), 1);
    gate.add_permits(1);
    eventually("the run's task ends", || async {
        consumer.in_flight() == 0
    })
    .await;
    let stats = consumer.stats();
    assert_eq!(stats.lease_lost, 1, "the refused ack is a lost lease");
    assert_eq!(stats.errors, 0, "and not an error");
    assert_eq!(stats.settled.values().sum::<u64>(), 0);
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Claimed, "not acked");
    assert_eq!(info.lease.unwrap().consumer, thief);
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_heartbeat_failure_keeps_the_run_and_the_next_beat_extends_it() {
    let (clock, faulty, spool, q) = faulty_setup();
    let id = enqueue(&spool, &q, "long").await;
    faulty
        .script()
        .heartbeat
        .push_back(Error::unavailable("the connection dropped"));
    let gate = Arc::new(Semaphore::new(0));
    let seen = Arc::new(Mutex::new(None));
    let (g, s) = (gate.clone(), seen.clone());
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                g.acquire().await.unwrap().forget();
                *s.lock().unwrap() = Some(job.stop().reason());
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    eventually("the failed beat is counted as an error", || async {
        consumer.stats().errors == 1
    })
    .await;
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    eventually("the next beat extends the lease", || async {
        consumer.stats().heartbeats == 1
    })
    .await;
    gate.add_permits(1);
    eventually("acked", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    assert_eq!(consumer.stats().lease_lost, 0);
    assert_eq!(
        *seen.lock().unwrap(),
        Some(None),
        "the handler was never told to stop"
    );
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_consumer_neither_claims_nor_beats_before_a_third_of_the_lease() {
    let (clock, spool, q) = setup();
    enqueue(&spool, &q, "busy").await;
    let ticks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let (t, d) = (ticks.clone(), done.clone());
    // One slot, taken: the loop has nothing to claim for. The handler counts real
    // milliseconds, which is how the test knows the loop has had many slices to misbehave in.
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .spawn(move |_job: Job| {
            let (t, d) = (t.clone(), d.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = d.notified() => return Outcome::Done,
                        _ = tokio::time::sleep(Duration::from_millis(1)) => {
                            t.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    let claims = consumer.stats().claims;
    assert!(claims >= 1, "the claim that took the run is counted");
    eventually("40 ms of handler time (20 poll intervals)", || async {
        ticks.load(Ordering::SeqCst) >= 40
    })
    .await;
    let stats = consumer.stats();
    assert_eq!(stats.claims, claims, "no claim while every slot is taken");
    assert_eq!(stats.errors, 0);
    assert_eq!(stats.heartbeats, 0, "no beat before a third of the lease");
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    eventually("a beat once a third has passed", || async {
        consumer.stats().heartbeats == 1
    })
    .await;
    done.notify_one();
    eventually("acked", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&1)
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_the_batch_free_claims_at_once() {
    let (_clock, spool, q) = setup();
    enqueue(&spool, &q, "blocked0").await;
    enqueue(&spool, &q, "blocked1").await;
    // Two of four slots free is half the batch: no coalescing wait, even with a window far
    // longer than the test.
    let (consumer, gate) = gated_consumer(&spool, &q, Duration::from_secs(3600)).await;
    eventually("two handlers hold their slots", || async {
        consumer.in_flight() == 2
    })
    .await;
    let late = enqueue(&spool, &q, "late").await;
    eventually(
        "the new run is claimed without waiting out the window",
        || async { state(&spool, late).await == RunState::Succeeded },
    )
    .await;
    gate.add_permits(2);
    eventually("all three succeed", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&3)
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_free_slot_waits_the_whole_window_from_when_it_freed() {
    let (_clock, spool, q) = setup();
    for k in ["held0", "held1", "held2", "ticker", "late"] {
        enqueue(&spool, &q, k).await;
    }
    let window = Duration::from_millis(200);
    let gate = Arc::new(Semaphore::new(0));
    let ticks = Arc::new(AtomicUsize::new(0));
    let finish = Arc::new(tokio::sync::Notify::new());
    let freed_at = Arc::new(Mutex::new(None));
    let late_at = Arc::new(Mutex::new(None));
    let (g, t, f, fa, la) = (
        gate.clone(),
        ticks.clone(),
        finish.clone(),
        freed_at.clone(),
        late_at.clone(),
    );
    let consumer = builder(&spool, &q)
        .concurrency(4)
        .claim_coalesce(window)
        .spawn(move |job: Job| {
            let (g, t, f, fa, la) = (g.clone(), t.clone(), f.clone(), fa.clone(), la.clone());
            async move {
                match job.payload() {
                    b"ticker" => loop {
                        tokio::select! {
                            _ = f.notified() => {
                                *fa.lock().unwrap() = Some(Instant::now());
                                return Outcome::Done;
                            }
                            _ = tokio::time::sleep(Duration::from_millis(1)) => {
                                t.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    },
                    b"late" => {
                        *la.lock().unwrap() = Some(Instant::now());
                        Outcome::Done
                    }
                    _ => {
                        g.acquire().await.unwrap().forget();
                        Outcome::Done
                    }
                }
            }
        })
        .await
        .unwrap();
    eventually("four handlers hold every slot", || async {
        consumer.in_flight() == 4
    })
    .await;
    // The consumer has been full for a while (a quarter of the window) when one slot frees.
    eventually("50 ms of handler time", || async {
        ticks.load(Ordering::SeqCst) >= 50
    })
    .await;
    finish.notify_one();
    eventually("the late run is handled", || async {
        late_at.lock().unwrap().is_some()
    })
    .await;
    let freed = freed_at.lock().unwrap().unwrap();
    let claimed = late_at.lock().unwrap().unwrap();
    assert!(
        claimed - freed >= window,
        "one free slot of four claimed {:?} after it freed, inside the {window:?} window",
        claimed - freed
    );
    gate.add_permits(3);
    eventually("all five succeed", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&5)
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_waits_for_a_handler_that_finishes_inside_the_bound() {
    let (_clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "winds-down").await;
    // A poll interval of 900 ms makes the outer slack 900 ms: a shutdown that waited only
    // until `deadline - slack` would give up 100 ms in.
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_millis(900))
        .spawn(|job: Job| async move {
            let why = job.stop().stopped().await;
            // Winding down takes 300 ms of real work, well inside the 1 s bound.
            tokio::time::sleep(Duration::from_millis(300)).await;
            Outcome::Retry(why.to_string())
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    let started = Instant::now();
    let report = consumer.shutdown_within(Duration::from_secs(1)).await;
    assert!(report.is_clean(), "abandoned {:?}", report.abandoned);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!(
        info.state,
        RunState::Queued,
        "the handler's retry was recorded"
    );
    assert_eq!(
        info.reason.as_deref(),
        Some("the consumer is shutting down"),
        "the stop reason, in words, is the run's reason"
    );
}

/// Sets its flag when dropped: the handler's future was dropped (aborted or finished).
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_consumer_aborts_a_handler_that_ignores_every_stop() {
    let (_clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "deaf").await;
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = dropped.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |_job: Job| {
            let flag = DropFlag(d.clone());
            async move {
                let _flag = flag;
                std::future::pending::<Outcome>().await
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    assert!(!dropped.load(Ordering::SeqCst));
    drop(consumer);
    eventually("the handler's future is dropped", || async {
        dropped.load(Ordering::SeqCst)
    })
    .await;
    assert_eq!(
        state(&spool, id).await,
        RunState::Claimed,
        "left to its lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stop_signal_reads_clear_until_a_stop_then_names_it() {
    let (_clock, spool, q) = setup();
    enqueue(&spool, &q, "watch").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                let stop = job.stop().clone();
                s.lock().unwrap().push((stop.is_stopped(), stop.reason()));
                stop.stopped().await;
                s.lock().unwrap().push((stop.is_stopped(), stop.reason()));
                Outcome::Retry("stopped".into())
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { !seen.lock().unwrap().is_empty() }).await;
    assert!(consumer.shutdown().await.is_clean());
    assert_eq!(
        *seen.lock().unwrap(),
        vec![(false, None), (true, Some(StopReason::Shutdown))]
    );
}

#[tokio::test]
async fn the_shortest_poll_interval_is_accepted() {
    let (_clock, spool, q) = setup();
    let consumer = builder(&spool, &q)
        .poll_interval(MIN_WAIT)
        .spawn(|_job: Job| async { Outcome::Done })
        .await;
    assert!(consumer.is_ok(), "{MIN_WAIT:?} is the documented minimum");
    assert!(matches!(
        builder(&spool, &q)
            .poll_interval(MIN_WAIT - Duration::from_nanos(1))
            .spawn(|_job: Job| async { Outcome::Done })
            .await,
        Err(Error::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn concurrency_plus_prefetch_may_reach_the_batch_limit_and_not_pass_it() {
    let (_clock, spool, q) = setup();
    let noop = |_job: Job| async { Outcome::Done };
    for (concurrency, prefetch, batch) in [
        (MAX_BATCH, 0, None),
        (10, MAX_BATCH - 10, None),
        (2, 3, Some(5)),
        (2, 3, Some(1)),
    ] {
        let mut b = builder(&spool, &q)
            .concurrency(concurrency)
            .prefetch(prefetch);
        if let Some(n) = batch {
            b = b.claim_batch(n);
        }
        let consumer = b.spawn(noop).await;
        assert!(
            consumer.is_ok(),
            "concurrency {concurrency} + prefetch {prefetch}, claim batch {batch:?}: accepted"
        );
    }
    for (concurrency, prefetch, batch) in [
        (10, MAX_BATCH - 9, None),
        (MAX_BATCH, 1, None),
        (2, 3, Some(6)),
        (2, 3, Some(0)),
    ] {
        let mut b = builder(&spool, &q)
            .concurrency(concurrency)
            .prefetch(prefetch);
        if let Some(n) = batch {
            b = b.claim_batch(n);
        }
        assert!(
            matches!(b.spawn(noop).await, Err(Error::InvalidInput { .. })),
            "concurrency {concurrency} + prefetch {prefetch}, claim batch {batch:?}: refused"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_comes_back_short_waits_instead_of_claiming_again() {
    let (_clock, spool, q) = setup();
    enqueue(&spool, &q, "ticker").await;
    let ticks = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(tokio::sync::Notify::new());
    let (t, d) = (ticks.clone(), done.clone());
    // Two slots, one run: the first claim asks for two and gets one, so the queue is empty and
    // the next look is an hour away (or at a wake-up). The handler counts real milliseconds.
    let consumer = builder(&spool, &q)
        .concurrency(2)
        .poll_interval(Duration::from_secs(3600))
        .spawn(move |_job: Job| {
            let (t, d) = (t.clone(), d.clone());
            async move {
                loop {
                    tokio::select! {
                        _ = d.notified() => return Outcome::Done,
                        _ = tokio::time::sleep(Duration::from_millis(1)) => {
                            t.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        })
        .await
        .unwrap();
    eventually("40 ms of handler time", || async {
        ticks.load(Ordering::SeqCst) >= 40
    })
    .await;
    let stats = consumer.stats();
    assert_eq!(stats.claims, 1, "one claim, then a wait");
    assert_eq!(stats.claimed, 1);
    done.notify_one();
    eventually("acked", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&1)
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_shutdown_is_raised_over_the_shutdown_and_never_lowered() {
    let (clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "canceled-while-stopping").await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                let stop = job.stop().clone();
                let first = stop.stopped().await;
                s.lock().unwrap().push(first);
                // Keep going through the shutdown until something more urgent arrives.
                while stop.reason() == Some(StopReason::Shutdown) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let second = stop.stopped().await;
                s.lock().unwrap().push(second);
                Outcome::Nack(NackKind::Failed, "canceled".into())
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    let shutdown = tokio::spawn(consumer.shutdown_within(Duration::from_secs(5)));
    eventually("the handler hears the shutdown", || async {
        seen.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(spool.cancel(id).await.unwrap(), CancelOutcome::Requested);
    // The next heartbeat carries the cancel to the handler.
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    let report = shutdown.await.unwrap();
    assert!(report.is_clean(), "abandoned {:?}", report.abandoned);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![StopReason::Shutdown, StopReason::CancelRequested]
    );
    assert_eq!(state(&spool, id).await, RunState::Canceled);
}

#[test]
fn a_stop_reason_only_rises() {
    let (tx, rx) = watch::channel(None);
    let signal = StopSignal { rx };
    raise(&tx, StopReason::CancelRequested);
    assert_eq!(signal.reason(), Some(StopReason::CancelRequested));
    raise(&tx, StopReason::Shutdown);
    assert_eq!(
        signal.reason(),
        Some(StopReason::CancelRequested),
        "not lowered"
    );
    raise(&tx, StopReason::LeaseLost);
    assert_eq!(signal.reason(), Some(StopReason::LeaseLost), "raised");
    raise(&tx, StopReason::CancelRequested);
    assert_eq!(signal.reason(), Some(StopReason::LeaseLost));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_after_the_consumer_went_idle_wakes_it() {
    let (_clock, faulty, spool, q) = faulty_setup();
    // Polling an hour apart: once its first claim has come back empty, only the spool's
    // wake-up, forwarded by the listener, can bring the consumer back.
    let consumer = builder(&spool, &q)
        .poll_interval(Duration::from_secs(3600))
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    // The loop's claim came back empty and its look at the due time too: it is about to wait.
    eventually(
        "the first claim and look at the due time have come back",
        || async {
            let sent = consumer.stats().claims;
            let s = faulty.script();
            sent >= 1 && s.claims_returned == sent && s.next_due_returned == sent
        },
    )
    .await;
    let id = enqueue(&spool, &q, "after-idle").await;
    eventually("the woken consumer acks", || async {
        state(&spool, id).await == RunState::Succeeded
    })
    .await;
    assert!(consumer.shutdown().await.is_clean());
}

/// A handler that records how many handlers run at once and waits for a permit of `gate`.
fn counting_handler(
    gate: &Arc<Semaphore>,
    running: &Arc<AtomicUsize>,
    most: &Arc<AtomicUsize>,
    started: &Arc<AtomicUsize>,
) -> impl Fn(Job) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync + 'static
{
    let (gate, running, most, started) =
        (gate.clone(), running.clone(), most.clone(), started.clone());
    move |_job: Job| {
        let (gate, running, most, started) =
            (gate.clone(), running.clone(), most.clone(), started.clone());
        Box::pin(async move {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            started.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            running.fetch_sub(1, Ordering::SeqCst);
            Outcome::Done
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetch_is_claimed_with_the_slots_and_fills_them_without_another_claim() {
    let (_clock, spool, q) = setup();
    for i in 0..12 {
        enqueue(&spool, &q, &format!("prefetched-{i}")).await;
    }
    let gate = Arc::new(Semaphore::new(0));
    let (running, most, started) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    // A coalescing window of an hour: once the first claim is in, only a slot freeing with
    // at least half a batch of room (3) could claim again.
    let consumer = builder(&spool, &q)
        .concurrency(2)
        .prefetch(4)
        .claim_coalesce(Duration::from_secs(3600))
        .spawn(counting_handler(&gate, &running, &most, &started))
        .await
        .unwrap();
    eventually("two handlers run", || async {
        started.load(Ordering::SeqCst) == 2
    })
    .await;
    let stats = consumer.stats();
    assert_eq!(
        (stats.claims, stats.claimed),
        (1, 6),
        "one claim for 2 slots + 4 prefetched"
    );
    // Two handlers return: their slots take two prefetched runs, with no claim in between.
    gate.add_permits(2);
    eventually("four handlers have started", || async {
        started.load(Ordering::SeqCst) == 4
    })
    .await;
    assert_eq!(
        consumer.stats().claims,
        1,
        "the slots were filled from the prefetch"
    );
    gate.add_permits(100);
    eventually("every run acked", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&12)
    })
    .await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more handlers than the concurrency"
    );
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_takes_its_next_run_while_the_previous_ack_is_on_its_way() {
    let (_clock, faulty, spool, q) = faulty_setup();
    let first = enqueue(&spool, &q, "first").await;
    let second = enqueue(&spool, &q, "second").await;
    let held_back = faulty.acks.write().await;
    let starts = Arc::new(Mutex::new(Vec::new()));
    let s = starts.clone();
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(1)
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(job.run_id());
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("both handlers ran, both acks wait", || async {
        faulty.script().ack_calls == 2
    })
    .await;
    assert_eq!(*starts.lock().unwrap(), vec![first, second]);
    assert!(
        consumer.stats().settled.is_empty(),
        "a run counts as settled only once its ack returned"
    );
    drop(held_back);
    eventually("both acked", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&2)
    })
    .await;
    assert_eq!(state(&spool, first).await, RunState::Succeeded);
    assert!(consumer.shutdown().await.is_clean());
}

// Paused time: the runtime moves its clock only when every task waits, so "an hour of polls
// passed" is reached deterministically, with no real sleep.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn no_claim_goes_out_while_the_acks_of_a_whole_batch_are_on_their_way() {
    let (_clock, faulty, spool, q) = faulty_setup();
    for i in 0..10 {
        enqueue(&spool, &q, &format!("held-{i}")).await;
    }
    let held_back = faulty.acks.write().await;
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(1)
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    // An hour of 2 ms polls.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let stats = consumer.stats();
    // The first claim takes 2 (slot + prefetch); the slot's first handler returning leaves one
    // run settling, under the bound of 2, so one more is claimed; then two settle and the
    // loop claims nothing more until an ack returns.
    assert_eq!(stats.claimed, 3, "{stats:?}");
    assert_eq!(faulty.script().ack_calls, 3);
    assert!(stats.claimed <= 2 * (1 + 1));
    drop(held_back);
    for _ in 0..100 {
        if consumer.stats().settled.get(&RunState::Succeeded) == Some(&10) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        consumer.stats().settled.get(&RunState::Succeeded),
        Some(&10)
    );
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_run_whose_lease_was_lost_while_it_waited_never_starts() {
    let (clock, faulty, spool, q) = faulty_setup();
    let slow = enqueue(&spool, &q, "slow").await;
    let waiting = enqueue(&spool, &q, "waiting").await;
    let gate = Arc::new(Semaphore::new(0));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (g, r) = (gate.clone(), ran.clone());
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(1)
        .spawn(move |job: Job| {
            let (g, r) = (g.clone(), r.clone());
            async move {
                r.lock().unwrap().push(job.run_id());
                if job.run_id() == slow {
                    g.acquire().await.unwrap().forget();
                }
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("the slow run holds the slot", || async {
        consumer.stats().claimed == 2 && ran.lock().unwrap().len() == 1
    })
    .await;
    // The waiting run's lease runs out (and its backoff) and another consumer takes it. The
    // slow run keeps its own lease by a heartbeat every third of it.
    // The clock moves in small steps until each beat: the run's task schedules its next beat
    // a third of the lease after it reads the clock once the previous beat returns, which on a
    // loaded machine can be after this test's next step, so one step of a third may fall short.
    let mut passed = Duration::ZERO;
    let step = LEASE / 30;
    while passed <= LEASE + max_backoff_for_tests(1) {
        let beats = faulty.script().heartbeat_calls;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while faulty.script().heartbeat_calls == beats {
            assert!(
                std::time::Instant::now() < deadline,
                "the slow run's beat: not within 10 s"
            );
            clock.advance(step);
            passed += step;
            // Give the run's task a moment to see the new time before the next step.
            let settle = std::time::Instant::now() + Duration::from_millis(20);
            while faulty.script().heartbeat_calls == beats && std::time::Instant::now() < settle {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let other = ConsumerId::new("c2").unwrap();
    let taken = loop {
        let got = spool.claim(&q, &other, LEASE, 1).await.unwrap();
        if let Some(c) = got.into_iter().next() {
            break c;
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(taken.run_id, waiting);
    gate.add_permits(1);
    eventually("the slow run is acked", || async {
        state(&spool, slow).await == RunState::Succeeded
    })
    .await;
    eventually("the waiting run is counted lost", || async {
        consumer.stats().lease_lost == 1
    })
    .await;
    assert_eq!(
        *ran.lock().unwrap(),
        vec![slow],
        "the lost run's handler never ran"
    );
    assert_eq!(
        state(&spool, waiting).await,
        RunState::Claimed,
        "still the other consumer's"
    );
    spool.ack(waiting, taken.token).await.unwrap();
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_run_that_waited_a_third_of_its_lease_is_heartbeaten_before_it_starts() {
    let (clock, faulty, spool, q) = faulty_setup();
    let slow = enqueue(&spool, &q, "slow").await;
    let waiting = enqueue(&spool, &q, "waiting").await;
    let gate = Arc::new(Semaphore::new(0));
    let beats_at_start = Arc::new(Mutex::new(None));
    let (g, b, f) = (gate.clone(), beats_at_start.clone(), faulty.clone());
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(1)
        .spawn(move |job: Job| {
            let (g, b, f) = (g.clone(), b.clone(), f.clone());
            async move {
                if job.run_id() == slow {
                    g.acquire().await.unwrap().forget();
                } else {
                    *b.lock().unwrap() = Some(f.script().heartbeat_calls);
                }
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("both claimed", || async { consumer.stats().claimed == 2 }).await;
    // A third of the lease (and a bit): the slow run's own beat is due too.
    clock.advance(LEASE / 3 + Duration::from_secs(1));
    eventually("the slow run's beat", || async {
        faulty.script().heartbeat_calls >= 1
    })
    .await;
    let before = faulty.script().heartbeat_calls;
    gate.add_permits(1);
    eventually("both acked", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&2)
    })
    .await;
    let at_start = beats_at_start.lock().unwrap().expect("the waiting run ran");
    assert!(
        at_start > before,
        "the waiting run was heartbeaten before its handler ({at_start} beats at its start, {before} before)"
    );
    assert_eq!(state(&spool, waiting).await, RunState::Succeeded);
    assert!(consumer.shutdown().await.is_clean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_the_prefetched_runs_with_their_attempts() {
    let (_clock, spool, q) = setup();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(enqueue(&spool, &q, &format!("r{i}")).await);
    }
    let gate = Arc::new(Semaphore::new(0));
    let (running, most, started) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(3)
        .spawn(counting_handler(&gate, &running, &most, &started))
        .await
        .unwrap();
    eventually("one running, three prefetched", || async {
        consumer.stats().claimed == 4 && started.load(Ordering::SeqCst) == 1
    })
    .await;
    // The running handler holds its slot until the prefetched runs are back in the queue
    // (shutdown releases them before it waits for the handlers; a slot freeing earlier would
    // start one of them).
    let stopping = tokio::spawn(consumer.shutdown());
    eventually("three released", || async {
        let mut queued = 0;
        for id in &ids {
            if state(&spool, *id).await == RunState::Queued {
                queued += 1;
            }
        }
        queued == 4
    })
    .await;
    gate.add_permits(1);
    let report = stopping.await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.stats.released, 3);
    assert_eq!(report.stats.settled.get(&RunState::Succeeded), Some(&1));
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "no prefetched run started"
    );
    let mut queued = 0;
    for id in &ids {
        let info = spool.run(*id).await.unwrap().unwrap();
        match info.state {
            RunState::Queued => {
                queued += 1;
                assert_eq!(info.attempts, 0, "the release gave the attempt back");
            }
            RunState::Succeeded => {}
            other => panic!("{id:?} is {other:?}"),
        }
    }
    assert_eq!(queued, 4, "three released, one never claimed");
}

/// A consumer of concurrency 1 and prefetch 2 over a [`Faulty`] spool holding three runs: one
/// handler running (held at the returned gate), two runs prefetched.
async fn one_running_two_prefetched() -> (Arc<Faulty>, Arc<dyn Spool>, Consumer, Arc<Semaphore>) {
    let (_clock, faulty, spool, q) = faulty_setup();
    for i in 0..3 {
        enqueue(&spool, &q, &format!("r{i}")).await;
    }
    let gate = Arc::new(Semaphore::new(0));
    let (running, most, started) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let consumer = builder(&spool, &q)
        .concurrency(1)
        .prefetch(2)
        .spawn(counting_handler(&gate, &running, &most, &started))
        .await
        .unwrap();
    eventually("one running, two prefetched", || async {
        consumer.stats().claimed == 3 && started.load(Ordering::SeqCst) == 1
    })
    .await;
    (faulty, spool, consumer, gate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_run_that_cannot_be_released_by_the_deadline_is_reported() {
    let (faulty, spool, consumer, gate) = one_running_two_prefetched().await;
    // The first release fails for good; the second goes through. The handler holds its slot
    // until both were tried (shutdown releases before it waits for the handlers).
    faulty
        .script()
        .settle
        .push_back(Error::invalid("release", "refused by the test"));
    let stopping = tokio::spawn(consumer.shutdown());
    eventually("both releases tried", || async {
        faulty.script().settle_calls.len() == 2
    })
    .await;
    gate.add_permits(1);
    let report = stopping.await.unwrap();
    assert_eq!(report.stats.released, 1);
    assert_eq!(report.abandoned.len(), 1, "{report:?}");
    assert_eq!(report.stats.errors, 1);
    let info = spool.run(report.abandoned[0]).await.unwrap().unwrap();
    assert_eq!(info.state, RunState::Claimed, "left to its lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_run_whose_lease_is_gone_at_shutdown_is_counted_lost_not_abandoned() {
    let (faulty, spool, consumer, gate) = one_running_two_prefetched().await;
    // The first release finds the lease gone (another consumer has the run now): the run is
    // no longer this consumer's to give back, so it is neither an error nor abandoned.
    let first = faulty.script().settle_calls.len();
    faulty.script().settle.push_back(Error::LeaseLost {
        run: RunId::generate(spool.clock().now()),
    });
    let stopping = tokio::spawn(consumer.shutdown());
    eventually("both releases tried", || async {
        faulty.script().settle_calls.len() == first + 2
    })
    .await;
    gate.add_permits(1);
    let report = stopping.await.unwrap();
    assert_eq!(report.stats.released, 1);
    assert_eq!(report.stats.lease_lost, 1, "{report:?}");
    assert_eq!(report.stats.errors, 0, "{report:?}");
    assert!(report.abandoned.is_empty(), "{report:?}");
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_returns_after_its_lease_was_lost_is_not_settled() {
    let (clock, faulty, spool, q) = faulty_setup();
    let id = enqueue(&spool, &q, "long").await;
    // The heartbeat says the lease is gone (the spool itself still has the run claimed by
    // this consumer, so an ack sent anyway would land and be visible).
    faulty
        .script()
        .heartbeat
        .push_back(Error::LeaseLost { run: id });
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |job: Job| {
            let s = s.clone();
            async move {
                *s.lock().unwrap() = Some(job.stop().stopped().await);
                Outcome::Done
            }
        })
        .await
        .unwrap();
    eventually("claimed", || async { consumer.in_flight() == 1 }).await;
    clock.advance(LEASE / 3 + Duration::from_millis(1));
    eventually("the handler is told and returns", || async {
        consumer.stats().lease_lost == 1 && consumer.in_flight() == 0
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), Some(StopReason::LeaseLost));
    let report = consumer.shutdown().await;
    assert_eq!(
        faulty.script().ack_calls,
        0,
        "no ack after the lease was lost"
    );
    assert!(report.stats.settled.is_empty(), "{report:?}");
    assert_eq!(report.stats.lease_lost, 1, "{report:?}");
    assert_eq!(
        state(&spool, id).await,
        RunState::Claimed,
        "left to its lease"
    );
}

/// Issue 44 item 5.5: a handler's `Outcome::Release` counts as released, not as a settlement
/// to `Queued` (36 release-and-retry cycles once left `released` at 0 and `settled[Queued]`
/// at 36); the run's attempts stay as if the releases never happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_release_counts_as_released_not_settled() {
    const RELEASES: usize = 36;
    let (_clock, spool, q) = setup();
    let id = enqueue(&spool, &q, "released").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let consumer = builder(&spool, &q)
        .spawn(move |_job: Job| {
            let seen = seen.clone();
            async move {
                if seen.fetch_add(1, Ordering::SeqCst) < RELEASES {
                    Outcome::Release(Duration::ZERO)
                } else {
                    Outcome::Done
                }
            }
        })
        .await
        .unwrap();
    eventually("the run succeeds after its releases", || async {
        consumer.stats().settled.get(&RunState::Succeeded) == Some(&1)
    })
    .await;
    let report = consumer.shutdown().await;
    assert!(report.is_clean());
    assert_eq!(calls.load(Ordering::SeqCst), RELEASES + 1);
    assert_eq!(report.stats.released, RELEASES as u64);
    assert_eq!(report.stats.claimed, RELEASES as u64 + 1);
    assert_eq!(
        report.stats.settled,
        BTreeMap::from([(RunState::Succeeded, 1)]),
        "a release is not a settlement"
    );
    let info = spool.run(id).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (RunState::Succeeded, 1));
}

/// What a service's own subscriber and recorder see of a consumer: a span per run with its
/// queue, id, attempt and outcome (the handler's events inside it), and per-queue counters of
/// claimed and handled runs and the handler's time.
mod telemetry_seen_by_a_service {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::registry::LookupSpan;
    use tracing_subscriber::Layer;

    use super::*;

    /// Counter totals and histogram sample counts, by `name{label=value,…}` (labels sorted).
    #[derive(Default)]
    struct Recorded {
        counters: Mutex<BTreeMap<String, u64>>,
        samples: Mutex<BTreeMap<String, usize>>,
    }

    fn series(key: &Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    struct Count(Arc<Recorded>, String);
    impl metrics::CounterFn for Count {
        fn increment(&self, v: u64) {
            *self
                .0
                .counters
                .lock()
                .unwrap()
                .entry(self.1.clone())
                .or_default() += v;
        }
        fn absolute(&self, v: u64) {
            self.0.counters.lock().unwrap().insert(self.1.clone(), v);
        }
    }
    struct Sample(Arc<Recorded>, String);
    impl metrics::HistogramFn for Sample {
        fn record(&self, v: f64) {
            assert!(v >= 0.0, "a handler's time is not negative: {v}");
            *self
                .0
                .samples
                .lock()
                .unwrap()
                .entry(self.1.clone())
                .or_default() += 1;
        }
    }

    struct Rec(Arc<Recorded>);
    impl Recorder for Rec {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(Count(self.0.clone(), series(key))))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Sample(self.0.clone(), series(key))))
        }
    }

    /// A span's name and fields.
    type SpanSeen = (String, BTreeMap<String, String>);

    /// The closed spans' names and fields, and the messages of events inside a run's span.
    #[derive(Default)]
    struct Spans {
        open: Mutex<BTreeMap<u64, SpanSeen>>,
        closed: Mutex<Vec<SpanSeen>>,
        events_in_runs: Mutex<Vec<String>>,
    }
    struct Fields<'a>(&'a mut BTreeMap<String, String>);
    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0.insert(
                field.name().to_owned(),
                format!("{value:?}").trim_matches('"').to_owned(),
            );
        }
    }
    struct Capture(Arc<Spans>);
    impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
        fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
            let mut fields = BTreeMap::new();
            attrs.record(&mut Fields(&mut fields));
            let name = attrs.metadata().name().to_owned();
            self.0
                .open
                .lock()
                .unwrap()
                .insert(id.into_u64(), (name, fields));
        }
        fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
            if let Some((_, fields)) = self.0.open.lock().unwrap().get_mut(&id.into_u64()) {
                values.record(&mut Fields(fields));
            }
        }
        fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
            if ctx
                .event_scope(event)
                .is_some_and(|mut scope| scope.any(|s| s.name() == "cairn.spool.run"))
            {
                let mut fields = BTreeMap::new();
                event.record(&mut Fields(&mut fields));
                let message = fields.remove("message").unwrap_or_default();
                self.0.events_in_runs.lock().unwrap().push(message);
            }
        }
        fn on_close(&self, id: Id, _: Context<'_, S>) {
            if let Some(span) = self.0.open.lock().unwrap().remove(&id.into_u64()) {
                self.0.closed.lock().unwrap().push(span);
            }
        }
    }

    #[test]
    fn a_consumer_reports_a_span_per_run_and_per_queue_metrics() {
        let recorded = Arc::new(Recorded::default());
        let spans = Arc::new(Spans::default());
        let subscriber = tracing_subscriber::registry().with(Capture(spans.clone()));
        let recorder = Rec(recorded.clone());
        // A current-thread runtime: the consumer's tasks run on this thread, under this
        // thread's subscriber and recorder (what a service installs globally).
        let _tracing = tracing::subscriber::set_default(subscriber);
        let _metrics = metrics::set_default_local_recorder(&recorder);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ids = rt.block_on(async {
            let (_clock, spool, q) = setup();
            let ids = [
                enqueue(&spool, &q, "done").await,
                enqueue(&spool, &q, "fail").await,
                enqueue(&spool, &q, "retry").await,
            ];
            let consumer = builder(&spool, &q)
                .concurrency(3)
                .spawn(|job: Job| async move {
                    tracing::info!("handling {}", String::from_utf8_lossy(job.payload()));
                    match job.payload() {
                        b"done" => Outcome::Done,
                        b"fail" => Outcome::Fail("bad input".into()),
                        _ => Outcome::Retry("flaky".into()),
                    }
                })
                .await
                .unwrap();
            eventually("all three settled", || async {
                consumer.stats().settled.values().sum::<u64>() == 3
            })
            .await;
            assert!(consumer.shutdown().await.is_clean());
            ids
        });

        let closed = spans.closed.lock().unwrap();
        let runs: BTreeMap<String, &BTreeMap<String, String>> = closed
            .iter()
            .filter(|(name, _)| name == "cairn.spool.run")
            .map(|(_, f)| (f["run_id"].clone(), f))
            .collect();
        assert_eq!(runs.len(), 3, "one span per run: {closed:?}");
        for (id, outcome) in ids.iter().zip(["succeeded", "parked", "queued"]) {
            let f = runs[&id.to_string()];
            assert_eq!(
                (
                    f["queue"].as_str(),
                    f["attempt"].as_str(),
                    f["consumer"].as_str()
                ),
                ("work", "1", "c1")
            );
            assert_eq!(f["outcome"], outcome, "{id}");
        }
        let mut seen = spans.events_in_runs.lock().unwrap().clone();
        seen.retain(|m| m.starts_with("handling"));
        seen.sort();
        assert_eq!(
            seen,
            ["handling done", "handling fail", "handling retry"],
            "the handler's events are inside its run's span"
        );

        let counters = recorded.counters.lock().unwrap();
        let count = |s: &str| counters.get(s).copied().unwrap_or(0);
        assert_eq!(count("cairn_spool_consumer_claimed_total{queue=work}"), 3);
        for outcome in ["succeeded", "parked", "queued"] {
            assert_eq!(
                count(&format!(
                    "cairn_spool_consumer_handled_total{{outcome={outcome},queue=work}}"
                )),
                1,
                "{outcome}: {counters:?}"
            );
        }
        assert_eq!(
            recorded.samples.lock().unwrap()["cairn_spool_consumer_handler_seconds{queue=work}"],
            3
        );
    }
}

/// The consumer's context reaches every handler call as the type it was given (and as nothing
/// else), without the handler cloning it into its closure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_share_the_consumers_context() {
    struct App {
        seen: Mutex<Vec<String>>,
    }
    let (_clock, spool, q) = setup();
    enqueue(&spool, &q, "a").await;
    enqueue(&spool, &q, "b").await;
    let app = Arc::new(App {
        seen: Mutex::new(Vec::new()),
    });
    let consumer = builder(&spool, &q)
        .context(app.clone())
        .spawn(|job: Job| async move {
            let Some(app) = job.context::<App>() else {
                return Outcome::Fail("no context".into());
            };
            if job.context::<String>().is_some() {
                return Outcome::Fail("a context of another type".into());
            }
            let payload = String::from_utf8_lossy(job.payload()).into_owned();
            app.seen.lock().unwrap().push(payload);
            Outcome::Done
        })
        .await
        .unwrap();
    eventually("both handled", || async {
        consumer.stats().settled.values().sum::<u64>() == 2
    })
    .await;
    let report = consumer.shutdown().await;
    assert_eq!(report.stats.settled[&RunState::Succeeded], 2, "{report:?}");
    let mut seen = app.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, ["a", "b"]);
}
