//! E14: what a sync asks of the receiving store — the batch import with its cursor
//! (`EpochStore::import_batch`), the cursors it keeps (`sync_peers`), the `need` list
//! (`missing`) and the store's identity (`store_id`).

use std::time::{Duration, Instant};

use cairn_core::sync::{
    epoch_bytes, StoreId, SyncCursor, SyncPeer, MAX_IMPORT_BATCH, MAX_MISSING_IDS,
};
use cairn_core::{
    epoch_id, EpochDiagnostics, EpochId, EpochStore, Error, ForeignEpoch, Head, ImportOutcome,
    RepairOutcome, Result, Seq, SpaceId,
};
use cairn_migrate::{cairn_set, Runner, SYNC_REVISION};

use super::support::{ev, evs, foreign, open, snapshot, variant};
use crate::{random_space, Harness, MigrationHarness};

/// A peer id made of one repeated hex digit, so peers sort as their digits do.
fn peer(digit: char) -> StoreId {
    StoreId::parse(&digit.to_string().repeat(StoreId::LEN)).expect("a valid store id")
}

fn cursor(peer: &StoreId, seq: u64, id: EpochId) -> SyncCursor {
    SyncCursor {
        peer: peer.clone(),
        seq: Seq(seq),
        id,
    }
}

/// A chain of `n` foreign epochs of `space`, the first on `parents`, each on the one before.
fn chain(space: &SpaceId, parents: &[EpochId], tag: &str, n: usize) -> Vec<ForeignEpoch> {
    let mut out: Vec<ForeignEpoch> = Vec::with_capacity(n);
    for i in 0..n {
        let on = match out.last() {
            Some(prev) => vec![prev.id],
            None => parents.to_vec(),
        };
        out.push(foreign(space, &on, evs(format!("{tag}-{i}"), 1 + i % 3)));
    }
    out
}

/// An id no store holds.
fn absent(tag: &str) -> EpochId {
    let space = random_space("e14-absent");
    epoch_id(
        &space,
        &[],
        &[cairn_core::Event::new("absent", tag.as_bytes().to_vec()).id()],
    )
}

fn bytes_of(epochs: &[&ForeignEpoch]) -> u64 {
    epochs.iter().map(|e| epoch_bytes(e)).sum()
}

/// The index and inner variant of an `InvalidBatchItem`, or a panic naming what came instead.
fn batch_item<T: std::fmt::Debug>(r: Result<T>, ctx: &str) -> (usize, &'static str, Error) {
    match r {
        Err(Error::InvalidBatchItem { index, error }) => (index, variant(&error), *error),
        other => panic!("{ctx}: expected InvalidBatchItem, got {other:?}"),
    }
}

/// Asserts the head cache is exact: `repair_heads` finds nothing to do and the cached rows
/// equal the anti-join's heads and `heads()`.
async fn assert_cache_exact(store: &dyn EpochDiagnostics, space: &SpaceId, want: &[Head]) {
    let cached = store.cached_heads(space).await.unwrap();
    let computed = store.computed_heads(space).await.unwrap();
    assert_eq!(computed, want, "E14: the anti-join's heads");
    assert_eq!(cached, computed, "E14: the cache rows equal the anti-join");
    assert_eq!(
        EpochStore::heads(store, space).await.unwrap(),
        want,
        "E14: heads()"
    );
    assert_eq!(
        store.repair_heads(space).await.unwrap(),
        RepairOutcome::Unchanged,
        "E14: the cache needs no repair"
    );
}

