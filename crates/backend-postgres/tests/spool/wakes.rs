//! Wake-ups the spool contract promises besides an enqueue's.

use std::time::Duration;

use cairn_conformance::random_queue;
use cairn_core::spool::{NackKind, RunState};
use cairn_core::{ConsumerId, DedupKey, EnqueueOptions, Spool};
use cairn_postgres::spool::testkit::spool_harness;

/// A retryable nack puts the run back in its queue and wakes the queue's subscribers (the
/// `Spool::nack` contract) by `NOTIFY`: with the fallback poll an hour away, only the nack can
/// wake the subscriber in time. Kills `wake = to == RunState::Queued` → `!=` in `nack`
/// (mutation testing of `spool/ops.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_nack_wakes_the_queues_subscribers() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    spool.set_wake_poll(Duration::from_secs(3600));
    let q = random_queue("nack-wake");
    spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["nack-wake"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let me = ConsumerId::new("nack-wake").unwrap();
    let claimed = spool
        .claim(&q, &me, Duration::from_secs(30), 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut wake = spool.subscribe(&q).await.unwrap();
    let nacked = spool
        .nack(
            claimed[0].run_id,
            claimed[0].token,
            NackKind::Retryable,
            "again",
        )
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Queued);
    tokio::time::timeout(Duration::from_secs(20), wake.wait())
        .await
        .expect("a retryable nack must wake the queue's subscriber without waiting for a poll")
        .unwrap();
    spool.close().await;
}
