//! Queue flow control (Q1–Q4): pause and resume, the cap on runs claimed at once, the cap per
//! partition key, the rate limit, and refused limits. Time moves only when a case advances the
//! harness's clock, so no lease expires unless a case says so.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    EnqueueItem, PartitionKey, QueueFlow, QueueLimits, RateLimit, RunFilter, RunState,
    MAX_FLOW_LIMIT,
};
use cairn_core::{Claimed, Clock, EnqueueOptions, QueueName, RunId, Spool};

use super::support::{
    assert_err, consumer, enqueue_new, enqueue_with, info, key, max_backoff, open_spool, within,
    LEASE,
};
use crate::{random_queue, SpoolHarness};

fn partition(name: &str) -> PartitionKey {
    PartitionKey::new(name).expect("valid partition key")
}

fn in_partition(name: &str) -> EnqueueOptions {
    EnqueueOptions {
        partition_key: Some(partition(name)),
        ..EnqueueOptions::default()
    }
}

fn max_claimed(n: u32) -> QueueLimits {
    QueueLimits {
        max_claimed: Some(n),
        ..QueueLimits::default()
    }
}

/// The dedup keys of `claimed`, as the text the cases enqueued them under.
fn keys_of(claimed: &[Claimed]) -> Vec<String> {
    claimed
        .iter()
        .map(|c| String::from_utf8_lossy(c.dedup_key.as_bytes()).into_owned())
        .collect()
}

/// The keys `names` as [`keys_of`] prints them.
fn keys(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| String::from_utf8_lossy(key(&[n]).as_bytes()).into_owned())
        .collect()
}

/// How many runs of `q` are claimed at once now: state `claimed`, `due_at` ahead of now.
async fn claimed_at_once(s: &dyn Spool, q: &QueueName) -> usize {
    let now = s.clock().now();
    let filter = RunFilter {
        queue: Some(q.clone()),
        state: Some(RunState::Claimed),
        after: None,
    };
    let runs = s.runs(&filter, 1000).await.unwrap();
    runs.iter()
        .filter(|r| r.due_at.is_some_and(|d| d > now))
        .count()
}