/// E14: a batch whose epochs chain (each on the one before it in the batch) imports in batch
/// order at the next local seqs — into a space with history and into a space with none — with
/// an exact cache after it, and its cursor is recorded with what it counted.
pub async fn e14_batch_imports_a_chain_in_order_with_an_exact_cache<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-chain");
    let a1 = store.append(&space, ev("e14-a1")).await.unwrap();
    let batch = chain(&space, &[a1.id], "e14-chain", 3);
    let last = batch[2].id;
    let p = peer('a');
    let outcomes = store
        .import_batch(&space, batch.clone(), Some(&cursor(&p, 9, last)), 1_000)
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [2, 3, 4].map(|s| ImportOutcome::Imported(Seq(s))),
        "E14: the batch's epochs get the next seqs in batch order"
    );
    assert_cache_exact(
        store.as_ref(),
        &space,
        &[Head {
            id: last,
            seq: Seq(4),
        }],
    )
    .await;
    for (i, epoch) in batch.iter().enumerate() {
        let stored = store
            .epoch(&space, &epoch.id)
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(stored.to_foreign(), *epoch, "E14: epoch {i} round-trips");
        assert_eq!(stored.seq, Seq(2 + i as u64), "E14: epoch {i}'s seq");
    }
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [SyncPeer {
            cursor: cursor(&p, 9, last),
            epochs: 3,
            bytes: bytes_of(&batch.iter().collect::<Vec<_>>()),
            updated_at_us: 1_000,
        }],
        "E14: the cursor and its counters"
    );
    let next = store.append(&space, ev("e14-after")).await.unwrap();
    assert_eq!(
        next.parents,
        [last],
        "E14: the next append builds on the batch"
    );

    // A space with no epoch: the batch's first epoch is a root.
    let empty = random_space("e14-chain-new");
    let batch = chain(&empty, &[], "e14-new", 4);
    let outcomes = store
        .import_batch(&empty, batch.clone(), None, 2_000)
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [1, 2, 3, 4].map(|s| ImportOutcome::Imported(Seq(s)))
    );
    assert_cache_exact(
        store.as_ref(),
        &empty,
        &[Head {
            id: batch[3].id,
            seq: Seq(4),
        }],
    )
    .await;
    assert!(
        store.sync_peers(&empty).await.unwrap().is_empty(),
        "E14: a batch without a cursor records none"
    );
}

/// E14: a batch refused at index k — a forged epoch (its id does not recompute), an epoch of
/// another space, or one whose parent is neither in the space nor earlier in the batch —
/// writes nothing of the batch, not even the epochs before k, and no cursor.
pub async fn e14_refused_batch_writes_nothing<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-refused");
    let a1 = store.append(&space, ev("e14-r-a1")).await.unwrap();
    let before = snapshot(store.as_ref(), &space).await;
    let p = peer('b');

    // Forged at index 2.
    let mut batch = chain(&space, &[a1.id], "e14-forged", 4);
    batch[2].id = absent("forged");
    let c = cursor(&p, 4, batch[3].id);
    let (index, inner, _) = batch_item(
        store.import_batch(&space, batch.clone(), Some(&c), 1).await,
        "E14: a forged epoch",
    );
    assert_eq!((index, inner), (2, "HashMismatch"), "E14: a forged epoch");

    // Of another space at index 1.
    let mut other = chain(&space, &[a1.id], "e14-other", 2);
    other[1] = foreign(&random_space("e14-elsewhere"), &[], ev("elsewhere"));
    let (index, inner, _) = batch_item(
        store.import_batch(&space, other, Some(&c), 1).await,
        "E14: an epoch of another space",
    );
    assert_eq!((index, inner), (1, "InvalidInput"));

    // An unknown parent at index 2: the epochs before it were written inside the transaction
    // and must be gone with it.
    let stray = absent("stray parent");
    let mut batch = chain(&space, &[a1.id], "e14-unknown", 2);
    batch.push(foreign(&space, &[batch[1].id, stray], ev("e14-unknown-2")));
    let (index, inner, error) = batch_item(
        store.import_batch(&space, batch.clone(), Some(&c), 1).await,
        "E14: an unknown parent",
    );
    assert_eq!((index, inner), (2, "UnknownParent"), "E14: {error}");
    assert!(
        matches!(error, Error::UnknownParent { parent } if parent == stray),
        "E14: the refusal names the stray parent: {error:?}"
    );

    // A parent that comes later in the batch is unknown too (parents first).
    let mut batch = chain(&space, &[a1.id], "e14-order", 3);
    batch.swap(1, 2);
    let (index, inner, _) = batch_item(
        store.import_batch(&space, batch.clone(), Some(&c), 1).await,
        "E14: a child before its parent",
    );
    assert_eq!((index, inner), (1, "UnknownParent"));

    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        before,
        "E14: a refused batch writes nothing"
    );
    let ids: Vec<EpochId> = batch.iter().map(|e| e.id).collect();
    assert_eq!(
        store.missing(&space, &ids).await.unwrap(),
        ids,
        "E14: none of a refused batch's epochs is stored"
    );
    assert!(
        store.sync_peers(&space).await.unwrap().is_empty(),
        "E14: a refused batch records no cursor"
    );
    assert_cache_exact(store.as_ref(), &space, &[a1.head()]).await;
}

