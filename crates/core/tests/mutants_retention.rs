//! Tests written to kill mutants cargo-mutants found alive in `MemorySpool::retention_pass`
//! (scope `retention-memory`, docs/RELIABILITY.md): the run step's cutoff is strict, and a
//! finished run that still holds an event is not removed.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    ConsumerId, DedupKey, EnqueueOptions, ManualClock, MemorySpool, QueueName, RetentionBudget,
    RetentionPolicy, RunEventId, Spool,
};
use cairn_core::Clock;

#[tokio::test]
async fn a_run_finished_exactly_at_the_cutoff_survives_the_pass() {
    let clock = ManualClock::default();
    let spool = MemorySpool::new(Arc::new(clock.clone()));
    let q = QueueName::new("q").unwrap();
    let me = ConsumerId::new("c").unwrap();
    let mut ids = Vec::new();
    for k in ["older", "exact"] {
        let key = DedupKey::from_parts([k]).unwrap();
        let e = spool
            .enqueue(&q, &key, Vec::new(), EnqueueOptions::default())
            .await
            .unwrap();
        ids.push(e.run_id);
    }
    let claimed = spool
        .claim(&q, &me, Duration::from_secs(30), 2)
        .await
        .unwrap();
    let token = |id| claimed.iter().find(|c| c.run_id == id).unwrap().token;
    let (older, exact) = (ids[0], ids[1]);
    spool.ack(older, token(older)).await.unwrap();
    clock.advance(Duration::from_micros(1));
    spool.ack(exact, token(exact)).await.unwrap();
    let max_age = Duration::from_secs(3600);
    // The pass starts exactly `max_age` after `exact` finished: its cutoff is that instant.
    clock.advance(max_age);
    let policy = RetentionPolicy {
        max_age,
        max_bytes: u64::MAX,
    };
    let report = spool
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert!(report.complete);
    assert!(
        spool.run(older).await.unwrap().is_none(),
        "finished before the cutoff: removed"
    );
    assert!(
        spool.run(exact).await.unwrap().is_some(),
        "finished exactly at the cutoff: not older than max_age, kept"
    );
}

/// A finished run keeps its row while it still holds an event, even when it finished before the
/// cutoff: here the host's clock stepped back between the event's append and the run's ack, so
/// the event is younger than the run's end and outlives the event step.
#[tokio::test]
async fn a_finished_run_that_still_holds_an_event_is_kept() {
    let clock = ManualClock::default();
    let spool = MemorySpool::new(Arc::new(clock.clone()));
    let q = QueueName::new("q").unwrap();
    let me = ConsumerId::new("c").unwrap();
    let hour = Duration::from_secs(3600);
    let start = clock.now();
    let key = DedupKey::from_parts(["k"]).unwrap();
    let run = spool
        .enqueue(&q, &key, Vec::new(), EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let claimed = spool.claim(&q, &me, hour * 4, 1).await.unwrap();
    // The event at start + 2 h, then the clock steps back and the run finishes at start.
    clock.set(start.saturating_add(hour * 2));
    let ev = RunEventId::new("e").unwrap();
    spool.append_event(run, &ev, b"x".to_vec()).await.unwrap();
    clock.set(start);
    spool.ack(run, claimed[0].token).await.unwrap();
    // At start + 2.5 h with a 1 h max age the cutoff is start + 1.5 h: the run finished before
    // it, its event was appended after it.
    clock.set(start.saturating_add(hour * 5 / 2));
    let policy = RetentionPolicy {
        max_age: hour,
        max_bytes: u64::MAX,
    };
    let report = spool
        .retention_pass(&policy, &RetentionBudget::default())
        .await
        .unwrap();
    assert!(report.complete);
    assert_eq!(
        report.events_expired, 0,
        "the event is younger than max_age"
    );
    assert_eq!(report.runs_removed, 0, "a run holding an event is kept");
    assert!(spool.run(run).await.unwrap().is_some());
    assert_eq!(spool.stats().await.unwrap().events, 1);
}
