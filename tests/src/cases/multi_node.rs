//! Cases for backends whose separately opened instances are separate nodes that lock spaces
//! independently (Postgres).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::{
    Appended, EpochDiagnostics, EpochId, Head, ImportOutcome, RepairOutcome, Seq, SpaceId,
};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

use super::support::{assert_single_head, ev, foreign, ids, legacy_fork, open};
use crate::{random_space, Harness};

/// Generous deadline for an operation that must complete (never a fixed sleep: it returns as
/// soon as the operation does).
const DEADLINE: Duration = Duration::from_secs(20);

/// How long an append must stay pending while its space's lock is held elsewhere.
const MUST_WAIT: Duration = Duration::from_millis(500);

/// Checks that `appended` (all appends to `space`, any order) form one chain in seq order:
/// seqs `first..first+n` with none shared, and each epoch's parents are exactly the epoch with
/// the previous seq — so each append saw the previous commit as the space's only head.
/// `first_parents` is what the first of them must name.
fn assert_chain_in_seq_order(
    appended: &[Appended],
    first: u64,
    first_parents: &[EpochId],
    ctx: &str,
) {
    let by_seq: BTreeMap<Seq, &Appended> = appended.iter().map(|a| (a.seq, a)).collect();
    assert_eq!(
        by_seq.len(),
        appended.len(),
        "{ctx}: two appends got the same seq"
    );
    let seqs: Vec<u64> = by_seq.keys().map(|s| s.0).collect();
    let expected: Vec<u64> = (first..first + appended.len() as u64).collect();
    assert_eq!(
        seqs, expected,
        "{ctx}: seqs are not consecutive from {first}"
    );
    let mut prev: Vec<EpochId> = first_parents.to_vec();
    for (seq, a) in &by_seq {
        assert_eq!(
            a.parents, prev,
            "{ctx}: epoch with seq {seq} does not name the previous seq's epoch as its only parent"
        );
        prev = vec![a.id];
    }
}

async fn join_all<T: Send + 'static>(mut tasks: JoinSet<T>, ctx: &str) -> Vec<T> {
    let mut out = Vec::new();
    while let Some(res) = timeout(DEADLINE, tasks.join_next())
        .await
        .unwrap_or_else(|_| panic!("{ctx}: tasks did not finish within {DEADLINE:?}"))
    {
        out.push(res.unwrap_or_else(|e| panic!("{ctx}: task failed: {e}")));
    }
    out
}

/// E1 across nodes: two store instances with separate pools × 24 concurrent appends to one
/// space. Seqs are unique and strictly increase in commit order (each epoch's parent is the
/// previous seq's epoch), and the space ends with exactly one head and one cache row.
pub async fn e1_two_nodes_concurrent_appends_keep_one_head<H: Harness>(h: &H) {
    let nodes: [Arc<dyn EpochDiagnostics>; 2] = [open(h).await, open(h).await];
    let space = random_space("e1-nodes");
    let mut tasks = JoinSet::new();
    for i in 0..24 {
        for (n, node) in nodes.iter().enumerate() {
            let (node, space) = (Arc::clone(node), space.clone());
            tasks.spawn(async move { node.append(&space, ev(format!("node{n}-{i}"))).await });
        }
    }
    let appended: Vec<Appended> = join_all(tasks, "E1 two nodes")
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("E1 two nodes: append failed: {e}")))
        .collect();
    assert_eq!(appended.len(), 48);
    assert_chain_in_seq_order(&appended, 1, &[], "E1 two nodes");

    // The stored epochs agree with what the appends returned.
    for a in &appended {
        let stored = nodes[0]
            .epoch(&space, &a.id)
            .await
            .unwrap()
            .expect("E1: appended epoch is stored");
        assert_eq!(
            (stored.seq, &stored.parents),
            (a.seq, &a.parents),
            "E1: stored epoch {}",
            a.seq
        );
    }
    let last = appended.iter().max_by_key(|a| a.seq).unwrap();
    let head = last.head();
    for node in &nodes {
        assert_single_head(node.as_ref(), &space, head).await;
    }
}

