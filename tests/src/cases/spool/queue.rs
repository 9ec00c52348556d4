//! Queue cases: dedup (S1, S2), wake-up (S3), leases (S4), races (S5), supersede (S8), cancel
//! (S9), retry/backoff/park and claim order (S10), bad input.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_core::spool::{
    expired_park_reason, jitter_seed, BackoffPolicy, CancelOutcome, Nacked, RetentionBudget,
    RetentionPolicy, RunFilter, RunState, MAX_ACK_IDS, MAX_BATCH, MAX_FACT_VALUE, MAX_LEASE,
    MAX_REASON_LEN, MAX_RUN_EVENT_PAYLOAD, MAX_RUN_PAYLOAD,
};
use cairn_core::{
    Claimed, Clock, EnqueueOptions, Enqueued, FactName, LeaseToken, NackKind, RunEventId, RunId,
    SupersedeGroup,
};

use super::{
    assert_err, consumer, enqueue_new, enqueue_with, info, key, max_backoff, open_spool, within,
    LEASE,
};
use crate::{random_queue, SpoolHarness};

/// S1 (in-process part): many tasks on two spool instances enqueue the same keys at once; each
/// key gets exactly one run id, exactly one enqueue says `created`, and a later enqueue with
/// other payload and options changes nothing. The same key in another queue is another run.
pub async fn s1_same_key_same_run_across_instances<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s1");
    let keys: Vec<String> = (0..16).map(|i| format!("sha{i}")).collect();
    let mut joins = Vec::new();
    for t in 0..8 {
        let spool = spools[t % 2].clone();
        let (q, keys) = (q.clone(), keys.clone());
        joins.push(tokio::spawn(async move {
            let mut out = Vec::new();
            // Each task walks the keys from another start, so every key is raced.
            for i in 0..keys.len() {
                let k = &keys[(i + t * 3) % keys.len()];
                let e = spool
                    .enqueue(
                        &q,
                        &key(&["gate", "refs/heads/main", k]),
                        format!("payload-{t}").into_bytes(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("S1: enqueue {k}: {e}"));
                out.push((k.clone(), e));
            }
            out
        }));
    }
    let mut by_key: BTreeMap<String, Vec<Enqueued>> = BTreeMap::new();
    for j in joins {
        for (k, e) in j.await.expect("enqueue task panicked") {
            by_key.entry(k).or_default().push(e);
        }
    }
    let mut all_ids = BTreeSet::new();
    for (k, es) in &by_key {
        let ids: BTreeSet<RunId> = es.iter().map(|e| e.run_id).collect();
        assert_eq!(ids.len(), 1, "S1: key {k} must map to one run id: {ids:?}");
        assert_eq!(
            es.iter().filter(|e| e.created).count(),
            1,
            "S1: exactly one enqueue of key {k} creates the run"
        );
        let id = es[0].run_id;
        all_ids.insert(id);
        for s in &spools {
            let i = info(s.as_ref(), id).await;
            assert_eq!(i.dedup_key, key(&["gate", "refs/heads/main", k]));
            assert_eq!((&i.queue, i.state), (&q, RunState::Queued));
        }
    }
    assert_eq!(
        all_ids.len(),
        keys.len(),
        "S1: distinct keys, distinct runs"
    );

    let first = by_key["sha0"][0].run_id;
    let k0 = key(&["gate", "refs/heads/main", "sha0"]);
    let before = info(spools[0].as_ref(), first).await;
    let again = spools[1]
        .enqueue(
            &q,
            &k0,
            b"another payload".to_vec(),
            EnqueueOptions::default().priority(9).max_attempts(1),
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            run_id: first,
            created: false
        },
        "S1: an existing key returns its run"
    );
    assert_eq!(
        info(spools[0].as_ref(), first).await,
        before,
        "S1: a duplicate enqueue changes nothing"
    );
    let other = spools[0]
        .enqueue(
            &random_queue("s1-other"),
            &k0,
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        other.created && other.run_id != first,
        "S1: the same key in another queue is another run"
    );
}

