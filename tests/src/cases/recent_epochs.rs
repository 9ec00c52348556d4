//! E13: a space's recent epochs, newest first (`EpochDiagnostics::recent_epochs`).

use cairn_core::{
    EpochDiagnostics, EpochStore, EpochSummary, Error, ImportOutcome, Seq, MAX_RECENT_EPOCHS,
};

use super::support::{evs, foreign, open, snapshot, variant};
use crate::{random_space, Harness};

/// Every page of `space`'s epochs read with `limit`, each starting below the last seq of the
/// one before, concatenated.
async fn all_pages(
    store: &dyn EpochDiagnostics,
    space: &cairn_core::SpaceId,
    limit: usize,
) -> Vec<EpochSummary> {
    let mut out: Vec<EpochSummary> = Vec::new();
    loop {
        let before = out.last().map(|e| e.seq);
        let page = store
            .recent_epochs(space, before, limit)
            .await
            .unwrap_or_else(|e| panic!("E13: page before {before:?}, limit {limit}: {e}"));
        assert!(
            page.len() <= limit,
            "E13: {} epochs for limit {limit}",
            page.len()
        );
        assert!(
            page.iter().all(|e| before.is_none_or(|b| e.seq < b)),
            "E13: a page before {before:?} holds a later epoch: {page:?}"
        );
        let last = page.len() < limit;
        out.extend(page);
        if last {
            return out;
        }
    }
}

/// E13: `recent_epochs` lists a space's epochs newest (highest seq) first with their sorted
/// parents and event counts — a linear chain, an imported sibling (a fork) and the append that
/// merges it — pages with `before` without gap or repeat, refuses a limit of 0 or above
/// `MAX_RECENT_EPOCHS` and an unknown space, and writes nothing.
pub async fn e13_recent_epochs_newest_first_with_parents_and_counts<H: Harness>(h: &H) {
    let store = open(h).await;
    let space = random_space("e12");

    let a1 = store.append(&space, evs("e12-1", 1)).await.unwrap();
    let a2 = store.append(&space, evs("e12-2", 3)).await.unwrap();
    let a3 = store.append(&space, evs("e12-3", 2)).await.unwrap();
    // Another node's epoch on a2: a sibling of a3, so a fork.
    let sibling = foreign(&space, &[a2.id], evs("e12-remote", 4));
    assert_eq!(
        store.import(sibling.clone()).await.unwrap(),
        ImportOutcome::Imported(Seq(4)),
        "E13 setup: the sibling's import"
    );
    let merge = store.append(&space, evs("e12-merge", 1)).await.unwrap();
    let mut fork = vec![a3.id, sibling.id];
    fork.sort();
    assert_eq!(merge.parents, fork, "E13 setup: the append merges the fork");
    let a6 = store.append(&space, evs("e12-6", 5)).await.unwrap();

    let summary = |id, seq, parents: Vec<_>, events| EpochSummary {
        id,
        seq: Seq(seq),
        parents,
        events,
    };
    let want = vec![
        summary(a6.id, 6, vec![merge.id], 5),
        summary(merge.id, 5, fork.clone(), 1),
        summary(sibling.id, 4, vec![a2.id], 4),
        summary(a3.id, 3, vec![a2.id], 2),
        summary(a2.id, 2, vec![a1.id], 3),
        summary(a1.id, 1, vec![], 1),
    ];
    let before_reads = snapshot(store.as_ref(), &space).await;

    let all = store.recent_epochs(&space, None, 1000).await.unwrap();
    assert_eq!(all, want, "E13: the whole history, newest first");
    // Each summary is the stored epoch without its events.
    for s in &all {
        let e = store
            .epoch(&space, &s.id)
            .await
            .unwrap()
            .expect("a listed epoch is stored");
        assert_eq!(
            (e.seq, &e.parents, e.events.len() as u64),
            (s.seq, &s.parents, s.events),
            "E13: the summary of {} matches the epoch",
            s.seq
        );
    }

    // Paging: any limit's pages concatenate to the whole history.
    for limit in 1..=7 {
        assert_eq!(
            all_pages(store.as_ref(), &space, limit).await,
            want,
            "E13: pages of {limit}"
        );
    }
    assert_eq!(
        store.recent_epochs(&space, None, 2).await.unwrap(),
        want[..2],
        "E13: the newest two"
    );
    assert_eq!(
        store.recent_epochs(&space, Some(Seq(5)), 2).await.unwrap(),
        want[2..4],
        "E13: the two below the merge: the sibling, then a3"
    );
    assert_eq!(
        store
            .recent_epochs(&space, Some(Seq(4)), 100)
            .await
            .unwrap(),
        want[3..],
        "E13: everything below the sibling"
    );
    for before in [
        Seq(7),
        Seq(1_000_000),
        Seq(i64::MAX.unsigned_abs()),
        Seq(u64::MAX),
    ] {
        assert_eq!(
            store.recent_epochs(&space, Some(before), 10).await.unwrap(),
            want,
            "E13: before {before}, above every seq"
        );
    }
    for before in [Seq(1), Seq(0)] {
        assert_eq!(
            store.recent_epochs(&space, Some(before), 10).await.unwrap(),
            vec![],
            "E13: nothing is before seq {before}"
        );
    }
    assert_eq!(
        store
            .recent_epochs(&space, None, MAX_RECENT_EPOCHS)
            .await
            .unwrap(),
        want,
        "E13: the largest limit"
    );

    // Refusals: the limit first, then an unknown space.
    let unknown = random_space("e12-unknown");
    for (target, limit) in [
        (&space, 0),
        (&space, MAX_RECENT_EPOCHS + 1),
        (&space, usize::MAX),
        (&unknown, 0),
        (&unknown, MAX_RECENT_EPOCHS + 1),
    ] {
        let err = store.recent_epochs(target, None, limit).await.unwrap_err();
        assert_eq!(
            variant(&err),
            "InvalidInput",
            "E13: limit {limit} on {target}: {err}"
        );
    }
    for before in [None, Some(Seq(1)), Some(Seq(10))] {
        let err = store.recent_epochs(&unknown, before, 10).await.unwrap_err();
        assert!(
            matches!(err, Error::NotFound { .. }),
            "E13: an unknown space, before {before:?}: {err}"
        );
        let heads = EpochStore::heads(store.as_ref(), &unknown)
            .await
            .unwrap_err();
        assert_eq!(
            variant(&err),
            variant(&heads),
            "E13: the same refusal as heads()"
        );
    }

    // Another instance reads the same; reading wrote nothing.
    let other = open(h).await;
    assert_eq!(
        other.recent_epochs(&space, None, 1000).await.unwrap(),
        want,
        "E13: another instance"
    );
    assert_eq!(
        snapshot(store.as_ref(), &space).await,
        before_reads,
        "E13: reads write nothing"
    );
}
