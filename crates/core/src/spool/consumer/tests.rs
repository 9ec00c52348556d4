//! The consumer loop over [`MemorySpool`] on a [`ManualClock`]: every wait is a condition with
//! a deadline, never a fixed sleep.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::*;
use crate::spool::{
    backoff_ceiling, BackoffPolicy, CancelOutcome, Clock, EnqueueOptions, ManualClock, MemorySpool,
    SystemClock, Timestamp,
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
        async fn cancel(&self, run: RunId) -> Result<CancelOutcome> {
            self.0.cancel(run).await
        }
        async fn close_run(&self, run: RunId) -> Result<crate::spool::CloseOutcome> {
            self.0.close_run(run).await
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_free_slot_is_filled_once_the_coalescing_window_ends() {
    let (_clock, spool, q) = setup();
    for i in 0..3 {
        enqueue(&spool, &q, &format!("blocked{i}")).await;
    }
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let consumer = builder(&spool, &q)
        .concurrency(4)
        .claim_coalesce(Duration::from_millis(50))
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
