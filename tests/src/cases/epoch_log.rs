//! Epoch-log cases every backend must pass (E1–E11 and bad input).

use std::collections::BTreeSet;

use cairn_core::{
    cache_is_current, epoch_id, event_id, verify_epoch, EpochId, EpochStore, Error, Event,
    FeedCursor, FeedEvent, Head, ImportOutcome, MemoryStore, RepairOutcome, Seq, SpaceId,
    MAX_EPOCH_EVENTS, MAX_EVENT_PAYLOAD, MAX_KEY_LEN, MAX_KIND_LEN, MAX_SPACE_LEN,
};

use super::support::{
    all_spaces, assert_heads_match_anti_join, assert_single_head, ev, event_ids, evs, foreign, ids,
    legacy_fork, open, snapshot,
};
use crate::{random_space, Harness};

/// E1: seqs are commit-ordered: 1, 2, 3, … in the order appends return, whichever writer
/// (append, legacy writer, import) takes the next one; concurrent appends on one instance are
/// serialized, so each names the previous one as its only parent.
pub async fn e1_commit_ordered_seq<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e1");
    for i in 1..=5u64 {
        let a = store.append(&space, ev(format!("e1-{i}"))).await.unwrap();
        assert_eq!(a.seq, Seq(i), "E1: seq of append {i}");
        assert_single_head(store.as_ref(), &space, a.head()).await;
    }
    let l = h
        .legacy_append(&space, None, ev("e1-legacy"))
        .await
        .unwrap();
    assert_eq!(l.seq, Seq(6), "E1: a legacy writer takes the next seq");
    let f = foreign(&space, &[l.id], ev("e1-import"));
    let imported = store.import(f).await.unwrap();
    assert_eq!(
        imported,
        ImportOutcome::Imported(Seq(7)),
        "E1: an import takes the next seq"
    );
    let a = store.append(&space, ev("e1-after")).await.unwrap();
    assert_eq!(a.seq, Seq(8), "E1: append after legacy write and import");

    // Concurrent appends through one instance.
    let space = random_space("e1-concurrent");
    let (tasks, per_task) = (6, 3);
    let mut joins = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        let space = space.clone();
        joins.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..per_task {
                let a = store
                    .append(&space, ev(format!("e1-c-{t}-{i}")))
                    .await
                    .unwrap();
                out.push(a);
            }
            out
        }));
    }
    let mut all = Vec::new();
    for j in joins {
        let got = j.await.expect("append task panicked");
        assert!(
            got.windows(2).all(|w| w[0].seq < w[1].seq),
            "E1: one task's appends got seqs in its commit order: {got:?}"
        );
        all.extend(got);
    }
    all.sort_by_key(|a| a.seq);
    let seqs: Vec<u64> = all.iter().map(|a| a.seq.0).collect();
    let want: Vec<u64> = (1..=(tasks * per_task) as u64).collect();
    assert_eq!(
        seqs, want,
        "E1: concurrent appends get unique, gap-free seqs"
    );
    assert!(
        all[0].parents.is_empty(),
        "E1: the first epoch has no parent"
    );
    for w in all.windows(2) {
        assert_eq!(
            w[1].parents,
            vec![w[0].id],
            "E1: seq {} must name seq {} as its only parent",
            w[1].seq,
            w[0].seq
        );
    }
    let last = all.last().unwrap();
    assert_single_head(store.as_ref(), &space, last.head()).await;
}

/// E2: every stored epoch's id recomputes from (space, parents, event ids), event ids recompute
/// from the events, the events round-trip byte for byte, and an exported epoch verifies.
pub async fn e2_ids_recompute<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e2");
    let mut written: Vec<(EpochId, Seq, Vec<Event>)> = Vec::new();

    let odd = vec![
        Event::new("e2.empty-payload", Vec::new()),
        Event::with_key("e2.empty-key", Vec::new(), b"k".to_vec()),
        Event::with_key(
            "e2.binary",
            vec![0u8, 0xff, 0x80],
            vec![0u8, 1, 2, 0xfe, 0xff],
        ),
        Event::new("e2.unicode ✓", "héllo".as_bytes().to_vec()),
    ];
    let a = store.append(&space, odd.clone()).await.unwrap();
    written.push((a.id, a.seq, odd));
    let batch = evs("e2-b", 3);
    let b = store.append(&space, batch.clone()).await.unwrap();
    written.push((b.id, b.seq, batch));
    // A fork: two legacy siblings, then an import and a merging append.
    for i in 0..2 {
        let e = evs(format!("e2-fork-{i}"), 2);
        let l = h
            .legacy_append(&space, Some(vec![b.id]), e.clone())
            .await
            .unwrap();
        written.push((l.id, l.seq, e));
    }
    let f = foreign(&space, &[b.id], evs("e2-import", 2));
    let ImportOutcome::Imported(seq) = store.import(f.clone()).await.unwrap() else {
        panic!("E2: a new epoch must be imported");
    };
    written.push((f.id, seq, f.events.clone()));
    let m_events = ev("e2-merge");
    let m = store.append(&space, m_events.clone()).await.unwrap();
    assert_eq!(m.parents.len(), 3, "E2: the merge names all three heads");
    written.push((m.id, m.seq, m_events));

    // Replaying the exported history into an independent reference store must reproduce it.
    let replica = MemoryStore::new();
    for (id, seq, events) in &written {
        let e = store
            .epoch(&space, id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("E2: epoch {id} (seq {seq}) not found"));
        assert_eq!(e.space, space, "E2: epoch's space");
        assert_eq!(e.id, *id, "E2: stored id");
        assert_eq!(e.seq, *seq, "E2: stored seq");
        assert_eq!(&e.events, events, "E2: events round-trip byte for byte");
        assert!(
            e.parents
                .windows(2)
                .all(|w| w[0].as_bytes() < w[1].as_bytes()),
            "E2: stored parents are sorted by id bytes: {:?}",
            e.parents
        );
        let recomputed_events: Vec<_> = e.events.iter().map(event_id).collect();
        assert_eq!(
            recomputed_events,
            event_ids(events),
            "E2: event ids recompute"
        );
        assert_eq!(
            epoch_id(&space, &e.parents, &recomputed_events),
            *id,
            "E2: epoch id recomputes"
        );
        verify_epoch(&e.to_foreign())
            .unwrap_or_else(|err| panic!("E2: exported epoch {id} must verify: {err}"));
        let outcome = replica.import(e.to_foreign()).await.unwrap();
        assert!(
            matches!(outcome, ImportOutcome::Imported(_)),
            "E2: the export imports elsewhere"
        );
    }
    assert_eq!(
        EpochStore::heads(&replica, &space).await.unwrap(),
        vec![m.head()],
        "E2: the replica ends at the same single head"
    );

    // The feed reports the same event ids.
    let feed = store.events_since(&space, None, 1_000).await.unwrap();
    for fe in &feed.events {
        assert_eq!(
            fe.event_id,
            event_id(&fe.event),
            "E2: feed event id recomputes"
        );
    }

    // Unknown ids, and ids of another space, are not found.
    assert_eq!(
        store.epoch(&space, &EpochId([0x5a; 32])).await.unwrap(),
        None,
        "E2: unknown epoch id"
    );
    let other = random_space("e2-other");
    store.append(&other, ev("e2-other")).await.unwrap();
    assert_eq!(
        store.epoch(&other, &a.id).await.unwrap(),
        None,
        "E2: an epoch belongs to one space only"
    );
}

