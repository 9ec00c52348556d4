//! The one-statement claim on Postgres (`spool::claim`, `CLAIM_QUEUED`) against the claim
//! transaction it replaces in the common case:
//! - its backoff, computed in SQL, is the core's `backoff` exactly (every edge of the integer
//!   arithmetic: zero and maximal durations, saturating doublings, the jitter's low bits
//!   ignored, the due time saturating);
//! - runs enqueued (one by one or batched) and runs nacked back to `queued` are claimed in one
//!   statement, and each claimed run holds exactly what the transaction writes: attempts + 1, a
//!   new lease, `due_at = expiry + backoff(attempt, jitter_seed(queue, key, attempt))`;
//! - the claim falls back to the transaction, writing nothing first, when an expired lease is
//!   due in the queue (it must be settled or reclaimed in claim order) and when a run lacks the jitter of the
//!   attempt it starts (rows of older builds, or a stale hint) — and then still claims in
//!   claim order.

use std::time::Duration;

use cairn_conformance::{random_queue, SpoolHarness};
use cairn_core::spool::{backoff, jitter_seed, BackoffPolicy, Claimed, Clock, Timestamp};
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, NackKind, QueueName, RunId, RunState, Spool,
};
use cairn_postgres::spool::testkit::spool_harness;
use cairn_postgres::PgSpool;

use crate::failures::admin;

const LEASE: Duration = Duration::from_secs(30);

fn me() -> ConsumerId {
    ConsumerId::new("claims").unwrap()
}

fn key(i: usize) -> DedupKey {
    DedupKey::from_parts([format!("k{i}")]).unwrap()
}

/// Enqueues key `i` on `q` with the default options.
async fn enqueue(spool: &PgSpool, q: &QueueName, i: usize) {
    spool
        .enqueue(q, &key(i), b"{}".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
}

/// Checks what a claim wrote to each of `runs` against the claim contract: claimed by `me()`,
/// the attempt counted, `expires_at = now + LEASE` and `due_at` = expiry plus the default
/// backoff of that attempt with the run's own jitter.
async fn assert_claimed_as_contracted(
    spool: &PgSpool,
    q: &QueueName,
    runs: &[Claimed],
    now: Timestamp,
) {
    let policy = BackoffPolicy::default();
    for c in runs {
        let info = spool.run(c.run_id).await.unwrap().expect("the claimed run");
        let expires = now.saturating_add(LEASE);
        let delay = policy.delay(c.attempt, jitter_seed(q, &c.dedup_key, c.attempt));
        assert_eq!(info.state, RunState::Claimed);
        assert_eq!(info.attempts, c.attempt);
        assert_eq!(c.expires_at, expires);
        let lease = info.lease.expect("a lease");
        assert_eq!(lease.consumer, me());
        assert_eq!(lease.expires_at, expires);
        assert_eq!(
            info.due_at,
            Some(expires.saturating_add(delay)),
            "due_at of {:?} (attempt {})",
            c.dedup_key,
            c.attempt
        );
        assert_eq!(info.updated_at, now);
        assert_eq!(info.finished_at, None);
    }
}

/// A tiny deterministic generator (splitmix64), so every run checks the same cases.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn duration(&mut self) -> Duration {
        match self.next() % 6 {
            0 => Duration::ZERO,
            1 => Duration::MAX,
            2 => Duration::from_nanos(self.next() % 1_000_000),
            3 => Duration::from_nanos(self.next()),
            4 => Duration::new(self.next(), (self.next() % 1_000_000_000) as u32),
            _ => Duration::from_secs(self.next() % 7_200),
        }
    }
}

