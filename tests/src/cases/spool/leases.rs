//! Leases (S4) and races between enqueue, claim and ack (S5).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::spool::{jitter_seed, BackoffPolicy, RunFilter, RunState, MAX_BATCH};
use cairn_core::{Claimed, Clock, EnqueueOptions, Enqueued, NackKind, RunId};

use super::support::{
    assert_err, consumer, enqueue_new, info, key, max_backoff, open_spool, within, LEASE,
};
use crate::{random_queue, SpoolHarness};

/// S4: eight claimers on two instances drain 60 runs concurrently; every run is handed out
/// exactly once, on attempt 1, with distinct tokens, to the consumer its lease names.
pub async fn s4_concurrent_claimers_never_share_a_run<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s4");
    let mut enqueued = BTreeSet::new();
    for i in 0..60 {
        enqueued.insert(enqueue_new(spools[i % 2].as_ref(), &q, &format!("s4-{i}")).await);
    }
    let total = enqueued.len();
    let mut joins = Vec::new();
    for t in 0..8 {
        let spool = spools[t % 2].clone();
        let q = q.clone();
        joins.push(tokio::spawn(async move {
            let me = consumer(&format!("claimer-{t}"));
            let mut out = Vec::new();
            loop {
                let got = spool.claim(&q, &me, LEASE, 3).await.unwrap();
                assert!(got.len() <= 3, "S4: claim respects its limit");
                if got.is_empty() {
                    return (me, out);
                }
                out.extend(got);
                // A claim that hands a run out without leasing it would loop here for ever.
                assert!(
                    out.len() <= total,
                    "S4: more runs handed out than were enqueued"
                );
            }
        }));
    }
    let mut seen: BTreeMap<RunId, Claimed> = BTreeMap::new();
    let mut tokens = BTreeSet::new();
    for j in joins {
        let (me, got) = j.await.expect("claimer panicked");
        for c in got {
            assert_eq!(c.attempt, 1, "S4: first delivery is attempt 1");
            assert!(tokens.insert(c.token), "S4: tokens are unique");
            let lease = info(spools[0].as_ref(), c.run_id).await.lease;
            assert_eq!(
                lease.map(|l| l.consumer),
                Some(me.clone()),
                "S4: the lease names its holder"
            );
            if let Some(prev) = seen.insert(c.run_id, c) {
                panic!("S4: run {} was handed out twice", prev.run_id);
            }
        }
    }
    let claimed: BTreeSet<RunId> = seen.keys().copied().collect();
    assert_eq!(claimed, enqueued, "S4: every run is claimed exactly once");
}