/// E3: an append's parents are the space's heads sorted by id bytes (not by seq), whether they
/// come from the anti-join (empty cache) or from a multi-row current cache, and the new id
/// recomputes from exactly those parents.
pub async fn e3_parents_are_heads_in_id_byte_order<H: Harness>(h: &H) {
    let store = open(h).await;
    for repair_first in [false, true] {
        let space = random_space("e3");
        let root = h.legacy_append(&space, None, ev("e3-root")).await.unwrap();
        let mut heads: Vec<Head> = Vec::new();
        // Add siblings until seq order differs from id order, so the case can tell them apart.
        for i in 0..16 {
            let l = h
                .legacy_append(&space, Some(vec![root.id]), ev(format!("e3-fork-{i}")))
                .await
                .unwrap();
            assert_eq!(l.parents, vec![root.id], "E3: legacy fork parents");
            heads.push(l.head());
            let by_seq = ids(&heads);
            let mut by_id = by_seq.clone();
            by_id.sort();
            if heads.len() >= 3 && by_seq != by_id {
                break;
            }
        }
        let f = foreign(&space, &[root.id], ev("e3-import"));
        let ImportOutcome::Imported(seq) = store.import(f.clone()).await.unwrap() else {
            panic!("E3: a new epoch must be imported");
        };
        heads.push(Head { id: f.id, seq });
        heads.sort_by(|a, b| a.id.as_bytes().cmp(b.id.as_bytes()));
        let expected = ids(&heads);
        assert_ne!(
            {
                let mut s = heads.clone();
                s.sort_by_key(|h| h.seq);
                ids(&s)
            },
            expected,
            "E3 setup: seq order must differ from id order"
        );
        if repair_first {
            store.repair_heads(&space).await.unwrap();
            assert_eq!(
                store.cached_heads(&space).await.unwrap(),
                heads,
                "E3: repaired cache rows in id byte order"
            );
        }
        assert_eq!(
            EpochStore::heads(store.as_ref(), &space).await.unwrap(),
            heads,
            "E3: heads() in id byte order"
        );
        assert_eq!(
            store.computed_heads(&space).await.unwrap(),
            heads,
            "E3: anti-join in id byte order"
        );

        let events = evs("e3-merge", 2);
        let a = store.append(&space, events.clone()).await.unwrap();
        assert_eq!(
            a.parents, expected,
            "E3: parents = heads in id byte order (repair_first={repair_first})"
        );
        assert_eq!(
            a.id,
            epoch_id(&space, &expected, &event_ids(&events)),
            "E3: id recomputes from the parents"
        );
        let stored = store
            .epoch(&space, &a.id)
            .await
            .unwrap()
            .expect("E3: merged epoch stored");
        assert_eq!(
            stored.parents, expected,
            "E3: stored parents in id byte order"
        );
        assert_single_head(store.as_ref(), &space, a.head()).await;
    }
}

/// E4: after every append — on an empty space, over a current cache, a stale cache, an empty
/// cache, a multi-row cache and a fork — the new epoch is the only head and the only cache row,
/// and its parents were the heads just before it.
pub async fn e4_one_head_and_one_cache_row_after_every_append<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e4");
    let mut step = 0usize;
    let mut append = |n: usize| {
        step += 1;
        let store = store.clone();
        let space = space.clone();
        let tag = format!("e4-{step}");
        async move {
            let before = store.computed_heads(&space).await.unwrap();
            let next = store.next_seq(&space).await.unwrap();
            let a = store.append(&space, evs(&tag, n)).await.unwrap();
            assert_eq!(a.seq, next, "E4: {tag}: seq");
            assert_eq!(
                a.parents,
                ids(&before),
                "E4: {tag}: parents = heads before the append"
            );
            assert_single_head(store.as_ref(), &space, a.head()).await;
            a
        }
    };

    let first = append(1).await;
    assert!(first.parents.is_empty(), "E4: first epoch has no parents");
    append(3).await;
    // Stale cache: one legacy epoch.
    h.legacy_append(&space, None, ev("e4-legacy"))
        .await
        .unwrap();
    append(1).await;
    // Stale cache under a legacy fork.
    let base = append(1).await;
    for i in 0..3 {
        h.legacy_append(&space, Some(vec![base.id]), ev(format!("e4-lfork-{i}")))
            .await
            .unwrap();
    }
    assert_eq!(
        store.computed_heads(&space).await.unwrap().len(),
        3,
        "E4 setup: three legacy heads"
    );
    append(2).await;
    // Multi-row current cache from repair.
    let base = append(1).await;
    for i in 0..2 {
        h.legacy_append(&space, Some(vec![base.id]), ev(format!("e4-rfork-{i}")))
            .await
            .unwrap();
    }
    store.repair_heads(&space).await.unwrap();
    assert_eq!(
        store.cached_heads(&space).await.unwrap().len(),
        2,
        "E4 setup: two cache rows"
    );
    append(1).await;
    // Multi-row current cache from an import fork.
    let base = append(1).await;
    append(1).await;
    store
        .import(foreign(&space, &[base.id], ev("e4-import")))
        .await
        .unwrap();
    assert_eq!(
        store.cached_heads(&space).await.unwrap().len(),
        2,
        "E4 setup: import fork cached"
    );
    append(1).await;
    // Empty cache: a space written only by the legacy writer.
    let legacy_only = random_space("e4-legacy-only");
    h.legacy_append(&legacy_only, None, ev("e4-lo-1"))
        .await
        .unwrap();
    let l2 = h
        .legacy_append(&legacy_only, None, ev("e4-lo-2"))
        .await
        .unwrap();
    assert!(
        store.cached_heads(&legacy_only).await.unwrap().is_empty(),
        "E4 setup: empty cache"
    );
    let a = store
        .append(&legacy_only, ev("e4-lo-append"))
        .await
        .unwrap();
    assert_eq!(a.parents, vec![l2.id], "E4: parents over an empty cache");
    assert_single_head(store.as_ref(), &legacy_only, a.head()).await;
    // A run of plain appends.
    for _ in 0..5 {
        append(1).await;
    }
}