/// S2 (in-process part): the run id returned by enqueue is there after the instance is dropped
/// and the store reopened, with its key, state and payload, and still deduplicates.
pub async fn s2_run_id_survives_reopen<H: SpoolHarness>(h: &H) {
    let q = random_queue("s2");
    let k = key(&["gate", "ref", "sha"]);
    let payload = vec![0u8, 1, 2, 0xfe, 0xff];
    let first = open_spool(h).await;
    let e = first
        .enqueue(&q, &k, payload.clone(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(e.created);
    drop(first);

    let reopened = open_spool(h).await;
    let i = info(reopened.as_ref(), e.run_id).await;
    assert_eq!((i.state, &i.dedup_key), (RunState::Queued, &k), "S2");
    assert_eq!(i.payload_bytes, payload.len() as u64);
    let again = reopened
        .enqueue(&q, &k, Vec::new(), EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            run_id: e.run_id,
            created: false
        },
        "S2: the reopened store still deduplicates the key"
    );
    let claimed = reopened
        .claim(&q, &consumer("s2"), LEASE, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (claimed[0].run_id, &claimed[0].payload),
        (e.run_id, &payload),
        "S2: the payload round-trips byte for byte"
    );
    assert_eq!(RunId::parse(&e.run_id.to_string()).unwrap(), e.run_id);
}

/// S3 (in-process part): a consumer blocked in `subscribe` wakes for an enqueue made through
/// another spool instance; a wake-up between two waits is not lost; a retryable nack wakes too.
pub async fn s3_subscriber_wakes_for_another_instances_enqueue<H: SpoolHarness>(h: &H) {
    let consumer_side = open_spool(h).await;
    let producer_side = open_spool(h).await;
    let q = random_queue("s3");
    let mut wake = consumer_side.subscribe(&q).await.unwrap();
    let waiter = tokio::spawn(async move { wake.wait().await.map(|()| wake) });
    enqueue_new(producer_side.as_ref(), &q, "s3-1").await;
    let mut wake = within("S3: wake for another instance's enqueue", waiter)
        .await
        .expect("waiter panicked")
        .expect("wait failed");
    let got = consumer_side
        .claim(&q, &consumer("s3"), LEASE, 10)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "S3: the woken consumer finds the run");

    enqueue_new(producer_side.as_ref(), &q, "s3-2").await;
    within("S3: a wake-up before wait is kept", wake.wait())
        .await
        .unwrap();

    let nacked = consumer_side
        .nack(got[0].run_id, got[0].token, NackKind::Retryable, "again")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    within("S3: a retryable nack wakes subscribers", wake.wait())
        .await
        .unwrap();
}

