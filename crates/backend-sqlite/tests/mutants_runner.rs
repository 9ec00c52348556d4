//! The migration runner's behaviour that survived mutation testing (issue 14, `cargo mutants`
//! over `crates/migrate/src/runner.rs` with this crate's conformance and migrate tests): each
//! test here names the mutant it kills. Against real SQLite stores.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_migrate::{MigrationBackend, MigrationSet, Opened, Runner, RunnerHooks};
use cairn_sqlite::{SqliteMigrator, SqliteOptions, SqliteStore};

/// The test's application set, `revisions` long (the head past the base, so a missing lineage
/// is due for repair).
fn app(revisions: usize) -> MigrationSet {
    let files = [
        ("0001_a.sql", "CREATE TABLE mut_a (id INTEGER PRIMARY KEY);"),
        ("0002_b.sql", "CREATE TABLE mut_b (id INTEGER PRIMARY KEY);"),
        ("0003_c.sql", "CREATE TABLE mut_c (id INTEGER PRIMARY KEY);"),
    ];
    MigrationSet::from_files("mut", files.into_iter().take(revisions)).unwrap()
}

fn migrator(db: &Path) -> SqliteMigrator {
    SqliteMigrator::new(db, SqliteOptions::default())
}

fn tables(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut s = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = s.query_map([], |r| r.get(0)).unwrap();
    names.map(Result::unwrap).collect()
}

/// A cairn store whose app set is at revision 2 without any lineage recorded (upgraded by a
/// runner that predates lineage): at this build's head, due for a lineage repair.
async fn store_without_lineage() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let old = Runner::new(app(2)).with_hooks(RunnerHooks {
        skip_lineage: true,
        ..RunnerHooks::default()
    });
    let opened = old.open(&migrator(&db)).await.unwrap();
    assert!(matches!(opened, Opened::Upgraded { .. }), "{opened:?}");
    assert_eq!(migrator(&db).read_state("mut").await.unwrap().lineage, None);
    (dir, db)
}

/// Kills `repair_locked`: `lineage_table_was_missing && state.lineage.is_none()` → `||`. A
/// repair that records a missing lineage in a lineage table that was there all along reports
/// no restored table.
#[tokio::test]
async fn repair_of_a_missing_lineage_does_not_report_a_restored_table() {
    let (_dir, db) = store_without_lineage().await;
    let m = migrator(&db);
    let repaired = Runner::new(app(2)).repair(&m).await.unwrap();
    assert_eq!(repaired.stamp_restored, None, "{repaired:?}");
    assert!(!repaired.lineage_table_restored, "{repaired:?}");
    assert!(repaired.lineage_recorded, "{repaired:?}");
    assert!(repaired.changed());
    assert_eq!(
        m.read_state("mut").await.unwrap().lineage,
        Some(app(2).lineage(m.dialect()))
    );
}

/// Kills `repair`: match guard `repaired.changed()` → `true`. A repair whose second look (under
/// the lock) finds the work done by another process meanwhile rolls back: not even the
/// bookkeeping table its lock created is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_that_finds_the_work_done_under_the_lock_commits_nothing() {
    let (_dir, db) = store_without_lineage().await;
    let other_db = db.clone();
    let hooks = RunnerHooks {
        before_lock: Some(Arc::new(move || {
            // Another process repairs first, and the down table is dropped by hand (the lock
            // recreates it inside the transaction; only a commit would keep it).
            let db = other_db.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let repaired = rt
                    .block_on(Runner::new(app(2)).repair(&migrator(&db)))
                    .unwrap();
                assert!(repaired.lineage_recorded);
                rusqlite::Connection::open(&db)
                    .unwrap()
                    .execute_batch("DROP TABLE cairn_migration_down")
                    .unwrap();
            })
            .join()
            .unwrap();
        })),
        ..RunnerHooks::default()
    };
    let m = migrator(&db);
    let repaired = Runner::new(app(2))
        .with_hooks(hooks)
        .repair(&m)
        .await
        .unwrap();
    assert!(!repaired.changed(), "{repaired:?}");
    assert!(
        !tables(&db).contains(&"cairn_migration_down".to_owned()),
        "the repair committed although its second look found nothing to do"
    );
}

/// Kills `<impl Debug for RunnerHooks>::fmt` → `Ok(())`: the hooks print which are set.
#[test]
fn runner_hooks_debug_names_the_hooks_set() {
    let hooks = RunnerHooks {
        fail_after_lineage_write: true,
        before_lock: Some(Arc::new(|| {})),
        ..RunnerHooks::default()
    };
    let printed = format!("{hooks:?}");
    for part in [
        "RunnerHooks",
        "before_lock: true",
        "skip_lineage: false",
        "fail_after_lineage_write: true",
    ] {
        assert!(printed.contains(part), "{printed}");
    }
}

/// Runs `f` on a thread of its own with a runtime of its own (from inside a runner hook, which
/// is synchronous), as another process would.
fn elsewhere(f: impl FnOnce(&tokio::runtime::Runtime) + Send + 'static) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        f(&rt);
    })
    .join()
    .unwrap();
}

