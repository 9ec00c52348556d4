//! The SQLite spool's behaviour that survived mutation testing (issue 14, `cargo mutants` over
//! `src/spool/queue.rs` with this crate's spool and group-commit tests): each test here names
//! the mutant it kills.

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{DedupKey, EnqueueOptions, QueueName, Spool, SystemClock};
use cairn_sqlite::{SqliteOptions, SqliteSpool};

/// Kills `existing_run_q` → `Ok(None)`. A duplicate enqueue is answered from a read
/// connection, without the writer: it returns the existing run while another write holds the
/// writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_enqueue_answers_without_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let spool = SqliteSpool::open(
        dir.path().join("store.db"),
        SqliteOptions::default(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let queue = QueueName::new("mutants").unwrap();
    let key = DedupKey::from_parts(["mutants", "dup"]).unwrap();
    let first = spool
        .enqueue(&queue, &key, b"a".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(first.created);
    let hold = spool.store().testkit_hold_writer().await.unwrap();
    let again = tokio::time::timeout(
        Duration::from_secs(5),
        spool.enqueue(&queue, &key, b"b".to_vec(), EnqueueOptions::default()),
    )
    .await
    .expect("a duplicate enqueue must not wait for the held writer")
    .expect("a duplicate enqueue succeeds while the writer is held");
    assert_eq!((again.run_id, again.created), (first.run_id, false));
    drop(hold);
}

/// Kills `next_due_q` → `Ok(None)`. The earliest due time of a queue is its queued run's
/// not-before time (none for an empty queue).
#[tokio::test]
async fn next_due_is_the_queued_runs_not_before() {
    let dir = tempfile::tempdir().unwrap();
    let spool = SqliteSpool::open(
        dir.path().join("store.db"),
        SqliteOptions::default(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap();
    let queue = QueueName::new("mutants-due").unwrap();
    assert_eq!(spool.next_due(&queue).await.unwrap(), None);
    let later = cairn_core::spool::Timestamp::from_unix_micros(4_000_000_000_000_000);
    spool
        .enqueue(
            &queue,
            &DedupKey::from_parts(["mutants", "due"]).unwrap(),
            b"x".to_vec(),
            EnqueueOptions::default().not_before(later),
        )
        .await
        .unwrap();
    assert_eq!(spool.next_due(&queue).await.unwrap(), Some(later));
}
