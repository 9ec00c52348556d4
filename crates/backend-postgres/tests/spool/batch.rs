//! Batched enqueues on Postgres (`spool::batch`): concurrent enqueues of one instance share one
//! statement and one commit, and
//! - each caller is answered with the id the committed statement wrote (another instance reads
//!   every one of them afterwards);
//! - two enqueues of one key in one batch get one run id, and a key already stored is answered
//!   with the stored run's id (S1);
//! - a batch statement that fails hands every enqueue back to the unbatched path, so each still
//!   gets its own committed outcome.
//!
//! Each test holds the enqueue lane while it queues, so the enqueues are certain to form one
//! batch, and waits (with a deadline) until all are queued before releasing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::{EnqueueItem, Enqueued, RunState};
use cairn_core::{DedupKey, EnqueueOptions, QueueName, Spool};
use cairn_postgres::spool::testkit::spool_harness;
use cairn_postgres::PgSpool;

async fn wait_queued(spool: &PgSpool, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while spool.testkit_pending_enqueues() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} enqueues were queued within 30 s",
            spool.testkit_pending_enqueues()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn enqueue(
    spool: &Arc<PgSpool>,
    q: &QueueName,
    k: &str,
) -> tokio::task::JoinHandle<cairn_core::Result<Enqueued>> {
    let (spool, q, k) = (spool.clone(), q.clone(), DedupKey::from_parts([k]).unwrap());
    tokio::spawn(async move {
        spool
            .enqueue(&q, &k, b"{}".to_vec(), EnqueueOptions::default())
            .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_enqueues_share_one_statement_and_dedup() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let q = random_queue("batch");
    let stored = spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["stored"]).unwrap(),
            b"{}".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();

    let lane = spool.testkit_hold_enqueue_lane().await;
    let fresh: Vec<_> = (0..10)
        .map(|i| enqueue(&spool, &q, &format!("k{i}")))
        .collect();
    let twins = [enqueue(&spool, &q, "twin"), enqueue(&spool, &q, "twin")];
    let again = enqueue(&spool, &q, "stored");
    wait_queued(&spool, 13).await;
    let (batches_before, _) = spool.testkit_batch_stats();
    drop(lane);

    let mut ids = Vec::new();
    for f in fresh {
        let e = f.await.unwrap().unwrap();
        assert!(e.created);
        ids.push(e.run_id);
    }
    let [a, b] = twins;
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!(a.run_id, b.run_id, "S1: one key, one run id within a batch");
    assert!(a.created != b.created, "exactly one twin created the run");
    let again = again.await.unwrap().unwrap();
    assert_eq!(
        again.run_id, stored.run_id,
        "S1: a stored key answers its run's id"
    );
    assert!(!again.created);
    let (batches, fallbacks) = spool.testkit_batch_stats();
    assert_eq!(
        batches - batches_before,
        1,
        "the 13 enqueues were not one batch"
    );
    assert_eq!(fallbacks, 0);

    let other = h.spool().await.unwrap();
    ids.push(a.run_id);
    for id in ids {
        let run = other
            .run(id)
            .await
            .unwrap()
            .expect("an answered enqueue is durable");
        assert_eq!(run.state, RunState::Queued);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_failure_runs_each_enqueue_alone() {
    let h = spool_harness().await;
    let spool = Arc::new(h.spool().await.unwrap());
    let q = random_queue("batch-fail");
    spool.testkit_fail_next_batch();
    let lane = spool.testkit_hold_enqueue_lane().await;
    let tasks: Vec<_> = (0..6)
        .map(|i| enqueue(&spool, &q, &format!("k{i}")))
        .collect();
    wait_queued(&spool, 6).await;
    drop(lane);
    let mut ids = Vec::new();
    for t in tasks {
        let e = t.await.unwrap().unwrap();
        assert!(e.created);
        ids.push(e.run_id);
    }
    assert_eq!(
        spool.testkit_batch_stats().1,
        1,
        "the injected failure was not hit"
    );
    let other = h.spool().await.unwrap();
    for id in ids {
        assert!(other.run(id).await.unwrap().is_some());
    }
}

/// A bulk enqueue mixing plain items with a supersede-group item writes each run of
/// consecutive plain items with one statement (the group's item alone, between them), not one
/// statement per item, and at most 1,000 rows per statement. Postgres numbers a transaction's
/// commands, and the rows one `INSERT` wrote share its number (`cmin`). Kills
/// `enqueue_many_on`'s `plain.len() < BULK_CHUNK` → `==` and → `>`, which wrote every item
/// alone, and → `<=`, which wrote 1,001 (postgres-spool shard 1/4 survivors at `b06aef2`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_bulk_enqueue_writes_consecutive_plain_items_together() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let q = random_queue("mixed-bulk");
    let grouped = EnqueueOptions::default()
        .supersede(cairn_core::spool::SupersedeGroup::from_parts(["g"]).unwrap());
    let item = |k: &str| EnqueueItem::new(DedupKey::from_parts([k]).unwrap(), "x");
    let items = vec![
        item("p0"),
        item("p1"),
        item("p2"),
        item("g").with_options(grouped),
        item("p3"),
        item("p4"),
    ];
    let done = spool.enqueue_many(&q, items).await.unwrap();
    assert!(done.iter().all(|e| e.created), "{done:?}");
    let mut conn = crate::failures::admin(&h).await;
    let mut command = Vec::new();
    for e in &done {
        let cmin: i64 =
            sqlx::query_scalar("SELECT cmin::text::bigint FROM spool_run WHERE run_id = $1")
                .bind(e.run_id.as_bytes().as_slice())
                .fetch_one(&mut conn)
                .await
                .unwrap();
        command.push(cmin);
    }
    let [p0, p1, p2, g, p3, p4] = command[..] else {
        panic!("six rows: {command:?}")
    };
    assert!(
        p0 == p1 && p1 == p2 && p3 == p4,
        "each run of plain items is one statement: {command:?}"
    );
    assert!(
        p2 < g && g < p3,
        "the group's item is written alone, in input order: {command:?}"
    );

    // 1,001 plain items before the group's: 1,000 in one statement, the last in the next.
    let mut items: Vec<EnqueueItem> = (0..1001).map(|i| item(&format!("n{i:04}"))).collect();
    items.push(
        item("g2").with_options(
            EnqueueOptions::default()
                .supersede(cairn_core::spool::SupersedeGroup::from_parts(["g2"]).unwrap()),
        ),
    );
    let done = spool.enqueue_many(&q, items).await.unwrap();
    let ids: Vec<Vec<u8>> = done.iter().map(|e| e.run_id.as_bytes().to_vec()).collect();
    let rows: Vec<(Vec<u8>, i64)> = sqlx::query_as(
        "SELECT run_id, cmin::text::bigint FROM spool_run WHERE run_id = ANY($1::bytea[])",
    )
    .bind(&ids)
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let by_id: std::collections::HashMap<Vec<u8>, i64> = rows.into_iter().collect();
    let command: Vec<i64> = ids.iter().map(|id| by_id[id]).collect();
    assert!(
        command[..1000].iter().all(|&c| c == command[0]),
        "the first 1,000 plain items are one statement"
    );
    assert!(
        command[0] < command[1000] && command[1000] < command[1001],
        "the 1,001st is written by the next statement, before the group's item: {:?}",
        &command[998..]
    );
}
