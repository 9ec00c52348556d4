//! The backend handle opened straight through this crate, without the `cairn` facade: its
//! open registers the build in the fleet registry, heartbeats it, and a contract revision is
//! gated by a build that runs through the backend crate alone; close deregisters and shuts the
//! connections.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::spool::{ManualClock, Timestamp};
use cairn_core::{scratch_name, Error, SpaceId};
use cairn_migrate::fleet::FleetEntry;
use cairn_migrate::{Backend, MigrationBackend, MigrationSet, OpenOptions};
use cairn_postgres::testkit::test_server_url;
use cairn_postgres::{PgBackend, PgMigrator, PgOptions};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

const DEADLINE: Duration = Duration::from_secs(20);

/// The application's set: v1 creates `notes` and `note_tags`; v2 adds a contract revision
/// that drops `note_tags`, which v1 writes.
fn notes(contract: bool) -> MigrationSet {
    let mut files = vec![(
        "0001_notes.sql".to_owned(),
        "CREATE TABLE notes (id BIGINT PRIMARY KEY, body TEXT NOT NULL);\n\
         CREATE TABLE note_tags (note_id BIGINT NOT NULL, tag TEXT NOT NULL);"
            .to_owned(),
    )];
    if contract {
        files.push((
            "0002_drop_tags.sql".to_owned(),
            "-- cairn:contract\nDROP TABLE note_tags;".to_owned(),
        ));
    }
    MigrationSet::from_files("notes", files).expect("the set loads")
}

async fn admin(url: &str) -> PgConnection {
    let opts = PgConnectOptions::from_str(url).expect("test server URL");
    PgConnection::connect_with(&opts)
        .await
        .expect("connect to the test server")
}

/// The `note%` tables of `schema`, by name.
async fn tables(url: &str, schema: &str) -> Vec<String> {
    let mut conn = admin(url).await;
    let names = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'note%' \
         ORDER BY tablename",
    )
    .bind(schema)
    .fetch_all(&mut conn)
    .await
    .expect("catalog query");
    let _ = conn.close().await;
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_through_the_backend_crate_registers_heartbeats_and_gates_contracts() {
    let url = test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = scratch_name("cairn_sess");
    let pg = || PgOptions::new(url.clone()).schema(schema.clone());
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_900_000_000_000_000));
    let opts = |build: &str| {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .heartbeat_interval(Duration::from_millis(20))
            .fleet_expiry(Duration::from_secs(60))
            .fleet_host("host-1")
            .build_id(build)
    };

    let v1 = PgBackend::open(pg(), opts("svc-v1").migrations(notes(false)))
        .await
        .unwrap();
    assert_eq!(v1.engine(), "postgres");
    let entry = v1.session().fleet_entry().expect("registered").clone();
    assert_eq!(entry.build, "svc-v1");
    assert_eq!(entry.heads["notes"], "0001_notes");
    // Registered in the store itself: another migrator of the schema reads it.
    let outside = PgMigrator::new(pg()).unwrap();
    assert_eq!(outside.read_fleet().await.unwrap(), vec![entry.clone()]);
    assert_eq!(v1.session().fleet().await.unwrap(), vec![entry.clone()]);

    // The heartbeat refreshes last_seen to the clock's now.
    let later = clock.advance(Duration::from_secs(45));
    let deadline = Instant::now() + DEADLINE;
    while outside.read_fleet().await.unwrap()[0].last_seen != later {
        assert!(
            Instant::now() < deadline,
            "the heartbeat refreshed the entry"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // A build with the contract revision, opened through the backend crate too, is gated by
    // v1: refused when it does not defer (nothing changes), deferred by default.
    let err = PgBackend::open(
        pg(),
        opts("svc-v2")
            .migrations(notes(true))
            .defer_blocked_contracts(false),
    )
    .await
    .expect_err("refused while v1 runs");
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("svc-v1"), "{err}");
    assert_eq!(
        tables(&url, &schema).await,
        ["note_tags", "notes"],
        "nothing changed"
    );
    assert_eq!(
        outside.read_fleet().await.unwrap().len(),
        1,
        "v2 left no entry"
    );

    let waiting = PgBackend::open(pg(), opts("svc-v2").migrations(notes(true)))
        .await
        .unwrap();
    let deferred = waiting.session().migrations()[1]
        .deferred
        .as_ref()
        .expect("the contract waits for v1");
    assert_eq!(deferred.revision, "0002_drop_tags");
    assert_eq!(deferred.blockers[0].build, "svc-v1");
    assert_eq!(tables(&url, &schema).await, ["note_tags", "notes"]);
    assert_eq!(waiting.session().fleet().await.unwrap().len(), 2);
    waiting.close().await.unwrap();

    // v1 closes: its entry is removed, its connections are shut, and the contract applies.
    let epochs = v1.epochs();
    v1.close().await.unwrap();
    assert!(outside.read_fleet().await.unwrap().is_empty());
    let space = SpaceId::new("s").unwrap();
    let closed = epochs.heads(&space).await.expect_err("closed");
    assert!(matches!(closed, Error::Unavailable { .. }), "{closed}");
    let v2 = PgBackend::open(pg(), opts("svc-v2").migrations(notes(true)))
        .await
        .unwrap();
    let opened = &v2.session().migrations()[1];
    assert!(opened.deferred.is_none());
    assert_eq!(opened.contracts.len(), 1);
    assert_eq!(tables(&url, &schema).await, ["notes"]);
    v2.close().await.unwrap();

    let mut conn = admin(&url).await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}