/// Q1: a paused queue's claims hand out and settle nothing, from any spool over the location,
/// while enqueues land and held runs heartbeat and ack; the pause survives reopening, leaves
/// the limits alone, and resuming wakes a subscriber and lets the queue drain.
pub async fn q1_paused_queue_claims_nothing_until_resumed<H: SpoolHarness>(h: &H) {
    let (a, b) = (open_spool(h).await, open_spool(h).await);
    let clock = h.clock();
    let q = random_queue("q1");
    assert_eq!(
        a.queue_flow(&q).await.unwrap(),
        QueueFlow::default(),
        "Q1: a queue nobody set is running and unlimited"
    );
    let last_try = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let expiring = enqueue_with(a.as_ref(), &q, "q1-expiring", last_try).await;
    let held = enqueue_new(a.as_ref(), &q, "q1-held").await;
    let limits = max_claimed(5);
    let set = a.set_queue_limits(&q, &limits).await.unwrap();
    assert_eq!(set.limits, limits);
    let taken = a.claim(&q, &consumer("q1-a"), LEASE, 2).await.unwrap();
    assert_eq!(keys_of(&taken), keys(&["q1-expiring", "q1-held"]));

    let paused = a.set_queue_paused(&q, true).await.unwrap();
    assert!(paused.paused, "Q1: the answer is the stored flow");
    assert_eq!(paused.limits, limits, "Q1: pausing leaves the limits alone");
    assert_eq!(paused.updated_at, Some(clock.now()));
    assert_eq!(
        a.set_queue_paused(&q, true).await.unwrap(),
        paused,
        "Q1: pausing is idempotent"
    );
    assert_eq!(
        b.queue_flow(&q).await.unwrap(),
        paused,
        "Q1: every spool sees it"
    );
    assert!(
        b.queue_flows()
            .await
            .unwrap()
            .contains(&(q.clone(), paused)),
        "Q1: the queue is listed with its flow"
    );
    let r2 = enqueue_new(b.as_ref(), &q, "q1-r2").await;
    let r3 = enqueue_new(a.as_ref(), &q, "q1-r3").await;
    for s in [&a, &b] {
        assert!(
            s.claim(&q, &consumer("q1-b"), LEASE, 10)
                .await
                .unwrap()
                .is_empty(),
            "Q1: a paused queue hands out nothing"
        );
    }
    // The runs held before the pause go on as usual.
    let held_claim = taken.iter().find(|c| c.run_id == held).unwrap();
    b.heartbeat(held, held_claim.token, LEASE).await.unwrap();
    b.ack(held, held_claim.token).await.unwrap();
    assert_eq!(info(a.as_ref(), held).await.state, RunState::Succeeded);
    // A lease that ran out on its last attempt is not settled by a paused queue's claims.
    clock.advance(LEASE + max_backoff(1) + Duration::from_secs(1));
    assert!(a
        .claim(&q, &consumer("q1-b"), LEASE, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        info(a.as_ref(), expiring).await.state,
        RunState::Claimed,
        "Q1: a paused queue's claim settles nothing"
    );

    // The pause is stored: a spool opened now sees it.
    let c = open_spool(h).await;
    assert!(
        c.queue_flow(&q).await.unwrap().paused,
        "Q1: the pause survives reopening"
    );
    assert!(c
        .claim(&q, &consumer("q1-c"), LEASE, 10)
        .await
        .unwrap()
        .is_empty());

    let mut wake = c.subscribe(&q).await.unwrap();
    let waiter = tokio::spawn(async move { wake.wait().await });
    let resumed = a.set_queue_paused(&q, false).await.unwrap();
    assert!(!resumed.paused);
    assert_eq!(
        resumed.limits, limits,
        "Q1: resuming leaves the limits alone"
    );
    within("Q1: resuming wakes a subscriber", waiter)
        .await
        .expect("waiter panicked")
        .expect("wait failed");
    let drained = c.claim(&q, &consumer("q1-c"), LEASE, 10).await.unwrap();
    let got: BTreeSet<RunId> = drained.iter().map(|c| c.run_id).collect();
    assert_eq!(
        got,
        BTreeSet::from([r2, r3]),
        "Q1: resumed, the queue drains"
    );
    assert_eq!(
        info(a.as_ref(), expiring).await.state,
        RunState::Parked,
        "Q1: resumed, the claim settles the spent lease"
    );
}

/// Q2: `max_claimed` holds under concurrent claims of several spools; lowering it below what is
/// in flight blocks new claims until enough acks; an expired lease keeps its slot until its
/// backoff passed, then is reclaimable.
pub async fn q2_max_claimed_holds_under_concurrent_claims<H: SpoolHarness>(h: &H) {
    let spools = [
        open_spool(h).await,
        open_spool(h).await,
        open_spool(h).await,
    ];
    let clock = h.clock();
    let q = random_queue("q2");
    spools[0]
        .set_queue_limits(&q, &max_claimed(3))
        .await
        .unwrap();
    let total = 12;
    for i in 0..total {
        enqueue_new(spools[i % 3].as_ref(), &q, &format!("q2-{i}")).await;
    }
    // One round of six concurrent claims asking for two each: three runs in all.
    let mut joins = Vec::new();
    for t in 0..6 {
        let (s, q) = (spools[t % 3].clone(), q.clone());
        joins.push(tokio::spawn(async move {
            s.claim(&q, &consumer(&format!("q2-{t}")), LEASE, 2)
                .await
                .unwrap()
        }));
    }
    let mut first = Vec::new();
    for j in joins {
        first.extend(j.await.expect("claimer panicked"));
    }
    assert_eq!(
        first.len(),
        3,
        "Q2: concurrent claims take exactly the limit"
    );
    assert_eq!(claimed_at_once(spools[0].as_ref(), &q).await, 3);

    // Lowered below what is in flight: nothing new until the queue is under the new limit.
    spools[1]
        .set_queue_limits(&q, &max_claimed(1))
        .await
        .unwrap();
    for (i, c) in first.iter().enumerate() {
        assert!(
            spools[2]
                .claim(&q, &consumer("q2-low"), LEASE, 5)
                .await
                .unwrap()
                .is_empty(),
            "Q2: {} in flight, limit 1: nothing is handed out",
            3 - i
        );
        spools[i % 3].ack(c.run_id, c.token).await.unwrap();
    }
    let one = spools[2]
        .claim(&q, &consumer("q2-low"), LEASE, 5)
        .await
        .unwrap();
    assert_eq!(one.len(), 1, "Q2: under the limit again, one run");

    // An expired lease keeps its slot through its backoff, then is handed out again.
    clock.advance(LEASE);
    assert!(spools[0]
        .claim(&q, &consumer("q2-x"), LEASE, 5)
        .await
        .unwrap()
        .is_empty());
    clock.advance(max_backoff(1));
    let again = spools[0]
        .claim(&q, &consumer("q2-x"), LEASE, 5)
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "Q2: an expired, due lease holds no slot");
    assert_ne!(
        again[0].run_id, one[0].run_id,
        "Q2: queued runs are due earlier"
    );
    assert_eq!(claimed_at_once(spools[1].as_ref(), &q).await, 1);
    spools[0]
        .ack(again[0].run_id, again[0].token)
        .await
        .unwrap();

    // Concurrent drain under limit 3: never more than 3 held, every run handed out once.
    spools[0]
        .set_queue_limits(&q, &max_claimed(3))
        .await
        .unwrap();
    let left = total - 4;
    let holding = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut joins = Vec::new();
    for t in 0..6 {
        let (s, q) = (spools[t % 3].clone(), q.clone());
        let (holding, done) = (holding.clone(), done.clone());
        joins.push(tokio::spawn(async move {
            let me = consumer(&format!("q2-drain-{t}"));
            let mut mine = Vec::new();
            while done.load(Ordering::SeqCst) < left {
                let got = s.claim(&q, &me, LEASE, 2).await.unwrap();
                let now_held = holding.fetch_add(got.len(), Ordering::SeqCst) + got.len();
                assert!(now_held <= 3, "Q2: {now_held} runs held at once, limit 3");
                for c in got {
                    holding.fetch_sub(1, Ordering::SeqCst);
                    s.ack(c.run_id, c.token).await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                    mine.push(c.run_id);
                }
                tokio::task::yield_now().await;
            }
            mine
        }));
    }
    let mut seen = BTreeSet::new();
    for j in joins {
        for id in within("Q2: the limited queue drains", j)
            .await
            .expect("drainer panicked")
        {
            assert!(seen.insert(id), "Q2: run {id} handed out twice");
        }
    }
    assert_eq!(seen.len(), left, "Q2: every run was drained");
    assert!(
        seen.contains(&one[0].run_id),
        "Q2: the expired lease was handed out again"
    );
}