/// E5: the cache is trusted only when `max(cached seq) + 1 == next seq` and the newest epoch is
/// a cached head; after legacy writes it is stale and ignored, so `heads()` always equals the
/// anti-join, and reading never rewrites it.
pub async fn e5_cache_used_only_when_current<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e5");
    // The rule over what the diagnostics show: the cache rows, and the space's newest epoch
    // (whose seq must be the one just below the next seq).
    let current = |cached: &[Head], newest: Head, next: Seq| {
        assert_eq!(
            next.0,
            newest.seq.0 + 1,
            "E1: the newest epoch is the last seq"
        );
        cache_is_current(cached, Some(newest.seq), Some(newest.id))
    };

    let a = store.append(&space, ev("e5-a")).await.unwrap();
    let a_head = a.head();
    let cached = store.cached_heads(&space).await.unwrap();
    assert!(
        current(&cached, a_head, store.next_seq(&space).await.unwrap()),
        "E5: cache current after append"
    );
    assert_heads_match_anti_join(store.as_ref(), &space, "E5 after append").await;

    let l1 = h.legacy_append(&space, None, ev("e5-l1")).await.unwrap();
    assert_eq!(
        l1.parents,
        vec![a.id],
        "E5: legacy writer's parents come from the anti-join"
    );
    let l2 = h.legacy_append(&space, None, ev("e5-l2")).await.unwrap();
    let fork = h
        .legacy_append(&space, Some(vec![l1.id]), ev("e5-fork"))
        .await
        .unwrap();
    let mut want = vec![l2.head(), fork.head()];
    want.sort();
    for round in 0..2 {
        let cached = store.cached_heads(&space).await.unwrap();
        assert_eq!(
            cached,
            vec![a_head],
            "E5: legacy writes leave the cache untouched (round {round})"
        );
        assert!(
            !current(&cached, fork.head(), store.next_seq(&space).await.unwrap()),
            "E5: the cache is stale"
        );
        let computed = store.computed_heads(&space).await.unwrap();
        assert_eq!(computed, want, "E5: anti-join sees the legacy fork");
        assert_ne!(
            cached, computed,
            "E5: stale cache differs from the anti-join"
        );
        assert_eq!(
            EpochStore::heads(store.as_ref(), &space).await.unwrap(),
            computed,
            "E5: heads() ignores a stale cache"
        );
    }
    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        vec![a_head],
        "E5: heads() writes nothing"
    );

    let b = store.append(&space, ev("e5-b")).await.unwrap();
    assert_eq!(
        b.parents,
        ids(&want),
        "E5: append over a stale cache takes the anti-join's heads"
    );
    let cached = store.cached_heads(&space).await.unwrap();
    assert!(
        current(&cached, b.head(), store.next_seq(&space).await.unwrap()),
        "E5: cache current again"
    );
    assert_single_head(store.as_ref(), &space, b.head()).await;

    // A legacy-only space: the cache is empty (never current), heads still come out right.
    let lo = random_space("e5-legacy-only");
    let x = h.legacy_append(&lo, None, ev("e5-lo")).await.unwrap();
    let cached = store.cached_heads(&lo).await.unwrap();
    assert!(
        cached.is_empty(),
        "E5: legacy writer never touches the cache"
    );
    assert!(
        !current(&cached, x.head(), store.next_seq(&lo).await.unwrap()),
        "E5: an empty cache is not current"
    );
    assert_eq!(
        EpochStore::heads(store.as_ref(), &lo).await.unwrap(),
        vec![x.head()],
        "E5: heads() over an empty cache"
    );
    assert_heads_match_anti_join(store.as_ref(), &lo, "E5 legacy-only").await;
    assert!(
        store.cached_heads(&lo).await.unwrap().is_empty(),
        "E5: heads() writes nothing"
    );
}

/// E5: a cached head deleted by hand whose seq a cache-unaware writer then reused is not
/// trusted. `max(cached seq) + 1 == next seq` holds again while the cached id names nothing, so
/// the seq check alone would serve a phantom head and the next append would name it as a parent;
/// the probe's id at the largest seq must be a cached head too (issue 9 item 7).
///
/// The hand deletion is plain SQL shared by the SQL backends; the store holds this one space.
pub async fn e5_cached_head_deleted_by_hand_and_its_seq_reused_is_not_trusted<
    H: crate::MigrationHarness,
>(
    h: &H,
) {
    let store = open(h).await;
    let space = random_space("e5-phantom");
    let a = store.append(&space, ev("e5-ph-a")).await.unwrap();
    let b = store.append(&space, ev("e5-ph-b")).await.unwrap();
    for stmt in [
        "DELETE FROM epoch_event WHERE seq = (SELECT max(seq) FROM epoch)",
        "DELETE FROM epoch_parent WHERE child IN \
         (SELECT id FROM epoch WHERE seq = (SELECT max(seq) FROM epoch))",
        "DELETE FROM epoch WHERE seq = (SELECT max(seq) FROM epoch)",
    ] {
        h.execute_sql(stmt)
            .await
            .unwrap_or_else(|e| panic!("E5 setup: {stmt}: {e}"));
    }
    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        vec![b.head()],
        "E5 setup: the cache row outlives its epoch"
    );
    let c = h.legacy_append(&space, None, ev("e5-ph-c")).await.unwrap();
    assert_eq!(
        (c.seq, c.parents.clone()),
        (b.seq, vec![a.id]),
        "E5 setup: the legacy writer reuses the freed seq"
    );
    assert_eq!(
        EpochStore::heads(store.as_ref(), &space).await.unwrap(),
        vec![c.head()],
        "E5: heads() serves no phantom"
    );
    let d = store.append(&space, ev("e5-ph-d")).await.unwrap();
    assert_eq!(d.parents, vec![c.id], "E5: the append takes the real head");
    assert_single_head(store.as_ref(), &space, d.head()).await;
    if let Some(budget) = h.append_statement_budget() {
        let before = store.statements_executed();
        store.append(&space, ev("e5-ph-e")).await.unwrap();
        assert_eq!(
            store.statements_executed() - before,
            budget,
            "E11: the id check costs no statement"
        );
    }
}

