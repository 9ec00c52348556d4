//! The backend handle opened straight through this crate, without the `cairn` facade: its
//! open registers the build in the fleet registry, heartbeats it, and a contract revision is
//! gated by a build that runs through the backend crate alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_core::spool::{ManualClock, Timestamp};
use cairn_core::Error;
use cairn_migrate::fleet::FleetEntry;
use cairn_migrate::{Backend, MigrationBackend, MigrationSet, OpenOptions};
use cairn_sqlite::{SqliteBackend, SqliteMigrator, SqliteOptions};

const DEADLINE: Duration = Duration::from_secs(20);

/// The application's set: v1 creates `notes` and `note_tags`; v2 adds a contract revision
/// that drops `note_tags`, which v1 writes.
fn notes(contract: bool) -> MigrationSet {
    let mut files = vec![(
        "0001_notes.sql".to_owned(),
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);\n\
         CREATE TABLE note_tags (note_id INTEGER NOT NULL, tag TEXT NOT NULL);"
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

fn tables(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'note%' ORDER BY name")
        .unwrap();
    let names = stmt.query_map([], |r| r.get(0)).unwrap();
    names.collect::<Result<_, _>>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_through_the_backend_crate_registers_heartbeats_and_gates_contracts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let clock = ManualClock::new(Timestamp::from_unix_micros(1_900_000_000_000_000));
    let opts = |build: &str| {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .heartbeat_interval(Duration::from_millis(20))
            .fleet_expiry(Duration::from_secs(60))
            .fleet_host("host-1")
            .build_id(build)
    };

    let v1 = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        opts("svc-v1").migrations(notes(false)),
    )
    .await
    .unwrap();
    assert_eq!(v1.engine(), "sqlite");
    let entry = v1.session().fleet_entry().expect("registered").clone();
    assert_eq!(entry.build, "svc-v1");
    assert_eq!(entry.heads["notes"], "0001_notes");
    // Registered in the store itself: another migrator of the file reads it.
    let outside = SqliteMigrator::new(&path, SqliteOptions::default());
    let stored = outside.read_fleet().await.unwrap();
    assert_eq!(stored, vec![entry.clone()]);
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
    let err = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        opts("svc-v2")
            .migrations(notes(true))
            .defer_blocked_contracts(false),
    )
    .await
    .expect_err("refused while v1 runs");
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("svc-v1"), "{err}");
    assert_eq!(tables(&path), ["note_tags", "notes"], "nothing changed");
    assert_eq!(
        outside.read_fleet().await.unwrap().len(),
        1,
        "v2 left no entry"
    );

    let waiting = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        opts("svc-v2").migrations(notes(true)),
    )
    .await
    .unwrap();
    let deferred = waiting.session().migrations()[1]
        .deferred
        .as_ref()
        .expect("the contract waits for v1");
    assert_eq!(deferred.revision, "0002_drop_tags");
    assert_eq!(deferred.blockers[0].build, "svc-v1");
    assert_eq!(tables(&path), ["note_tags", "notes"]);
    assert_eq!(waiting.session().fleet().await.unwrap().len(), 2);
    waiting.close().await.unwrap();

    // v1 closes: its entry is removed, and the contract revision applies.
    v1.close().await.unwrap();
    assert!(outside.read_fleet().await.unwrap().is_empty());
    let v2 = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        opts("svc-v2").migrations(notes(true)),
    )
    .await
    .unwrap();
    let opened = &v2.session().migrations()[1];
    assert!(opened.deferred.is_none());
    assert_eq!(opened.contracts.len(), 1);
    assert_eq!(tables(&path), ["notes"]);
    v2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_given_twice_is_refused_before_the_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let opts = OpenOptions::default()
        .migrations(notes(false))
        .migrations(notes(false));
    let err = SqliteBackend::open(&path, SqliteOptions::default(), opts)
        .await
        .expect_err("the set is given twice");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(!path.exists(), "nothing was created");
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
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let now = Timestamp::from_unix_micros(1_900_000_000_000_000);
    let clock = ManualClock::new(now);
    let opts = || {
        OpenOptions::default()
            .clock(Arc::new(clock.clone()))
            .build_id("svc-v1")
            .migrations(notes(false))
    };
    // The first open creates the registry; its own entry goes when it closes.
    let first = SqliteBackend::open(&path, SqliteOptions::default(), opts())
        .await
        .unwrap();
    first.close().await.unwrap();

    const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
    const MINUTE: Duration = Duration::from_secs(60);
    let outside = SqliteMigrator::new(&path, SqliteOptions::default());
    for e in [
        dead("past-the-week", now.saturating_sub(WEEK + MINUTE)),
        dead("within-the-week", now.saturating_sub(WEEK - MINUTE)),
    ] {
        outside.register(&e, Timestamp::UNIX_EPOCH).await.unwrap();
    }
    assert_eq!(outside.read_fleet().await.unwrap().len(), 2);

    let second = SqliteBackend::open(&path, SqliteOptions::default(), opts())
        .await
        .unwrap();
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
}
