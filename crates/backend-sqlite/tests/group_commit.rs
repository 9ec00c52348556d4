//! Group commit on the SQLite writer (`crate::group`): concurrent writes of one store instance
//! share one transaction and one fsync, and
//! - every caller is answered only after the transaction holding its write committed (a failing
//!   commit, injected with SQLite's commit hook, answers nobody with success);
//! - an operation that fails inside a group leaves its neighbours' writes in place;
//! - two enqueues of one key in one group give one run id;
//! - everything answered is durable: another instance opened afterwards reads it.
//!
//! Each test holds the writer while it queues its operations, so they are certain to land in
//! one group, and waits (with a deadline) until all of them are queued before releasing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::spool::Spool;
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, EpochStore, Error, Event, LeaseToken, QueueName,
    RunState, SpaceId,
};
use cairn_sqlite::spool_testkit::spool_harness;
use cairn_sqlite::{SqliteOptions, SqliteSpool};

fn queue() -> QueueName {
    QueueName::new("gate").unwrap()
}

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts(["gate", "refs/heads/main", k]).unwrap()
}

/// Waits until `spool`'s store has `n` writes queued for its next group.
async fn wait_queued(spool: &SqliteSpool, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while spool.store().testkit_pending_writes() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} writes were queued within 30 s",
            spool.store().testkit_pending_writes()
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn enqueue(
    spool: &Arc<SqliteSpool>,
    k: &str,
) -> tokio::task::JoinHandle<cairn_core::Result<cairn_core::spool::Enqueued>> {
    let (spool, k) = (spool.clone(), key(k));
    tokio::spawn(async move {
        spool
            .enqueue(&queue(), &k, b"{}".to_vec(), EnqueueOptions::default())
            .await
    })
}

/// Concurrent enqueues and epoch appends queued together commit as one group, each caller
/// gets its own result, and all of it is there for another instance after the fact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_concurrent_writes_are_one_group_and_durable() {
    let h = spool_harness().await;
    let spool = Arc::new(h.open_with(SqliteOptions::default()).await.unwrap());
    let store = spool.store().clone();
    let spaces: Vec<SpaceId> = (0..4)
        .map(|i| SpaceId::new(format!("group-{i}")).unwrap())
        .collect();

    let hold = store.testkit_hold_writer().await.unwrap();
    let enqueues: Vec<_> = (0..12).map(|i| enqueue(&spool, &format!("k{i}"))).collect();
    let appends: Vec<_> = (0..8)
        .map(|i| {
            let (store, space) = (store.clone(), spaces[i % 4].clone());
            tokio::spawn(async move {
                store
                    .append(&space, vec![Event::new("e", format!("{i}").into_bytes())])
                    .await
            })
        })
        .collect();
    wait_queued(&spool, 20).await;
    let (groups_before, ops_before, _) = store.testkit_group_stats();
    drop(hold);

    let mut ids = Vec::new();
    for e in enqueues {
        let e = e.await.unwrap().unwrap();
        assert!(e.created);
        ids.push(e.run_id);
    }
    let mut seqs = std::collections::BTreeMap::<usize, Vec<u64>>::new();
    for (i, a) in appends.into_iter().enumerate() {
        let a = a.await.unwrap().unwrap();
        seqs.entry(i % 4).or_default().push(a.seq.0);
    }
    let (groups, ops, fallbacks) = store.testkit_group_stats();
    assert_eq!(
        groups - groups_before,
        1,
        "the 20 writes were not one group"
    );
    assert_eq!(ops - ops_before, 20);
    assert_eq!(fallbacks, 0);
    // Appends to one space in one group still get consecutive seqs.
    for s in seqs.values_mut() {
        s.sort_unstable();
        assert_eq!(s[1], s[0] + 1, "E1: seqs in one space must be consecutive");
    }

    // Another instance (its own connections) sees every answered write.
    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    for id in ids {
        let run = other
            .run(id)
            .await
            .unwrap()
            .expect("an answered enqueue is durable");
        assert_eq!(run.state, RunState::Queued);
    }
    for (i, space) in spaces.iter().enumerate() {
        let heads = other.store().heads(space).await.unwrap();
        assert_eq!(heads.len(), 1);
        assert_eq!(
            heads[0].seq.0, seqs[&i][1],
            "both appends of the space are there"
        );
    }
}