/// E14: a batch of more than `MAX_IMPORT_BATCH` epochs is refused with `InvalidInput` before
/// anything is written.
pub async fn e14_oversized_batch_is_refused_before_writing<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-oversized");
    let a1 = store.append(&space, ev("e14-o-a1")).await.unwrap();
    let before = snapshot(store.as_ref(), &space).await;
    let batch = chain(&space, &[a1.id], "e14-over", MAX_IMPORT_BATCH + 1);
    let c = cursor(&peer('c'), 1, batch[0].id);
    match store.import_batch(&space, batch, Some(&c), 1).await {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("E14: an oversized batch: expected InvalidInput, got {other:?}"),
    }
    assert_eq!(snapshot(store.as_ref(), &space).await, before);
    assert!(store.sync_peers(&space).await.unwrap().is_empty());
}

/// E14: epochs already present (local ones, earlier imports, or earlier in the same batch)
/// answer `AlreadyPresent` with their seq, are written no more, and are not counted in the
/// cursor's `epochs` and `bytes`.
pub async fn e14_present_epochs_are_answered_and_not_counted<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-present");
    let a1 = store.append(&space, ev("e14-p-a1")).await.unwrap();
    let a2 = store.append(&space, evs("e14-p-a2", 2)).await.unwrap();
    let local = store
        .epoch(&space, &a2.id)
        .await
        .unwrap()
        .unwrap()
        .to_foreign();
    let p = peer('d');
    let first = chain(&space, &[a2.id], "e14-present", 2);
    let (f1, f2) = (first[0].clone(), first[1].clone());
    assert_eq!(
        store
            .import_batch(&space, vec![f1.clone()], Some(&cursor(&p, 3, f1.id)), 10)
            .await
            .unwrap(),
        [ImportOutcome::Imported(Seq(3))]
    );
    let batch = vec![local.clone(), f1.clone(), f2.clone(), f2.clone()];
    let outcomes = store
        .import_batch(&space, batch, Some(&cursor(&p, 5, f2.id)), 20)
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            ImportOutcome::AlreadyPresent(Seq(2)),
            ImportOutcome::AlreadyPresent(Seq(3)),
            ImportOutcome::Imported(Seq(4)),
            ImportOutcome::AlreadyPresent(Seq(4)),
        ],
        "E14: one outcome per epoch, in batch order"
    );
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [SyncPeer {
            cursor: cursor(&p, 5, f2.id),
            epochs: 2,
            bytes: bytes_of(&[&f1, &f2]),
            updated_at_us: 20,
        }],
        "E14: present epochs are not counted"
    );
    assert_cache_exact(
        store.as_ref(),
        &space,
        &[Head {
            id: f2.id,
            seq: Seq(4),
        }],
    )
    .await;
    assert_eq!(store.next_seq(&space).await.unwrap(), Seq(5));

    // A batch of present epochs only, without a cursor: nothing written.
    let before = snapshot(store.as_ref(), &space).await;
    let again = vec![f1.clone(), local.clone()];
    assert_eq!(
        store.import_batch(&space, again, None, 30).await.unwrap(),
        [
            ImportOutcome::AlreadyPresent(Seq(3)),
            ImportOutcome::AlreadyPresent(Seq(2))
        ]
    );
    assert_eq!(snapshot(store.as_ref(), &space).await, before);
    let _ = a1;
}