/// A registry entry of an instance that stopped heartbeating at `last_seen`.
fn dead(instance: &str, last_seen: Timestamp) -> FleetEntry {
    FleetEntry {
        instance: instance.into(),
        build: format!("svc-{instance}"),
        heads: [("notes".to_owned(), "0001_notes".to_owned())].into(),
        host: "host-gone".into(),
        pid: 1,
        started_at: last_seen,
        last_seen,
    }
}

/// An open prunes the entries of instances dead for more than a week (`fleet::PRUNE_AFTER`,
/// stated here in days so a change to it is seen) and keeps the younger dead ones, which
/// `cairn migrate fleet` still shows as expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_prunes_entries_dead_for_more_than_a_week_and_keeps_younger_ones() {
    let url = test_server_url()
        .await
        .unwrap_or_else(|msg| panic!("{msg}"));
    let schema = scratch_name("cairn_prune");
    let pg = || PgOptions::new(url.clone()).schema(schema.clone());
    let now = Timestamp::from_unix_micros(1_900_000_000_000_000);
    let clock = ManualClock::new(now);
    let opts = || {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .build_id("svc-v1")
            .migrations(notes(false))
    };
    // The first open creates the registry; its own entry goes when it closes.
    let first = PgBackend::open(pg(), opts()).await.unwrap();
    first.close().await.unwrap();

    const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
    const MINUTE: Duration = Duration::from_secs(60);
    let outside = PgMigrator::new(pg()).unwrap();
    for e in [
        dead("past-the-week", now.saturating_sub(WEEK + MINUTE)),
        dead("within-the-week", now.saturating_sub(WEEK - MINUTE)),
    ] {
        outside.register(&e, Timestamp::UNIX_EPOCH).await.unwrap();
    }
    assert_eq!(outside.read_fleet().await.unwrap().len(), 2);

    let second = PgBackend::open(pg(), opts()).await.unwrap();
    let own = second
        .session()
        .fleet_entry()
        .expect("registered")
        .instance
        .clone();
    let mut left: Vec<String> = outside
        .read_fleet()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.instance)
        .collect();
    left.sort();
    let mut want = vec![own, "within-the-week".to_owned()];
    want.sort();
    assert_eq!(
        left, want,
        "the entry dead past a week is pruned, the other kept"
    );
    second.close().await.unwrap();

    let mut conn = admin(&url).await;
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut conn)
        .await
        .unwrap();
}