/// S4: eight claimers on two instances drain 60 runs concurrently; every run is handed out
/// exactly once, on attempt 1, with distinct tokens, to the consumer its lease names.
pub async fn s4_concurrent_claimers_never_share_a_run<H: SpoolHarness>(h: &H) {
    let spools = [open_spool(h).await, open_spool(h).await];
    let q = random_queue("s4");
    let mut enqueued = BTreeSet::new();
    for i in 0..60 {
        enqueued.insert(enqueue_new(spools[i % 2].as_ref(), &q, &format!("s4-{i}")).await);
    }
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

/// S8: a run enqueued with a supersede group turns the group's older *queued* runs of the same
/// queue into `superseded` — never claimed runs, other groups, other queues, or anything when
/// the key already existed.
pub async fn s8_supersede_replaces_older_queued_runs_only<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s8");
    let g = SupersedeGroup::from_parts(["repo", "main"]).unwrap();
    let other_group = SupersedeGroup::from_parts(["repo", "dev"]).unwrap();
    let in_g = || EnqueueOptions::default().supersede(g.clone());

    let r1 = enqueue_with(s, &q, "r1", in_g()).await;
    let c1 = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
    assert_eq!(c1[0].run_id, r1);
    let r2 = enqueue_with(s, &q, "r2", in_g()).await;
    assert_eq!(
        info(s, r1).await.state,
        RunState::Claimed,
        "S8: claimed runs are never superseded"
    );
    let later = clock.now().saturating_add(Duration::from_secs(3600));
    let r3 = enqueue_with(s, &q, "r3", in_g().not_before(later)).await;
    let i2 = info(s, r2).await;
    assert_eq!(
        i2.state,
        RunState::Superseded,
        "S8: older queued run superseded"
    );
    assert_eq!(i2.finished_at, Some(clock.now()));
    let r4 = enqueue_with(
        s,
        &q,
        "r4",
        EnqueueOptions::default().supersede(other_group),
    )
    .await;
    let q2 = random_queue("s8-other");
    enqueue_with(s, &q2, "r5", in_g()).await;
    let r6 = enqueue_new(s, &q, "r6").await;
    let again = s
        .enqueue(&q, &key(&["r2"]), Vec::new(), in_g())
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued {
            run_id: r2,
            created: false
        }
    );
    assert_eq!(
        info(s, r3).await.state,
        RunState::Queued,
        "S8: other groups, other queues, ungrouped runs and duplicate keys supersede nothing"
    );
    let r7 = enqueue_with(s, &q, "r7", in_g()).await;
    assert_eq!(
        info(s, r3).await.state,
        RunState::Superseded,
        "S8: a queued run waiting for its not-before time is superseded too"
    );
    assert_eq!(info(s, r7).await.supersede_group, Some(g.clone()));

    s.ack(r1, c1[0].token)
        .await
        .expect("S8: a claimed run of the group is still acked normally");
    let claimed: BTreeSet<RunId> = s
        .claim(&q, &consumer("c"), LEASE, 10)
        .await
        .unwrap()
        .iter()
        .map(|c| c.run_id)
        .collect();
    assert_eq!(claimed, BTreeSet::from([r4, r6, r7]));
    assert_err(
        s.cancel(r2).await,
        "InvalidTransition",
        "S8: a superseded run is terminal",
    );
}

/// S9: cancel ends a queued run; on a claimed run it requests cancellation, which the holder
/// sees on heartbeat and which ends the run on its nack or lease expiry (an ack still
/// succeeds); a terminal run refuses it.
pub async fn s9_cancel_queued_claimed_and_terminal<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s9");
    let me = consumer("s9");

    let queued = enqueue_new(s, &q, "queued").await;
    assert_eq!(s.cancel(queued).await.unwrap(), CancelOutcome::Canceled);
    let i = info(s, queued).await;
    assert_eq!(i.state, RunState::Canceled);
    assert_eq!(i.finished_at, Some(clock.now()));
    assert!(
        s.claim(&q, &me, LEASE, 10).await.unwrap().is_empty(),
        "S9: a canceled run is never claimed"
    );
    assert_err(
        s.cancel(queued).await,
        "InvalidTransition",
        "S9: cancel twice",
    );

    let nacked = enqueue_new(s, &q, "nacked").await;
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(s.cancel(nacked).await.unwrap(), CancelOutcome::Requested);
    assert_eq!(s.cancel(nacked).await.unwrap(), CancelOutcome::Requested);
    let i = info(s, nacked).await;
    assert!(i.cancel_requested && i.state == RunState::Claimed);
    let hb = s.heartbeat(nacked, c[0].token, LEASE).await.unwrap();
    assert!(hb.cancel_requested, "S9: the holder sees the request");
    let n = s
        .nack(nacked, c[0].token, NackKind::Retryable, "stopping")
        .await
        .unwrap();
    assert_eq!(
        n,
        Nacked {
            state: RunState::Canceled,
            retry_at: None
        }
    );

    let acked = enqueue_new(s, &q, "acked").await;
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    s.cancel(acked).await.unwrap();
    s.ack(acked, c[0].token).await.unwrap();
    assert_eq!(info(s, acked).await.state, RunState::Succeeded);
    assert_err(
        s.cancel(acked).await,
        "InvalidTransition",
        "S9: cancel after ack",
    );

    let expired = enqueue_new(s, &q, "expired").await;
    s.claim(&q, &me, LEASE, 1).await.unwrap();
    s.cancel(expired).await.unwrap();
    clock.advance(LEASE + max_backoff(1));
    assert!(
        s.claim(&q, &me, LEASE, 10).await.unwrap().is_empty(),
        "S9: an expired run with a cancel request is not handed out again"
    );
    let i = info(s, expired).await;
    assert_eq!(i.state, RunState::Canceled);
    assert!(!i.cancel_requested && i.lease.is_none());

    assert_err(
        s.cancel(RunId::generate(clock.now())).await,
        "UnknownRun",
        "S9: cancel of an unknown run",
    );
}