/// E14: an empty batch with a cursor moves the cursor only (back as well as forward: the
/// caller knows it is true); a cursor must name an epoch the space holds (in a space with no
/// epoch, none does), else nothing is written; an empty batch without one writes nothing.
pub async fn e14_empty_batch_moves_the_cursor_only<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-empty");
    let a1 = store.append(&space, ev("e14-e-a1")).await.unwrap();
    let a2 = store.append(&space, ev("e14-e-a2")).await.unwrap();
    let before = snapshot(store.as_ref(), &space).await;
    let p = peer('e');
    let moved = |seq, id, at| SyncPeer {
        cursor: cursor(&p, seq, id),
        epochs: 0,
        bytes: 0,
        updated_at_us: at,
    };
    let out = store
        .import_batch(&space, Vec::new(), Some(&cursor(&p, 7, a2.id)), 100)
        .await
        .unwrap();
    assert!(out.is_empty(), "E14: no outcome for an empty batch");
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [moved(7, a2.id, 100)]
    );
    store
        .import_batch(&space, Vec::new(), Some(&cursor(&p, 3, a1.id)), 200)
        .await
        .unwrap();
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [moved(3, a1.id, 200)],
        "E14: the cursor row is replaced, its seq may move back"
    );
    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        before,
        "E14: a cursor-only batch writes no epoch"
    );

    // A cursor naming an epoch the space does not hold is refused; nothing moves.
    let far = absent("the sender's epoch at 9");
    match store
        .import_batch(&space, Vec::new(), Some(&cursor(&p, 9, far)), 250)
        .await
    {
        Err(Error::BadCursor { .. }) => {}
        other => {
            panic!("E14: a cursor naming an absent epoch: expected BadCursor, got {other:?}")
        }
    }
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [moved(3, a1.id, 200)]
    );

    // A space with no epoch holds no cursor's epoch: refused, and still no epoch nor cursor.
    let none = random_space("e14-empty-none");
    assert!(matches!(
        store
            .import_batch(&none, Vec::new(), Some(&cursor(&p, 1, a1.id)), 300)
            .await,
        Err(Error::BadCursor { .. })
    ));
    assert!(store.sync_peers(&none).await.unwrap().is_empty());
    assert!(matches!(
        EpochStore::heads(store.as_ref(), &none).await,
        Err(Error::NotFound { .. })
    ));
    assert!(store
        .list_spaces(None, 1000)
        .await
        .unwrap()
        .iter()
        .all(|s| s != &none));

    // No cursor, no epoch: nothing.
    let quiet = random_space("e14-empty-quiet");
    assert!(store
        .import_batch(&quiet, Vec::new(), None, 400)
        .await
        .unwrap()
        .is_empty());
    assert!(store.sync_peers(&quiet).await.unwrap().is_empty());

    // A cursor's seq below 1 is refused.
    match store
        .import_batch(&space, Vec::new(), Some(&cursor(&p, 0, a1.id)), 500)
        .await
    {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("E14: a cursor at seq 0: expected InvalidInput, got {other:?}"),
    }
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [moved(3, a1.id, 200)]
    );
}

/// E14: `sync_peers` lists one cursor per sending store of the space, by peer id, each with
/// its counters summed over its batches and the latest seq, id and time; other spaces keep
/// their own.
pub async fn e14_sync_peers_lists_cursors_per_peer_with_summed_counters<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-peers");
    let other = random_space("e14-peers-other");
    let a1 = store.append(&space, ev("e14-pe-a1")).await.unwrap();
    let epochs = chain(&space, &[a1.id], "e14-peers", 5);
    let (low, high) = (peer('1'), peer('f'));
    // high: epochs 0 and 1; low: epoch 2; high: epochs 3 and 4; low: cursor only.
    let steps: [(&StoreId, std::ops::Range<usize>, u64, i64); 4] = [
        (&high, 0..2, 2, 10),
        (&low, 2..3, 30, 20),
        (&high, 3..5, 5, 30),
        (&low, 5..5, 31, 40),
    ];
    for (p, range, seq, at) in steps.clone() {
        let id = epochs[range.end.max(1) - 1].id;
        store
            .import_batch(
                &space,
                epochs[range].to_vec(),
                Some(&cursor(p, seq, id)),
                at,
            )
            .await
            .unwrap();
    }
    let all: Vec<&ForeignEpoch> = epochs.iter().collect();
    assert_eq!(
        store.sync_peers(&space).await.unwrap(),
        [
            SyncPeer {
                cursor: cursor(&low, 31, epochs[4].id),
                epochs: 1,
                bytes: bytes_of(&all[2..3]),
                updated_at_us: 40,
            },
            SyncPeer {
                cursor: cursor(&high, 5, epochs[4].id),
                epochs: 4,
                bytes: bytes_of(&[all[0], all[1], all[3], all[4]]),
                updated_at_us: 30,
            },
        ],
        "E14: cursors by peer id, counters summed, the latest seq, id and time"
    );
    assert!(
        store.sync_peers(&other).await.unwrap().is_empty(),
        "E14: a space never synced into keeps no cursor"
    );
    let o1 = store.append(&other, ev("e14-pe-o1")).await.unwrap();
    store
        .import_batch(&other, Vec::new(), Some(&cursor(&low, 1, o1.id)), 50)
        .await
        .unwrap();
    assert_eq!(store.sync_peers(&other).await.unwrap().len(), 1);
    assert_eq!(store.sync_peers(&space).await.unwrap().len(), 2);
}

