//! Query plans of the spool's hot statements: each is one index range (no table scan, no
//! temporary sort), whatever the store holds.

use rusqlite::Connection;

use super::sql;
use crate::SqliteStore;

/// The `EXPLAIN QUERY PLAN` details of `q`, one line per step.
fn plan(conn: &Connection, q: &str) -> Vec<String> {
    let mut stmt = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {q}"))
        .expect("the statement compiles");
    let n = stmt.parameter_count();
    let params: Vec<rusqlite::types::Value> =
        (0..n).map(|_| rusqlite::types::Value::Null).collect();
    stmt.query_map(rusqlite::params_from_iter(params), |r| {
        r.get::<_, String>(3)
    })
    .expect("the plan runs")
    .collect::<rusqlite::Result<Vec<_>>>()
    .expect("plan rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_use_one_index_range_and_no_sort() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plans.db");
    drop(SqliteStore::open(&path).await.unwrap());
    let conn = Connection::open(&path).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("claim", sql::CANDIDATES, "spool_run_claim"),
        ("expired leases", sql::EXPIRED, "spool_run_expiry"),
        ("supersede", sql::SUPERSEDE, "spool_run_group"),
        (
            "duplicate enqueue",
            sql::RUN_ID_BY_KEY,
            "sqlite_autoindex_spool_run_2",
        ),
        (
            "lease state",
            sql::LEASE_STATE,
            "sqlite_autoindex_spool_run_1",
        ),
        ("retention events", sql::OLDEST_EVENTS, "spool_event_age"),
        ("retention runs", sql::REMOVABLE_RUNS, "spool_run_finished"),
        (
            "events",
            sql::EVENTS_AFTER,
            "sqlite_autoindex_spool_event_1",
        ),
        (
            "event dedup",
            sql::EVENT_SEQ_BY_ID,
            "sqlite_autoindex_spool_event_2",
        ),
    ];
    for (what, q, index) in cases {
        let steps = plan(&conn, q);
        let all = steps.join(" | ");
        assert!(
            steps[0].starts_with("SEARCH") || steps[0].starts_with("SCAN"),
            "{what}: {all}"
        );
        assert!(all.contains(index), "{what} must use {index}: {all}");
        assert!(!all.contains("TEMP B-TREE"), "{what} must not sort: {all}");
        assert!(
            !steps
                .iter()
                .any(|s| s.starts_with("SCAN spool_run") && !s.contains("INDEX")),
            "{what} must not scan a table: {all}"
        );
    }
}
