//! S16: the producer-side end of a run. An event is accepted only while the run is live and
//! not closed, decided atomically with the close; so a reader that saw a run closed and then
//! read no unacknowledged event has seen every event ever accepted for it. A release gives a
//! claimed run back without spending its attempt.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    CloseOutcome, EventStream, ImportSource, ImportedEvent, ImportedRun, NackKind,
    RunImportOutcome, RunState, SupersedeGroup, MAX_LEASE,
};
use cairn_core::{Clock, EnqueueOptions, Error, RunEventId, RunId, Spool};

use super::support::{
    assert_err, consumer, enqueue_new, enqueue_with, info, key, open_spool, within, LEASE,
};
use crate::{random_queue, SpoolHarness};

fn eid(s: &str) -> RunEventId {
    RunEventId::new(s).expect("valid event id")
}

/// Asserts an append was refused as [`Error::RunClosed`] with this state and close flag.
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    r: cairn_core::Result<T>,
    want_state: RunState,
    want_closed: bool,
    ctx: &str,
) {
    match r {
        Err(Error::RunClosed { state, closed, .. }) => {
            assert_eq!((state, closed), (want_state, want_closed), "{ctx}");
        }
        other => panic!("{ctx}: expected RunClosed, got {other:?}"),
    }
}

/// The ids of the run's stored events, in seq order.
async fn stored_ids(s: &dyn Spool, run: RunId) -> Vec<RunEventId> {
    s.events(run, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_id)
        .collect()
}

/// S16: an open run takes events until it is closed; a closed run and a finished run (every
/// terminal state) refuse new events with `RunClosed` and store nothing, while re-appending an
/// id the run still holds stays a no-op; closing is idempotent and allowed in every state.
pub async fn s16_closed_or_finished_run_refuses_appends<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s16");

    let run = enqueue_new(s, &q, "open").await;
    assert_eq!(info(s, run).await.stream, EventStream::Open);
    assert_eq!(
        s.append_event(run, &eid("e1"), b"one".to_vec())
            .await
            .unwrap()
            .seq,
        1
    );
    assert_eq!(s.close_run(run).await.unwrap(), CloseOutcome::Closed);
    assert_eq!(s.close_run(run).await.unwrap(), CloseOutcome::AlreadyClosed);
    let i = info(s, run).await;
    assert_eq!(
        (i.stream, i.state, i.events),
        (EventStream::Closed, RunState::Queued, 1)
    );
    assert_refused(
        s.append_event(run, &eid("e2"), b"two".to_vec()).await,
        RunState::Queued,
        true,
        "append after close",
    );
    assert_eq!(stored_ids(s, run).await, vec![eid("e1")], "nothing stored");
    let again = s
        .append_event(run, &eid("e1"), b"other".to_vec())
        .await
        .unwrap();
    assert_eq!(
        (again.seq, again.created),
        (1, false),
        "a held id stays a no-op"
    );
    // Closing changes nothing else: the run is still claimed and acked as usual.
    let c = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
    assert_eq!(c.len(), 1);
    assert_refused(
        s.append_event(run, &eid("e3"), Vec::new()).await,
        RunState::Claimed,
        true,
        "append to a claimed closed run",
    );
    s.ack(run, c[0].token).await.unwrap();
    assert_refused(
        s.append_event(run, &eid("e4"), Vec::new()).await,
        RunState::Succeeded,
        true,
        "append to a closed succeeded run",
    );

    // Every terminal state refuses, closed or not.
    let acked = enqueue_new(s, &q, "acked").await;
    let c = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
    assert_eq!(c[0].run_id, acked);
    s.ack(acked, c[0].token).await.unwrap();
    let canceled = enqueue_new(s, &q, "canceled").await;
    s.cancel(canceled).await.unwrap();
    let group = SupersedeGroup::from_parts(["g"]).unwrap();
    let superseded = enqueue_with(
        s,
        &q,
        "old",
        EnqueueOptions::default().supersede(group.clone()),
    )
    .await;
    enqueue_with(s, &q, "new", EnqueueOptions::default().supersede(group)).await;
    let parked = enqueue_new(s, &q, "parked").await;
    let failed = enqueue_new(s, &q, "failed").await;
    // "new" is queued too: claim everything due and settle the two runs that matter.
    for c in s.claim(&q, &consumer("c"), LEASE, 10).await.unwrap() {
        if c.run_id == parked {
            s.nack(c.run_id, c.token, NackKind::Permanent, "bad")
                .await
                .unwrap();
        } else if c.run_id == failed {
            s.nack(c.run_id, c.token, NackKind::Failed, "red")
                .await
                .unwrap();
        }
    }
    for (run, state) in [
        (acked, RunState::Succeeded),
        (canceled, RunState::Canceled),
        (superseded, RunState::Superseded),
        (parked, RunState::Parked),
        (failed, RunState::Failed),
    ] {
        assert_eq!(info(s, run).await.state, state);
        assert_refused(
            s.append_event(run, &eid("late"), b"late".to_vec()).await,
            state,
            false,
            &format!("append to a {state} run"),
        );
        assert!(
            stored_ids(s, run).await.is_empty(),
            "{state}: nothing stored"
        );
        // Closing a finished run is allowed and only marks it.
        assert_eq!(s.close_run(run).await.unwrap(), CloseOutcome::Closed);
    }
    assert_err(
        s.close_run(RunId([9; 16])).await,
        "UnknownRun",
        "close of an unknown run",
    );
}