/// Q2: limits `check_limits` refuses are `InvalidInput` and write nothing.
pub async fn q2_invalid_limits_are_refused_without_writes<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let q = random_queue("q2-bad");
    let rate = |claims, per| QueueLimits {
        rate: Some(RateLimit { claims, per }),
        ..QueueLimits::default()
    };
    for bad in [
        max_claimed(0),
        max_claimed(MAX_FLOW_LIMIT + 1),
        QueueLimits {
            per_partition: Some(0),
            ..QueueLimits::default()
        },
        rate(0, Duration::from_secs(1)),
        rate(1, Duration::from_micros(999)),
        rate(1, Duration::from_nanos(1_000_500)),
        rate(1, Duration::from_secs(24 * 60 * 60 + 1)),
    ] {
        assert_err(
            s.set_queue_limits(&q, &bad).await,
            "InvalidInput",
            &format!("Q2: {bad:?}"),
        );
    }
    assert_eq!(s.queue_flow(&q).await.unwrap(), QueueFlow::default());
    assert!(
        !s.queue_flows().await.unwrap().iter().any(|(n, _)| *n == q),
        "Q2: a refused limit stores nothing"
    );
    // A stored flow is untouched by a refused change.
    let stored = s.set_queue_limits(&q, &max_claimed(2)).await.unwrap();
    assert_err(
        s.set_queue_limits(&q, &max_claimed(0)).await,
        "InvalidInput",
        "Q2: zero",
    );
    assert_eq!(s.queue_flow(&q).await.unwrap(), stored);
}

