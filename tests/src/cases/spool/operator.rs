//! S17: the operator's way out of `parked`. A parked run can be retried (back to its queue,
//! due at once, with a fresh attempt budget, waking its subscribers) or discarded (ended
//! `canceled`); each action is recorded by the spool as an event of the run in the same
//! transaction, although the parked run refuses producers' events. A run that is not parked is
//! refused with its state, and nothing is written.

use cairn_core::spool::{
    operator_event, retry_parked_runs, Action, BulkRetry, EventStream, NackKind, RunState,
};
use cairn_core::{Clock, EnqueueOptions, Error, RunEventId, RunId, Spool};

use super::{assert_err, consumer, enqueue_with, info, open_spool, within, LEASE};
use crate::{random_queue, SpoolHarness};

/// Who asks, in every action of this case.
const BY: &str = "s17-operator";

/// Claims the queue's one due run (which must be `run`) and nacks it permanently: it is
/// parked with `reason`.
async fn park(s: &dyn Spool, q: &cairn_core::QueueName, run: RunId, reason: &str) {
    let claimed = s.claim(q, &consumer("w"), LEASE, 1).await.unwrap();
    assert_eq!(claimed.len(), 1, "one due run");
    assert_eq!(claimed[0].run_id, run);
    let nacked = s
        .nack(run, claimed[0].token, NackKind::Permanent, reason)
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Parked);
}

/// S17: retry and discard of a parked run, their events, their refusals.
pub async fn s17_operator_retries_or_discards_a_parked_run<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s17");
    let run = enqueue_with(s, &q, "a", EnqueueOptions::default().max_attempts(2)).await;
    let mut wake = s.subscribe(&q).await.unwrap();

    // Not parked: refused with the state, nothing written.
    for (what, r) in [
        ("retry of a queued run", s.retry_parked(run, BY).await),
        ("discard of a queued run", s.discard(run, BY).await),
    ] {
        match r {
            Err(Error::InvalidTransition { from, .. }) => assert_eq!(from, RunState::Queued),
            other => panic!("{what}: expected InvalidTransition, got {other:?}"),
        }
    }
    assert_err(
        s.retry_parked(RunId([9; 16]), BY).await,
        "UnknownRun",
        "retry of an unknown run",
    );
    assert_err(
        s.discard(RunId([9; 16]), BY).await,
        "UnknownRun",
        "discard of an unknown run",
    );
    assert_eq!(info(s, run).await.events, 0, "a refusal writes no event");

    park(s, &q, run, "the collector said 403").await;
    let parked = info(s, run).await;
    assert_err(
        s.retry_parked(run, "").await,
        "InvalidInput",
        "empty operator",
    );
    assert_eq!(
        info(s, run).await,
        parked,
        "a refused operator changes nothing"
    );
    // Drain the wake-ups of the enqueue so far; the retry's must come after.
    while tokio::time::timeout(std::time::Duration::from_millis(1), wake.wait())
        .await
        .is_ok()
    {}

    let retried = s.retry_parked(run, BY).await.unwrap();
    let now = clock.now();
    assert_eq!(retried.state, RunState::Queued);
    assert_eq!(
        retried.parked_reason.as_deref(),
        Some("the collector said 403")
    );
    assert_eq!((retried.event_seq, retried.at), (1, now));
    within("the retry wakes the queue's subscriber", wake.wait())
        .await
        .unwrap();
    let i = info(s, run).await;
    assert_eq!(i.state, RunState::Queued);
    assert_eq!(i.attempts, 0, "a fresh attempt budget");
    assert_eq!(i.due_at, Some(now), "due at once");
    assert_eq!((i.finished_at, i.lease.is_none()), (None, true));
    assert_eq!(i.reason.as_deref(), Some("the collector said 403"));
    assert_eq!(i.stream, EventStream::Open, "the stream is untouched");
    let events = s.events(run, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    let (id, payload) = operator_event(
        Action::Requeue,
        1,
        BY,
        now,
        Some("the collector said 403"),
        parked.attempts,
    )
    .unwrap();
    assert_eq!(
        (
            &events[0].event_id,
            &events[0].payload,
            events[0].created_at
        ),
        (&id, &payload, now)
    );
    // Live again: its producer appends after the spool's event, gap-free.
    let produced = s
        .append_event(run, &RunEventId::new("p1").unwrap(), b"x".to_vec())
        .await
        .unwrap();
    assert_eq!((produced.seq, produced.created), (2, true));
    let again = s.claim(&q, &consumer("w"), LEASE, 1).await.unwrap();
    assert_eq!((again.len(), again[0].attempt), (1, 1), "claimed afresh");
    assert_err(
        s.retry_parked(run, BY).await,
        "InvalidTransition",
        "retry of a claimed run",
    );
    s.close_run(run).await.unwrap();
    s.nack(run, again[0].token, NackKind::Permanent, "still 403")
        .await
        .unwrap();

    let discarded = s.discard(run, BY).await.unwrap();
    assert_eq!(discarded.state, RunState::Canceled);
    assert_eq!(discarded.parked_reason.as_deref(), Some("still 403"));
    assert_eq!(discarded.event_seq, 3);
    let i = info(s, run).await;
    assert_eq!(i.state, RunState::Canceled);
    assert_eq!(i.finished_at, Some(clock.now()));
    assert_eq!(
        i.stream,
        EventStream::Closed,
        "a closed stream stays closed"
    );
    let events = s.events(run, 0, 10).await.unwrap();
    let (id, payload) =
        operator_event(Action::Discard, 3, BY, clock.now(), Some("still 403"), 1).unwrap();
    assert_eq!((&events[2].event_id, &events[2].payload), (&id, &payload));
    match s.retry_parked(run, BY).await {
        Err(Error::InvalidTransition { from, action }) => {
            assert_eq!((from, action), (RunState::Canceled, Action::Requeue));
        }
        other => panic!("retry of a discarded run: expected InvalidTransition, got {other:?}"),
    }
    assert_eq!(info(s, run).await.events, 3, "a refusal writes no event");

    // Another instance sees every write: the actions are durable, not cached.
    let other = open_spool(h).await;
    assert_eq!(other.run(run).await.unwrap().unwrap(), i);
}