#[tokio::test]
async fn claim_backoff_in_sql_is_the_core_backoff() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let mut cases: Vec<(i64, Duration, Duration, u32, u64)> = vec![
        (0, Duration::from_secs(1), Duration::from_secs(60), 1, 0),
        (
            0,
            Duration::from_secs(1),
            Duration::from_secs(60),
            3,
            u64::MAX,
        ),
        (
            0,
            Duration::from_secs(1),
            Duration::from_secs(60),
            3,
            u64::MAX / 2,
        ),
        (5, Duration::ZERO, Duration::from_secs(60), 9, 123 << 32),
        (
            5,
            Duration::from_secs(100),
            Duration::from_secs(10),
            1,
            u64::MAX,
        ),
        (
            i64::MAX - 10,
            Duration::from_secs(1),
            Duration::from_secs(60),
            2,
            u64::MAX,
        ),
        (i64::MAX, Duration::MAX, Duration::MAX, 64, u64::MAX),
        (7, Duration::MAX, Duration::MAX, 1, 1 << 32),
        (7, Duration::from_nanos(1), Duration::MAX, 127, u64::MAX),
        (7, Duration::from_nanos(1), Duration::MAX, 128, u64::MAX),
        (7, Duration::from_nanos(1), Duration::MAX, 129, u64::MAX),
        (
            7,
            Duration::from_nanos(3),
            Duration::MAX,
            i32::MAX as u32,
            u64::MAX,
        ),
        (
            7,
            Duration::from_nanos(1_999),
            Duration::from_nanos(3_999),
            2,
            u64::MAX,
        ),
        (
            7,
            Duration::from_nanos(999),
            Duration::from_nanos(999),
            1,
            0,
        ),
    ];
    let mut mix = Mix(0x5EED_CA1B);
    for _ in 0..1_500 {
        let expires = (mix.next() >> 1) as i64 % 4_000_000_000_000_000;
        let expires = if mix.next() % 10 == 0 {
            i64::MAX - (mix.next() % 1_000) as i64
        } else {
            expires
        };
        let attempt = match mix.next() % 3 {
            0 => 1 + (mix.next() % 8) as u32,
            1 => 1 + (mix.next() % 200) as u32,
            _ => 1 + (mix.next() % i32::MAX as u64) as u32,
        };
        cases.push((expires, mix.duration(), mix.duration(), attempt, mix.next()));
    }
    for (expires, base, cap, attempt, seed) in cases {
        let rust = Timestamp::from_unix_micros(expires)
            .saturating_add(backoff(attempt, base, cap, seed))
            .as_unix_micros();
        let sql = spool
            .testkit_claim_due_in_sql(expires, base, cap, i64::from(attempt), (seed >> 32) as i64)
            .await
            .unwrap();
        assert_eq!(
            sql, rust,
            "expires {expires}, base {base:?}, cap {cap:?}, attempt {attempt}, jitter {seed:#x}"
        );
    }
}

#[tokio::test]
async fn enqueued_runs_are_claimed_in_one_statement_in_claim_order() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("claims");
    // Batched enqueues (concurrent) and lone ones, with priorities that reorder them.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let spool = spool.clone();
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let options = EnqueueOptions {
                priority: i32::try_from(i % 3).unwrap(),
                ..EnqueueOptions::default()
            };
            spool
                .enqueue(&q, &key(i), b"{}".to_vec(), options)
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().created);
    }
    enqueue(&spool, &q, 6).await;
    let now = h.clock().now();
    let first = spool.claim(&q, &me(), LEASE, 4).await.unwrap();
    let rest = spool.claim(&q, &me(), LEASE, 10).await.unwrap();
    assert_eq!(
        spool.testkit_claim_paths(),
        (2, 0),
        "both claims took one statement"
    );
    assert_eq!((first.len(), rest.len()), (4, 3));
    let priorities: Vec<i32> = {
        let mut p = Vec::new();
        for c in first.iter().chain(&rest) {
            p.push(spool.run(c.run_id).await.unwrap().unwrap().priority);
        }
        p
    };
    assert_eq!(
        priorities,
        vec![2, 2, 1, 1, 0, 0, 0],
        "claim order: priority first"
    );
    let mut tokens: Vec<_> = first.iter().chain(&rest).map(|c| c.token).collect();
    tokens.sort_by_key(|t| *t.as_bytes());
    tokens.dedup();
    assert_eq!(tokens.len(), 7, "every run its own token");
    assert!(first
        .iter()
        .chain(&rest)
        .all(|c| c.attempt == 1 && c.payload == b"{}"));
    assert_claimed_as_contracted(&spool, &q, &first, now).await;
    assert_claimed_as_contracted(&spool, &q, &rest, now).await;
    assert!(spool.claim(&q, &me(), LEASE, 10).await.unwrap().is_empty());
    assert_eq!(
        spool.testkit_claim_paths(),
        (3, 0),
        "an empty claim is one statement too"
    );
}