/// Q3: `per_partition` caps the runs of one partition claimed at once, while other partitions
/// and unpartitioned runs flow; a busy partition at the head of the queue does not hide the
/// runs behind it; the partition key round-trips in `RunInfo`.
pub async fn q3_per_partition_limits_each_partition_only<H: SpoolHarness>(h: &H) {
    let (a, b) = (open_spool(h).await, open_spool(h).await);
    let q = random_queue("q3");
    let limits = QueueLimits {
        per_partition: Some(1),
        ..QueueLimits::default()
    };
    a.set_queue_limits(&q, &limits).await.unwrap();
    let mut ids = Vec::new();
    for (name, p) in [
        ("q3-a1", Some("a")),
        ("q3-a2", Some("a")),
        ("q3-b1", Some("b")),
        ("q3-u1", None),
        ("q3-a3", Some("a")),
        ("q3-b2", Some("b")),
        ("q3-u2", None),
    ] {
        let options = p.map(in_partition).unwrap_or_default();
        ids.push((enqueue_with(a.as_ref(), &q, name, options).await, p));
    }
    for (id, p) in &ids {
        assert_eq!(
            info(b.as_ref(), *id).await.partition_key,
            p.map(partition),
            "Q3: the partition key round-trips"
        );
    }
    let listed = b
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                state: None,
                after: None,
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(
        listed.iter().filter(|r| r.partition_key.is_some()).count(),
        5,
        "Q3: listed runs carry their partition key"
    );
    let first = b.claim(&q, &consumer("q3"), LEASE, 10).await.unwrap();
    assert_eq!(
        keys_of(&first),
        keys(&["q3-a1", "q3-b1", "q3-u1", "q3-u2"]),
        "Q3: one run per partition, every unpartitioned run"
    );
    assert!(a
        .claim(&q, &consumer("q3"), LEASE, 10)
        .await
        .unwrap()
        .is_empty());
    a.ack(first[0].run_id, first[0].token).await.unwrap();
    let next = a.claim(&q, &consumer("q3"), LEASE, 10).await.unwrap();
    assert_eq!(
        keys_of(&next),
        keys(&["q3-a2"]),
        "Q3: a freed partition slot"
    );

    // A busy partition at the head: 250 of its runs before one of another partition and one
    // without; claims of one run each still find those.
    let q2 = random_queue("q3-head");
    a.set_queue_limits(&q2, &limits).await.unwrap();
    let mut items: Vec<EnqueueItem> = (0..250)
        .map(|i| EnqueueItem {
            key: key(&[&format!("q3-h{i}")]),
            payload: Vec::new(),
            options: in_partition("h"),
        })
        .collect();
    items.push(EnqueueItem {
        key: key(&["q3-z"]),
        payload: Vec::new(),
        options: in_partition("z"),
    });
    items.push(EnqueueItem {
        key: key(&["q3-u"]),
        payload: Vec::new(),
        options: EnqueueOptions::default(),
    });
    let stored = b.enqueue_many(&q2, items).await.unwrap();
    assert_eq!(
        info(a.as_ref(), stored[250].run_id).await.partition_key,
        Some(partition("z")),
        "Q3: a bulk enqueue stores the partition key"
    );
    let mut order = Vec::new();
    for _ in 0..3 {
        order.extend(keys_of(
            &a.claim(&q2, &consumer("q3"), LEASE, 1).await.unwrap(),
        ));
    }
    assert_eq!(
        order,
        keys(&["q3-h0", "q3-z", "q3-u"]),
        "Q3: nothing is starved"
    );
    assert!(b
        .claim(&q2, &consumer("q3"), LEASE, 10)
        .await
        .unwrap()
        .is_empty());
}

