//! Transactions on SQLite: the conformance transaction cases (T1–T5) and the closure API,
//! [`SqliteBackend::transaction`].

cairn_conformance::tx_suite!(cairn_sqlite::spool_testkit::spool_harness());

use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::EnqueueItem;
use cairn_core::{DedupKey, EnqueueOptions, Error, QueueName};
use cairn_migrate::{Backend, MigrationSet, OpenOptions};
use cairn_sqlite::{SqliteBackend, SqliteOptions};

fn orders() -> MigrationSet {
    MigrationSet::from_files(
        "app",
        [(
            "0001_orders.sql",
            "CREATE TABLE app_order (id TEXT PRIMARY KEY)",
        )],
    )
    .unwrap()
}

async fn open(path: &std::path::Path) -> SqliteBackend {
    SqliteBackend::open(
        path,
        SqliteOptions::default(),
        OpenOptions::default()
            .migrations(orders())
            .register_in_fleet(false),
    )
    .await
    .unwrap()
}

fn count_orders(b: &SqliteBackend, id: &str) -> i64 {
    let conn = rusqlite::Connection::open(b.store().path()).unwrap();
    conn.query_row("SELECT count(*) FROM app_order WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .unwrap()
}

/// The closure's `Ok` commits the application's row and cairn's run together; its `Err`
/// (and a panic) rolls both back; the queue's subscriber is woken by the commit only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_closure_commits_on_ok_and_rolls_back_on_err_or_panic() {
    let dir = tempfile::tempdir().unwrap();
    let b = open(&dir.path().join("store.db")).await;
    b.sqlite_spool().set_wake_poll(Duration::from_secs(3600));
    let q = QueueName::new("outbox").unwrap();
    let mut wake = b.spool().subscribe(&q).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_millis(50), wake.wait()).await;

    let (q2, key) = (q.clone(), DedupKey::from_parts(["receipt", "1"]).unwrap());
    let run = b
        .transaction(move |tx| {
            tx.connection()
                .execute("INSERT INTO app_order (id) VALUES ('1')", [])
                .map_err(|e| Error::backend("app", e.to_string()))?;
            let run = tx.enqueue(&q2, &key, b"1".to_vec(), EnqueueOptions::default())?;
            let batch = tx.enqueue_many(
                &q2,
                vec![
                    EnqueueItem::new(key.clone(), "again"),
                    EnqueueItem::new(DedupKey::from_parts(["receipt", "2"]).unwrap(), "2"),
                ],
            )?;
            assert_eq!(
                batch[0].run_id, run.run_id,
                "one key, one run inside the closure"
            );
            Ok(run)
        })
        .await
        .unwrap();
    assert!(run.created);
    assert_eq!(count_orders(&b, "1"), 1);
    assert!(b.spool().run(run.run_id).await.unwrap().is_some());
    tokio::time::timeout(Duration::from_secs(10), wake.wait())
        .await
        .expect("the commit wakes the subscriber")
        .unwrap();

    let q2 = q.clone();
    let refused = b
        .transaction(move |tx| -> cairn_core::Result<()> {
            tx.connection()
                .execute("INSERT INTO app_order (id) VALUES ('2')", [])
                .map_err(|e| Error::backend("app", e.to_string()))?;
            tx.enqueue(
                &q2,
                &DedupKey::from_parts(["receipt", "3"]).unwrap(),
                b"3".to_vec(),
                EnqueueOptions::default(),
            )?;
            Err(Error::invalid("order", "the application changed its mind"))
        })
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidInput { .. })),
        "{refused:?}"
    );
    assert_eq!(
        count_orders(&b, "2"),
        0,
        "the closure's error rolled the row back"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), wake.wait())
            .await
            .is_err(),
        "a rolled-back enqueue wakes nobody"
    );

    let q2 = q.clone();
    let panicked = b
        .transaction(move |tx| -> cairn_core::Result<()> {
            tx.connection()
                .execute("INSERT INTO app_order (id) VALUES ('3')", [])
                .unwrap();
            tx.enqueue(
                &q2,
                &DedupKey::from_parts(["receipt", "4"]).unwrap(),
                b"4".to_vec(),
                EnqueueOptions::default(),
            )?;
            panic!("the application's code panicked");
        })
        .await;
    assert!(panicked.is_err(), "a panic is an error, not a commit");
    assert_eq!(count_orders(&b, "3"), 0, "the panic rolled the row back");
    let after = b
        .spool()
        .enqueue(
            &q,
            &DedupKey::from_parts(["receipt", "4"]).unwrap(),
            b"4".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        after.created,
        "the panicked transaction's key is free, the writer usable"
    );
}

/// A statement of the application's that ends the transaction (`COMMIT` through the
/// connection) makes the transaction fail rather than commit half of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_transaction_from_the_application_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let b = Arc::new(open(&dir.path().join("store.db")).await);
    let r = b
        .transaction(move |tx| {
            tx.connection()
                .execute_batch("INSERT INTO app_order (id) VALUES ('x'); ROLLBACK;")
                .map_err(|e| Error::backend("app", e.to_string()))?;
            Ok(())
        })
        .await;
    assert!(
        r.is_err(),
        "a transaction ended under cairn does not report a commit: {r:?}"
    );
    assert_eq!(count_orders(&b, "x"), 0);
}

/// A write queued for a group commit while a transaction holds the writer past the busy
/// timeout fails with `Retryable`, its message saying so once (a group's callers used to get
/// the first error's whole message wrapped in a second "store busy (…)").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_behind_an_open_transaction_is_retryable_with_one_message() {
    let dir = tempfile::tempdir().unwrap();
    let b = SqliteBackend::open(
        dir.path().join("store.db"),
        SqliteOptions::default().busy_timeout(Duration::from_millis(100)),
        OpenOptions::default().register_in_fleet(false),
    )
    .await
    .unwrap();
    let tx = b.begin_transaction().await.unwrap();
    let q = QueueName::new("busy").unwrap();
    let err = b
        .spool()
        .enqueue(
            &q,
            &DedupKey::from_parts(["busy"]).unwrap(),
            b"x".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    let text = err.to_string();
    assert_eq!(text.matches("store busy").count(), 1, "{text}");
    drop(tx);
    let after = b
        .spool()
        .enqueue(
            &q,
            &DedupKey::from_parts(["busy"]).unwrap(),
            b"x".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    assert!(
        after.created,
        "the dropped transaction gave the writer back"
    );
}