/// S10: a retryable nack requeues the run with `due_at = now + backoff(attempt, jitter_seed)`
/// (the exact value, between half and all of the capped exponential ceiling); it is not
/// claimable a microsecond early; on the last attempt the run is parked with the reason.
pub async fn s10_retry_backoff_then_park<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s10");
    let me = consumer("s10");
    let policy = BackoffPolicy::default();
    let id = enqueue_with(s, &q, "flaky", EnqueueOptions::default().max_attempts(3)).await;
    for attempt in 1..=2u32 {
        let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
        assert_eq!(c.len(), 1, "S10: attempt {attempt} is claimable");
        assert_eq!(c[0].attempt, attempt);
        let now = clock.now();
        let n = s
            .nack(id, c[0].token, NackKind::Retryable, "transient")
            .await
            .unwrap();
        let delay = policy.delay(attempt, jitter_seed(&q, &key(&["flaky"]), attempt));
        assert_eq!(
            n,
            Nacked {
                state: RunState::Queued,
                retry_at: Some(now.saturating_add(delay))
            },
            "S10: retry after the run's backoff"
        );
        assert!(delay <= max_backoff(attempt) && delay >= max_backoff(attempt) / 2);
        let i = info(s, id).await;
        assert_eq!((i.state, i.due_at), (RunState::Queued, n.retry_at));
        assert_eq!(i.reason.as_deref(), Some("transient"));
        assert!(i.lease.is_none());
        clock.advance(delay - Duration::from_micros(1));
        assert!(
            s.claim(&q, &me, LEASE, 1).await.unwrap().is_empty(),
            "S10: not claimable before the backoff passed"
        );
        clock.advance(Duration::from_micros(1));
    }
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c[0].attempt, 3);
    let n = s
        .nack(id, c[0].token, NackKind::Retryable, "still failing")
        .await
        .unwrap();
    assert_eq!(
        n,
        Nacked {
            state: RunState::Parked,
            retry_at: None
        },
        "S10: the last attempt parks"
    );
    let i = info(s, id).await;
    let reason = i.reason.unwrap_or_default();
    assert!(
        reason.contains("attempts exhausted") && reason.contains("still failing"),
        "S10: the park reason says why: {reason}"
    );
    clock.advance(Duration::from_secs(3600));
    assert!(s.claim(&q, &me, LEASE, 1).await.unwrap().is_empty());
}