/// E7 under concurrency: `repair_heads` running on one node while two nodes append (starting
/// from a legacy history with a fork and an empty cache) never corrupts the cache: every append
/// still names exactly the previous heads, and the space ends exact (one head, one cache row,
/// equal to the anti-join) with a final repair that writes nothing.
pub async fn e7_repair_concurrent_with_appends_ends_exact<H: Harness>(h: &H) {
    let nodes: [Arc<dyn EpochDiagnostics>; 3] = [open(h).await, open(h).await, open(h).await];
    let space = random_space("e7-concurrent");
    let root = h.legacy_append(&space, None, ev("e7c-root")).await.unwrap();
    let fork = ids(&legacy_fork(h, &space, root.id, "e7c").await);

    let mut appends = JoinSet::new();
    let mut repairs = JoinSet::new();
    for i in 0..12 {
        for (n, node) in nodes[..2].iter().enumerate() {
            let (node, space) = (Arc::clone(node), space.clone());
            appends.spawn(async move { node.append(&space, ev(format!("e7c-node{n}-{i}"))).await });
        }
        let (node, space) = (Arc::clone(&nodes[2]), space.clone());
        repairs.spawn(async move { node.repair_heads(&space).await });
    }
    let appended: Vec<Appended> = join_all(appends, "E7 concurrent")
        .await
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("E7 concurrent: append failed: {e}")))
        .collect();
    for r in join_all(repairs, "E7 concurrent repairs").await {
        match r.unwrap_or_else(|e| panic!("E7 concurrent: repair failed: {e}")) {
            RepairOutcome::Unchanged => {}
            RepairOutcome::Rewritten { after, .. } => {
                assert!(
                    !after.is_empty(),
                    "E7: a repair left the cache empty for a non-empty space"
                )
            }
        }
    }
    // The first append merges the fork; each later one names only its predecessor.
    assert_chain_in_seq_order(&appended, 4, &fork, "E7 concurrent");

    let last = appended.iter().max_by_key(|a| a.seq).unwrap();
    let head = last.head();
    for node in &nodes {
        assert_single_head(node.as_ref(), &space, head).await;
    }
    assert_eq!(
        nodes[2].repair_heads(&space).await.unwrap(),
        RepairOutcome::Unchanged,
        "E7: a repair after the dust settled must write nothing"
    );
}

/// Asserts that `task` is still pending after [`MUST_WAIT`]: it waits on a space lock held
/// elsewhere.
async fn stays_pending<T>(task: &mut JoinHandle<T>, what: &str) {
    assert!(
        timeout(MUST_WAIT, task).await.is_err(),
        "{what} completed while the space's lock was held"
    );
}

/// What `task` returned, once it finished within [`DEADLINE`] after the lock it waited on was
/// released.
async fn finishes<T>(task: JoinHandle<T>, what: &str) -> T {
    timeout(DEADLINE, task)
        .await
        .unwrap_or_else(|_| panic!("{what} did not complete after the lock was released"))
        .unwrap_or_else(|e| panic!("{what} panicked: {e}"))
}

/// E12: spaces are locked independently. While space A's write lock is held in an open
/// transaction, an append to space B completes, and an append to A stays pending until the
/// lock is released, then completes with the next seq.
pub async fn e12_spaces_do_not_block_each_other<H: Harness>(h: &H) {
    let store = open(h).await;
    let (a, b) = (random_space("e12-a"), random_space("e12-b"));
    let a0 = store.append(&a, ev("e12-a0")).await.unwrap();
    store.append(&b, ev("e12-b0")).await.unwrap();

    let held = h
        .hold_space_lock(&a)
        .await
        .unwrap_or_else(|e| panic!("E12: cannot hold space A's lock: {e}"));
    let b1 = timeout(DEADLINE, store.append(&b, ev("e12-b1")))
        .await
        .expect("E12: an append to B waited on A's lock")
        .unwrap();
    assert_eq!(b1.seq, Seq(2), "E12: B's append");

    let mut pending_a = {
        let (store, a) = (Arc::clone(&store), a.clone());
        tokio::spawn(async move { store.append(&a, ev("e12-a1")).await })
    };
    stays_pending(&mut pending_a, "E12: an append to A").await;
    held.release().await;
    let a1 = finishes(pending_a, "E12: the append to A").await.unwrap();
    assert_eq!(
        (a1.seq, a1.parents.clone()),
        (Seq(2), vec![a0.id]),
        "E12: A's append after release"
    );
    assert_single_head(store.as_ref(), &a, a1.head()).await;
    assert_single_head(store.as_ref(), &b, b1.head()).await;
}