/// S16: appends racing a close: every append that returned success is stored, every other one
/// was refused with `RunClosed` and stored nothing, and after the close returned nothing more
/// is accepted — so "closed, then no unacknowledged event" read in that order is final.
pub async fn s16_appends_racing_a_close_are_stored_or_refused<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let q = random_queue("s16-race");
    let run = enqueue_new(s.as_ref(), &q, "race").await;
    let appends = 40;
    let mut tasks = Vec::new();
    for i in 0..appends {
        let sp: Arc<dyn Spool> = s.clone();
        tasks.push(tokio::spawn(async move {
            let id = eid(&format!("e{i}"));
            let r = sp.append_event(run, &id, vec![1; 8]).await.map(|_| ());
            (id, r)
        }));
        if i == appends / 2 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let r = s.close_run(run).await.map(|_| ());
                (eid("close"), r)
            }));
        }
    }
    let mut accepted = BTreeSet::new();
    let mut refused = 0;
    for t in tasks {
        let (id, r) = within("append or close", t).await.unwrap();
        match r {
            Ok(_) if id == eid("close") => {}
            Ok(_) => {
                accepted.insert(id);
            }
            Err(Error::RunClosed { .. }) => refused += 1,
            Err(e) => panic!("{id:?}: unexpected {e}"),
        }
    }
    let stored: BTreeSet<RunEventId> = stored_ids(s.as_ref(), run).await.into_iter().collect();
    assert_eq!(stored, accepted, "exactly the accepted appends are stored");
    assert_eq!(accepted.len() + refused, appends);
    assert_eq!(info(s.as_ref(), run).await.stream, EventStream::Closed);
    assert_refused(
        s.append_event(run, &eid("after"), Vec::new()).await,
        RunState::Queued,
        true,
        "append after the close returned",
    );
}

