//! Queries the Postgres spool answers with its own SQL where the trait has a provided body.

use std::time::Duration;

use cairn_conformance::random_queue;
use cairn_core::spool::RunFilter;
use cairn_core::{Clock, ConsumerId, DedupKey, EnqueueOptions, Spool};
use cairn_postgres::spool::testkit::spool_harness;

/// `next_due` is the smallest `due_at` of the queue's live runs — queued (not-before, retry
/// time) and claimed (lease expiry plus backoff) — as the listing shows them, and `None` for a
/// queue without live runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_due_is_the_earliest_live_due_time() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let clock = cairn_conformance::SpoolHarness::clock(&h).clone();
    let q = random_queue("next-due");
    assert_eq!(spool.next_due(&q).await.unwrap(), None);
    let at = |s| clock.now().saturating_add(Duration::from_secs(s));
    for (k, delay) in [("a", 10), ("b", 5), ("c", 0)] {
        spool
            .enqueue(
                &q,
                &DedupKey::from_parts([k]).unwrap(),
                Vec::new(),
                EnqueueOptions::default().not_before(at(delay)),
            )
            .await
            .unwrap();
    }
    let listed = || async {
        let runs = spool
            .runs(
                &RunFilter {
                    queue: Some(q.clone()),
                    ..RunFilter::default()
                },
                100,
            )
            .await
            .unwrap();
        runs.iter().filter_map(|r| r.due_at).min()
    };
    assert_eq!(spool.next_due(&q).await.unwrap(), Some(at(0)));
    assert_eq!(spool.next_due(&q).await.unwrap(), listed().await);
    let me = ConsumerId::new("next-due").unwrap();
    let c = spool
        .claim(&q, &me, Duration::from_secs(30), 1)
        .await
        .unwrap();
    assert_eq!(spool.next_due(&q).await.unwrap(), Some(at(5)));
    assert_eq!(spool.next_due(&q).await.unwrap(), listed().await);
    spool.ack(c[0].run_id, c[0].token).await.unwrap();
    clock.advance(Duration::from_secs(10));
    for c in spool
        .claim(&q, &me, Duration::from_secs(30), 10)
        .await
        .unwrap()
    {
        spool.ack(c.run_id, c.token).await.unwrap();
    }
    assert_eq!(
        spool.next_due(&q).await.unwrap(),
        None,
        "no live run is left"
    );
    spool.close().await;
}
