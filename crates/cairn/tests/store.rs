//! The front door, as a service uses it: open from a URL (SQLite and Postgres), options,
//! application migration sets (upgrade, ahead, refused), an existing Postgres pool, close.

use std::path::{Path, PathBuf};

use cairn::migrate::MigrationSet;
use cairn::{Clock, Error, Event, Opened, Scheme, SpaceId, Store};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn notes(version: &str) -> MigrationSet {
    MigrationSet::from_dir("notes", fixture(version)).expect("the fixture set loads")
}

/// A store location of one backend, fresh for each test.
enum Location {
    Sqlite(tempfile::TempDir),
    Postgres { server: String, schema: String },
}

impl Location {
    fn sqlite() -> Self {
        Self::Sqlite(tempfile::tempdir().expect("a temporary directory"))
    }

    async fn postgres() -> Self {
        let server = cairn::testkit::postgres::testkit::test_server_url()
            .await
            .unwrap_or_else(|why| panic!("no Postgres server for the facade tests: {why}"));
        Self::Postgres {
            server,
            schema: cairn::testkit::scratch_name("cairn_f"),
        }
    }

    async fn each() -> [Self; 2] {
        [Self::sqlite(), Self::postgres().await]
    }

    fn url(&self) -> String {
        match self {
            Self::Sqlite(dir) => format!("sqlite://{}", dir.path().join("store.db").display()),
            Self::Postgres { server, schema } => {
                let sep = if server.contains('?') { '&' } else { '?' };
                format!("{server}{sep}cairn_schema={schema}")
            }
        }
    }

    fn scheme(&self) -> Scheme {
        match self {
            Self::Sqlite(_) => Scheme::Sqlite,
            Self::Postgres { .. } => Scheme::Postgres,
        }
    }

