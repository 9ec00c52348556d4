//! One pool per store: the spool and the migrator built from an open store
//! ([`PgSpool::from_store`], [`PgMigrator::from_store`]) run on the store's pool, so a fleet
//! registration and its heartbeats take a pooled connection instead of opening one.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_core::spool::{ManualClock, SpoolConfig, Timestamp};
use cairn_core::{scratch_name, Spool};
use cairn_migrate::{FleetEntry, MigrationBackend};
use cairn_postgres::testkit::{harness, test_server_url};
use cairn_postgres::{PgMigrator, PgOptions, PgSpool, PgStore};
use sqlx::{Connection, PgConnection};

/// The server connections whose `application_name` is `app`: pid and last statement.
async fn backends(admin: &mut PgConnection, app: &str) -> Vec<(i32, String)> {
    sqlx::query_as(
        "SELECT pid, query FROM pg_catalog.pg_stat_activity WHERE application_name = $1 \
         ORDER BY pid",
    )
    .bind(app)
    .fetch_all(admin)
    .await
    .unwrap()
}

/// With a pool of one connection, the spool's statements, the fleet registration and ten
/// heartbeats all run on that one connection: the store holds exactly one server connection
/// throughout (the same pid), and its last statement is the heartbeat. A migrator that opened a
/// connection per heartbeat (as `PgMigrator::new` does) would leave no backend whose last
/// statement is the heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_and_the_fleet_heartbeat_run_on_the_stores_one_pool() {
    let h = harness().await;
    let server = test_server_url().await.expect("the test server");
    let app = scratch_name("cairn_pool");
    let sep = if server.contains('?') { '&' } else { '?' };
    let opts = PgOptions::new(format!("{server}{sep}application_name={app}"))
        .schema(h.schema())
        .max_connections(1);
    let store = PgStore::open_with(opts).await.unwrap();
    let spool = PgSpool::from_store(
        &store,
        Arc::new(ManualClock::default()),
        SpoolConfig::default(),
    )
    .unwrap();
    spool.stats().await.unwrap();
    let mut admin = PgConnection::connect(&server).await.unwrap();
    let before = backends(&mut admin, &app).await;
    assert_eq!(
        before.len(),
        1,
        "the store's one pooled connection: {before:?}"
    );

    let migrator = PgMigrator::from_store(&store);
    let now = Timestamp::from_unix_micros(1_000_000_000);
    let entry = FleetEntry {
        instance: "one-pool".into(),
        build: "one-pool-build".into(),
        heads: BTreeMap::from([("cairn".to_owned(), "0001_epoch_log".to_owned())]),
        host: "test".into(),
        pid: 1,
        started_at: now,
        last_seen: now,
    };
    migrator.register(&entry, now).await.unwrap();
    let mut last = now;
    for i in 1..=10 {
        last = Timestamp::from_unix_micros(now.as_unix_micros() + i);
        migrator.heartbeat("one-pool", last).await.unwrap();
    }
    let after = backends(&mut admin, &app).await;
    assert_eq!(
        after.iter().map(|(pid, _)| *pid).collect::<Vec<_>>(),
        vec![before[0].0],
        "the same one connection ran everything: {after:?}"
    );
    assert!(
        after[0].1.contains("UPDATE cairn_fleet SET last_seen_us"),
        "the heartbeat ran on the store's pooled connection: {after:?}"
    );
    let fleet = migrator.read_fleet().await.unwrap();
    assert_eq!(fleet.len(), 1);
    assert_eq!(fleet[0].last_seen, last, "every heartbeat was written");
    migrator.deregister("one-pool").await.unwrap();
    assert!(migrator.read_fleet().await.unwrap().is_empty());
    spool.close().await;
}
