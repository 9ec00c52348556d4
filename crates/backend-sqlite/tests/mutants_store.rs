//! The SQLite store's behaviour that survived mutation testing (issue 14, `cargo mutants` over
//! the head-cache and seq functions of `src/store.rs` with this crate's conformance,
//! epoch-log, spool and group-commit tests): each test here names the mutant it kills.

use cairn_core::{EpochDiagnostics, EpochStore, Event, SpaceId};
use cairn_sqlite::{SqliteStore, APPEND_STATEMENT_BUDGET};

/// Kills `cache_sole_head`: delete match arm `0` (a space without cache rows would then run
/// the several-rows path, a `DELETE` before the `INSERT`). The first append into a new space
/// costs `5 + parents + events` statements like any append with a current cache: `BEGIN
/// IMMEDIATE`, the probe, the epoch insert, its events, the cache `INSERT`, `COMMIT`.
#[tokio::test]
async fn first_append_into_a_new_space_costs_five_plus_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("store.db"))
        .await
        .unwrap();
    for events in 1..=3_u64 {
        let space = SpaceId::new(format!("mutants-new-{events}")).unwrap();
        let batch = (0..events)
            .map(|i| Event::new("first", format!("event {i}")))
            .collect();
        let before = store.statements_executed();
        let appended = store.append(&space, batch).await.unwrap();
        assert!(appended.parents.is_empty());
        assert_eq!(
            store.statements_executed() - before,
            5 + events,
            "the first append of {events} event(s) into a new space"
        );
        assert_eq!(
            store.cached_heads(&space).await.unwrap(),
            vec![appended.head()]
        );
    }
    // The steady state, for comparison: one parent, one event.
    let space = SpaceId::new("mutants-new-1").unwrap();
    let before = store.statements_executed();
    store
        .append(&space, vec![Event::new("second", "x")])
        .await
        .unwrap();
    assert_eq!(
        store.statements_executed() - before,
        APPEND_STATEMENT_BUDGET
    );
}