    /// Runs `sql` against the store's database as the application would (its own connection).
    async fn exec(&self, sql: &str) {
        match self {
            Self::Sqlite(dir) => {
                let conn = rusqlite::Connection::open(dir.path().join("store.db")).unwrap();
                conn.execute_batch(sql).unwrap();
            }
            Self::Postgres { server, schema } => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(server).await.unwrap();
                sqlx::query(&format!("SET search_path TO {schema}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            }
        }
    }

    /// Counts the rows of `table` as the application would.
    async fn count(&self, table: &str) -> i64 {
        let q = format!("SELECT count(*) FROM {table}");
        match self {
            Self::Sqlite(dir) => {
                let conn = rusqlite::Connection::open(dir.path().join("store.db")).unwrap();
                conn.query_row(&q, [], |r| r.get(0)).unwrap()
            }
            Self::Postgres { server, schema } => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(server).await.unwrap();
                sqlx::query(&format!("SET search_path TO {schema}"))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                sqlx::query_scalar(&q).fetch_one(&mut conn).await.unwrap()
            }
        }
    }

    /// Drops a Postgres store's schema (SQLite's directory goes with the `TempDir`).
    async fn cleanup(self) {
        if let Self::Postgres { server, schema } = self {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&server).await.unwrap();
            sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_append_heads_feed_on_both_backends() {
    for loc in Location::each().await {
        let store = Store::open(&loc.url()).await.unwrap();
        assert_eq!(store.scheme(), Some(loc.scheme()));
        assert_eq!(store.engine(), loc.scheme().to_string());
        assert!(
            matches!(store.migrations()[0].outcome, Opened::Upgraded { .. }),
            "a new store is created at cairn's head: {:?}",
            store.migrations()
        );
        let space = SpaceId::new("docs").unwrap();
        let a = store
            .epochs()
            .append(&space, vec![Event::new("doc.edit", "hello")])
            .await
            .unwrap();
        let heads = store.epochs().heads(&space).await.unwrap();
        assert_eq!(heads, vec![a.head()]);
        let page = store
            .epochs()
            .events_since(&space, None, 100)
            .await
            .unwrap();
        assert_eq!(page.events.len(), 1);
        store.close().await.unwrap();

        // Reopening finds the store at head and writes nothing for the migration.
        let again = Store::open(&loc.url()).await.unwrap();
        assert_eq!(again.migrations()[0].outcome, Opened::AtHead);
        assert_eq!(again.epochs().heads(&space).await.unwrap(), vec![a.head()]);
        again.close().await.unwrap();
        loc.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_create_if_missing_a_missing_store_is_refused_and_nothing_is_created() {
    for loc in Location::each().await {
        let err = Store::builder(loc.url())
            .create_if_missing(false)
            .open()
            .await
            .expect_err("no store exists yet");
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        match &loc {
            Location::Sqlite(dir) => assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                0,
                "nothing was created in the directory"
            ),
            Location::Postgres { server, schema } => {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(server).await.unwrap();
                let n: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
                        .bind(schema)
                        .fetch_one(&mut conn)
                        .await
                        .unwrap();
                assert_eq!(n, 0, "no schema was created");
            }
        }
        // Once created, the same builder opens it.
        Store::open(&loc.url())
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        Store::builder(loc.url())
            .create_if_missing(false)
            .open()
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        loc.cleanup().await;
    }
}

#[tokio::test]
async fn an_application_sqlite_file_is_refused_unless_sharing_is_chosen() {
    let loc = Location::sqlite();
    loc.exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO accounts (name) VALUES ('a')")
        .await;
    let err = Store::open(&loc.url())
        .await
        .expect_err("a file holding another application's tables is not a cairn store");
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert_eq!(loc.count("accounts").await, 1);

    let store = Store::builder(loc.url())
        .share_sqlite_file(true)
        .open()
        .await
        .unwrap();
    let space = SpaceId::new("s").unwrap();
    store
        .epochs()
        .append(&space, vec![Event::new("k", "v")])
        .await
        .unwrap();
    assert_eq!(
        loc.count("accounts").await,
        1,
        "the application's rows are untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_set_upgrades_an_older_build_runs_ahead_and_a_diverged_one_is_refused() {
    for loc in Location::each().await {
        // Build v1 of the service creates its table beside cairn's.
        let v1 = Store::builder(loc.url())
            .migrations(notes("notes_v1"))
            .open()
            .await
            .unwrap();
        assert_eq!(v1.migrations()[1].set, "notes");
        assert!(matches!(
            &v1.migrations()[1].outcome,
            Opened::Upgraded { from: None, applied } if applied == &["0001_notes".to_owned()]
        ));
        loc.exec("INSERT INTO notes (id, body) VALUES (1, 'from v1')")
            .await;

        // Build v2 upgrades the store while v1 still runs.
        let v2 = Store::builder(loc.url())
            .migrations(notes("notes_v2"))
            .open()
            .await
            .unwrap();
        assert!(matches!(
            &v2.migrations()[1].outcome,
            Opened::Upgraded { from: Some(from), applied }
                if from == "0001_notes" && applied == &["0002_note_tags".to_owned()]
        ));
        loc.exec("INSERT INTO note_tags (note_id, tag) VALUES (1, 'x')")
            .await;

        // A v1 process started now finds the store ahead and keeps using its table.
        let v1_again = Store::builder(loc.url())
            .migrations(notes("notes_v1"))
            .open()
            .await
            .unwrap();
        assert_eq!(
            v1_again.migrations()[1].outcome,
            Opened::Ahead {
                stamp: "0002_note_tags".into()
            }
        );
        loc.exec("INSERT INTO notes (id, body) VALUES (2, 'v1 after the upgrade')")
            .await;
        assert_eq!(loc.count("notes").await, 2);

        // Another team's revision 2 is a diverged history: refused in one line naming both.
        let err = Store::builder(loc.url())
            .migrations(notes("notes_diverged"))
            .open()
            .await
            .expect_err("a diverged build must not use the store");
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert!(
            msg.contains("0002_note_tags") && msg.contains("0002_note_authors"),
            "names both revisions: {msg}"
        );
        assert!(
            loc.count("note_tags").await == 1,
            "the refusal changed nothing"
        );

        for s in [v1, v2, v1_again] {
            s.close().await.unwrap();
        }
        loc.cleanup().await;
    }
}

/// The stamp of set `name` in the store at `url`, read without opening the store.
async fn stamp(url: &str, name: &str) -> Option<String> {
    let url = cairn::DatabaseUrl::parse(url).unwrap();
    cairn::migrate::Migrations::at(&url, false)
        .unwrap()
        .state(name)
        .await
        .unwrap()
        .stamp
}

/// Makes the store at `url` as an older build would: cairn's set up to `revision`. Returns the
/// store's raw migration backend.
async fn made_by_an_older_build(
    url: &str,
    revision: &str,
) -> std::sync::Arc<dyn cairn::testkit::MigrationBackend> {
    let url = cairn::DatabaseUrl::parse(url).unwrap();
    let raw = cairn::testkit::migration_backend(&url, true).unwrap();
    cairn::testkit::Runner::new(cairn::migrate::cairn_set().up_to(revision).unwrap())
        .open(raw.as_ref())
        .await
        .expect("the older build creates its store");
    raw
}

/// `StoreBuilder::upgrade(false)`: a store behind this build — in cairn's own set or in an
/// application's — is refused with `Incompatible` in one line naming the stamp, the head and
/// `cairn migrate up`, and nothing is written; a missing store is still created at head, a
/// store at head opens, and the default open upgrades the refused store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_upgrade_a_store_behind_this_build_is_refused_and_left_as_it_is() {
    let older = "0009_spool_flow";
    let head = cairn::migrate::cairn_set().head().id.clone();
    assert_ne!(head, older, "the case needs a revision after {older}");
    for loc in Location::each().await {
        made_by_an_older_build(&loc.url(), older).await;
        assert_eq!(stamp(&loc.url(), "cairn").await.as_deref(), Some(older));

        let err = Store::builder(loc.url())
            .upgrade(false)
            .register_in_fleet(false)
            .open()
            .await
            .expect_err("a store behind this build is refused without upgrade");
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        for part in [
            older,
            head.as_str(),
            "behind",
            "cairn migrate up",
            "nothing was changed",
        ] {
            assert!(msg.contains(part), "names {part}: {msg}");
        }
        assert_eq!(
            stamp(&loc.url(), "cairn").await.as_deref(),
            Some(older),
            "the refusal wrote nothing"
        );

        // The default open upgrades it; then an open without upgrade finds it at head.
        let upgraded = Store::open(&loc.url()).await.unwrap();
        assert!(matches!(
            &upgraded.migrations()[0].outcome,
            Opened::Upgraded { from: Some(from), .. } if from == older
        ));
        upgraded.close().await.unwrap();
        let at_head = Store::builder(loc.url())
            .upgrade(false)
            .open()
            .await
            .unwrap();
        assert_eq!(at_head.migrations()[0].outcome, Opened::AtHead);
        at_head.close().await.unwrap();

        // An application's set behind this build is refused the same way, cairn's set at head.
        Store::builder(loc.url())
            .migrations(notes("notes_v1"))
            .open()
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        let err = Store::builder(loc.url())
            .migrations(notes("notes_v2"))
            .upgrade(false)
            .open()
            .await
            .expect_err("the application's set is behind this build");
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        assert!(
            err.to_string().contains("migration set notes")
                && err.to_string().contains("0002_note_tags"),
            "{err}"
        );
        assert_eq!(
            stamp(&loc.url(), "notes").await.as_deref(),
            Some("0001_notes")
        );
        loc.cleanup().await;
    }

    // A store behind only by a contract revision that a live older build lacks (a rolling
    // deploy) is served at its stamp, as an upgrading open would serve it, the revision
    // deferred; with no such build it is plainly behind, and refused.
    let parent = "0007_spool_ready";
    let contract = "0008_spool_ready_contract";
    assert!(cairn::migrate::cairn_set().is_contract(contract));
    for loc in Location::each().await {
        let raw = made_by_an_older_build(&loc.url(), parent).await;
        let without_upgrade = || {
            Store::builder(loc.url())
                .upgrade(false)
                .register_in_fleet(false)
                .open()
        };
        let err = without_upgrade()
            .await
            .expect_err("no live build holds the contract back");
        assert!(err.to_string().contains("behind"), "{err}");
        let now = cairn::spool::SystemClock.now();
        let older = cairn::migrate::FleetEntry {
            instance: "older-instance".into(),
            build: "older-build".into(),
            heads: [("cairn".to_owned(), parent.to_owned())].into(),
            host: "elsewhere".into(),
            pid: 7,
            started_at: now,
            last_seen: now,
        };
        raw.register(&older, cairn::spool::Timestamp::from_unix_micros(0))
            .await
            .unwrap();
        let served = without_upgrade()
            .await
            .expect("served at its stamp, the contract deferred");
        let opened = &served.migrations()[0];
        assert_eq!(opened.outcome, Opened::AtHead, "{opened:?}");
        let deferred = opened.deferred.as_ref().expect("the contract is deferred");
        assert_eq!(deferred.revision, contract);
        assert_eq!(deferred.blockers.len(), 1, "{deferred:?}");
        served.close().await.unwrap();
        assert_eq!(stamp(&loc.url(), "cairn").await.as_deref(), Some(parent));
        loc.cleanup().await;
    }

    // A missing store is created at head even without upgrade: creating is not upgrading.
    for loc in Location::each().await {
        let created = Store::builder(loc.url())
            .upgrade(false)
            .open()
            .await
            .unwrap();
        assert!(matches!(
            &created.migrations()[0].outcome,
            Opened::Upgraded { from: None, .. }
        ));
        created.close().await.unwrap();
        assert_eq!(stamp(&loc.url(), "cairn").await, Some(head.clone()));
        loc.cleanup().await;
    }
}

#[tokio::test]
async fn application_sets_named_cairn_or_given_twice_are_refused_before_anything_is_opened() {
    let loc = Location::sqlite();
    let cairn_named = MigrationSet::from_files(
        "cairn",
        [(
            "0001_x.sql".to_owned(),
            "CREATE TABLE x (id INTEGER)".to_owned(),
        )],
    );
    // The name is reserved either where the set is built or, at the latest, at open.
    match cairn_named {
        Err(e) => assert!(
            matches!(e, cairn::migrate::MigrateError::InvalidSet { .. }),
            "{e}"
        ),
        Ok(set) => {
            let err = Store::builder(loc.url())
                .migrations(set)
                .open()
                .await
                .expect_err("the name is reserved");
            assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
        }
    }
    let err = Store::builder(loc.url())
        .migrations(notes("notes_v1"))
        .migrations(notes("notes_v2"))
        .open()
        .await
        .expect_err("one set, two chains");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let Location::Sqlite(dir) = &loc else {
        unreachable!()
    };
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_pg_pool_is_accepted() {
    let loc = Location::postgres().await;
    let Location::Postgres { server, schema } = &loc else {
        unreachable!()
    };
    let pool = sqlx::PgPool::connect(server).await.unwrap();
    let store = Store::builder_from_pg_pool(&pool)
        .schema(schema.clone())
        .pool_size(2)
        .migrations(notes("notes_v1"))
        .open()
        .await
        .unwrap();
    let space = SpaceId::new("pooled").unwrap();
    store
        .epochs()
        .append(&space, vec![Event::new("k", "v")])
        .await
        .unwrap();
    assert_eq!(loc.count("notes").await, 0);
    // The service's own pool is untouched by cairn's session settings.
    let path: String = sqlx::query_scalar("SHOW search_path")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!path.contains(schema.as_str()), "{path}");
    let handle = store.epochs();
    store.close().await.unwrap();
    let err = handle
        .heads(&space)
        .await
        .expect_err("a closed store refuses work");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    loc.cleanup().await;
}

#[tokio::test]
async fn errors_never_echo_the_url() {
    for url in [
        "mysql://user:hunter2@127.0.0.1/db",
        "postgres://user:hunter2@127.0.0.1:1/db?cairn_schema=Bad-Name",
    ] {
        let err = Store::open(url).await.expect_err("cannot open");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(!format!("{err:?}").contains("hunter2"), "{err:?}");
    }
    let builder = Store::builder("postgres://user:hunter2@h/db");
    assert!(!format!("{builder:?}").contains("hunter2"));
}

#[tokio::test]
async fn a_failed_application_revision_names_itself_and_changes_nothing() {
    let loc = Location::sqlite();
    Store::builder(loc.url())
        .migrations(notes("notes_v1"))
        .open()
        .await
        .unwrap();
    let broken = MigrationSet::from_files(
        "notes",
        [
            (
                "0001_notes.sql".to_owned(),
                std::fs::read_to_string(fixture("notes_v1/0001_notes.sql")).unwrap(),
            ),
            (
                "0002_broken.sql".to_owned(),
                "CREATE TABLE half_done (id INTEGER);\nALTER TABLE no_such_table ADD COLUMN x TEXT;"
                    .to_owned(),
            ),
        ],
    )
    .unwrap();
    let err = Store::builder(loc.url())
        .migrations(broken)
        .open()
        .await
        .expect_err("the revision fails");
    match &err {
        Error::Migration { revision, .. } => assert_eq!(revision, "0002_broken"),
        other => panic!("expected a migration error, got {other}"),
    }
    let Location::Sqlite(dir) = &loc else {
        unreachable!()
    };
    let conn = rusqlite::Connection::open(dir.path().join("store.db")).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'half_done'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0, "the failed upgrade was rolled back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spool_through_the_front_door_on_both_backends() {
    use cairn::{ConsumerId, DedupKey, EnqueueOptions, QueueName, RunState};
    use std::time::Duration;
    for loc in Location::each().await {
        let store = Store::open(&loc.url()).await.unwrap();
        let queue = QueueName::new("gate").unwrap();
        let key = DedupKey::from_parts(["gate", "refs/heads/main", "abc123"]).unwrap();
        let first = store
            .spool()
            .enqueue(&queue, &key, b"check".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        assert!(first.created);

        // Another handle on the same store (another process, as far as the store can tell)
        // gets the same run for the same key.
        let other = Store::open(&loc.url()).await.unwrap();
        let again = other
            .spool()
            .enqueue(&queue, &key, b"check".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(again.run_id, first.run_id);
        assert!(!again.created);

        let me = ConsumerId::new("facade-test").unwrap();
        let claimed = other
            .spool()
            .claim(&queue, &me, Duration::from_secs(30), 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].run_id, first.run_id);
        other
            .spool()
            .ack(claimed[0].run_id, claimed[0].token)
            .await
            .unwrap();
        let info = store.spool().run(first.run_id).await.unwrap().unwrap();
        assert_eq!(info.state, RunState::Succeeded);
        store.close().await.unwrap();
        other.close().await.unwrap();
        loc.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_sets_revisions_are_checked_for_additivity_on_both_engines() {
    use cairn::migrate::{additivity_engine, check_set};
    let pg = cairn::testkit::postgres::testkit::test_server_url()
        .await
        .unwrap_or_else(|why| panic!("no Postgres server for the facade tests: {why}"));
    for backend in [Scheme::Sqlite, Scheme::Postgres] {
        let engine = additivity_engine(backend, Some(&pg)).unwrap();
        let ok = check_set(engine.as_ref(), &notes("notes_v2"))
            .await
            .unwrap();
        assert_eq!(
            ok.len(),
            1,
            "{backend}: the base is exempt, 0002 is checked"
        );
        assert_eq!(ok[0].revision, "0002_note_tags");
        assert!(
            ok[0].violations.is_empty(),
            "{backend}: {:?}",
            ok[0].violations
        );

        let bad = check_set(engine.as_ref(), &notes("notes_breaking"))
            .await
            .unwrap();
        assert_eq!(bad[0].revision, "0002_drop_body");
        assert!(
            bad[0]
                .violations
                .iter()
                .any(|v| v.table.as_deref() == Some("notes")),
            "{backend}: dropping a column an older build writes is flagged on its table: {:?}",
            bad[0].violations
        );
    }
}

/// How long a facade test waits for something that must happen promptly (a heartbeat).
/// Generous: it bounds a wait, it is never slept.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// The notes set at v3: v2's expand revision, then a contract revision (marked by its first
/// line) that drops `note_tags`, which v2 writes.
fn notes_v3() -> MigrationSet {
    MigrationSet::from_files(
        "notes",
        [
            (
                "0001_notes.sql",
                std::fs::read_to_string(fixture("notes_v1").join("0001_notes.sql")).unwrap(),
            ),
            (
                "0002_note_tags.sql",
                std::fs::read_to_string(fixture("notes_v2").join("0002_note_tags.sql")).unwrap(),
            ),
            (
                "0003_drop_tags.sql",
                "-- cairn:contract\n-- tags move elsewhere\nDROP TABLE note_tags;".to_owned(),
            ),
        ],
    )
    .expect("the v3 set loads")
}

/// Issue 13: every open registers its build in the fleet registry (instance, build id, the
/// head it knows per set, host, pid), a heartbeat refreshes `last_seen` from the store's clock
/// while it is open, an entry not refreshed within the expiry window is not live, and close
/// removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_open_registers_heartbeats_and_close_removes_it_on_both_backends() {
    use std::time::Duration;
    for loc in Location::each().await {
        let clock =
            cairn::ManualClock::new(cairn::Timestamp::from_unix_micros(1_900_000_000_000_000));
        let builder = |build: &str| {
            Store::builder(loc.url())
                .migrations(notes("notes_v1"))
                .clock(std::sync::Arc::new(clock.clone()))
                .heartbeat_interval(Duration::from_millis(20))
                .fleet_expiry(Duration::from_secs(60))
                .fleet_host("host-1")
                .build_id(build)
        };
        let a = builder("svc-1.0").open().await.unwrap();
        let entry = a.fleet_entry().expect("registered").clone();
        assert_eq!(entry.build, "svc-1.0");
        assert_eq!(entry.host, "host-1");
        assert_eq!(entry.pid, std::process::id());
        assert_eq!(entry.heads["notes"], "0001_notes");
        assert_eq!(entry.heads["cairn"], "0011_spool_room");
        assert_eq!(a.fleet().await.unwrap(), vec![entry.clone()]);

        // The heartbeat refreshes last_seen to the clock's now.
        let later = clock.advance(Duration::from_secs(45));
        let deadline = std::time::Instant::now() + DEADLINE;
        loop {
            let live = a.fleet().await.unwrap();
            if live
                .iter()
                .any(|e| e.instance == entry.instance && e.last_seen == later)
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the heartbeat refreshed the entry: {live:?}"
            );
            tokio::task::yield_now().await;
        }

        // A second open is a second instance; the default build id names version and heads.
        let b = Store::builder(loc.url())
            .migrations(notes("notes_v1"))
            .clock(std::sync::Arc::new(clock.clone()))
            .open()
            .await
            .unwrap();
        let b_entry = b.fleet_entry().unwrap().clone();
        assert_ne!(b_entry.instance, entry.instance);
        assert_eq!(
            b_entry.build,
            format!(
                "{}+cairn@0011_spool_room,notes@0001_notes",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(a.fleet().await.unwrap().len(), 2);

        // Close removes a's entry; b's (dropped, its heartbeat stopped) expires with the window.
        a.close().await.unwrap();
        let reader = Store::builder(loc.url())
            .clock(std::sync::Arc::new(clock.clone()))
            .register_in_fleet(false)
            .open()
            .await
            .unwrap();
        assert!(reader.fleet_entry().is_none());
        let m =
            cairn::migrate::Migrations::at(&cairn::DatabaseUrl::parse(&loc.url()).unwrap(), false)
                .unwrap();
        let live = |now| {
            let m = m.clone();
            async move { m.fleet(now, Duration::from_secs(60)).await.unwrap() }
        };
        let instances: Vec<String> = live(clock.now())
            .await
            .into_iter()
            .map(|e| e.instance)
            .collect();
        assert_eq!(
            instances,
            std::slice::from_ref(&b_entry.instance),
            "close removed a's entry"
        );
        drop(b);
        let expired = clock.advance(Duration::from_secs(61));
        assert!(live(expired).await.is_empty(), "b's entry expired");
        reader.close().await.unwrap();
        loc.cleanup().await;
    }
}

/// Issue 13: a contract revision waits for the older builds that lack it. While v1 and v2
/// stores are open (registered, heartbeating) a v3 open that does not defer is refused in one
/// line naming their build, host, pid and revision, and changes nothing; by default v3 opens
/// with the contract revision deferred and reported; once v1 and v2 close, v3 applies it. An
/// older build opened afterwards refuses the store. With `force_contract` the revision is
/// applied anyway and reported as forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_revision_waits_for_older_builds_or_is_forced_on_both_backends() {
    for loc in Location::each().await {
        let v1 = Store::builder(loc.url())
            .migrations(notes("notes_v1"))
            .build_id("svc-v1")
            .fleet_host("old-host")
            .open()
            .await
            .unwrap();
        let v2 = Store::builder(loc.url())
            .migrations(notes("notes_v2"))
            .build_id("svc-v2")
            .open()
            .await
            .unwrap();
        loc.exec("INSERT INTO note_tags (note_id, tag) VALUES (1, 'x')")
            .await;
        let err = Store::builder(loc.url())
            .migrations(notes_v3())
            .build_id("svc-v3")
            .defer_blocked_contracts(false)
            .open()
            .await
            .expect_err("refused while v1 and v2 run");
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "one line: {msg}");
        for part in [
            "0003_drop_tags",
            "svc-v1",
            "old-host",
            &std::process::id().to_string(),
            "knows 0001_notes",
            "svc-v2",
            "knows 0002_note_tags",
        ] {
            assert!(msg.contains(part), "names {part}: {msg}");
        }
        assert_eq!(loc.count("note_tags").await, 1, "nothing changed");

        // By default the v3 build still opens: the contract revision waits, reported, and the
        // store stays at v2's revision (a rolling deploy of v3 is not blocked by older nodes).
        let waiting = Store::builder(loc.url())
            .migrations(notes_v3())
            .build_id("svc-v3")
            .open()
            .await
            .unwrap();
        let opened = &waiting.migrations()[1];
        assert_eq!(
            opened.outcome,
            Opened::AtHead,
            "nothing before the contract was pending"
        );
        let deferred = opened.deferred.as_ref().expect("the contract waits");
        assert_eq!(deferred.revision, "0003_drop_tags");
        let mut lacking: Vec<&str> = deferred.blockers.iter().map(|b| b.build.as_str()).collect();
        lacking.sort_unstable();
        assert_eq!(lacking, ["svc-v1", "svc-v2"]);
        assert_eq!(loc.count("note_tags").await, 1, "the contract did not run");
        assert_eq!(
            waiting.fleet_entry().unwrap().heads["notes"],
            "0003_drop_tags"
        );
        waiting.close().await.unwrap();

        // Forced: applied past both, and reported.
        if loc.scheme() == Scheme::Postgres {
            let forced = Store::builder(loc.url())
                .migrations(notes_v3())
                .force_contract(true)
                .open()
                .await
                .unwrap();
            let contracts = &forced.migrations()[1].contracts;
            assert_eq!(contracts.len(), 1);
            assert!(contracts[0].forced);
            assert_eq!(contracts[0].blockers.len(), 2);
            forced.close().await.unwrap();
        } else {
            // Waiting: once both close, the gate lifts.
            v1.clone().close().await.unwrap();
            v2.clone().close().await.unwrap();
            let v3 = Store::builder(loc.url())
                .migrations(notes_v3())
                .open()
                .await
                .unwrap();
            let contracts = &v3.migrations()[1].contracts;
            assert_eq!(contracts.len(), 1);
            assert!(!contracts[0].forced);
            assert!(v3.migrations()[1].deferred.is_none());
            v3.close().await.unwrap();
        }
        // Either way the table is gone, and an older build now refuses the store.
        let err = Store::builder(loc.url())
            .migrations(notes("notes_v2"))
            .open()
            .await
            .expect_err("v2 lacks the contract revision");
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        assert!(err.to_string().contains("0003_drop_tags"), "{err}");
        drop((v1, v2));
        loc.cleanup().await;
    }
}

#[test]
fn the_postgres_additivity_engine_needs_a_postgres_url_and_says_which_is_missing() {
    use cairn::migrate::additivity_engine;
    let message = |url: Option<&str>| match additivity_engine(Scheme::Postgres, url) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{url:?} was taken"),
    };
    assert!(
        message(None).contains("needs a server URL"),
        "{}",
        message(None)
    );
    let not_pg = message(Some("sqlite:///tmp/x.db"));
    assert!(not_pg.contains("not a postgres:// URL"), "{not_pg}");
    let foreign = message(Some("mysql://u:hunter2@h/db"));
    assert!(
        foreign.contains("unsupported scheme") && !foreign.contains("hunter2"),
        "{foreign}"
    );
}

/// `StoreBuilder::retention`: a library store bounds what finished work leaves behind in the
/// background, as `cairn serve` does — a finished run older than the policy's age is removed by
/// a later pass, a young one is kept — and `close` stops the loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_built_with_retention_removes_old_finished_runs_in_the_background() {
    use std::time::{Duration, Instant};

    use cairn::spool::{EnqueueOptions, RetentionPolicy};
    for loc in Location::each().await {
        let policy = RetentionPolicy {
            max_age: Duration::from_secs(1),
            max_bytes: 1 << 30,
        };
        let store = Store::builder(loc.url())
            .retention(policy, Duration::from_millis(100))
            .open()
            .await
            .unwrap();
        let spool = store.spool();
        let q = cairn::QueueName::new("retained").unwrap();
        let key = cairn::DedupKey::from_parts(["old"]).unwrap();
        let run = spool
            .enqueue(&q, &key, b"p".to_vec(), EnqueueOptions::default())
            .await
            .unwrap();
        let me = cairn::ConsumerId::new("w").unwrap();
        let claimed = spool
            .claim(&q, &me, Duration::from_secs(30), 1)
            .await
            .unwrap();
        spool.ack(run.run_id, claimed[0].token).await.unwrap();
        let live = spool
            .enqueue(
                &q,
                &cairn::DedupKey::from_parts(["live"]).unwrap(),
                b"p".to_vec(),
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while spool.run(run.run_id).await.unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "{:?}: the finished run was not removed in time",
                loc.scheme()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            spool.run(live.run_id).await.unwrap().is_some(),
            "a live run is never removed"
        );
        store.close().await.unwrap();
        loc.cleanup().await;
    }
}
