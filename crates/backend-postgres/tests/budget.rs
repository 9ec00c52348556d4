//! The append's statement budget and the Postgres-specific behaviour around it: exactly 5
//! statements (BEGIN, lock, read, write, COMMIT) for a single-event append with a current
//! cache, whatever the history's length; one more (the anti-join) when the cache is stale.
//! BEGIN and the lock go together as one simple query, so those 5 statements take 4 round
//! trips; the read stays a statement of its own, sent after the lock is held (its snapshot
//! must include the previous holder's commit).

use std::sync::Arc;
use std::time::Duration;

use cairn_conformance::{random_space, Harness};
use cairn_core::{Appended, EpochDiagnostics, EpochStore, Error, Event, Seq};
use cairn_postgres::testkit::{harness, HeadLookup};
use cairn_postgres::{PgOptions, PgStore};

fn ev(tag: &str) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_bytes().to_vec())]
}

async fn statements_of_one_append(store: &PgStore, space: &cairn_core::SpaceId, tag: &str) -> u64 {
    let before = store.statements_executed();
    store.append(space, ev(tag)).await.unwrap();
    store.statements_executed() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_event_append_with_current_cache_costs_exactly_five_statements() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("budget");
    // First append: empty cache, empty space (current): INSERT variant, still 5.
    assert_eq!(statements_of_one_append(&store, &space, "first").await, 5);
    // One cached row: UPDATE variant.
    for i in 0..3 {
        assert_eq!(
            statements_of_one_append(&store, &space, &format!("short-{i}")).await,
            5
        );
    }
    // A long history changes nothing.
    store
        .bench_seed_chain(&space, 20_000, Arc::new(|_| {}))
        .await
        .unwrap();
    assert_eq!(store.cached_heads(&space).await.unwrap().len(), 1);
    assert_eq!(statements_of_one_append(&store, &space, "long").await, 5);
    assert_eq!(h.append_statement_budget(), Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_cache_costs_one_anti_join_then_budget_again() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("stale");
    store.append(&space, ev("a")).await.unwrap();
    let legacy = h.legacy_append(&space, None, ev("legacy")).await.unwrap();
    assert_eq!(legacy.seq, Seq(2));
    let before = store.statements_executed();
    let a = store.append(&space, ev("after-legacy")).await.unwrap();
    assert_eq!(
        store.statements_executed() - before,
        6,
        "stale cache: one anti-join more"
    );
    assert_eq!(a.parents, vec![legacy.id]);
    assert_eq!(
        statements_of_one_append(&store, &space, "current-again").await,
        5
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_cached_heads_are_replaced_by_one() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("replace");
    let root = store.append(&space, ev("root")).await.unwrap();
    let f1 = h
        .legacy_append(&space, Some(vec![root.id]), ev("f1"))
        .await
        .unwrap();
    let f2 = h
        .legacy_append(&space, Some(vec![root.id]), ev("f2"))
        .await
        .unwrap();
    store.repair_heads(&space).await.unwrap();
    assert_eq!(store.cached_heads(&space).await.unwrap().len(), 2);
    // Current cache with two rows: DELETE + INSERT in the one write statement.
    let before = store.statements_executed();
    let a = store.append(&space, ev("merge")).await.unwrap();
    assert_eq!(store.statements_executed() - before, 5);
    let mut fork = vec![f1.id, f2.id];
    fork.sort();
    assert_eq!(a.parents, fork);
    let head = a.head();
    assert_eq!(store.cached_heads(&space).await.unwrap(), vec![head]);
    assert_eq!(store.heads(&space).await.unwrap(), vec![head]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_different_schemas_do_not_block_each_other() {
    let h1 = harness().await;
    let h2 = harness().await;
    let space = random_space("shared-name");
    let held = h1.hold_space_lock(&space).await.unwrap();
    let other = h2.store().await.unwrap();
    let a = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        other.append(&space, ev("x")),
    )
    .await
    .expect("a store in another schema waited on this schema's space lock")
    .unwrap();
    assert_eq!(a.seq, Seq(1));
    held.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schema_names_are_refused_before_connecting() {
    for bad in ["Public", "x; drop table epoch", "1x", ""] {
        let opts = PgOptions::new("postgres://nobody@127.0.0.1:1/none").schema(bad);
        match PgStore::open_with(opts).await {
            Err(Error::InvalidInput { .. }) => {}
            other => panic!("schema {bad:?}: expected InvalidInput, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable_and_the_message_has_no_url() {
    let opts = PgOptions::new("postgres://someone:s3cret@127.0.0.1:1/db")
        .acquire_timeout(std::time::Duration::from_secs(3));
    let err = PgStore::open_with(opts).await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(!msg.contains("s3cret") && !msg.contains("someone"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_lookups_return_one_timing_per_run() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("bench");
    store
        .bench_seed_chain(&space, 12_000, Arc::new(|_| {}))
        .await
        .unwrap();
    let heads = store.heads(&space).await.unwrap();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0].seq, Seq(12_000));
    assert_eq!(store.computed_heads(&space).await.unwrap(), heads);
    for lookup in [
        HeadLookup::AntiJoinPlain,
        HeadLookup::AntiJoinIndexed,
        HeadLookup::Cache,
    ] {
        let t = store.bench_time_lookup(&space, lookup, 3).await.unwrap();
        assert_eq!(t.len(), 3, "{lookup:?}");
    }
    // The plain measurement restored the index.
    let before = store.statements_executed();
    store.append(&space, ev("after-bench")).await.unwrap();
    assert_eq!(store.statements_executed() - before, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_keeps_a_row_that_stays_a_head() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("repair-overlap");
    let root = store.append(&space, ev("root")).await.unwrap();
    let f1 = store.append(&space, ev("f1")).await.unwrap();
    let f2 = h
        .legacy_append(&space, Some(vec![root.id]), ev("f2"))
        .await
        .unwrap();
    let mut after = vec![f1.head(), f2.head()];
    after.sort();
    let outcome = store.repair_heads(&space).await.unwrap();
    assert_eq!(
        outcome,
        cairn_core::RepairOutcome::Rewritten {
            before: vec![f1.head()],
            after: after.clone()
        }
    );
    assert_eq!(store.cached_heads(&space).await.unwrap(), after);
    assert_eq!(
        store.repair_heads(&space).await.unwrap(),
        cairn_core::RepairOutcome::Unchanged
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_past_the_lock_timeout_is_retryable_and_writes_nothing() {
    let h = harness().await;
    let store = PgStore::open_with(h.options().lock_timeout(Duration::from_millis(200)))
        .await
        .unwrap();
    let space = random_space("lock-timeout");
    let first = store.append(&space, ev("first")).await.unwrap();
    let held = h.hold_space_lock(&space).await.unwrap();
    let err = store.append(&space, ev("blocked")).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    // Classified by its SQLSTATE (lock_not_available), and the driver error stays reachable.
    let source = std::error::Error::source(&err).expect("the driver error is the source");
    let code = match source.downcast_ref::<sqlx::Error>() {
        Some(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        other => panic!("expected a database error, got {other:?}"),
    };
    assert_eq!(code.as_deref(), Some("55P03"));
    held.release().await;
    assert_eq!(store.heads(&space).await.unwrap(), vec![first.head()]);
    assert_eq!(store.next_seq(&space).await.unwrap(), Seq(2));
}

/// A writer that skips the space lock can pick a seq another writer picked too; the unique
/// `(space, seq)` index turns that race into a [`Error::Conflict`] for one of them, and the
/// heads stay right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_skipping_the_space_lock_races_into_a_conflict_never_a_wrong_head() {
    let h = harness().await;
    let (s1, s2) = (h.store().await.unwrap(), h.store().await.unwrap());
    let space = random_space("unlocked");
    let root = s1.append(&space, ev("root")).await.unwrap();
    // Both writers read (seq 2, parent root) before either writes.
    let both_read = Arc::new(tokio::sync::Barrier::new(2));
    let racer = |store: PgStore, tag: &'static str| {
        let (space, both_read) = (space.clone(), both_read.clone());
        tokio::spawn(async move {
            store
                .legacy_append_unlocked(&space, ev(tag), async move {
                    both_read.wait().await;
                })
                .await
        })
    };
    let (a, b) = (racer(s1.clone(), "a"), racer(s2.clone(), "b"));
    let outcomes = [a.await.unwrap(), b.await.unwrap()];
    let winners: Vec<&Appended> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
    let losers: Vec<&Error> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert_eq!((winners.len(), losers.len()), (1, 1), "{outcomes:?}");
    let winner = winners[0];
    assert_eq!(
        (winner.seq, winner.parents.clone()),
        (Seq(2), vec![root.id])
    );
    let err = losers[0];
    assert!(err.is_conflict(), "{err:?}");
    match std::error::Error::source(err).and_then(|s| s.downcast_ref::<sqlx::Error>()) {
        Some(sqlx::Error::Database(db)) => assert_eq!(db.code().as_deref(), Some("23505")),
        other => panic!("expected the unique violation as the source, got {other:?}"),
    }
    // The loser wrote nothing; the heads are the winner, and the next append builds on it.
    assert_eq!(s1.heads(&space).await.unwrap(), vec![winner.head()]);
    assert_eq!(
        s1.computed_heads(&space).await.unwrap(),
        vec![winner.head()]
    );
    let next = s2.append(&space, ev("after")).await.unwrap();
    assert_eq!((next.seq, next.parents), (Seq(3), vec![winner.id]));
}

/// A lock timeout fails the append's first round trip (BEGIN and the lock together) after
/// BEGIN ran: the connection must not go back to the pool inside that aborted transaction. With
/// one pooled connection, the next append would find it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_timeout_leaves_no_aborted_transaction_in_the_pool() {
    let h = harness().await;
    let store = PgStore::open_with(
        h.options()
            .max_connections(1)
            .lock_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    let space = random_space("aborted");
    let first = store.append(&space, ev("first")).await.unwrap();
    let held = h.hold_space_lock(&space).await.unwrap();
    for _ in 0..2 {
        let err = store.append(&space, ev("blocked")).await.unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
    }
    held.release().await;
    let next = store.append(&space, ev("after")).await.unwrap();
    assert_eq!((next.seq, next.parents), (Seq(2), vec![first.id]));
    let other = random_space("aborted-other");
    assert_eq!(store.append(&other, ev("x")).await.unwrap().seq, Seq(1));
}
