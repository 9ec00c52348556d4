//! Search-path hijacking: a function or operator planted in the store's schema (which is
//! `public` for a store in `public`, writable by every role before PostgreSQL 15) must never
//! run in place of the built-in one cairn means. Every call cairn's SQL makes resolves to
//! `pg_catalog` whatever the schema holds, so no warning about `public` is needed.

use std::sync::Arc;
use std::time::Duration;

use cairn_conformance::{random_space, MigrationHarness};
use cairn_core::spool::SpoolConfig;
use cairn_core::{
    epoch_id, ConsumerId, DedupKey, EnqueueOptions, EpochDiagnostics, EpochStore, Event,
    ForeignEpoch, ManualClock, QueueName, RunEventId, Spool,
};
use cairn_postgres::testkit::harness;
use cairn_postgres::{PgSpool, PgStore};

/// Hostile objects, each raising when called: overloads more specific than the built-ins
/// cairn calls (which win over `pg_catalog`'s polymorphic or cross-type ones wherever
/// `pg_catalog` sits in the `search_path`) and same-signature copies (which only an explicit
/// `pg_catalog` first keeps out).
const PLANTED: &[&str] = &[
    "CREATE FUNCTION boom() RETURNS boolean LANGUAGE plpgsql AS \
     $$BEGIN RAISE EXCEPTION 'hijacked: a planted function ran'; END$$",
    "CREATE FUNCTION unnest(bytea[]) RETURNS SETOF bytea LANGUAGE sql AS 'SELECT NULL::bytea WHERE boom()'",
    "CREATE FUNCTION unnest(text[]) RETURNS SETOF text LANGUAGE sql AS 'SELECT NULL::text WHERE boom()'",
    "CREATE FUNCTION unnest(bytea[], text[], bytea[], bytea[]) \
     RETURNS TABLE (a bytea, b text, c bytea, d bytea) LANGUAGE sql \
     AS 'SELECT NULL::bytea, NULL::text, NULL::bytea, NULL::bytea WHERE boom()'",
    "CREATE FUNCTION unnest(bytea[], bigint[]) RETURNS TABLE (a bytea, b bigint) LANGUAGE sql \
     AS 'SELECT NULL::bytea, NULL::bigint WHERE boom()'",
    "CREATE FUNCTION le(numeric, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT boom()'",
    "CREATE OPERATOR <= (LEFTARG = numeric, RIGHTARG = bigint, FUNCTION = le)",
    "CREATE FUNCTION pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE sql AS 'SELECT WHERE boom()'",
    "CREATE FUNCTION pg_notify(text, text) RETURNS void LANGUAGE sql AS 'SELECT WHERE boom()'",
    "CREATE FUNCTION has_database_privilege(name, text) RETURNS boolean LANGUAGE sql AS 'SELECT boom()'",
    "CREATE FUNCTION max_step(bigint, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint WHERE boom()'",
    "CREATE AGGREGATE max(bigint) (SFUNC = max_step, STYPE = bigint)",
];

fn ev(tag: &str) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_bytes().to_vec())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_planted_in_the_stores_schema_never_run() {
    let h = harness().await;
    let store = h.store().await.unwrap();
    for stmt in PLANTED {
        h.execute_sql(stmt)
            .await
            .unwrap_or_else(|e| panic!("{stmt}: {e}"));
    }
    // The planted objects are live: a plain unqualified call reaches them.
    assert!(
        h.query_i64("SELECT count(*) FROM unnest(ARRAY['\\x01'::bytea])")
            .await
            .is_err(),
        "the planted unnest(bytea[]) is what an unqualified call resolves to"
    );

    let space = random_space("hijack");
    let a = store.append(&space, ev("a")).await.unwrap();
    let b = store.append(&space, ev("b")).await.unwrap();
    assert_eq!(b.parents, vec![a.id]);
    assert_eq!(store.heads(&space).await.unwrap(), vec![b.head()]);
    let page = store.events_since(&space, None, 1).await.unwrap();
    assert_eq!(page.events.len(), 1);
    let fork = {
        let events = ev("fork");
        let ids: Vec<_> = events.iter().map(Event::id).collect();
        ForeignEpoch {
            space: space.clone(),
            id: epoch_id(&space, &[a.id], &ids),
            parents: vec![a.id],
            events,
        }
    };
    store.import(fork).await.unwrap();
    assert_eq!(store.heads(&space).await.unwrap().len(), 2);
    store.repair_heads(&space).await.unwrap();
    store.append(&space, ev("merge")).await.unwrap();
    assert!(store.epoch(&space, &a.id).await.unwrap().is_some());
    let recent = store.recent_epochs(&space, None, 10).await.unwrap();
    assert_eq!(recent.len(), 4);
    assert_eq!(recent[0].parents.len(), 2, "the merge names both heads");
    assert_eq!(
        store.list_spaces(None, 10).await.unwrap(),
        vec![space.clone()]
    );
    assert_eq!(store.computed_heads(&space).await.unwrap().len(), 1);
    // Reopening reads the migration state through the same schema.
    let again = PgStore::open_with(h.options()).await.unwrap();
    assert_eq!(again.heads(&space).await.unwrap().len(), 1);

    let clock = Arc::new(ManualClock::default());
    let spool = PgSpool::from_store(&again, clock, SpoolConfig::default()).unwrap();
    let queue = QueueName::new("hijack").unwrap();
    let key = DedupKey::from_parts(["k"]).unwrap();
    let run = spool
        .enqueue(&queue, &key, b"p".to_vec(), EnqueueOptions::default())
        .await
        .unwrap();
    let consumer = ConsumerId::new("c").unwrap();
    let claimed = spool
        .claim(&queue, &consumer, Duration::from_secs(30), 5)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let event = RunEventId::new(b"e".to_vec()).unwrap();
    spool
        .append_event(claimed[0].run_id, &event, b"x".to_vec())
        .await
        .unwrap();
    spool
        .ack(claimed[0].run_id, claimed[0].token)
        .await
        .unwrap();
    spool.stats().await.unwrap();
    let _ = run;
}