/// S4: an expired lease makes the run claimable again once its backoff passed; the new claim
/// gets a new token and the old one is refused everywhere; ack is idempotent for its token.
pub async fn s4_expired_lease_reclaimed_and_stale_token_refused<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let clock = h.clock();
    let q = random_queue("s4-expiry");
    let id = enqueue_new(s.as_ref(), &q, "s4-e").await;
    let first = s.claim(&q, &consumer("a"), LEASE, 1).await.unwrap();
    assert_eq!(first.len(), 1);
    let t1 = first[0].token;
    assert_eq!(first[0].expires_at, clock.now().saturating_add(LEASE));
    assert!(
        s.claim(&q, &consumer("b"), LEASE, 1)
            .await
            .unwrap()
            .is_empty(),
        "S4: a held lease is not handed out"
    );

    clock.advance(LEASE);
    let i = info(s.as_ref(), id).await;
    let p = BackoffPolicy::default();
    let expected_due = first[0]
        .expires_at
        .saturating_add(p.delay(1, jitter_seed(&q, &key(&["s4-e"]), 1)));
    assert_eq!(
        i.state,
        RunState::Claimed,
        "S4: expired but not yet reclaimed"
    );
    assert_eq!(i.due_at, Some(expected_due), "S4: due = expiry + backoff");
    assert!(
        s.claim(&q, &consumer("b"), LEASE, 1)
            .await
            .unwrap()
            .is_empty(),
        "S4: an expired lease waits out its backoff"
    );

    clock.advance(max_backoff(1));
    let second = s.claim(&q, &consumer("b"), LEASE, 1).await.unwrap();
    assert_eq!(second.len(), 1, "S4: the expired lease is reclaimed");
    let t2 = second[0].token;
    assert_eq!((second[0].run_id, second[0].attempt), (id, 2));
    assert_ne!(t1, t2, "S4: a reclaim issues a new token");

    assert_err(
        s.ack(id, t1).await,
        "LeaseLost",
        "S4: ack with a stale token",
    );
    assert_err(
        s.heartbeat(id, t1, LEASE).await,
        "LeaseLost",
        "S4: heartbeat with a stale token",
    );
    assert_err(
        s.nack(id, t1, NackKind::Retryable, "x").await,
        "LeaseLost",
        "S4: nack with a stale token",
    );
    let hb = s.heartbeat(id, t2, LEASE).await.unwrap();
    assert_eq!(hb.expires_at, clock.now().saturating_add(LEASE));
    assert!(!hb.cancel_requested);

    s.ack(id, t2).await.unwrap();
    s.ack(id, t2)
        .await
        .expect("S4: a repeated ack with the same token succeeds");
    let i = info(s.as_ref(), id).await;
    assert_eq!((i.state, i.attempts), (RunState::Succeeded, 2));
    assert!(i.lease.is_none() && i.due_at.is_none() && i.finished_at.is_some());
    assert_err(
        s.ack(id, t1).await,
        "LeaseLost",
        "S4: stale token after ack",
    );
    assert_err(
        s.nack(id, t2, NackKind::Retryable, "late").await,
        "InvalidTransition",
        "S4: nack after ack",
    );
    assert_err(
        s.heartbeat(id, t2, LEASE).await,
        "InvalidTransition",
        "S4: heartbeat after ack",
    );
}

/// S4: heartbeats keep a lease; an expired lease nobody has reclaimed is still held (its
/// holder can heartbeat or ack).
pub async fn s4_heartbeat_extends_and_unreclaimed_lease_is_still_held<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let clock = h.clock();
    let q = random_queue("s4-hb");
    let a = enqueue_new(s.as_ref(), &q, "s4-hb-a").await;
    let c = s.claim(&q, &consumer("a"), LEASE, 1).await.unwrap();
    clock.advance(Duration::from_secs(20));
    let hb = s.heartbeat(a, c[0].token, LEASE).await.unwrap();
    assert_eq!(hb.expires_at, clock.now().saturating_add(LEASE));
    clock.advance(Duration::from_secs(20));
    assert!(
        s.claim(&q, &consumer("b"), LEASE, 1)
            .await
            .unwrap()
            .is_empty(),
        "S4: a heartbeat extends the lease"
    );
    clock.advance(LEASE + max_backoff(1));
    s.ack(a, c[0].token)
        .await
        .expect("S4: an expired lease no claim took over is still held");

    let b = enqueue_new(s.as_ref(), &q, "s4-hb-b").await;
    let c = s.claim(&q, &consumer("a"), LEASE, 1).await.unwrap();
    assert_eq!(c[0].run_id, b);
    clock.advance(LEASE + max_backoff(1));
    s.heartbeat(b, c[0].token, LEASE)
        .await
        .expect("S4: an unreclaimed expired lease can be renewed");
    assert!(
        s.claim(&q, &consumer("b"), LEASE, 1)
            .await
            .unwrap()
            .is_empty(),
        "S4: a renewed lease is not handed out"
    );
}

