//! How runs end: supersede (S8), cancel (S9), retry, backoff, park and claim order (S10).

use std::collections::BTreeSet;
use std::time::Duration;

use cairn_core::spool::{
    expired_park_reason, jitter_seed, BackoffPolicy, CancelOutcome, Nacked, RunState, MAX_LEASE,
    MAX_REASON_LEN,
};
use cairn_core::{Claimed, Clock, EnqueueOptions, Enqueued, NackKind, RunId, SupersedeGroup};

use super::support::{
    assert_err, consumer, enqueue_new, enqueue_with, info, key, max_backoff, open_spool, LEASE,
};
use crate::{random_queue, SpoolHarness};

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

/// S10: a run that succeeds after failed attempts keeps no failure reason — the ack clears
/// the reason the last nack left (issue 44 item 5.5: a run that succeeded on its third attempt
/// still showed the second attempt's failure). Two runs acked at once take the same path as
/// one (on Postgres, a batched ack).
pub async fn s10_success_after_failed_attempts_clears_the_reason<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s10c");
    let me = consumer("s10c");
    let options = || EnqueueOptions::default().max_attempts(5);
    let ids = [
        enqueue_with(s, &q, "third-time-a", options()).await,
        enqueue_with(s, &q, "third-time-b", options()).await,
    ];
    for attempt in 1..=2u32 {
        let c = s.claim(&q, &me, LEASE, 2).await.unwrap();
        assert_eq!(
            c.len(),
            2,
            "S10: attempt {attempt} of both runs is claimable"
        );
        for claimed in &c {
            s.nack(
                claimed.run_id,
                claimed.token,
                NackKind::Retryable,
                &format!("attempt {attempt} failed"),
            )
            .await
            .unwrap();
        }
        let i = info(s, ids[0]).await;
        let want = format!("attempt {attempt} failed");
        assert_eq!(i.reason.as_deref(), Some(want.as_str()));
        clock.advance(max_backoff(attempt));
    }
    let c = s.claim(&q, &me, LEASE, 2).await.unwrap();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.attempt == 3));
    let (a, b) = tokio::join!(
        s.ack(c[0].run_id, c[0].token),
        s.ack(c[1].run_id, c[1].token)
    );
    a.unwrap();
    b.unwrap();
    for id in ids {
        let i = info(s, id).await;
        assert_eq!((i.state, i.attempts), (RunState::Succeeded, 3));
        assert_eq!(
            i.reason, None,
            "S10: a succeeded run shows no earlier attempt's failure"
        );
    }
    // A repeated ack still succeeds and writes nothing.
    s.ack(c[0].run_id, c[0].token).await.unwrap();
    assert_eq!(info(s, c[0].run_id).await.reason, None);
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

/// S10: a retry with the caller's own delay ([`Spool::retry_after`](cairn_core::Spool::retry_after))
/// requeues the run due exactly that delay later (zero: due at once) instead of after the
/// backoff, spending the attempt: the last attempt parks, a requested cancel wins, and a delay
/// over the longest lease, a stale token and an unknown run are refused with nothing written.
pub async fn s10_retry_after_uses_the_callers_delay<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s10r");
    let me = consumer("s10r");
    let id = enqueue_with(s, &q, "later", EnqueueOptions::default().max_attempts(3)).await;

    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c[0].attempt, 1);
    let delay = Duration::from_secs(90);
    let now = clock.now();
    let n = s
        .retry_after(id, c[0].token, "rate limited", delay)
        .await
        .unwrap();
    assert_eq!(
        n,
        Nacked {
            state: RunState::Queued,
            retry_at: Some(now.saturating_add(delay))
        },
        "S10: due after the caller's delay, not the backoff"
    );
    let i = info(s, id).await;
    assert_eq!(
        (i.state, i.due_at, i.lease),
        (RunState::Queued, n.retry_at, None)
    );
    assert_eq!(i.reason.as_deref(), Some("rate limited"));
    clock.advance(delay - Duration::from_micros(1));
    assert!(
        s.claim(&q, &me, LEASE, 1).await.unwrap().is_empty(),
        "S10: not claimable before the caller's delay passed"
    );
    clock.advance(Duration::from_micros(1));
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1, "S10: claimable once the delay passed");
    assert_eq!(c[0].attempt, 2, "S10: the retry spent an attempt");

    // Too long a delay is refused before anything is written.
    assert_err(
        s.retry_after(id, c[0].token, "never", MAX_LEASE + Duration::from_secs(1))
            .await,
        "InvalidInput",
        "a retry delay over the longest lease",
    );
    let i = info(s, id).await;
    assert_eq!(i.state, RunState::Claimed, "S10: nothing was written");
    assert_eq!(i.reason.as_deref(), Some("rate limited"));

    // A zero delay: due at once.
    let now = clock.now();
    let n = s
        .retry_after(id, c[0].token, "again", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(n.retry_at, Some(now));
    let c = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1, "S10: a zero delay is due at once");
    assert_eq!(c[0].attempt, 3);

    // The last attempt parks, whatever the delay.
    let n = s
        .retry_after(id, c[0].token, "still limited", Duration::from_secs(5))
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
    let reason = info(s, id).await.reason.unwrap_or_default();
    assert!(
        reason.contains("attempts exhausted") && reason.contains("still limited"),
        "S10: the park reason says why: {reason}"
    );

    // A requested cancel wins; a stale token and an unknown run are refused.
    let other = enqueue_with(s, &q, "canceled", EnqueueOptions::default().max_attempts(3)).await;
    let first = s.claim(&q, &me, LEASE, 1).await.unwrap();
    assert_eq!(first[0].run_id, other);
    clock.advance(LEASE * 2);
    let taken = s.claim(&q, &consumer("d"), LEASE, 1).await.unwrap();
    assert_eq!(taken.len(), 1, "the expired lease was taken over");
    assert_err(
        s.retry_after(other, first[0].token, "stale", delay).await,
        "LeaseLost",
        "a stale token",
    );
    s.cancel(other).await.unwrap();
    let n = s
        .retry_after(other, taken[0].token, "stopping", delay)
        .await
        .unwrap();
    assert_eq!(n.state, RunState::Canceled, "S10: a requested cancel wins");
    assert_err(
        s.retry_after(RunId([7; 16]), taken[0].token, "who", delay)
            .await,
        "UnknownRun",
        "an unknown run",
    );
}