/// E14: `missing` answers exactly the ids the space lacks, in the order given (repeats kept),
/// for a space with history and for one with no epoch, up to `MAX_MISSING_IDS` ids, and
/// refuses more.
pub async fn e14_missing_answers_the_absent_ids_in_order<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-missing");
    let a1 = store.append(&space, ev("e14-m-a1")).await.unwrap();
    let a2 = store.append(&space, ev("e14-m-a2")).await.unwrap();
    // The same ids held by another space do not count.
    let other = random_space("e14-missing-other");
    let o1 = store.append(&other, ev("e14-m-o1")).await.unwrap();
    let (x1, x2) = (absent("x1"), absent("x2"));
    let ask = [x1, a2.id, o1.id, x2, a1.id, x1];
    assert_eq!(
        store.missing(&space, &ask).await.unwrap(),
        [x1, o1.id, x2, x1],
        "E14: the absent ids in the order given"
    );
    assert!(store.missing(&space, &[]).await.unwrap().is_empty());
    assert!(store
        .missing(&space, &[a2.id, a1.id])
        .await
        .unwrap()
        .is_empty());
    let none = random_space("e14-missing-none");
    assert_eq!(
        store.missing(&none, &ask).await.unwrap(),
        ask,
        "E14: a space with no epoch lacks every id"
    );

    let mut many: Vec<EpochId> = (0..MAX_MISSING_IDS - 2)
        .map(|i| absent(&format!("many-{i}")))
        .collect();
    many.insert(MAX_MISSING_IDS / 2, a1.id);
    many.push(a2.id);
    let want: Vec<EpochId> = many
        .iter()
        .filter(|id| **id != a1.id && **id != a2.id)
        .copied()
        .collect();
    assert_eq!(
        store.missing(&space, &many).await.unwrap(),
        want,
        "E14: {MAX_MISSING_IDS} ids in one call"
    );
    many.push(x1);
    match store.missing(&space, &many).await {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("E14: too many ids: expected InvalidInput, got {other:?}"),
    }
}

/// E14: `store_id` is made once and answered the same ever after: by repeated calls, by two
/// instances asking first at once, and by an instance opened later.
pub async fn e14_store_id_is_stable<H: Harness>(h: &H) {
    let (one, two) = (open(h).await, open(h).await);
    let (a, b) = tokio::join!(one.store_id(), two.store_id());
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "E14: concurrent first calls agree");
    assert_eq!(StoreId::parse(a.as_str()).unwrap(), a, "E14: a valid id");
    assert_eq!(one.store_id().await.unwrap(), a, "E14: stable across calls");
    drop((one, two));
    let again = open(h).await;
    assert_eq!(
        again.store_id().await.unwrap(),
        a,
        "E14: stable across a reopen"
    );
}

