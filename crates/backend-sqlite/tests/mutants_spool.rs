//! The SQLite spool's behaviour that survived mutation testing (issue 14, `cargo mutants` over
//! `src/spool/*.rs` with this crate's spool and group-commit tests): each test here names the
//! mutant it kills.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    DedupKey, EnqueueOptions, ImportSource, ImportedRun, QueueName, RunImportOutcome, RunState,
    Spool, SystemClock, Timestamp,
};
use cairn_core::RunId;
use cairn_sqlite::{SqliteOptions, SqliteSpool};

/// A spool on a new store in `dir`, with the default options and the system clock.
async fn open(dir: &tempfile::TempDir) -> SqliteSpool {
    SqliteSpool::open(
        dir.path().join("store.db"),
        SqliteOptions::default(),
        Arc::new(SystemClock),
    )
    .await
    .unwrap()
}

/// Kills `existing_run_q` → `Ok(None)`. A duplicate enqueue is answered from a read
/// connection, without the writer: it returns the existing run while another write holds the
/// writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_enqueue_answers_without_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
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
    let spool = open(&dir).await;
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

/// Kills `import_runs_tx`'s `r.state == RunState::Queued` → `!=` and its `delete !` in
/// `!woken.contains(..)` (`src/spool/import.rs`). An import that gives a queue a queued run
/// wakes that queue's subscribers of this instance at once, as an enqueue does, not only at the
/// next poll for other connections' commits (an hour away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_of_a_queued_run_wakes_the_queues_subscribers_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    spool.set_wake_poll(Duration::from_secs(3600));
    let queue = QueueName::new("mutants-import").unwrap();
    let mut wake = spool.subscribe(&queue).await.unwrap();
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000);
    let run = ImportedRun {
        run_id: RunId::generate(at),
        queue: queue.clone(),
        dedup_key: DedupKey::from_parts(["mutants", "import"]).unwrap(),
        supersede_group: None,
        payload: b"x".to_vec(),
        state: RunState::Queued,
        attempts: 0,
        max_attempts: 3,
        priority: 0,
        enqueued_at: at,
        due_at: Some(at),
        finished_at: None,
        reason: None,
        facts: BTreeMap::new(),
        events: Vec::new(),
    };
    let source = ImportSource {
        fingerprint: [9; 32],
        description: "mutants".into(),
    };
    let outcome = spool.import_runs(&source, vec![run]).await.unwrap();
    assert!(
        matches!(outcome, RunImportOutcome::Imported { .. }),
        "{outcome:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), wake.wait())
        .await
        .expect("the import must wake the queue's subscriber without waiting for a poll")
        .unwrap();
}

/// Kills `<impl Debug for SqliteSpool>::fmt` -> `Ok(Default::default())`. A spool's `{:?}` (in
/// a log line or a panic message) says what it is and which file it works on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spool_debug_names_its_type_and_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    let shown = format!("{spool:?}");
    assert!(shown.starts_with("SqliteSpool {"), "{shown}");
    let path = format!("{:?}", spool.store().path());
    assert!(shown.contains(&path), "{shown} lacks {path}");
}
