//! A duplicate enqueue on Postgres (`ENQUEUE`, `ON CONFLICT DO NOTHING` plus a read of the key's
//! run in the same statement):
//! - it writes nothing: the stored run keeps its row version, and the answer is its id;
//! - a key whose run another transaction commits while the enqueue waits on it (so after the
//!   enqueue statement's snapshot) is answered with that run's id, by running the statement
//!   again.

use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::{DedupKey, EnqueueOptions, RunId, Spool};
use cairn_postgres::spool::testkit::spool_harness;

use crate::failures::{admin, blocked_by};

const DEADLINE: Duration = Duration::from_secs(30);

/// The run's row version: the transaction that wrote it and where it lies.
async fn row_version(conn: &mut sqlx::PgConnection, run: RunId) -> String {
    sqlx::query_scalar("SELECT xmin::text || ctid::text FROM spool_run WHERE run_id = $1")
        .bind(run.as_bytes().to_vec())
        .fetch_one(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_duplicate_enqueue_writes_nothing_and_answers_the_stored_id() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let mut admin = admin(&h).await;
    let q = random_queue("dup");
    let k = DedupKey::from_parts(["once"]).unwrap();
    let first = spool
        .enqueue(&q, &k, b"1".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
    let before = row_version(&mut admin, first.run_id).await;
    for _ in 0..3 {
        let again = spool
            .enqueue(&q, &k, b"2".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!((again.run_id, again.created), (first.run_id, false));
    }
    assert_eq!(
        row_version(&mut admin, first.run_id).await,
        before,
        "no new row version"
    );
    assert_eq!(
        spool
            .run(first.run_id)
            .await
            .unwrap()
            .unwrap()
            .payload_bytes,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_committed_after_the_statements_snapshot_is_answered_with_its_run() {
    let h = spool_harness().await;
    let spool = h.spool().await.unwrap();
    let mut other = admin(&h).await;
    let q = random_queue("dup-race");
    let k = DedupKey::from_parts(["raced"]).unwrap();
    // Another transaction inserts the key and holds it uncommitted: the enqueue's insert waits
    // for it, inside a statement whose snapshot predates its commit.
    let theirs = RunId::generate(cairn_core::spool::Timestamp::from_unix_micros(1));
    sqlx::query("BEGIN").execute(&mut other).await.unwrap();
    sqlx::query(
        "INSERT INTO spool_run (run_id, queue, dedup_key, state, max_attempts, enqueued_at, \
         updated_at, due_at, payload_bytes, payload) \
         VALUES ($1, $2, $3, 'queued', 3, 1, 1, 1, 0, ''::bytea)",
    )
    .bind(theirs.as_bytes().to_vec())
    .bind(q.as_str())
    .bind(k.as_bytes().to_vec())
    .execute(&mut other)
    .await
    .unwrap();
    let mine: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut other)
        .await
        .unwrap();
    let enqueue = {
        let (spool, q, k) = (spool.clone(), q.clone(), k.clone());
        tokio::spawn(async move {
            spool
                .enqueue(&q, &k, b"x".to_vec(), EnqueueOptions::default())
                .await
        })
    };
    let mut watcher = admin(&h).await;
    let started = Instant::now();
    while blocked_by(&mut watcher, mine, "WITH ins AS")
        .await
        .is_none()
    {
        assert!(
            !enqueue.is_finished(),
            "the enqueue did not wait for the key"
        );
        assert!(
            started.elapsed() < DEADLINE,
            "the enqueue never blocked on the key"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    sqlx::query("COMMIT").execute(&mut other).await.unwrap();
    let got = enqueue.await.unwrap().unwrap();
    assert_eq!((got.run_id, got.created), (theirs, false));
}