/// E14: a batch that forks the space (two epochs on one parent) leaves two heads with an exact
/// cache, and the next append merges them.
pub async fn e14_batch_fork_leaves_two_heads_and_the_next_append_merges<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e14-fork");
    let a1 = store.append(&space, ev("e14-f-a1")).await.unwrap();
    let left = foreign(&space, &[a1.id], ev("e14-left"));
    let right = foreign(&space, &[a1.id], evs("e14-right", 2));
    let tip = foreign(&space, &[right.id], ev("e14-right-tip"));
    let outcomes = store
        .import_batch(
            &space,
            vec![left.clone(), right.clone(), tip.clone()],
            Some(&cursor(&peer('7'), 3, tip.id)),
            1,
        )
        .await
        .unwrap();
    assert_eq!(outcomes, [2, 3, 4].map(|s| ImportOutcome::Imported(Seq(s))));
    let mut heads = vec![
        Head {
            id: left.id,
            seq: Seq(2),
        },
        Head {
            id: tip.id,
            seq: Seq(4),
        },
    ];
    heads.sort();
    assert_cache_exact(store.as_ref(), &space, &heads).await;
    let merge = store.append(&space, ev("e14-merge")).await.unwrap();
    assert_eq!(
        merge.parents,
        heads.iter().map(|h| h.id).collect::<Vec<_>>(),
        "E14: the append merges the fork"
    );
    assert_cache_exact(store.as_ref(), &space, &[merge.head()]).await;
}

/// E14 (`migrations`): two stores have different ids.
pub async fn e14_two_stores_have_different_ids<H: MigrationHarness>(h: &H) {
    let other = h.fresh().await;
    let mine = open(h).await.store_id().await.unwrap();
    let theirs = open(&other).await.store_id().await.unwrap();
    assert_ne!(mine, theirs, "E14: two stores, two ids");
}

/// Asserts `r` is the refusal that names the sync revision.
fn assert_needs_sync_revision<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    match r {
        Err(Error::Incompatible { detail, blockers }) => {
            assert!(detail.contains(SYNC_REVISION), "{what}: {detail}");
            assert!(blockers.is_empty(), "{what}");
        }
        other => panic!("E14: {what}: expected Incompatible naming {SYNC_REVISION}, got {other:?}"),
    }
}

/// E14 (`migrations`): on a store whose upgrade stopped before `0010_epoch_sync` the store id,
/// the batch import and the cursors are refused by name, writing nothing, while `missing`
/// answers; once another open applied the revision, a new instance has them, and the running
/// one picks the revision up by itself.
pub async fn e14_a_store_before_the_sync_revision_refuses_sync_state_by_name<
    H: MigrationHarness,
>(
    h: &H,
) {
    let h = h.fresh().await;
    let before = Runner::new(
        cairn_set()
            .up_to("0009_spool_flow")
            .expect("0009 in the set"),
    );
    let old = h.open_as(&before).await.expect("the store at 0009");
    let space = random_space("e14-rev");
    let a1 = old.append(&space, ev("e14-rev-a1")).await.unwrap();
    let batch = chain(&space, &[a1.id], "e14-rev", 2);
    let snap = snapshot(old.as_ref(), &space).await;

    assert_needs_sync_revision(old.store_id().await, "store_id");
    assert_needs_sync_revision(
        old.import_batch(&space, batch.clone(), None, 1).await,
        "import_batch",
    );
    assert_needs_sync_revision(
        old.import_batch(&space, Vec::new(), Some(&cursor(&peer('9'), 1, a1.id)), 1)
            .await,
        "import_batch with a cursor only",
    );
    assert_needs_sync_revision(old.sync_peers(&space).await, "sync_peers");
    assert_eq!(
        snapshot(old.as_ref(), &space).await,
        snap,
        "E14: nothing written"
    );
    let x = absent("rev");
    assert_eq!(
        old.missing(&space, &[x, a1.id]).await.unwrap(),
        [x],
        "E14: missing works before the revision"
    );

    // Another open brings the store to this build's head.
    let new = open(&h).await;
    let id = new.store_id().await.unwrap();
    assert_eq!(
        new.import_batch(&space, batch.clone(), None, 2)
            .await
            .unwrap(),
        [2, 3].map(|s| ImportOutcome::Imported(Seq(s)))
    );
    assert!(new.sync_peers(&space).await.unwrap().is_empty());
    // The running instance sees the revision within its recheck interval.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match old.store_id().await {
            Ok(seen) => {
                assert_eq!(seen, id, "E14: one id for the store");
                break;
            }
            Err(Error::Incompatible { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("E14: the running instance never saw the revision: {e}"),
        }
    }
}