/// S5 (in-process part): producers on two instances enqueue overlapping keys while consumers
/// claim and ack, some abandoning their first delivery; after the abandoned leases expire and
/// the queue is drained, every key has one run, every run succeeded exactly once, and no
/// `(run, attempt)` was delivered twice.
pub async fn s5_enqueue_claim_ack_races_lose_and_duplicate_nothing<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s5");
    let keys = 40usize;
    let producers_done = Arc::new(AtomicBool::new(false));
    let deliveries: Arc<Mutex<Vec<(RunId, u32)>>> = Arc::default();
    let acks: Arc<Mutex<Vec<RunId>>> = Arc::default();

    let mut producers = Vec::new();
    for t in 0..4 {
        let spool = spools[t % 2].clone();
        let q = q.clone();
        producers.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..keys {
                let k = format!("s5-{}", (i * 7 + t * 5) % keys);
                let e = spool
                    .enqueue(
                        &q,
                        &key(&[&k]),
                        k.clone().into_bytes(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap();
                out.push((k, e));
                tokio::task::yield_now().await;
            }
            out
        }));
    }
    let consume = |t: usize, abandon: bool| {
        let spool = spools[t % 2].clone();
        let (q, done) = (q.clone(), producers_done.clone());
        let (deliveries, acks) = (deliveries.clone(), acks.clone());
        tokio::spawn(async move {
            let me = consumer(&format!("s5-consumer-{t}"));
            let mut wake = spool.subscribe(&q).await.unwrap();
            loop {
                let got = spool.claim(&q, &me, LEASE, 4).await.unwrap();
                if got.is_empty() {
                    if done.load(Ordering::SeqCst) {
                        return;
                    }
                    // A poll interval for this loop, not an assertion's wait.
                    let _ = tokio::time::timeout(Duration::from_millis(20), wake.wait()).await;
                    continue;
                }
                for c in got {
                    deliveries.lock().unwrap().push((c.run_id, c.attempt));
                    if abandon && c.attempt == 1 && c.run_id.0[15] % 4 == 0 {
                        continue; // a consumer that died holding the lease
                    }
                    spool.ack(c.run_id, c.token).await.unwrap();
                    acks.lock().unwrap().push(c.run_id);
                }
            }
        })
    };
    let consumers: Vec<_> = (0..4).map(|t| consume(t, true)).collect();
    let mut by_key: HashMap<String, Vec<Enqueued>> = HashMap::new();
    for p in producers {
        for (k, e) in p.await.expect("producer panicked") {
            by_key.entry(k).or_default().push(e);
        }
    }
    producers_done.store(true, Ordering::SeqCst);
    for c in consumers {
        within("S5: consumers drain the queue", c)
            .await
            .expect("consumer panicked");
    }
    // The abandoned leases expire; one more consumer drains what they held.
    h.clock().advance(LEASE + max_backoff(1));
    within("S5: the final drain", consume(0, false))
        .await
        .expect("consumer panicked");

    assert_eq!(by_key.len(), keys);
    let mut runs = BTreeSet::new();
    for (k, es) in &by_key {
        let ids: BTreeSet<RunId> = es.iter().map(|e| e.run_id).collect();
        assert_eq!(ids.len(), 1, "S5: key {k} has one run");
        assert_eq!(es.iter().filter(|e| e.created).count(), 1);
        runs.insert(es[0].run_id);
    }
    let deliveries = deliveries.lock().unwrap().clone();
    let unique: BTreeSet<(RunId, u32)> = deliveries.iter().copied().collect();
    assert_eq!(
        unique.len(),
        deliveries.len(),
        "S5: no (run, attempt) is delivered twice"
    );
    let mut acks = acks.lock().unwrap().clone();
    acks.sort();
    let acked: BTreeSet<RunId> = acks.iter().copied().collect();
    assert_eq!(acks.len(), acked.len(), "S5: every run is acked once");
    assert_eq!(acked, runs, "S5: every run is acked; none is lost");
    let listed = spools[1]
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            MAX_BATCH,
        )
        .await
        .unwrap();
    assert_eq!(listed.len(), keys, "S5: no extra run exists");
    assert!(
        listed.iter().all(|r| r.state == RunState::Succeeded),
        "S5: every run ends succeeded"
    );
}