#[tokio::test]
async fn a_nacked_run_is_claimed_again_in_one_statement_with_the_next_attempts_jitter() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("claims");
    enqueue(&spool, &q, 0).await;
    let c = spool.claim(&q, &me(), LEASE, 1).await.unwrap().remove(0);
    spool
        .nack(c.run_id, c.token, NackKind::Retryable, "again")
        .await
        .unwrap();
    let due = spool.run(c.run_id).await.unwrap().unwrap().due_at.unwrap();
    h.clock().set(due);
    let now = h.clock().now();
    let again = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    assert_eq!(spool.testkit_claim_paths(), (2, 0));
    assert_claimed_as_contracted(&spool, &q, &again, now).await;
}

#[tokio::test]
async fn an_expired_lease_due_sends_the_claim_to_the_transaction() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("claims");
    enqueue(&spool, &q, 0).await;
    let lost = spool.claim(&q, &me(), LEASE, 1).await.unwrap().remove(0);
    // A queued run enqueued later: due now, so before the expired run (due at its expiry plus
    // backoff) in claim order.
    enqueue(&spool, &q, 1).await;
    let due = spool
        .run(lost.run_id)
        .await
        .unwrap()
        .unwrap()
        .due_at
        .unwrap();
    h.clock().set(due);
    let now = h.clock().now();
    let runs = spool.claim(&q, &me(), LEASE, 2).await.unwrap();
    assert_eq!(
        spool.testkit_claim_paths(),
        (1, 1),
        "the second claim took the transaction"
    );
    let taken: Vec<_> = runs
        .iter()
        .map(|c| (c.dedup_key.clone(), c.attempt))
        .collect();
    assert_eq!(
        taken,
        vec![(key(1), 1), (key(0), 2)],
        "claim order; the expired run reclaimed"
    );
    assert_eq!(runs[1].run_id, lost.run_id);
    assert_claimed_as_contracted(&spool, &q, &runs, now).await;
}