/// E6: history written by a legacy writer, ending in a fork, under a stale single cache row:
/// the next append detects it (seq check) and takes the fork's heads, not the cached one.
pub async fn e6_legacy_history_with_fork_detected<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e6");
    let a0 = store.append(&space, ev("e6-a0")).await.unwrap();
    let stale = a0.head();
    let l1 = h.legacy_append(&space, None, ev("e6-l1")).await.unwrap();
    let l2 = h.legacy_append(&space, None, ev("e6-l2")).await.unwrap();
    assert_eq!(
        (l1.seq, l2.seq),
        (Seq(2), Seq(3)),
        "E6: legacy writer follows the seq rule"
    );
    assert_eq!(l2.parents, vec![l1.id], "E6: legacy chain");
    let fork = legacy_fork(h, &space, l2.id, "e6").await;

    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        vec![stale],
        "E6 setup: one stale cache row"
    );
    assert_eq!(
        store.computed_heads(&space).await.unwrap(),
        fork,
        "E6 setup: anti-join sees the fork"
    );
    assert_eq!(
        EpochStore::heads(store.as_ref(), &space).await.unwrap(),
        fork,
        "E6: heads() sees the fork"
    );

    let events = ev("e6-append");
    let n = store.append(&space, events.clone()).await.unwrap();
    assert!(
        !n.parents.contains(&a0.id),
        "E6: the stale cached head must not be a parent"
    );
    assert_eq!(
        n.parents,
        ids(&fork),
        "E6: parents are the fork's heads in id byte order"
    );
    assert_eq!(n.seq, Seq(6), "E6: seq after legacy history");
    assert_eq!(
        n.id,
        epoch_id(&space, &ids(&fork), &event_ids(&events)),
        "E6: id recomputes"
    );
    assert_single_head(store.as_ref(), &space, n.head()).await;
}

/// E7: repair fills an empty cache (linear and forked history) and replaces a stale row, a
/// second repair changes nothing, an append on a two-row cache collapses it to one row, and
/// repairing an unknown space is refused.
pub async fn e7_repair_fills_once_and_fork_collapses<H: Harness>(h: &H) {
    let store = open(h).await;

    // Linear legacy history, empty cache.
    let linear = random_space("e7-linear");
    let mut last = None;
    for i in 0..3 {
        last = Some(
            h.legacy_append(&linear, None, ev(format!("e7-l-{i}")))
                .await
                .unwrap(),
        );
    }
    let last = last.unwrap();
    let tip = last.head();
    assert!(
        store.cached_heads(&linear).await.unwrap().is_empty(),
        "E7 setup: empty cache"
    );
    let r = store.repair_heads(&linear).await.unwrap();
    assert_eq!(
        r,
        RepairOutcome::Rewritten {
            before: vec![],
            after: vec![tip]
        },
        "E7: repair fills the cache"
    );
    assert_eq!(
        store.cached_heads(&linear).await.unwrap(),
        vec![tip],
        "E7: cache = anti-join"
    );
    let snap = snapshot(store.as_ref(), &linear).await;
    assert_eq!(
        store.repair_heads(&linear).await.unwrap(),
        RepairOutcome::Unchanged,
        "E7: second repair"
    );
    assert_eq!(
        snapshot(store.as_ref(), &linear).await,
        snap,
        "E7: second repair wrote nothing"
    );
    let a = store.append(&linear, ev("e7-l-append")).await.unwrap();
    assert_eq!(
        a.parents,
        vec![last.id],
        "E7: append over the repaired cache"
    );
    assert_single_head(store.as_ref(), &linear, a.head()).await;
    assert_eq!(
        store.repair_heads(&linear).await.unwrap(),
        RepairOutcome::Unchanged,
        "E7: append leaves the cache exact"
    );

    // Forked legacy history, empty cache: repair writes two rows.
    let forked = random_space("e7-fork");
    let root = h
        .legacy_append(&forked, None, ev("e7-f-root"))
        .await
        .unwrap();
    let mut fork = Vec::new();
    for i in 0..2 {
        let f = h
            .legacy_append(&forked, Some(vec![root.id]), ev(format!("e7-f-{i}")))
            .await
            .unwrap();
        fork.push(f.head());
    }
    fork.sort();
    let r = store.repair_heads(&forked).await.unwrap();
    assert_eq!(
        r,
        RepairOutcome::Rewritten {
            before: vec![],
            after: fork.clone()
        },
        "E7: repair over a fork"
    );
    assert_eq!(
        store.cached_heads(&forked).await.unwrap(),
        fork,
        "E7: two cache rows"
    );
    let snap = snapshot(store.as_ref(), &forked).await;
    assert_eq!(
        store.repair_heads(&forked).await.unwrap(),
        RepairOutcome::Unchanged,
        "E7: second repair over a fork"
    );
    assert_eq!(
        snapshot(store.as_ref(), &forked).await,
        snap,
        "E7: second repair wrote nothing"
    );
    let m = store.append(&forked, ev("e7-f-merge")).await.unwrap();
    assert_eq!(
        m.parents,
        ids(&fork),
        "E7: the append merges both cached heads"
    );
    assert_single_head(store.as_ref(), &forked, m.head()).await;

    // A stale row is replaced.
    let stale = random_space("e7-stale");
    let s = store.append(&stale, ev("e7-s-a")).await.unwrap();
    let l = h.legacy_append(&stale, None, ev("e7-s-l")).await.unwrap();
    let r = store.repair_heads(&stale).await.unwrap();
    assert_eq!(
        r,
        RepairOutcome::Rewritten {
            before: vec![s.head()],
            after: vec![l.head()],
        },
        "E7: repair replaces a stale row"
    );
    assert_eq!(
        store.repair_heads(&stale).await.unwrap(),
        RepairOutcome::Unchanged,
        "E7: then no-op"
    );

    // Unknown space.
    let unknown = random_space("e7-unknown");
    let err = store.repair_heads(&unknown).await.unwrap_err();
    assert!(
        matches!(err, Error::NotFound { .. }),
        "E7: repair of an unknown space: {err:?}"
    );
    let snap = snapshot(store.as_ref(), &unknown).await;
    assert_eq!(snap.heads, None, "E7: refused repair creates no space");
    assert!(
        snap.cached.is_empty(),
        "E7: refused repair writes no cache row"
    );
    assert_eq!(
        snap.next_seq,
        Seq::FIRST,
        "E7: refused repair writes no epoch"
    );
}

