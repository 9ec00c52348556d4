//! S17: the operator's way out of `parked`. A parked run can be retried (back to its queue,
//! due at once, with a fresh attempt budget, waking its subscribers) or discarded (ended
//! `canceled`); each action is recorded by the spool as an event of the run in the same
//! transaction, although the parked run refuses producers' events. A run that is not parked is
//! refused with its state, and nothing is written.

use std::collections::BTreeMap;

use cairn_core::spool::{
    operator_event, retry_parked_runs, Action, BulkRetry, EventStream, ImportSource, ImportedEvent,
    ImportedRun, NackKind, RunImportOutcome, RunState,
};
use cairn_core::{Clock, EnqueueOptions, Error, RunEventId, RunId, Spool};

use super::support::{assert_err, consumer, enqueue_with, info, key, open_spool, within, LEASE};
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
            skipped: 0,
            failed: 0,
            failed_runs: Vec::new(),
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

/// S17: the `cairn:` event ids are the spool's own. A producer's append of one (the id a retry
/// would take next, or any other) is refused as reserved with nothing written, so no producer
/// can forge an operator's event or make the run's retry fail; the retry then records its
/// event under that id.
pub async fn s17_producers_cannot_take_the_spools_event_ids<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s17p");
    let run = enqueue_with(s, &q, "p", EnqueueOptions::default()).await;
    let first = s
        .append_event(run, &RunEventId::new("p1").unwrap(), b"1".to_vec())
        .await
        .unwrap();
    assert_eq!((first.seq, first.created), (1, true));
    let refused = |id: &str, r: cairn_core::Result<cairn_core::spool::EventAppended>| match r {
        Err(Error::Reserved { what, name }) => {
            assert_eq!((what, name.as_str()), ("run event id", id));
        }
        other => panic!("a producer's {id}: expected Reserved, got {other:?}"),
    };
    for id in ["cairn:retry:2", "cairn:discard:2", "cairn:mine"] {
        let r = s
            .append_event(run, &RunEventId::new(id).unwrap(), b"forged".to_vec())
            .await;
        refused(id, r);
    }
    // Refused before the run is looked up.
    let r = s
        .append_event(
            RunId([9; 16]),
            &RunEventId::new("cairn:x").unwrap(),
            Vec::new(),
        )
        .await;
    refused("cairn:x", r);
    assert_eq!(info(s, run).await.events, 1, "a refused id writes nothing");

    park(s, &q, run, "the collector said 403").await;
    let retried = s.retry_parked(run, BY).await.unwrap();
    assert_eq!((retried.state, retried.event_seq), (RunState::Queued, 2));
    let events = s.events(run, 0, 10).await.unwrap();
    let ids: Vec<&[u8]> = events.iter().map(|e| e.event_id.as_bytes()).collect();
    assert_eq!(ids, [b"p1".as_slice(), b"cairn:retry:2".as_slice()]);
    // The spool's own event is not the producer's to re-append either.
    let r = s
        .append_event(run, &RunEventId::new("cairn:retry:2").unwrap(), Vec::new())
        .await;
    refused("cairn:retry:2", r);
    assert_eq!(info(s, run).await.events, 2);
}

/// S17: the bulk retry goes on past a parked run whose own retry is refused (here: an event
/// imported from an older store holds the id the retry would record with, a conflict), counts
/// and names it, leaves it parked with nothing written, and retries the runs after it.
pub async fn s17_bulk_retry_goes_on_past_a_run_it_cannot_retry<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s17f");
    let now = h.clock().now();
    let base = RunId::generate(now);
    // Three ids in run id order (the bulk retry's order); the middle one cannot be retried.
    let ids: Vec<RunId> = (0..3u8)
        .map(|i| {
            let mut b = base.0;
            b[15] = i;
            RunId(b)
        })
        .collect();
    let runs = ids
        .iter()
        .enumerate()
        .map(|(i, id)| ImportedRun {
            run_id: *id,
            queue: q.clone(),
            dedup_key: key(&["s17f", &i.to_string()]),
            supersede_group: None,
            payload: b"{}".to_vec(),
            state: RunState::Parked,
            attempts: 1,
            max_attempts: 1,
            priority: 0,
            enqueued_at: now,
            due_at: None,
            finished_at: Some(now),
            reason: Some("HTTP 403".into()),
            facts: BTreeMap::new(),
            // Seq 1 under the id a retry takes at seq 2.
            events: if i == 1 {
                vec![ImportedEvent {
                    event_id: RunEventId::new("cairn:retry:2").unwrap(),
                    payload: b"stored".to_vec(),
                    created_at: now,
                }]
            } else {
                Vec::new()
            },
        })
        .collect();
    let source = ImportSource {
        fingerprint: *blake3::hash(base.as_bytes()).as_bytes(),
        description: "s17 bulk retry past a failing run".into(),
    };
    let outcome = s.import_runs(&source, runs).await.unwrap();
    assert!(
        matches!(outcome, RunImportOutcome::Imported { .. }),
        "{outcome:?}"
    );
    assert_err(
        s.retry_parked(ids[1], BY).await,
        "Conflict",
        "a retry whose event id the run holds",
    );
    let stuck = info(s, ids[1]).await;

    let want = BulkRetry {
        retried: 2,
        unmatched: 0,
        skipped: 0,
        failed: 1,
        failed_runs: vec![ids[1]],
    };
    assert_eq!(retry_parked_runs(s, &q, None, BY).await.unwrap(), want);
    for (id, state) in ids
        .iter()
        .zip([RunState::Queued, RunState::Parked, RunState::Queued])
    {
        assert_eq!(info(s, *id).await.state, state);
    }
    assert_eq!(info(s, ids[1]).await, stuck, "the failed run is untouched");
    let again = retry_parked_runs(s, &q, None, BY).await.unwrap();
    assert_eq!(
        again,
        BulkRetry {
            retried: 0,
            failed: 1,
            failed_runs: vec![ids[1]],
            ..BulkRetry::default()
        },
        "a second pass fails it again and writes nothing"
    );
}