/// Kills `down`: match guard `!done.reverted.is_empty()` → `true`. A `down` whose second look
/// (under the lock) finds the store already rolled back by another process meanwhile rolls
/// back: not even the bookkeeping table its lock created is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_that_finds_the_store_at_its_target_under_the_lock_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let with_down = || {
        app(3)
            .with_down("0002_b", vec!["DROP TABLE mut_b".into()], vec!["x".into()])
            .unwrap()
            .with_down("0003_c", vec!["DROP TABLE mut_c".into()], vec!["x".into()])
            .unwrap()
    };
    let m = migrator(&db);
    Runner::new(with_down()).open(&m).await.unwrap();
    let other_db = db.clone();
    let hooks = RunnerHooks {
        before_lock: Some(Arc::new(move || {
            let db = other_db.clone();
            elsewhere(move |rt| {
                let done = rt
                    .block_on(Runner::new(app(1)).down(&migrator(&db), "0001_a"))
                    .unwrap();
                assert_eq!(done.reverted, ["0003_c", "0002_b"]);
                rusqlite::Connection::open(&db)
                    .unwrap()
                    .execute_batch("DROP TABLE cairn_migration_down")
                    .unwrap();
            });
        })),
        ..RunnerHooks::default()
    };
    let done = Runner::new(app(1))
        .with_hooks(hooks)
        .down(&m, "0001_a")
        .await
        .unwrap();
    assert!(done.reverted.is_empty(), "{done:?}");
    assert!(
        !tables(&db).contains(&"cairn_migration_down".to_owned()),
        "the down committed although its second look found nothing to undo"
    );
    assert_eq!(
        m.read_state("mut").await.unwrap().stamp.as_deref(),
        Some("0001_a")
    );
}

/// Kills `needs_repair` → `true`. A repair of a store that needs none takes no lock: it
/// answers while another process holds the migration lock.
#[tokio::test]
async fn repair_of_a_healthy_store_takes_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let m = migrator(&db);
    Runner::new(app(2)).open(&m).await.unwrap();
    let held = m.lock(std::time::Duration::from_secs(5)).await.unwrap();
    for runner in [Runner::new(app(2)), Runner::new(app(3))] {
        let repaired = runner
            .with_lock_timeout(std::time::Duration::from_millis(100))
            .repair(&m)
            .await
            .expect("a store that needs no repair is not locked");
        assert!(!repaired.changed(), "{repaired:?}");
    }
    held.rollback().await.unwrap();
}

/// Kills `Runner::committed` → `()`. The `after_commit` hook (what the crash tests die in)
/// runs once after each COMMIT — an upgrade, a repair that wrote, a down — when the work is
/// already durable: another connection sees it from inside the hook. An open at head and a
/// repair with nothing to do commit nothing and never call it.
#[tokio::test]
async fn the_after_commit_hook_runs_once_per_commit_with_the_work_visible() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let hooks = {
        let (calls, seen, db) = (calls.clone(), seen.clone(), db.clone());
        RunnerHooks {
            after_commit: Some(Arc::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                seen.lock().unwrap().push(tables(&db));
            })),
            ..RunnerHooks::default()
        }
    };
    let m = migrator(&db);
    let set = app(3)
        .with_down("0003_c", vec!["DROP TABLE mut_c".into()], vec!["x".into()])
        .unwrap();

    let runner = |set: &MigrationSet| Runner::new(set.clone()).with_hooks(hooks.clone());

    // An upgrade commits: the hook sees its tables from another connection.
    let opened = runner(&set).open(&m).await.unwrap();
    assert!(matches!(opened, Opened::Upgraded { .. }), "{opened:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(seen.lock().unwrap()[0].contains(&"mut_c".to_owned()));

    // At head: no lock, no commit, no call. Nor for a repair with nothing to do.
    runner(&set).open(&m).await.unwrap();
    let repaired = runner(&set).repair(&m).await.unwrap();
    assert!(!repaired.changed(), "{repaired:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A down commits: the hook sees the table already gone.
    let done = runner(&app(2)).down(&m, "0002_b").await.unwrap();
    assert_eq!(done.reverted, ["0003_c"]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert!(!seen.lock().unwrap()[1].contains(&"mut_c".to_owned()));
    drop(m);

    // A repair that writes commits: the hook sees the lineage recorded.
    let (_dir2, db2) = store_without_lineage().await;
    let m2 = migrator(&db2);
    let lineage_seen = Arc::new(Mutex::new(None));
    let hooks = {
        let (calls, lineage_seen, db2) = (calls.clone(), lineage_seen.clone(), db2.clone());
        RunnerHooks {
            after_commit: Some(Arc::new(move || {
                calls.fetch_add(1, Ordering::SeqCst);
                let conn = rusqlite::Connection::open(&db2).unwrap();
                let n: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM cairn_migration_lineage WHERE set_name = 'mut'",
                        [],
                        |r| r.get(0),
                    )
                    .unwrap();
                *lineage_seen.lock().unwrap() = Some(n);
            })),
            ..RunnerHooks::default()
        }
    };
    let repaired = Runner::new(app(2))
        .with_hooks(hooks)
        .repair(&m2)
        .await
        .unwrap();
    assert!(repaired.lineage_recorded, "{repaired:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert!(lineage_seen.lock().unwrap().is_some_and(|n| n > 0));
}