#[tokio::test]
async fn runs_without_their_attempts_jitter_are_claimed_by_the_transaction() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let mut admin = admin(&h).await;
    let q = random_queue("claims");
    for i in 0..3 {
        enqueue(&spool, &q, i).await;
    }
    // As an older build leaves them: no hint at all; and a hint for another attempt.
    sqlx::query(
        "UPDATE spool_run SET claim_attempt = NULL, claim_jitter = NULL WHERE dedup_key = $1",
    )
    .bind(key(0).as_bytes())
    .execute(&mut admin)
    .await
    .unwrap();
    let now = h.clock().now();
    let first = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    assert_eq!(spool.testkit_claim_paths(), (0, 1));
    assert_eq!(first[0].dedup_key, key(0), "claim order is kept");
    assert_claimed_as_contracted(&spool, &q, &first, now).await;

    sqlx::query("UPDATE spool_run SET claim_attempt = 2 WHERE dedup_key = $1")
        .bind(key(1).as_bytes())
        .execute(&mut admin)
        .await
        .unwrap();
    let second = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    assert_eq!(
        spool.testkit_claim_paths(),
        (0, 2),
        "a stale hint is not used"
    );
    assert_eq!(second[0].dedup_key, key(1));
    assert_claimed_as_contracted(&spool, &q, &second, now).await;

    let third = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    assert_eq!(
        spool.testkit_claim_paths(),
        (1, 2),
        "a run with its hint: one statement"
    );
    assert_eq!(third[0].dedup_key, key(2));
    assert_claimed_as_contracted(&spool, &q, &third, now).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_the_claim_index_in_order_whatever_the_statistics() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("claims-plan");
    // A queue of a few thousand runs in a table never analyzed (as a queue table usually is,
    // between autoanalyze runs): the planner believes the queue holds a handful of rows. The
    // scratch table is kept from autoanalyze so that stays true on any server.
    let mut conn = admin(&h).await;
    for table in ["spool_run", "spool_ready"] {
        sqlx::query(&format!(
            "ALTER TABLE {table} SET (autovacuum_enabled = false)"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let mut tasks = Vec::new();
    for p in 0..8 {
        let (spool, q) = (spool.clone(), q.clone());
        tasks.push(tokio::spawn(async move {
            for i in (p..3_000).step_by(8) {
                enqueue(&spool, &q, i).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let plan = spool.testkit_explain_claim(&q, 10, false).await.unwrap();
    assert!(
        plan.contains("Index Scan using spool_ready_claim") && !plan.contains("Bitmap"),
        "the claim reads the claim index in order and stops at its limit:\n{plan}"
    );
    // What the spool's session setup prevents: with bitmap scans allowed, the same claim
    // would read every due run of the queue and sort them.
    let unguarded = spool.testkit_explain_claim(&q, 10, true).await.unwrap();
    assert!(
        unguarded.contains("Bitmap Index Scan on spool_ready_claim"),
        "the planner's choice this test guards against:\n{unguarded}"
    );
}

/// An operator's retry or discard refused for a run's state leaves no lock behind: the refusal
/// rolls back its transaction before it answers. (sqlx rolls a dropped transaction back only
/// when its connection goes back to the pool, from a spawned task, so a claim right after the
/// refusal ran on another connection while the row was still locked, and `SKIP LOCKED` skipped
/// it: the model test saw a claim answer nothing with a due run queued.)
#[tokio::test]
async fn a_refused_operator_action_leaves_no_row_lock_for_the_next_claim() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("unpark-lock");
    for round in 0..20 {
        enqueue(&spool, &q, round).await;
        let run = spool
            .runs(
                &cairn_core::spool::RunFilter {
                    queue: Some(q.clone()),
                    state: Some(RunState::Queued),
                    after: None,
                },
                1,
            )
            .await
            .unwrap()[0]
            .run_id;
        // Queued, not parked: both refused, after the row was locked.
        assert!(spool.retry_parked(run, "test").await.is_err());
        assert!(spool.discard(run, "test").await.is_err());
        let claimed = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
        assert_eq!(
            claimed.iter().map(|c| c.run_id).collect::<Vec<_>>(),
            [run],
            "round {round}: the due run is claimed right after the refusals"
        );
        spool.ack(run, claimed[0].token).await.unwrap();
    }
}

/// A queue whose runs have one partition each, `per_partition = 1`, holding exactly one page
/// of a limited claim's candidates in partition `a` (16 runs, priority 3), then one run of `b`,
/// then one more of `a`, then one of `c`; with `max_claimed` as given. Returns the queue and
/// the first run of `a`, the run of `b` and the run of `c`.
async fn a_full_page_of_one_partition(
    spool: &PgSpool,
    name: &str,
    max_claimed: Option<u32>,
) -> (QueueName, [RunId; 3]) {
    use cairn_core::spool::{PartitionKey, QueueLimits};
    let q = random_queue(name);
    let limits = QueueLimits {
        per_partition: Some(1),
        max_claimed,
        ..QueueLimits::default()
    };
    spool.set_queue_limits(&q, &limits).await.unwrap();
    let in_partition = |p: &str| EnqueueOptions {
        partition_key: Some(PartitionKey::new(p).unwrap()),
        priority: 3,
        ..EnqueueOptions::default()
    };
    let mut runs = Vec::new();
    for (i, p) in std::iter::repeat_n("a", 16)
        .chain(["b", "a", "c"])
        .enumerate()
    {
        let id = spool
            .enqueue(&q, &key(i), b"{}".to_vec(), in_partition(p))
            .await
            .unwrap()
            .run_id;
        runs.push(id);
    }
    (q, [runs[0], runs[16], runs[18]])
}

/// A claim of a queue with a per-partition limit reads its candidates a page at a time
/// (`flow::pick_limited`, pages of `max(limit, 16)` runs, in claim order, leaving out the
/// partitions already full). A page that one partition fills is not the last one: with
/// exactly one page of partition `a` at the head of the queue, then one run of `b`, one more
/// of `a` and one of `c` ([`a_full_page_of_one_partition`]), a claim of up to 3 takes the
/// first `a`, `b` and `c`, and not the second `a`; under `max_claimed = 2` a claim of up to 3
/// takes the first `a` and `b`; a claim of up to 1 takes the first `a` alone. Reading a full
/// page as the last one would stop at `a` and hand out one run; so would a next page that
/// starts from the wrong place in claim order, which orders by priority first, highest first
/// (the runs have priority 3, so the page's cursor must carry it negated); a partition whose
/// runs taken on one page are not counted would not be left out of the next, which would then
/// hand out the second `a`; and runs taken on one page that are not counted against the
/// claim's allowance (here 2, from `max_claimed`, below the claim's own limit of 3, which the
/// claim enforces again) would let the next page hand out `c` too.
#[tokio::test]
async fn a_limited_claim_reads_past_a_page_that_one_partition_fills() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let sorted = |mut ids: Vec<RunId>| {
        ids.sort();
        ids
    };
    let (q, [a, b, c]) = a_full_page_of_one_partition(&spool, "claims-page", None).await;
    let claimed = spool.claim(&q, &me(), LEASE, 3).await.unwrap();
    assert_eq!(
        sorted(claimed.iter().map(|c| c.run_id).collect()),
        sorted(vec![a, b, c]),
        "one run of the partition that fills the first page, then `b` and `c` behind it"
    );
    let (q, [a, b, _]) = a_full_page_of_one_partition(&spool, "claims-page-2", Some(2)).await;
    let claimed = spool.claim(&q, &me(), LEASE, 3).await.unwrap();
    assert_eq!(
        sorted(claimed.iter().map(|c| c.run_id).collect()),
        sorted(vec![a, b]),
        "under max_claimed = 2, the run the first page gave counts against the allowance"
    );
    let (q, [a, _, _]) = a_full_page_of_one_partition(&spool, "claims-page-1", None).await;
    let claimed = spool.claim(&q, &me(), LEASE, 1).await.unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.run_id).collect::<Vec<_>>(),
        vec![a],
        "a claim of up to 1 takes the first run and reads no further"
    );
}

/// The rate window's rows of queue `q`.
async fn ticks(conn: &mut sqlx::PgConnection, q: &QueueName) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM spool_claim_tick WHERE queue = $1")
        .bind(q.as_str())
        .fetch_one(conn)
        .await
        .unwrap()
}

/// A rate-limited queue keeps one tick (`spool_claim_tick`) per claim that handed out runs
/// (`flow::record_claim`), and none for a claim that found nothing: a consumer polling an
/// empty rate-limited queue must not write a row per poll.
#[tokio::test]
async fn a_rate_limited_claim_that_hands_out_nothing_records_no_tick() {
    use cairn_core::spool::{QueueLimits, RateLimit};
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("claims-tick");
    let limits = QueueLimits {
        rate: Some(RateLimit {
            claims: 100,
            per: Duration::from_secs(60),
        }),
        ..QueueLimits::default()
    };
    spool.set_queue_limits(&q, &limits).await.unwrap();
    let mut conn = admin(&h).await;
    for _ in 0..3 {
        assert!(spool.claim(&q, &me(), LEASE, 5).await.unwrap().is_empty());
    }
    assert_eq!(ticks(&mut conn, &q).await, 0, "empty claims wrote ticks");
    enqueue(&spool, &q, 0).await;
    assert_eq!(spool.claim(&q, &me(), LEASE, 5).await.unwrap().len(), 1);
    assert_eq!(
        ticks(&mut conn, &q).await,
        1,
        "the claim that handed out a run is recorded"
    );
    assert!(spool.claim(&q, &me(), LEASE, 5).await.unwrap().is_empty());
    assert_eq!(ticks(&mut conn, &q).await, 1, "an empty claim wrote a tick");
}