/// Q4: a rate limit hands out at most `claims` runs in any window of its length on the spool's
/// clock — a sliding window over the claims' times, not fixed buckets.
pub async fn q4_rate_limit_is_a_sliding_window<H: SpoolHarness>(h: &H) {
    let (a, b) = (open_spool(h).await, open_spool(h).await);
    let clock = h.clock();
    let q = random_queue("q4");
    let per = Duration::from_secs(10);
    let limits = QueueLimits {
        rate: Some(RateLimit { claims: 3, per }),
        ..QueueLimits::default()
    };
    let set = a.set_queue_limits(&q, &limits).await.unwrap();
    assert_eq!(b.queue_flow(&q).await.unwrap(), set);
    for i in 0..10 {
        enqueue_new(a.as_ref(), &q, &format!("q4-{i}")).await;
    }
    let claim = |s: &Arc<dyn Spool>, n: usize| {
        let (s, q) = (s.clone(), q.clone());
        async move { s.claim(&q, &consumer("q4"), LEASE, n).await.unwrap().len() }
    };
    let step = Duration::from_secs(5);
    // t = 0: two runs; t = 5: the third and no more.
    assert_eq!(claim(&a, 2).await, 2);
    clock.advance(step);
    assert_eq!(claim(&b, 5).await, 1, "Q4: three in the window");
    assert_eq!(claim(&a, 5).await, 0);
    // t = 10: the claims of t = 0 left the window, the one of t = 5 has not (a fixed bucket
    // starting at 10 would allow three).
    clock.advance(step);
    assert_eq!(claim(&a, 5).await, 2, "Q4: the window slides");
    assert_eq!(claim(&b, 5).await, 0);
    // t = 15: the claim of t = 5 left it.
    clock.advance(step);
    assert_eq!(claim(&b, 5).await, 1);
    // t = 25: the window is empty; the last three runs.
    clock.advance(per);
    assert_eq!(claim(&a, 10).await, 3, "Q4: the next window admits more");
    assert_eq!(claim(&a, 10).await, 0);
    // Removing the limit lets the queue run freely again.
    let unlimited = b
        .set_queue_limits(&q, &QueueLimits::default())
        .await
        .unwrap();
    assert!(!unlimited.limits.any());
    assert_eq!(claim(&b, 10).await, 1, "Q4: no limit, the rest");
}