/// E9: importing epochs exported by another node replicates them; a sibling creates a fork and
/// two cache rows, re-import is a no-op, the next append merges every head, and a bad id,
/// tampered content, unsorted parents or unknown parent are refused without writing.
pub async fn e9_import_fork_merge_and_refusals<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e9");
    // The other node.
    let remote = MemoryStore::new();
    let r1 = remote.append(&space, evs("e9-r1", 2)).await.unwrap();
    let r2 = remote.append(&space, ev("e9-r2")).await.unwrap();
    let export = |id: EpochId| {
        let remote = remote.clone();
        let space = space.clone();
        async move {
            remote
                .epoch(&space, &id)
                .await
                .unwrap()
                .expect("exported epoch")
                .to_foreign()
        }
    };

    // Importing into an empty space creates it.
    assert_eq!(
        store.import(export(r1.id).await).await.unwrap(),
        ImportOutcome::Imported(Seq(1)),
        "E9: first import"
    );
    assert_eq!(
        store.import(export(r2.id).await).await.unwrap(),
        ImportOutcome::Imported(Seq(2)),
        "E9: second import"
    );
    let r2_head = Head {
        id: r2.id,
        seq: Seq(2),
    };
    assert_eq!(
        EpochStore::heads(store.as_ref(), &space).await.unwrap(),
        vec![r2_head],
        "E9: heads after imports"
    );
    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        vec![r2_head],
        "E9: import keeps the cache exact"
    );

    // A local append and a remote sibling of it.
    let c = store.append(&space, ev("e9-local")).await.unwrap();
    assert_eq!(
        c.parents,
        vec![r2.id],
        "E9: local append on imported history"
    );
    let x = remote
        .append(&space, ev("e9-remote-sibling"))
        .await
        .unwrap();
    assert_eq!(x.parents, vec![r2.id], "E9 setup: remote sibling");
    let xf = export(x.id).await;
    assert_eq!(
        store.import(xf.clone()).await.unwrap(),
        ImportOutcome::Imported(Seq(4)),
        "E9: sibling import"
    );
    let mut fork = vec![
        c.head(),
        Head {
            id: x.id,
            seq: Seq(4),
        },
    ];
    fork.sort();
    assert_eq!(
        EpochStore::heads(store.as_ref(), &space).await.unwrap(),
        fork,
        "E9: import creates a fork"
    );
    assert_eq!(
        store.cached_heads(&space).await.unwrap(),
        fork,
        "E9: two cache rows after the fork"
    );
    assert_eq!(
        store.computed_heads(&space).await.unwrap(),
        fork,
        "E9: anti-join agrees"
    );

    // Re-import writes nothing.
    let snap = snapshot(store.as_ref(), &space).await;
    assert_eq!(
        store.import(xf.clone()).await.unwrap(),
        ImportOutcome::AlreadyPresent(Seq(4)),
        "E9: re-import"
    );
    assert_eq!(
        store.import(export(r1.id).await).await.unwrap(),
        ImportOutcome::AlreadyPresent(Seq(1)),
        "E9: re-import old"
    );
    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        snap,
        "E9: re-import wrote nothing"
    );

    // The next append merges every head.
    let m = store.append(&space, ev("e9-merge")).await.unwrap();
    assert_eq!(m.parents, ids(&fork), "E9: append merges every head");
    assert_single_head(store.as_ref(), &space, m.head()).await;

    // Refusals.
    let snap = snapshot(store.as_ref(), &space).await;
    let good = foreign(&space, &[m.id], ev("e9-good"));

    let mut wrong_id = good.clone();
    wrong_id.id = EpochId([0x11; 32]);
    let err = store.import(wrong_id).await.unwrap_err();
    assert!(
        matches!(err, Error::HashMismatch { claimed, actual } if claimed == EpochId([0x11; 32]) && actual == good.id),
        "E9: wrong id: {err:?}"
    );
    let mut tampered = good.clone();
    tampered.events[0].payload.push(b'!');
    let err = store.import(tampered).await.unwrap_err();
    assert!(
        matches!(err, Error::HashMismatch { claimed, .. } if claimed == good.id),
        "E9: tampered events: {err:?}"
    );
    let mut wrong_space = good.clone();
    wrong_space.space = random_space("e9-elsewhere");
    let err = store.import(wrong_space.clone()).await.unwrap_err();
    assert!(
        matches!(err, Error::HashMismatch { .. }),
        "E9: id of another space: {err:?}"
    );
    assert_eq!(
        snapshot(store.as_ref(), &wrong_space.space).await.heads,
        None,
        "E9: refused import creates no space"
    );

    let unknown = EpochId(*blake3::hash(b"e9 unknown parent").as_bytes());
    let err = store
        .import(foreign(&space, &[unknown], ev("e9-orphan")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownParent { parent } if parent == unknown),
        "E9: unknown parent: {err:?}"
    );
    let err = store
        .import(foreign(&space, &[m.id, unknown], ev("e9-half-orphan")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownParent { parent } if parent == unknown),
        "E9: one unknown parent: {err:?}"
    );

    let mut unsorted = vec![m.id, c.id];
    unsorted.sort();
    unsorted.reverse();
    let events = ev("e9-unsorted");
    let bad_order = cairn_core::ForeignEpoch {
        space: space.clone(),
        id: epoch_id(&space, &unsorted, &event_ids(&events)),
        parents: unsorted,
        events,
    };
    let err = store.import(bad_order).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "E9: unsorted parents: {err:?}"
    );
    let empty = cairn_core::ForeignEpoch {
        space: space.clone(),
        id: epoch_id(&space, &[m.id], &[]),
        parents: vec![m.id],
        events: vec![],
    };
    let err = store.import(empty).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "E9: empty foreign epoch: {err:?}"
    );
    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        snap,
        "E9: refused imports wrote nothing"
    );

    let fresh = random_space("e9-fresh");
    let err = store
        .import(foreign(&fresh, &[unknown], ev("e9-fresh-orphan")))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnknownParent { .. }),
        "E9: unknown parent in a new space: {err:?}"
    );
    let s = snapshot(store.as_ref(), &fresh).await;
    assert_eq!(
        (s.heads, s.next_seq),
        (None, Seq::FIRST),
        "E9: refused import creates no space"
    );

    // The good epoch still imports afterwards.
    assert_eq!(
        store.import(good).await.unwrap(),
        ImportOutcome::Imported(Seq(6)),
        "E9: good import after refusals"
    );
}