/// E12 for the other writers: a repair and an import take the same per-space lock as an
/// append (they rewrite the space's cache and give out its next seq). While space A's lock is
/// held elsewhere each stays pending, and each completes once it is released: the import with
/// the next seq, the repair finding the cache exact.
pub async fn e12_repair_and_import_wait_for_the_space_lock<H: Harness>(h: &H) {
    let store = open(h).await;
    let a = random_space("e12-writers");
    let a0 = store.append(&a, ev("e12w-a0")).await.unwrap();

    let held = h
        .hold_space_lock(&a)
        .await
        .unwrap_or_else(|e| panic!("E12: cannot hold space A's lock: {e}"));
    let mut repair = {
        let (store, a) = (Arc::clone(&store), a.clone());
        tokio::spawn(async move { store.repair_heads(&a).await })
    };
    let epoch = foreign(&a, &[a0.id], ev("e12w-a1"));
    let mut import = {
        let (store, epoch) = (Arc::clone(&store), epoch.clone());
        tokio::spawn(async move { store.import(epoch).await })
    };
    stays_pending(&mut repair, "E12: a repair of A").await;
    stays_pending(&mut import, "E12: an import into A").await;
    held.release().await;

    let imported = finishes(import, "E12: the import").await.unwrap();
    assert_eq!(imported, ImportOutcome::Imported(Seq(2)), "E12: the import");
    let repaired = finishes(repair, "E12: the repair").await.unwrap();
    assert_eq!(
        repaired,
        RepairOutcome::Unchanged,
        "E12: the cache was exact whichever of the two went first"
    );
    let head = Head {
        id: epoch.id,
        seq: Seq(2),
    };
    assert_single_head(store.as_ref(), &a, head).await;
}

/// E6 upgrade path: a history written by a cache-unaware writer (with a fork) has an empty
/// cache; repair fills it with both fork heads, the next append names both as parents, and the
/// space then has one head and one cache row.
pub async fn e6_upgrade_path_legacy_history_gets_cache_by_repair<H: Harness>(h: &H) {
    let store = open(h).await;
    let space: SpaceId = random_space("e6-upgrade");
    let l1 = h.legacy_append(&space, None, ev("e6u-1")).await.unwrap();
    let l2 = h.legacy_append(&space, None, ev("e6u-2")).await.unwrap();
    assert_eq!(
        l2.parents,
        vec![l1.id],
        "E6: the legacy writer chains on the anti-join's head"
    );
    let fork = legacy_fork(h, &space, l2.id, "e6u").await;

    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        vec![],
        "E6: legacy writers leave the cache empty"
    );
    assert_eq!(
        store.computed_heads(&space).await.unwrap(),
        fork,
        "E6: anti-join sees the fork"
    );
    assert_eq!(
        store.heads(&space).await.unwrap(),
        fork,
        "E6: heads ignore the stale cache"
    );

    let repaired = store.repair_heads(&space).await.unwrap();
    assert_eq!(
        repaired,
        RepairOutcome::Rewritten {
            before: vec![],
            after: fork.clone()
        },
        "E6: repair fills the cache with both fork heads"
    );
    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        fork,
        "E6: cache after repair"
    );
    assert_eq!(
        store.heads(&space).await.unwrap(),
        fork,
        "E6: heads after repair"
    );
    assert_eq!(
        store.repair_heads(&space).await.unwrap(),
        RepairOutcome::Unchanged,
        "E6: second repair"
    );

    let next = store.append(&space, ev("e6u-next")).await.unwrap();
    let fork_ids: Vec<EpochId> = fork.iter().map(|h| h.id).collect();
    assert_eq!(
        (next.seq, next.parents.clone()),
        (Seq(5), fork_ids),
        "E6: the next append merges both fork heads"
    );
    assert_single_head(store.as_ref(), &space, next.head()).await;
    let other = open(h).await;
    assert_single_head(other.as_ref(), &space, next.head()).await;
}
