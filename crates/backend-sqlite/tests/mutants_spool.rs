//! The SQLite spool's behaviour that survived mutation testing (issue 14, `cargo mutants` over
//! `src/spool/*.rs` with this crate's spool and group-commit tests): each test here names the
//! mutant it kills.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{
    ConsumerId, DedupKey, EnqueueOptions, ImportSource, ImportedRun, NackKind, QueueName,
    RunImportOutcome, RunState, Spool, SystemClock, Timestamp, Wakeup,
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

/// Enqueues a run under key `["mutants", key]` on `queue`; returns its id.
async fn enqueue(spool: &SqliteSpool, queue: &QueueName, key: &str) -> RunId {
    spool
        .enqueue(
            queue,
            &DedupKey::from_parts(["mutants", key]).unwrap(),
            b"x".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id
}

/// Waits (10 s deadline) for a wake-up of `wake`: `what` must wake it.
async fn woken(wake: &mut Box<dyn Wakeup>, what: &str) {
    tokio::time::timeout(Duration::from_secs(10), wake.wait())
        .await
        .unwrap_or_else(|_| panic!("{what}: no wake-up within 10 s"))
        .unwrap();
}

/// A window of 300 ms for a wake-up of `wake` that must not come (`what` must wake no one):
/// a wake-up of this instance's own writes is immediate, and the tests that use this either
/// set the poll for other connections' commits an hour away or commit nothing.
async fn not_woken(wake: &mut Box<dyn Wakeup>, what: &str) {
    assert!(
        tokio::time::timeout(Duration::from_millis(300), wake.wait())
            .await
            .is_err(),
        "{what} must wake no one"
    );
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

/// A run in `state` to import into `queue`, under `key`.
fn imported(queue: &QueueName, key: &str, state: RunState) -> ImportedRun {
    let at = Timestamp::from_unix_micros(1_700_000_000_000_000);
    let finished = state != RunState::Queued;
    ImportedRun {
        run_id: RunId::generate(at),
        queue: queue.clone(),
        dedup_key: DedupKey::from_parts(["mutants", key]).unwrap(),
        supersede_group: None,
        payload: b"x".to_vec(),
        state,
        attempts: u32::from(finished),
        max_attempts: 3,
        priority: 0,
        enqueued_at: at,
        due_at: (!finished).then_some(at),
        finished_at: finished.then_some(at),
        reason: None,
        facts: BTreeMap::new(),
        events: Vec::new(),
    }
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
    let source = ImportSource {
        fingerprint: [9; 32],
        description: "mutants".into(),
    };
    let run = imported(&queue, "import", RunState::Queued);
    let outcome = spool.import_runs(&source, vec![run]).await.unwrap();
    assert!(
        matches!(outcome, RunImportOutcome::Imported { .. }),
        "{outcome:?}"
    );
    woken(
        &mut wake,
        "an import of a queued run, without waiting for a poll",
    )
    .await;
}

/// Kills `import_runs_tx`'s `&&` → `||` in `r.state == RunState::Queued &&
/// !woken.contains(..)` (`src/spool/import.rs`, a sqlite-spool shard 2/4 survivor at
/// `bb2d9c0`). An import that gives a queue only finished runs leaves nothing to claim, so it
/// wakes none of that queue's subscribers (each wake costs a worker an empty claim); the same
/// subscription is then woken by an enqueue, so it was listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_of_finished_runs_only_wakes_no_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    spool.set_wake_poll(Duration::from_secs(3600));
    let queue = QueueName::new("mutants-import-done").unwrap();
    let mut wake = spool.subscribe(&queue).await.unwrap();
    let source = ImportSource {
        fingerprint: [10; 32],
        description: "mutants".into(),
    };
    let runs = vec![
        imported(&queue, "done", RunState::Succeeded),
        imported(&queue, "failed", RunState::Failed),
    ];
    let outcome = spool.import_runs(&source, runs).await.unwrap();
    assert!(
        matches!(&outcome, RunImportOutcome::Imported { created, .. } if created.len() == 2),
        "{outcome:?}"
    );
    not_woken(&mut wake, "an import of finished runs only").await;
    enqueue(&spool, &queue, "after").await;
    woken(&mut wake, "the enqueue that follows").await;
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

/// Enqueues a run on `queue` and parks it (claimed, then nacked permanently); returns its id.
async fn parked(spool: &SqliteSpool, queue: &QueueName, key: &str) -> RunId {
    let run = enqueue(spool, queue, key).await;
    let claimed = spool
        .claim(
            queue,
            &ConsumerId::new("mutants").unwrap(),
            Duration::from_secs(30),
            1,
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "one due run");
    assert_eq!(claimed[0].run_id, run);
    let nacked = spool
        .nack(run, claimed[0].token, NackKind::Permanent, "mutants")
        .await
        .unwrap();
    assert_eq!(nacked.state, RunState::Parked);
    run
}

/// Kills `unpark_tx`'s `to == RunState::Queued` → `!=` (`src/spool/settle.rs`, a sqlite-spool
/// shard 3/4 survivor at `8fad4b3`). As `Spool::discard` and `Spool::retry_parked` promise:
/// a discard wakes no one (the run is finished), a retry wakes the queue's subscribers of this
/// instance at once (its run is due), not only at the next poll for other connections' commits
/// (an hour away here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_parked_run_wakes_its_queue_and_a_discarded_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    spool.set_wake_poll(Duration::from_secs(3600));
    let queue = QueueName::new("mutants-unpark").unwrap();
    let discarded = parked(&spool, &queue, "discard").await;
    let retried = parked(&spool, &queue, "retry").await;
    let mut wake = spool.subscribe(&queue).await.unwrap();

    assert_eq!(
        spool.discard(discarded, "mutants").await.unwrap().state,
        RunState::Canceled
    );
    not_woken(&mut wake, "a discard").await;
    assert_eq!(
        spool.retry_parked(retried, "mutants").await.unwrap().state,
        RunState::Queued
    );
    woken(&mut wake, "a retry of a parked run, at once").await;
}

/// Kills `WakeHub::subscribe_blocking`'s `st.poller.is_none() && probe.is_none()` → `||`
/// (`src/spool/wake.rs`, a sqlite-spool shard 3/4 survivor at `8fad4b3`). A subscription made
/// while the instance's poller runs joins that poller: it opens no connection of its own, so
/// it succeeds even when the store file can no longer be opened by its name (here: renamed
/// away; the instance's open connections still reach it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_joins_the_running_poller_without_opening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    spool.set_wake_poll(Duration::from_secs(3600));
    let first = QueueName::new("mutants-first").unwrap();
    let second = QueueName::new("mutants-second").unwrap();
    let _running = spool.subscribe(&first).await.unwrap();

    let path = dir.path().join("store.db");
    let away = dir.path().join("away.db");
    std::fs::rename(&path, &away).unwrap();
    let joined = spool.subscribe(&second).await;
    std::fs::rename(&away, &path).unwrap();
    let mut wake = joined.expect("a subscription while the poller runs must not open the file");

    enqueue(&spool, &second, "second").await;
    woken(&mut wake, "an enqueue on the joined subscription's queue").await;
}