/// The feed events an epoch contributes.
fn feed_of(seq: Seq, id: EpochId, events: &[Event]) -> Vec<FeedEvent> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| FeedEvent {
            seq,
            epoch: id,
            epoch_seq: u32::try_from(i).unwrap(),
            event_id: event_id(e),
            event: e.clone(),
        })
        .collect()
}

/// E10: the feed returns every event in `(seq, epoch_seq)` order; pages of any limit hold whole
/// epochs, as many as fit; their concatenation is the full feed; the end is an empty page with
/// the same cursor; malformed, foreign-space cursors and a zero limit are refused.
pub async fn e10_feed_order_paging_and_cursor_refusals<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e10");
    // (seq, id, events) for each epoch, in seq order.
    let mut epochs: Vec<(Seq, EpochId, Vec<Event>)> = Vec::new();
    for (i, n) in [1usize, 3, 2, 5, 1, 4, 2].into_iter().enumerate() {
        let events = evs(format!("e10-{i}"), n);
        let a = store.append(&space, events.clone()).await.unwrap();
        epochs.push((a.seq, a.id, events));
        if i == 2 {
            let events = evs("e10-legacy", 3);
            let l = h.legacy_append(&space, None, events.clone()).await.unwrap();
            epochs.push((l.seq, l.id, events));
        }
        if i == 4 {
            let events = evs("e10-import", 2);
            let f = foreign(&space, &[a.id], events.clone());
            let ImportOutcome::Imported(seq) = store.import(f.clone()).await.unwrap() else {
                panic!("E10: new epoch must be imported");
            };
            epochs.push((seq, f.id, events));
        }
    }
    let seqs: Vec<u64> = epochs.iter().map(|e| e.0 .0).collect();
    assert_eq!(
        seqs,
        (1..=epochs.len() as u64).collect::<Vec<_>>(),
        "E10 setup: gap-free seqs"
    );
    let expected: Vec<FeedEvent> = epochs
        .iter()
        .flat_map(|(s, id, ev)| feed_of(*s, *id, ev))
        .collect();

    let full = store.events_since(&space, None, 1_000).await.unwrap();
    assert_eq!(
        full.events, expected,
        "E10: full feed in (seq, epoch_seq) order"
    );

    for limit in [1usize, 2, 3, 4, 5, 7, 100] {
        let mut cursor: Option<FeedCursor> = None;
        let mut got: Vec<FeedEvent> = Vec::new();
        let mut next_epoch = 0usize;
        loop {
            let page = store
                .events_since(&space, cursor.as_ref(), limit)
                .await
                .unwrap();
            if page.events.is_empty() {
                assert_eq!(
                    next_epoch,
                    epochs.len(),
                    "E10: limit {limit}: empty page before the end"
                );
                if let Some(c) = &cursor {
                    assert_eq!(
                        &page.next, c,
                        "E10: limit {limit}: the end returns the same cursor"
                    );
                }
                break;
            }
            // The page is exactly the greedy run of whole epochs starting at next_epoch.
            let mut want = Vec::new();
            while next_epoch < epochs.len() {
                let (s, id, ev) = &epochs[next_epoch];
                if !want.is_empty() && want.len() + ev.len() > limit {
                    break;
                }
                want.extend(feed_of(*s, *id, ev));
                next_epoch += 1;
            }
            assert_eq!(
                page.events, want,
                "E10: limit {limit}: page holds whole epochs, as many as fit"
            );
            got.extend(page.events);
            let printed = page.next.to_string();
            let parsed = FeedCursor::parse(&printed)
                .unwrap_or_else(|e| panic!("E10: printed cursor must parse: {e}"));
            assert_eq!(
                parsed, page.next,
                "E10: cursor round-trips through its printed form"
            );
            cursor = Some(parsed);
            assert!(
                got.len() <= expected.len() * 2,
                "E10: limit {limit}: the feed does not terminate"
            );
        }
        assert_eq!(
            got, expected,
            "E10: limit {limit}: pages concatenate to the full feed"
        );
        // The end stays the end, and picks up new epochs exactly.
        let end = cursor.expect("at least one page");
        let again = store.events_since(&space, Some(&end), limit).await.unwrap();
        assert!(
            again.events.is_empty(),
            "E10: reading at the end again is empty"
        );
        assert_eq!(again.next, end, "E10: empty page keeps the cursor");
    }

    let end = full.next.clone();
    let events = evs("e10-late", 2);
    let late = store.append(&space, events.clone()).await.unwrap();
    let page = store.events_since(&space, Some(&end), 1).await.unwrap();
    assert_eq!(
        page.events,
        feed_of(late.seq, late.id, &events),
        "E10: resume sees only the new epoch, whole"
    );
    let page = store
        .events_since(&space, Some(&page.next), 1)
        .await
        .unwrap();
    assert!(page.events.is_empty(), "E10: and then the end again");

    // Refusals.
    for junk in [
        "",
        "junk",
        "c1.",
        "c1.zz.1",
        "c1.0011223344556677",
        "c1.0011223344556677.",
        "c1.0011223344556677.-1",
        "c1.0011223344556677.01",
        "c1.0011223344556677.1x",
        "c1.00112233445566.1",
        "c2.0011223344556677.1",
        "c1.0011223344556677.99999999999999999999",
    ] {
        let err = FeedCursor::parse(junk).unwrap_err();
        assert!(
            matches!(err, Error::BadCursor { .. }),
            "E10: malformed cursor {junk:?}: {err:?}"
        );
    }
    let other = random_space("e10-other");
    store.append(&other, ev("e10-other")).await.unwrap();
    let foreign_cursor = store.events_since(&other, None, 10).await.unwrap().next;
    let err = store
        .events_since(&space, Some(&foreign_cursor), 10)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::BadCursor { .. }),
        "E10: cursor from another space: {err:?}"
    );
    let err = store
        .events_since(&other, Some(&end), 10)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::BadCursor { .. }),
        "E10: cursor from another space (reverse): {err:?}"
    );
    let err = store.events_since(&space, None, 0).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "E10: limit 0: {err:?}"
    );
    let err = store.events_since(&space, Some(&end), 0).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "E10: limit 0 with a cursor: {err:?}"
    );
}

