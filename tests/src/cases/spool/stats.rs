//! Spool counts (S18): `stats()` per queue, and the stored events' totals.

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_core::spool::{
    QueueStats, RetentionBudget, RetentionPolicy, RunState, SpoolStats, MAX_LEASE,
};
use cairn_core::{Clock, EnqueueOptions, NackKind, QueueName, RunEventId, Timestamp};

use super::support::{consumer, enqueue_new, enqueue_with, info};
use crate::{random_queue, SpoolHarness};

/// One queue's expected counts, with `scheduled` of its queued runs not due yet.
fn queue(runs: &[(RunState, u64)], oldest_queued: Option<Timestamp>, scheduled: u64) -> QueueStats {
    QueueStats {
        runs: runs.iter().copied().collect(),
        oldest_queued,
        scheduled,
    }
}

/// The totals must be the queues' sums, read at the same state: per state, the counts add up,
/// and the spool's oldest queued run is the earliest of the queues'.
#[track_caller]
fn assert_totals_are_the_queues_sums(stats: &SpoolStats, ctx: &str) {
    let mut runs: BTreeMap<RunState, u64> = BTreeMap::new();
    for (q, qs) in &stats.queues {
        assert!(
            !qs.runs.is_empty(),
            "{ctx}: queue {q} is listed without runs"
        );
        assert!(
            qs.runs.values().all(|n| *n > 0),
            "{ctx}: queue {q} lists a state with no run: {qs:?}"
        );
        for (state, n) in &qs.runs {
            *runs.entry(*state).or_default() += n;
        }
    }
    assert_eq!(
        runs, stats.runs,
        "{ctx}: per state, the queues add up to runs"
    );
    let oldest = stats.queues.values().filter_map(|q| q.oldest_queued).min();
    assert_eq!(
        oldest, stats.oldest_queued,
        "{ctx}: the oldest queued run is the earliest of the queues'"
    );
}

