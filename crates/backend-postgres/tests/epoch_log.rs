//! Epoch-log behaviour specific to what Postgres stores can be put through by hand.

use cairn_conformance::{random_space, Harness, MigrationHarness};
use cairn_core::{EpochDiagnostics, EpochStore, Event, SpaceId};
use cairn_postgres::testkit::harness;
use cairn_postgres::PgStore;

fn ev(tag: &str) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_bytes().to_vec())]
}

async fn append_cost(store: &PgStore, space: &SpaceId, tag: &str) -> u64 {
    let before = store.statements_executed();
    store.append(space, ev(tag)).await.unwrap();
    store.statements_executed() - before
}

/// A bytea literal (`'\x…'::bytea`) for hand-written SQL.
fn bytea(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("'\\x{hex}'::bytea")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_head_deleted_by_hand_whose_seq_was_reused_is_not_trusted() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    let space = random_space("phantom");
    let a = store.append(&space, ev("a")).await.unwrap();
    let b = store.append(&space, ev("b")).await.unwrap();
    // The cached head's epoch deleted by hand; the cache row stays.
    let (s, id) = (bytea(space.as_bytes()), bytea(b.id.as_bytes()));
    for stmt in [
        format!("DELETE FROM epoch_event WHERE space = {s} AND epoch = {id}"),
        format!("DELETE FROM epoch_parent WHERE space = {s} AND child = {id}"),
        format!("DELETE FROM epoch WHERE space = {s} AND id = {id}"),
    ] {
        h.execute_sql(&stmt).await.unwrap();
    }
    // A writer that never touches the cache takes the freed seq: `max(cached seq) + 1 == next`
    // holds again, while the cached id names nothing.
    let c = h.legacy_append(&space, None, ev("c")).await.unwrap();
    assert_eq!((c.seq, c.parents.clone()), (b.seq, vec![a.id]));

    assert_eq!(
        store.heads(&space).await.unwrap(),
        vec![c.head()],
        "no phantom head"
    );
    let d = store.append(&space, ev("d")).await.unwrap();
    assert_eq!(d.parents, vec![c.id]);
    assert_eq!(store.cached_heads(&space).await.unwrap(), vec![d.head()]);
    assert_eq!(
        append_cost(&store, &space, "e").await,
        h.append_statement_budget().unwrap(),
        "the check costs no extra statement"
    );
}