/// E11: with a current cache, a single-event append costs exactly the backend's statement
/// budget, on a fresh space and on a long history alike.
pub async fn e11_append_statement_budget_is_fixed<H: Harness>(h: &H) {
    let store = open(h).await;
    let Some(budget) = h.append_statement_budget() else {
        let space = random_space("e11");
        for i in 0..3 {
            store.append(&space, ev(format!("e11-{i}"))).await.unwrap();
        }
        assert_eq!(
            store.statements_executed(),
            0,
            "E11: a backend without a budget counts no statements"
        );
        return;
    };
    let measure = |space: SpaceId, tag: String| {
        let store = store.clone();
        async move {
            let before = store.statements_executed();
            store.append(&space, ev(tag)).await.unwrap();
            store.statements_executed() - before
        }
    };

    let short = random_space("e11-short");
    store.append(&short, ev("e11-short-0")).await.unwrap();
    let cost = measure(short.clone(), "e11-short-1".into()).await;
    assert_eq!(
        cost, budget,
        "E11: append on a 1-epoch space costs exactly the budget"
    );

    let long = random_space("e11-long");
    for i in 0..300 {
        store
            .append(&long, ev(format!("e11-long-{i}")))
            .await
            .unwrap();
    }
    for i in 0..3 {
        let cost = measure(long.clone(), format!("e11-long-m{i}")).await;
        assert_eq!(
            cost, budget,
            "E11: append on a 300-epoch space costs exactly the budget (run {i})"
        );
    }
    let cost = measure(short, "e11-short-2".into()).await;
    assert_eq!(cost, budget, "E11: and still on the short space");
}

/// Bad input (empty or oversized batches, bad space ids, unknown spaces, zero limits) is refused
/// with a typed error and writes nothing.
pub async fn bad_input_is_refused_without_writes<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("bad");
    let fresh = random_space("bad-fresh");
    store.append(&space, evs("bad-ok", 2)).await.unwrap();
    let before = snapshot(store.as_ref(), &space).await;
    let spaces_before = all_spaces(store.as_ref(), 100).await;

    let ok = Event::new("test.event", b"ok".to_vec());
    let batches: Vec<(&str, Vec<Event>)> = vec![
        ("empty epoch", vec![]),
        (
            "oversized payload",
            vec![Event::new("k", vec![0u8; MAX_EVENT_PAYLOAD + 1])],
        ),
        ("empty kind", vec![Event::new("", b"x".to_vec())]),
        (
            "oversized kind",
            vec![Event::new("k".repeat(MAX_KIND_LEN + 1), b"x".to_vec())],
        ),
        (
            "oversized key",
            vec![Event::with_key(
                "k",
                vec![1u8; MAX_KEY_LEN + 1],
                b"x".to_vec(),
            )],
        ),
        ("too many events", vec![ok.clone(); MAX_EPOCH_EVENTS + 1]),
        (
            "one bad event among good ones",
            vec![ok.clone(), ok.clone(), Event::new("", b"x".to_vec())],
        ),
    ];
    for (what, batch) in batches {
        for target in [&space, &fresh] {
            let err = store.append(target, batch.clone()).await.unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput { .. }),
                "bad input: {what}: {err:?}"
            );
        }
    }

    for bytes in [Vec::new(), vec![b's'; MAX_SPACE_LEN + 1]] {
        let err = SpaceId::new(bytes).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "bad input: space id: {err:?}"
        );
    }

    let err = EpochStore::heads(store.as_ref(), &fresh).await.unwrap_err();
    assert!(
        matches!(err, Error::NotFound { .. }),
        "bad input: heads of an unknown space: {err:?}"
    );
    let err = store.events_since(&fresh, None, 10).await.unwrap_err();
    assert!(
        matches!(err, Error::NotFound { .. }),
        "bad input: feed of an unknown space: {err:?}"
    );
    let err = store.repair_heads(&fresh).await.unwrap_err();
    assert!(
        matches!(err, Error::NotFound { .. }),
        "bad input: repair of an unknown space: {err:?}"
    );
    let err = store.list_spaces(None, 0).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { .. }),
        "bad input: list_spaces limit 0: {err:?}"
    );
    assert_eq!(
        store.epoch(&fresh, &EpochId([1; 32])).await.unwrap(),
        None,
        "bad input: epoch of an unknown space"
    );

    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        before,
        "bad input changed the space"
    );
    let f = snapshot(store.as_ref(), &fresh).await;
    assert_eq!(f.heads, None, "bad input created a space");
    assert!(f.cached.is_empty(), "bad input wrote a cache row");
    assert_eq!(f.next_seq, Seq::FIRST, "bad input wrote an epoch");
    let spaces_after = all_spaces(store.as_ref(), 100).await;
    assert!(
        !spaces_after.contains(&fresh),
        "bad input listed a new space"
    );
    assert!(
        spaces_after.contains(&space),
        "list_spaces lists the written space"
    );
    assert_eq!(
        spaces_before
            .iter()
            .filter(|s| **s == space || **s == fresh)
            .count(),
        spaces_after
            .iter()
            .filter(|s| **s == space || **s == fresh)
            .count(),
        "bad input changed list_spaces"
    );

    // The store still works.
    let a = store.append(&space, ev("bad-after")).await.unwrap();
    assert_eq!(
        a.seq, before.next_seq,
        "append after refusals takes the next seq"
    );
}

/// A new store instance over the same location sees the same history, heads, cache rows (stale
/// ones included) and seqs, and continues the seq.
pub async fn reopen_keeps_history_and_cache<H: Harness>(h: &H) {
    let store = open(h).await;
    let current = random_space("reopen-current");
    let stale = random_space("reopen-stale");
    let forked = random_space("reopen-fork");
    for i in 0..3 {
        store
            .append(&current, evs(format!("reopen-c-{i}"), 2))
            .await
            .unwrap();
    }
    store.append(&stale, ev("reopen-s")).await.unwrap();
    h.legacy_append(&stale, None, ev("reopen-s-legacy"))
        .await
        .unwrap();
    let root = store.append(&forked, ev("reopen-f")).await.unwrap();
    store
        .import(foreign(&forked, &[root.id], ev("reopen-f-1")))
        .await
        .unwrap();
    store
        .import(foreign(&forked, &[root.id], ev("reopen-f-2")))
        .await
        .unwrap();
    let spaces = [current, stale, forked];
    let mut before = Vec::new();
    for s in &spaces {
        before.push(snapshot(store.as_ref(), s).await);
    }
    assert_ne!(
        before[1].cached, before[1].computed,
        "reopen setup: stale cache"
    );
    assert_eq!(before[2].cached.len(), 2, "reopen setup: two-row cache");
    drop(store);

    let reopened = open(h).await;
    for (s, b) in spaces.iter().zip(&before) {
        assert_eq!(
            &snapshot(reopened.as_ref(), s).await,
            b,
            "reopen: {s} differs after reopening"
        );
    }
    for (s, b) in spaces.iter().zip(&before) {
        let a = reopened.append(s, ev("reopen-after")).await.unwrap();
        assert_eq!(a.seq, b.next_seq, "reopen: {s}: seq continues");
        assert_eq!(
            a.parents,
            ids(&b.computed),
            "reopen: {s}: parents are the heads"
        );
        assert_single_head(reopened.as_ref(), s, a.head()).await;
    }
    // A second live instance sees the first one's writes.
    let second = open(h).await;
    for s in &spaces {
        assert_eq!(
            snapshot(second.as_ref(), s).await,
            snapshot(reopened.as_ref(), s).await,
            "reopen: two instances agree on {s}"
        );
    }
}