/// S16: a release gives a claimed run back without spending its attempt: the run is queued
/// with the claim's attempt returned, due after the delay, and so never parks however often it
/// is released; a stale token, an unclaimed run and an oversized delay are refused; a release
/// after a cancel request ends the run canceled.
pub async fn s16_release_returns_the_attempt<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let clock = h.clock();
    let q = random_queue("s16-release");
    let run = enqueue_with(s, &q, "r", EnqueueOptions::default().max_attempts(1)).await;
    let delay = Duration::from_secs(5);
    for round in 0..3 {
        let c = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
        assert_eq!(c.len(), 1, "round {round}: the run is due again");
        assert_eq!(c[0].attempt, 1, "round {round}: the attempt was given back");
        let now = clock.now();
        let r = s.release(run, c[0].token, delay).await.unwrap();
        assert_eq!(r.state, RunState::Queued);
        assert_eq!(r.retry_at, Some(now.saturating_add(delay)));
        let i = info(s, run).await;
        assert_eq!((i.state, i.attempts, i.lease), (RunState::Queued, 0, None));
        assert_eq!(i.due_at, Some(now.saturating_add(delay)));
        assert_err(
            s.release(run, c[0].token, delay).await,
            "InvalidTransition",
            "release of a queued run",
        );
        assert!(s
            .claim(&q, &consumer("c"), LEASE, 1)
            .await
            .unwrap()
            .is_empty());
        clock.advance(delay);
    }
    let c = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
    assert_err(
        s.release(run, c[0].token, MAX_LEASE + Duration::from_secs(1))
            .await,
        "InvalidInput",
        "a delay over the longest lease",
    );
    assert_eq!(
        info(s, run).await.state,
        RunState::Claimed,
        "nothing was written"
    );
    // A retryable nack on its only attempt parks the run: the attempts above were given back.
    let nacked = s
        .nack(run, c[0].token, NackKind::Retryable, "down")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Parked);

    // A stale token: the lease expired and another claim took the run.
    let other = enqueue_with(s, &q, "stale", EnqueueOptions::default().max_attempts(3)).await;
    let first = s.claim(&q, &consumer("c"), LEASE, 1).await.unwrap();
    assert_eq!(first[0].run_id, other);
    clock.advance(LEASE * 2);
    let taken = s.claim(&q, &consumer("d"), LEASE, 1).await.unwrap();
    assert_eq!(taken.len(), 1, "the expired lease was taken over");
    assert_err(
        s.release(other, first[0].token, delay).await,
        "LeaseLost",
        "stale token",
    );
    s.cancel(other).await.unwrap();
    let r = s.release(other, taken[0].token, delay).await.unwrap();
    assert_eq!(r.state, RunState::Canceled, "a requested cancel wins");
    assert_err(
        s.release(RunId([7; 16]), taken[0].token, delay).await,
        "UnknownRun",
        "unknown run",
    );
}

/// S16: an imported run (like one written by an older build) carries no close mark: it takes
/// events while live and is closed like any other, after which it refuses them.
pub async fn s16_unmarked_runs_take_events_until_closed<H: SpoolHarness>(h: &H) {
    let s = open_spool(h).await;
    let s = s.as_ref();
    let q = random_queue("s16-unmarked");
    let now = h.clock().now();
    let id = RunId::generate(now);
    let imported = ImportedRun {
        run_id: id,
        queue: q.clone(),
        dedup_key: key(&["old"]),
        supersede_group: None,
        payload: b"{}".to_vec(),
        state: RunState::Queued,
        attempts: 0,
        max_attempts: 3,
        priority: 0,
        enqueued_at: now,
        due_at: Some(now),
        finished_at: None,
        reason: None,
        facts: BTreeMap::new(),
        events: vec![ImportedEvent {
            event_id: eid("first"),
            payload: b"1".to_vec(),
            created_at: now,
        }],
    };
    let source = ImportSource {
        fingerprint: *blake3::hash(id.as_bytes()).as_bytes(),
        description: "s16 unmarked".into(),
    };
    let outcome = s.import_runs(&source, vec![imported]).await.unwrap();
    assert!(
        matches!(outcome, RunImportOutcome::Imported { .. }),
        "{outcome:?}"
    );
    assert_eq!(info(s, id).await.stream, EventStream::Unmarked);
    assert_eq!(
        s.append_event(id, &eid("second"), Vec::new())
            .await
            .unwrap()
            .seq,
        2
    );
    assert_eq!(s.close_run(id).await.unwrap(), CloseOutcome::Closed);
    assert_eq!(info(s, id).await.stream, EventStream::Closed);
    assert_refused(
        s.append_event(id, &eid("third"), Vec::new()).await,
        RunState::Queued,
        true,
        "append after closing an unmarked run",
    );
    assert_eq!(stored_ids(s, id).await, vec![eid("first"), eid("second")]);
}