/// S10: a permanent nack parks with its reason, a failed nack ends `failed`, a run whose last
/// lease expires is parked by the next claim, long reasons are cut, and a parked run refuses
/// further nacks.
pub async fn s10_permanent_failed_and_expired_last_attempt<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s10b");
    let me = consumer("s10b");

    let permanent = enqueue_new(s, &q, "permanent").await;
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    let n = s
        .nack(permanent, c[0].token, NackKind::Permanent, "bad input")
        .await
        .unwrap();
    assert_eq!(n.state, RunState::Parked);
    let i = info(s, permanent).await;
    assert_eq!(
        (i.state, i.reason.as_deref()),
        (RunState::Parked, Some("bad input"))
    );
    assert_err(
        s.nack(permanent, c[0].token, NackKind::Retryable, "again")
            .await,
        "InvalidTransition",
        "S10: nack of a parked run",
    );

    let failed = enqueue_new(s, &q, "failed").await;
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    let long = "x".repeat(MAX_REASON_LEN * 2);
    let n = s
        .nack(failed, c[0].token, NackKind::Failed, &long)
        .await
        .unwrap();
    assert_eq!(n.state, RunState::Failed);
    let i = info(s, failed).await;
    assert_eq!(i.state, RunState::Failed);
    assert!(i.reason.unwrap_or_default().len() <= MAX_REASON_LEN);

    let once = enqueue_with(s, &q, "once", EnqueueOptions::default().max_attempts(1)).await;
    s.claim(&q, &me, LEASE, 1).await.unwrap();
    let twice = enqueue_with(s, &q, "twice", EnqueueOptions::default().max_attempts(2)).await;
    s.claim(&q, &me, LEASE, 1).await.unwrap();
    clock.advance(LEASE + max_backoff(1));
    let c = s.claim(&q, &me, LEASE, 10).await.unwrap();
    assert_eq!(
        c.len(),
        1,
        "S10: only the run with an attempt left is reclaimed"
    );
    assert_eq!((c[0].run_id, c[0].attempt), (twice, 2));
    let i = info(s, once).await;
    assert_eq!(i.state, RunState::Parked);
    assert_eq!(i.reason, Some(expired_park_reason(1)));
    clock.advance(LEASE + max_backoff(2));
    assert!(s.claim(&q, &me, LEASE, 10).await.unwrap().is_empty());
    assert_eq!(info(s, twice).await.state, RunState::Parked);
}

/// S10: claims take due runs by priority (descending), then due time, then enqueue order, and
/// never a run before its not-before time.
pub async fn s10_claim_order_priority_then_due_time<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s10-order");
    let at = |secs| clock.now().saturating_add(Duration::from_secs(secs));
    let o = EnqueueOptions::default;
    let a = enqueue_with(s, &q, "a", o()).await;
    let b = enqueue_with(s, &q, "b", o().priority(5)).await;
    let c = enqueue_with(s, &q, "c", o().not_before(at(10))).await;
    let d = enqueue_with(s, &q, "d", o()).await;
    let e = enqueue_with(s, &q, "e", o().priority(-1)).await;
    let f = enqueue_with(s, &q, "f", o().priority(5).not_before(at(5))).await;
    let g = enqueue_with(s, &q, "g", o().not_before(at(3))).await;
    let me = consumer("s10-order");
    let ids = |v: Vec<Claimed>| v.into_iter().map(|c| c.run_id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.claim(&q, &me, LEASE, 10).await.unwrap()),
        vec![b, a, d, e],
        "S10: priority, then due time, then enqueue order"
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        ids(s.claim(&q, &me, LEASE, 2).await.unwrap()),
        vec![f, g],
        "S10: once due, priority first, then the earlier due time"
    );
    assert_eq!(ids(s.claim(&q, &me, LEASE, 2).await.unwrap()), vec![c]);
}