/// A write that fails inside a group (an ack with a stale token) fails alone: the enqueues and
/// the good ack queued around it commit, and two enqueues of one key give one run id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_failing_op_leaves_neighbours_and_dedups() {
    let h = spool_harness().await;
    let spool = Arc::new(h.open_with(SqliteOptions::default()).await.unwrap());
    let first = spool
        .enqueue(
            &queue(),
            &key("first"),
            b"{}".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let me = ConsumerId::new("w").unwrap();
    let claimed = spool
        .claim(&queue(), &me, Duration::from_secs(30), 1)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let token = claimed[0].token;

    let hold = spool.store().testkit_hold_writer().await.unwrap();
    let a = enqueue(&spool, "a");
    let bad_ack = {
        let spool = spool.clone();
        tokio::spawn(async move { spool.ack(first.run_id, LeaseToken::generate()).await })
    };
    let b = enqueue(&spool, "b");
    let b_again = enqueue(&spool, "b");
    wait_queued(&spool, 4).await;
    let good_ack = {
        let spool = spool.clone();
        tokio::spawn(async move { spool.ack(first.run_id, token).await })
    };
    wait_queued(&spool, 5).await;
    let (groups_before, _, _) = spool.store().testkit_group_stats();
    drop(hold);

    let a = a.await.unwrap().unwrap();
    assert!(matches!(
        bad_ack.await.unwrap(),
        Err(Error::LeaseLost { .. })
    ));
    let b = b.await.unwrap().unwrap();
    let b_again = b_again.await.unwrap().unwrap();
    good_ack.await.unwrap().unwrap();
    // The two tasks of key "b" reach the queue in either order: exactly one creates the run.
    assert!(a.created);
    assert!(
        b.created != b_again.created,
        "one of two enqueues of one key creates the run, the other finds it"
    );
    assert_eq!(
        b.run_id, b_again.run_id,
        "S1: one key, one run id, within a group too"
    );
    let (groups, _, fallbacks) = spool.store().testkit_group_stats();
    assert_eq!(groups - groups_before, 1);
    assert_eq!(fallbacks, 0, "a failing operation must not fail its group");

    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    assert!(other.run(a.run_id).await.unwrap().is_some());
    assert!(other.run(b.run_id).await.unwrap().is_some());
    assert_eq!(
        other.run(first.run_id).await.unwrap().unwrap().state,
        RunState::Succeeded
    );
}

/// S12 with grouping: when every commit fails, no caller of the group is answered with
/// success and nothing is there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_failed_commit_answers_no_success() {
    let h = spool_harness().await;
    let spool = Arc::new(h.open_with(SqliteOptions::default()).await.unwrap());
    spool.store().testkit_fail_commits(u64::MAX).await.unwrap();
    let hold = spool.store().testkit_hold_writer().await.unwrap();
    let tasks: Vec<_> = (0..4).map(|i| enqueue(&spool, &format!("k{i}"))).collect();
    wait_queued(&spool, 4).await;
    drop(hold);
    for t in tasks {
        let r = t.await.unwrap();
        assert!(
            r.is_err(),
            "S12: a write whose commit failed was answered {r:?}"
        );
    }
    spool.store().testkit_fail_commits(0).await.unwrap();
    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    let stats = other.stats().await.unwrap();
    assert!(
        stats.runs.is_empty(),
        "a failed commit left runs: {stats:?}"
    );
}

/// When only the group's commit fails, each operation is run again in a transaction of its
/// own: every caller gets a committed result, and all of them are durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_failed_group_retries_each_alone() {
    let h = spool_harness().await;
    let spool = Arc::new(h.open_with(SqliteOptions::default()).await.unwrap());
    spool.store().testkit_fail_commits(1).await.unwrap();
    let hold = spool.store().testkit_hold_writer().await.unwrap();
    let tasks: Vec<_> = (0..4).map(|i| enqueue(&spool, &format!("k{i}"))).collect();
    wait_queued(&spool, 4).await;
    drop(hold);
    let mut ids = Vec::new();
    for t in tasks {
        let e = t.await.unwrap().unwrap();
        assert!(e.created);
        ids.push(e.run_id);
    }
    let (_, _, fallbacks) = spool.store().testkit_group_stats();
    assert_eq!(fallbacks, 1);
    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    for id in ids {
        assert!(other.run(id).await.unwrap().is_some());
    }
}