/// Kills `poll`'s `tx.receiver_count() > 0` → `>=` (`src/spool/wake.rs`, a sqlite-spool shard
/// 3/4 survivor at `8fad4b3`). The poller runs only while the instance has subscriptions: once
/// the last is dropped it stops within a poll round, so a spool whose workers stopped keeps no
/// thread reading the file. A new subscription starts it again, and is woken by another
/// instance's commit through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poller_stops_with_its_last_subscription() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    spool.set_wake_poll(Duration::from_millis(1));
    let queue = QueueName::new("mutants-poller").unwrap();
    assert!(!spool.testkit_wake_poller_running(), "no subscription yet");
    let wake = spool.subscribe(&queue).await.unwrap();
    assert!(
        spool.testkit_wake_poller_running(),
        "a subscription starts the poller"
    );
    drop(wake);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while spool.testkit_wake_poller_running() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the poller still runs 10 s after its last subscription was dropped"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    let mut wake = spool.subscribe(&queue).await.unwrap();
    assert!(
        spool.testkit_wake_poller_running(),
        "a new subscription starts it again"
    );
    let other = open(&dir).await;
    enqueue(&other, &queue, "poller").await;
    woken(
        &mut wake,
        "another instance's commit, through the restarted poller",
    )
    .await;
}

/// Kills `poll`'s match guard `v == last` → `false` (`src/spool/wake.rs`, a sqlite-spool shard
/// 3/4 survivor at `8fad4b3`). The poller wakes subscribers only when the store changed: on an
/// idle store a subscriber stays pending round after round of the default 5-ms poll (each wake
/// would cost a worker an empty claim), and another instance's commit then wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_store_wakes_no_subscriber() {
    let dir = tempfile::tempdir().unwrap();
    let spool = open(&dir).await;
    let other = open(&dir).await;
    let queue = QueueName::new("mutants-idle").unwrap();
    let mut wake = spool.subscribe(&queue).await.unwrap();
    // Some 60 rounds of the default poll with no commit anywhere.
    not_woken(&mut wake, "an idle store").await;
    enqueue(&other, &queue, "idle").await;
    woken(&mut wake, "another instance's commit, at the next poll").await;
}