/// `list_spaces` pages through every space with an epoch — however it was written — in strict
/// byte order (not text collation), with no duplicates and no gaps.
pub async fn list_spaces_pages_in_id_order<H: Harness>(h: &H) {
    let store = open(h).await;
    let prefix = random_space("ls").as_bytes().to_vec();
    let with = |suffix: &[u8]| SpaceId::new([prefix.as_slice(), b"/", suffix].concat()).unwrap();
    // Byte order differs from most text collations here: 'B' < 'a' < 'b', '-' < '_', 0x00 first.
    let suffixes: [&[u8]; 8] = [
        b"a",
        b"B",
        b"b",
        b"a-b",
        b"a_b",
        &[0x00],
        &[0xff, 0x01],
        "é".as_bytes(),
    ];
    let mut created: Vec<SpaceId> = Vec::new();
    for (i, sfx) in suffixes.iter().enumerate() {
        let s = with(sfx);
        match i % 3 {
            0 => {
                store.append(&s, ev("ls")).await.unwrap();
            }
            1 => {
                h.legacy_append(&s, None, ev("ls")).await.unwrap();
            }
            _ => {
                store.import(foreign(&s, &[], ev("ls"))).await.unwrap();
            }
        }
        created.push(s);
    }
    // A refused write must not make a space appear.
    let ghost = with(b"ghost");
    store.append(&ghost, vec![]).await.unwrap_err();

    let listed = all_spaces(store.as_ref(), 2).await;
    assert!(
        listed.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
        "list_spaces: not in strict byte order"
    );
    let mine: Vec<SpaceId> = listed
        .iter()
        .filter(|s| s.as_bytes().starts_with(&prefix))
        .cloned()
        .collect();
    let mut want = created.clone();
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(
        mine, want,
        "list_spaces: every created space once, in byte order"
    );
    let unique: BTreeSet<&SpaceId> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "list_spaces: duplicates");

    // Paging from after any id returns exactly the ids above it (other cases may add spaces
    // meanwhile, so only this case's ids are compared).
    for (i, after) in want.iter().enumerate() {
        let mut got: Vec<SpaceId> = Vec::new();
        let mut cursor = after.clone();
        loop {
            let page = store.list_spaces(Some(&cursor), 3).await.unwrap();
            assert!(page.len() <= 3, "list_spaces: page over its limit");
            assert!(
                page.iter().all(|s| s.as_bytes() > cursor.as_bytes()),
                "list_spaces: id not after {cursor}"
            );
            let Some(last) = page.last().cloned() else {
                break;
            };
            got.extend(
                page.into_iter()
                    .filter(|s| s.as_bytes().starts_with(&prefix)),
            );
            cursor = last;
        }
        assert_eq!(got, want[i + 1..], "list_spaces after {after}");
    }
}

/// E10b: a page bounded in bytes ([`EpochStore::events_since_within`]) is the longest run of
/// whole epochs of the unbounded page within both `limit` events and `max_bytes` of stored
/// bytes (kind, key, payload), at least one epoch; `next` points after its last epoch, and
/// paging with it reads the whole feed once, in order.
pub async fn e10_feed_pages_within_bytes<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e10b");
    // Epochs of 1 to 3 events, payloads of 0 to 300 bytes, some keyed.
    let shapes: [&[usize]; 8] = [
        &[300],
        &[5, 5],
        &[0],
        &[40, 60, 100],
        &[250],
        &[1, 2, 3],
        &[120, 0],
        &[7],
    ];
    for (i, sizes) in shapes.iter().enumerate() {
        let events: Vec<Event> = sizes
            .iter()
            .enumerate()
            .map(|(j, n)| {
                let payload = vec![b'p'; *n];
                if j % 2 == 0 {
                    Event::new(format!("k{i}"), payload)
                } else {
                    Event::with_key("kind", format!("key-{i}-{j}"), payload)
                }
            })
            .collect();
        store.append(&space, events).await.unwrap();
    }
    let full = store
        .events_since(&space, None, 1_000)
        .await
        .unwrap()
        .events;
    let expect = |from: usize, limit: usize, max_bytes: usize| -> Vec<FeedEvent> {
        let mut out: Vec<FeedEvent> = Vec::new();
        let mut bytes = 0;
        for epoch in full[from..].chunk_by(|a, b| a.seq == b.seq) {
            let b: usize = epoch.iter().map(|e| e.event.stored_bytes()).sum();
            if !out.is_empty() && (out.len() + epoch.len() > limit || bytes + b > max_bytes) {
                break;
            }
            bytes += b;
            out.extend(epoch.iter().cloned());
        }
        out
    };
    for limit in [1usize, 2, 3, 4, 7, 1000] {
        for max_bytes in [0usize, 1, 10, 100, 150, 310, 400, 1000, usize::MAX] {
            let mut cursor: Option<FeedCursor> = None;
            let mut from = 0;
            let mut read = Vec::new();
            loop {
                let page = store
                    .events_since_within(&space, cursor.as_ref(), limit, max_bytes)
                    .await
                    .unwrap();
                assert_eq!(
                    page.events,
                    expect(from, limit, max_bytes),
                    "E10b: page at event {from}, limit {limit}, max_bytes {max_bytes}"
                );
                if page.events.is_empty() {
                    assert_eq!(
                        page.next.after().0,
                        full.last().unwrap().seq.0,
                        "E10b: the last cursor stays put"
                    );
                    break;
                }
                assert_eq!(
                    page.next,
                    FeedCursor::new(&space, page.events.last().unwrap().seq),
                    "E10b: next points after the page's last epoch"
                );
                from += page.events.len();
                read.extend(page.events);
                cursor = Some(page.next);
            }
            assert_eq!(read, full, "E10b: limit {limit}, max_bytes {max_bytes}");
        }
    }
}