/// S18: `stats()` counts each queue's runs per state exactly, next to totals that are their
/// sums; a queue's `oldest_queued` is the enqueue time of its earliest queued run (none when
/// nothing of it is queued); a queue whose runs retention removed is no longer listed. The
/// event totals count the stored events, their payload bytes and the append time of the
/// oldest, and drop to nothing when retention removes them.
pub async fn s18_stats_count_each_queues_runs<H: SpoolHarness>(h: &H) {
    // A location of its own: the totals are compared with exactly this case's runs.
    let s = h
        .fresh_spool()
        .await
        .unwrap_or_else(|e| panic!("{}: cannot open spool: {e}", h.backend()));
    let s = s.as_ref();
    let clock = h.clock();
    let me = consumer("s18");
    let second = Duration::from_secs(1);
    let [qa, qb, qc, qd] = ["s18-a", "s18-b", "s18-c", "s18-d"].map(random_queue);

    let empty = s.stats().await.unwrap();
    assert_eq!(empty, SpoolStats::default(), "S18: an empty spool");

    let a1 = enqueue_new(s, &qa, "a1").await;
    clock.advance(second);
    let b1 = enqueue_new(s, &qb, "b1").await;
    clock.advance(second);
    let a2 = enqueue_new(s, &qa, "a2").await;
    clock.advance(second);
    enqueue_new(s, &qa, "a3").await;
    clock.advance(second);
    // Queued, but not due for a long time: still counted as queued, and as scheduled (not the
    // backlog a claim can take now).
    let later = clock
        .now()
        .saturating_add(Duration::from_secs(30 * 24 * 3600));
    let b2 = enqueue_with(s, &qb, "b2", EnqueueOptions::default().not_before(later)).await;
    clock.advance(second);
    let c1 = enqueue_new(s, &qc, "c1").await;
    let d1 = enqueue_new(s, &qd, "d1").await;

    // qa: a1 claimed (under a lease that outlives the case), a2 and a3 queued.
    let c = s.claim(&qa, &me, MAX_LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!(
        c[0].run_id, a1,
        "S18 setup: the oldest run is claimed first"
    );
    // qb: b1 succeeded, b2 queued.
    let c = s.claim(&qb, &me, MAX_LEASE, 1).await.unwrap();
    assert_eq!(c[0].run_id, b1, "S18 setup: b2 is not due");
    s.ack(b1, c[0].token).await.unwrap();
    // qc: c1 parked.
    let c = s.claim(&qc, &me, MAX_LEASE, 1).await.unwrap();
    let n = s
        .nack(c1, c[0].token, NackKind::Permanent, "refused")
        .await
        .unwrap();
    assert_eq!(n.state, RunState::Parked);
    // qd: d1 canceled while queued.
    s.cancel(d1).await.unwrap();

    // Two events on the claimed a1, a second apart: the older one's time is `oldest_event`.
    let t_event = clock.now();
    for (id, body) in [("s18-first", &b"12345"[..]), ("s18-second", &b"123"[..])] {
        let ev = RunEventId::new(id).expect("valid event id");
        let appended = s.append_event(a1, &ev, body.to_vec()).await.unwrap();
        assert!(appended.created, "S18 setup: {id} appended");
        clock.advance(second);
    }

    let (t_a2, t_b2) = (info(s, a2).await.enqueued_at, info(s, b2).await.enqueued_at);
    let expected: BTreeMap<QueueName, QueueStats> = [
        (
            qa.clone(),
            queue(
                &[(RunState::Queued, 2), (RunState::Claimed, 1)],
                Some(t_a2),
                0,
            ),
        ),
        (
            qb.clone(),
            queue(
                &[(RunState::Queued, 1), (RunState::Succeeded, 1)],
                Some(t_b2),
                1,
            ),
        ),
        (qc.clone(), queue(&[(RunState::Parked, 1)], None, 0)),
        (qd.clone(), queue(&[(RunState::Canceled, 1)], None, 0)),
    ]
    .into_iter()
    .collect();
    let stats = s.stats().await.unwrap();
    assert_eq!(stats.queues, expected, "S18: each queue's counts, exactly");
    assert_eq!(
        stats.runs,
        [
            (RunState::Queued, 3),
            (RunState::Claimed, 1),
            (RunState::Succeeded, 1),
            (RunState::Canceled, 1),
            (RunState::Parked, 1),
        ]
        .into_iter()
        .collect(),
        "S18: the totals"
    );
    assert_eq!(
        stats.oldest_queued,
        Some(t_a2),
        "S18: a2 is the oldest queued"
    );
    assert_totals_are_the_queues_sums(&stats, "S18");
    assert_eq!(
        (stats.events, stats.event_bytes, stats.oldest_event),
        (2, 8, Some(t_event)),
        "S18: two stored events of 5 and 3 bytes, the older appended first"
    );

    // Retention removes the finished runs (none holds an event): qc and qd hold no run any
    // more and are no longer listed; qa and qb keep their live runs.
    let hour = Duration::from_secs(3600);
    clock.advance(hour * 2);
    let policy = RetentionPolicy {
        max_age: hour,
        max_bytes: 1024,
    };
    let r = s
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert_eq!(
        (r.runs_removed, r.complete),
        (3, true),
        "S18 setup: b1, c1 and d1 are removed"
    );
    let stats = s.stats().await.unwrap();
    let expected: BTreeMap<QueueName, QueueStats> = [
        (
            qa,
            queue(
                &[(RunState::Queued, 2), (RunState::Claimed, 1)],
                Some(t_a2),
                0,
            ),
        ),
        (qb, queue(&[(RunState::Queued, 1)], Some(t_b2), 1)),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        stats.queues, expected,
        "S18: a queue whose runs were all removed is not listed"
    );
    assert_totals_are_the_queues_sums(&stats, "S18 after retention");
    assert_eq!(
        (stats.events, stats.event_bytes, stats.oldest_event),
        (0, 0, None),
        "S18: retention removed both events (older than max_age)"
    );
}