/// S17: the bulk retry of a queue's parked runs whose reason matches retries each through the
/// single-run path (each gets its event) and counts what it left.
pub async fn s17_bulk_retry_of_parked_runs_by_reason<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s17b");
    let mut runs = Vec::new();
    for (k, reason) in [
        ("a", "HTTP 403 from a"),
        ("b", "bad input"),
        ("c", "HTTP 403 from c"),
    ] {
        let run = enqueue_with(s, &q, k, EnqueueOptions::default()).await;
        park(s, &q, run, reason).await;
        runs.push(run);
    }
    let done = retry_parked_runs(s, &q, Some("403"), BY).await.unwrap();
    assert_eq!(
        done,
        BulkRetry {
            retried: 2,
            unmatched: 1,
            skipped: 0
        }
    );
    for (run, want) in runs
        .iter()
        .zip([RunState::Queued, RunState::Parked, RunState::Queued])
    {
        let i = info(s, *run).await;
        assert_eq!(i.state, want);
        assert_eq!(i.events, u64::from(want == RunState::Queued));
    }
    let done = retry_parked_runs(s, &q, None, BY).await.unwrap();
    assert_eq!((done.retried, done.unmatched), (1, 0));
    assert_eq!(info(s, runs[1]).await.state, RunState::Queued);
    let none = retry_parked_runs(s, &q, None, BY).await.unwrap();
    assert_eq!(none, BulkRetry::default(), "nothing parked is left");
}

/// S17: two operators acting on one parked run at once, from two instances (two retries, or a
/// retry and a discard): exactly one action applies, the other is refused with the state it
/// found (never a silent success), and the run holds exactly one operator event.
pub async fn s17_racing_operators_apply_once<H: SpoolHarness>(h: &H) {
    let a = open_spool(h).await;
    let b = open_spool(h).await;
    for round in 0..6 {
        let q = random_queue("s17r");
        let run = enqueue_with(a.as_ref(), &q, "r", EnqueueOptions::default()).await;
        park(a.as_ref(), &q, run, "x").await;
        let discard = round % 2 == 1;
        let (ra, rb) = within("two racing operators", async {
            tokio::join!(a.retry_parked(run, BY), async {
                if discard {
                    b.discard(run, BY).await
                } else {
                    b.retry_parked(run, BY).await
                }
            })
        })
        .await;
        let applied: Vec<_> = [&ra, &rb]
            .into_iter()
            .filter_map(|r| r.as_ref().ok())
            .collect();
        assert_eq!(applied.len(), 1, "round {round}: {ra:?} {rb:?}");
        for r in [&ra, &rb] {
            if let Err(e) = r {
                match e {
                    Error::InvalidTransition { from, .. } => {
                        assert_eq!(*from, applied[0].state, "round {round}: the state it found");
                    }
                    other => panic!("round {round}: expected InvalidTransition, got {other}"),
                }
            }
        }
        let i = info(a.as_ref(), run).await;
        assert_eq!((i.state, i.events), (applied[0].state, 1), "round {round}");
    }
}