/// Bad input gets a typed error and changes nothing.
pub async fn spool_bad_input_is_refused_without_writes<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("bad");
    let me = consumer("bad");
    let k = key(&["bad"]);
    let before = s.stats().await.unwrap();
    assert_err(
        s.enqueue(
            &q,
            &k,
            vec![0; MAX_RUN_PAYLOAD + 1],
            EnqueueOptions::default(),
        )
        .await,
        "InvalidInput",
        "oversized run payload",
    );
    for n in [0, 1001] {
        assert_err(
            s.enqueue(
                &q,
                &k,
                Vec::new(),
                EnqueueOptions::default().max_attempts(n),
            )
            .await,
            "InvalidInput",
            "max attempts out of range",
        );
    }
    assert_eq!(
        s.stats().await.unwrap(),
        before,
        "refused enqueues write nothing"
    );
    let id = enqueue_new(s, &q, "bad").await;

    for (limit, lease) in [
        (0, LEASE),
        (MAX_BATCH + 1, LEASE),
        (1, Duration::ZERO),
        (1, MAX_LEASE + Duration::from_secs(1)),
    ] {
        assert_err(
            s.claim(&q, &me, lease, limit).await,
            "InvalidInput",
            "claim limit or lease out of range",
        );
    }
    let i = info(s, id).await;
    assert_eq!((i.state, i.attempts), (RunState::Queued, 0));
    assert_err(
        s.ack(id, LeaseToken::generate()).await,
        "LeaseLost",
        "ack of a run never claimed",
    );

    let unknown = RunId::generate(clock.now());
    let t = LeaseToken::generate();
    let ev = RunEventId::new("e").unwrap();
    let fact = FactName::new("f").unwrap();
    assert!(s.run(unknown).await.unwrap().is_none());
    assert_err(s.ack(unknown, t).await, "UnknownRun", "ack");
    assert_err(
        s.nack(unknown, t, NackKind::Permanent, "").await,
        "UnknownRun",
        "nack",
    );
    assert_err(
        s.heartbeat(unknown, t, LEASE).await,
        "UnknownRun",
        "heartbeat",
    );
    assert_err(s.cancel(unknown).await, "UnknownRun", "cancel");
    assert_err(
        s.append_event(unknown, &ev, Vec::new()).await,
        "UnknownRun",
        "append_event",
    );
    assert_err(s.events(unknown, 0, 10).await, "UnknownRun", "events");
    assert_err(
        s.acknowledge_events(unknown, std::slice::from_ref(&ev))
            .await,
        "UnknownRun",
        "acknowledge_events",
    );
    assert_err(
        s.set_fact(unknown, &fact, Vec::new()).await,
        "UnknownRun",
        "set_fact",
    );
    assert_err(s.facts(unknown).await, "UnknownRun", "facts");

    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_err(s.ack(id, t).await, "LeaseLost", "ack with a wrong token");
    assert_err(
        s.heartbeat(id, t, LEASE).await,
        "LeaseLost",
        "heartbeat with a wrong token",
    );
    assert_err(
        s.heartbeat(id, c[0].token, Duration::ZERO).await,
        "InvalidInput",
        "heartbeat with a zero lease",
    );
    let i = info(s, id).await;
    assert_eq!((i.state, i.attempts), (RunState::Claimed, 1));
    assert_eq!(i.lease.map(|l| l.expires_at), Some(c[0].expires_at));

    assert_err(
        s.append_event(id, &ev, vec![0; MAX_RUN_EVENT_PAYLOAD + 1])
            .await,
        "InvalidInput",
        "oversized event payload",
    );
    assert_eq!(
        s.append_event(id, &ev, Vec::new()).await.unwrap().seq,
        1,
        "a refused append uses no sequence number"
    );
    let too_many: Vec<RunEventId> = (0..=MAX_ACK_IDS)
        .map(|i| RunEventId::new(i.to_string()).unwrap())
        .collect();
    assert_err(
        s.acknowledge_events(id, &too_many).await,
        "InvalidInput",
        "too many event ids",
    );
    assert_eq!(s.events(id, 0, 10).await.unwrap().len(), 1);
    assert_err(
        s.set_fact(id, &fact, vec![0; MAX_FACT_VALUE + 1]).await,
        "InvalidInput",
        "oversized fact",
    );
    assert!(s.facts(id).await.unwrap().is_empty());
    assert_err(s.events(id, 0, 0).await, "InvalidInput", "events limit 0");
    assert_err(
        s.runs(&RunFilter::default(), 0).await,
        "InvalidInput",
        "runs limit 0",
    );
    assert_err(
        s.retention_pass(
            &RetentionPolicy::default(),
            &RetentionBudget {
                batch_size: 0,
                ..RetentionBudget::default()
            },
        )
        .await,
        "InvalidInput",
        "retention batch size 0",
    );
    assert_err(
        RunId::parse("not-a-run-id"),
        "InvalidInput",
        "malformed run id",
    );
}