/// Q1 (flow rows): a queue whose flow goes back to the defaults — running and unlimited — keeps
/// no stored flow: the answer is [`QueueFlow::default`], `queue_flows` no longer lists it (in
/// any spool, after reopening too), and a rate limit removed forgets its window.
pub async fn q1_a_queue_back_to_its_defaults_keeps_no_flow_row<H: SpoolHarness>(h: &H) {
    let (a, b) = (open_spool(h).await, open_spool(h).await);
    let clock = h.clock();
    let q = random_queue("q1-rows");
    let listed = |s: Arc<dyn Spool>, q: QueueName| async move {
        s.queue_flows()
            .await
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == q)
            .map(|(_, f)| f)
    };
    let unlimited = QueueLimits::default();

    // Paused, then resumed.
    let paused = a.set_queue_paused(&q, true).await.unwrap();
    assert_eq!(listed(b.clone(), q.clone()).await, Some(paused));
    let resumed = a.set_queue_paused(&q, false).await.unwrap();
    assert_eq!(resumed, QueueFlow::default(), "Q1: resumed, nothing stored");
    assert_eq!(b.queue_flow(&q).await.unwrap(), QueueFlow::default());
    assert_eq!(
        listed(b.clone(), q.clone()).await,
        None,
        "Q1: a resumed queue without limits is not listed"
    );

    // Limited, then unlimited.
    let limited = b.set_queue_limits(&q, &max_claimed(2)).await.unwrap();
    assert_eq!(listed(a.clone(), q.clone()).await, Some(limited));
    assert_eq!(
        b.set_queue_limits(&q, &unlimited).await.unwrap(),
        QueueFlow::default()
    );
    assert_eq!(
        listed(a.clone(), q.clone()).await,
        None,
        "Q1: a running queue whose limits are removed is not listed"
    );

    // Both set: the row goes only with the last of them.
    a.set_queue_limits(&q, &max_claimed(2)).await.unwrap();
    a.set_queue_paused(&q, true).await.unwrap();
    let still_limited = a.set_queue_paused(&q, false).await.unwrap();
    assert_eq!(still_limited.limits, max_claimed(2));
    assert_eq!(
        listed(b.clone(), q.clone()).await,
        Some(still_limited),
        "Q1: resumed but limited, still listed"
    );
    a.set_queue_paused(&q, true).await.unwrap();
    let still_paused = b.set_queue_limits(&q, &unlimited).await.unwrap();
    assert!(still_paused.paused);
    assert_eq!(
        listed(a.clone(), q.clone()).await,
        Some(still_paused),
        "Q1: unlimited but paused, still listed"
    );
    assert_eq!(
        b.set_queue_paused(&q, false).await.unwrap(),
        QueueFlow::default()
    );
    assert_eq!(listed(a.clone(), q.clone()).await, None);

    // A rate limit removed forgets its window: set again at once, it starts empty.
    let rate = QueueLimits {
        rate: Some(RateLimit {
            claims: 1,
            per: Duration::from_secs(60),
        }),
        ..QueueLimits::default()
    };
    for i in 0..4 {
        enqueue_new(a.as_ref(), &q, &format!("q1-rows-{i}")).await;
    }
    let claim = |s: &Arc<dyn Spool>| {
        let (s, q) = (s.clone(), q.clone());
        async move {
            s.claim(&q, &consumer("q1-rows"), LEASE, 5)
                .await
                .unwrap()
                .len()
        }
    };
    a.set_queue_limits(&q, &rate).await.unwrap();
    assert_eq!(claim(&a).await, 1);
    assert_eq!(claim(&b).await, 0, "Q1: one run per minute");
    clock.advance(Duration::from_secs(1));
    // Another limit instead of the rate: the window goes.
    b.set_queue_limits(&q, &max_claimed(10)).await.unwrap();
    a.set_queue_limits(&q, &rate).await.unwrap();
    assert_eq!(
        claim(&b).await,
        1,
        "Q1: a rate limit set again starts with an empty window"
    );
    clock.advance(Duration::from_secs(1));
    // Back to the defaults: the window goes with the row.
    a.set_queue_limits(&q, &unlimited).await.unwrap();
    assert_eq!(listed(b.clone(), q.clone()).await, None);
    b.set_queue_limits(&q, &rate).await.unwrap();
    assert_eq!(claim(&a).await, 1, "Q1: and after the defaults too");
    assert_eq!(claim(&a).await, 0);
    a.set_queue_limits(&q, &unlimited).await.unwrap();

    // Stored: a spool opened now lists nothing for the queue either.
    let c = open_spool(h).await;
    assert_eq!(c.queue_flow(&q).await.unwrap(), QueueFlow::default());
    assert_eq!(
        listed(c.clone(), q.clone()).await,
        None,
        "Q1: nothing stored after reopening"
    );
    assert_eq!(claim(&c).await, 1, "Q1: the queue runs freely");
}

/// Q3: a transaction's enqueues (single and bulk) store the partition key with the run, and
/// the limit counts those runs once they committed.
pub async fn q3_partition_keys_commit_with_a_transaction<H: crate::TxHarness>(h: &H) {
    let backend = h.open_tx().await.expect("a transactional store");
    let outside = open_spool(h).await;
    let q = random_queue("q3-tx");
    let limits = QueueLimits {
        per_partition: Some(1),
        ..QueueLimits::default()
    };
    outside.set_queue_limits(&q, &limits).await.unwrap();
    let mut tx = backend.begin().await.expect("begin");
    let one = tx
        .enqueue(&q, &key(&["q3-tx-1"]), Vec::new(), in_partition("t"))
        .await
        .unwrap();
    let many = tx
        .enqueue_many(
            &q,
            vec![EnqueueItem {
                key: key(&["q3-tx-2"]),
                payload: Vec::new(),
                options: in_partition("t"),
            }],
        )
        .await
        .unwrap();
    within("Q3: commit", tx.commit()).await.unwrap();
    for id in [one.run_id, many[0].run_id] {
        assert_eq!(
            info(outside.as_ref(), id).await.partition_key,
            Some(partition("t")),
            "Q3: a transaction's enqueue stores the partition key"
        );
    }
    let got = outside.claim(&q, &consumer("q3"), LEASE, 10).await.unwrap();
    assert_eq!(got.len(), 1, "Q3: one run of the partition at once");
}
