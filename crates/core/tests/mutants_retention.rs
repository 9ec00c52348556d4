//! Tests written to kill mutants cargo-mutants found alive in `MemorySpool::retention_pass`
//! (scope `retention-memory`, docs/RELIABILITY.md): the run step's cutoff is strict.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    ConsumerId, DedupKey, EnqueueOptions, ManualClock, MemorySpool, QueueName, RetentionBudget,
    RetentionPolicy, Spool,
};

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
