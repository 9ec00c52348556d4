//! The SQLite side of the migration protocol beyond the shared M cases: a revision cannot end
//! the upgrade transaction, and the look without the lock writes nothing.

use std::path::Path;

use cairn_core::Error;
use cairn_migrate::{
    cairn_revisions, MigrateError, MigrationBackend, MigrationSet, Revision, Runner,
};
use cairn_sqlite::{SqliteMigrator, SqliteOptions, SqliteStore};

fn tables(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut s = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .unwrap();
    let names = s.query_map([], |r| r.get(0)).unwrap();
    names.map(Result::unwrap).collect()
}

#[tokio::test]
async fn a_revision_that_commits_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let before = tables(&db);
    let m = SqliteMigrator::new(&db, SqliteOptions::default());
    let at_head = m.read_state("cairn").await.unwrap();

    for control in ["COMMIT", "END", "ROLLBACK", "BEGIN"] {
        let mut revs = cairn_revisions();
        revs.push(Revision {
            id: "9999_commits".into(),
            parent: Some(revs.last().unwrap().id.clone()),
            up_sqlite: vec![
                "CREATE TABLE half_one (x INTEGER)".into(),
                control.into(),
                "CREATE TABLE half_two (x INTEGER)".into(),
            ],
            up_postgres: Vec::new(),
            description: "ends the runner's transaction".into(),
        });
        let runner = Runner::new(MigrationSet::new("cairn", revs).unwrap());
        let err = runner.open(&m).await.unwrap_err();
        let MigrateError::RevisionFailed { revision, source } = &err else {
            panic!("{control}: expected RevisionFailed, got {err}");
        };
        assert_eq!(revision, "9999_commits");
        assert!(
            matches!(source, Error::InvalidInput { .. }),
            "{control}: {source}"
        );
        assert_eq!(
            tables(&db),
            before,
            "{control}: the upgrade left tables behind"
        );
        assert_eq!(m.read_state("cairn").await.unwrap(), at_head, "{control}");
    }
}

#[tokio::test]
async fn looking_at_the_state_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();

    // A missing store stays missing.
    let missing = dir.path().join("nothing").join("store.db");
    let state = SqliteMigrator::new(&missing, SqliteOptions::default())
        .read_state("cairn")
        .await
        .unwrap();
    assert_eq!(state, Default::default());
    assert!(!dir.path().join("nothing").exists());

    // An application's file in rollback-journal mode keeps its bytes and its journal mode,
    // whether it is refused (default) or read (shared).
    let app = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&app).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode = DELETE; CREATE TABLE customers (id INTEGER PRIMARY KEY);",
    )
    .unwrap();
    drop(conn);
    let bytes = std::fs::read(&app).unwrap();
    let err = SqliteMigrator::new(&app, SqliteOptions::default())
        .read_state("cairn")
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("share_file_with_application"),
        "{err}"
    );
    let shared = SqliteOptions::default().share_file_with_application(true);
    let state = SqliteMigrator::new(&app, shared)
        .read_state("cairn")
        .await
        .unwrap();
    assert_eq!(state, Default::default());
    assert_eq!(std::fs::read(&app).unwrap(), bytes, "the file was written");
    let mode: String = rusqlite::Connection::open(&app)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

/// Single-engine sets (issue 25): the fixtures of `crates/migrate/tests/fixtures`.
const SQLITE_ONLY: &[(&str, &str)] =
    cairn_migrate::embed_migrations!("../migrate/tests/fixtures/sqlite_only");
const POSTGRES_ONLY: &[(&str, &str)] =
    cairn_migrate::embed_migrations!("../migrate/tests/fixtures/postgres_only");

fn single_engine_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../migrate/tests/fixtures")
        .join(name)
}

/// A SQLite-only set (no `.postgres.sql` file) opens a SQLite store, embedded or read from
/// its directory; a Postgres-only one is refused in one line naming the missing dialect, and
/// the store keeps no trace of it.
#[tokio::test]
async fn a_single_engine_set_opens_on_its_engine_only() {
    let dir = tempfile::tempdir().unwrap();
    let sets = [
        MigrationSet::from_embedded("solo", SQLITE_ONLY).unwrap(),
        MigrationSet::from_dir("solo", single_engine_fixture("sqlite_only")).unwrap(),
    ];
    for (i, set) in sets.into_iter().enumerate() {
        let db = dir.path().join(format!("solo{i}.db"));
        drop(SqliteStore::open(&db).await.unwrap());
        let m = SqliteMigrator::new(&db, SqliteOptions::default());
        let opened = Runner::new(set).open(&m).await.unwrap();
        assert!(
            matches!(&opened, cairn_migrate::Opened::Upgraded { applied, .. } if applied.len() == 2),
            "{opened:?}"
        );
        assert!(tables(&db).contains(&"solo_note_tags".to_owned()));
        assert_eq!(
            m.read_state("solo").await.unwrap().stamp.as_deref(),
            Some("0002_note_tags")
        );
    }
    let db = dir.path().join("refused.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let before = tables(&db);
    let m = SqliteMigrator::new(&db, SqliteOptions::default());
    for set in [
        MigrationSet::from_embedded("solo", POSTGRES_ONLY).unwrap(),
        MigrationSet::from_dir("solo", single_engine_fixture("postgres_only")).unwrap(),
    ] {
        let e = Runner::new(set).open(&m).await.unwrap_err();
        assert!(
            matches!(&e, MigrateError::UnsupportedDialect { .. }),
            "{e:?}"
        );
        let line = e.to_string();
        assert!(
            line.contains("Postgres-only")
                && line.contains("no SQLite SQL")
                && line.contains("0002_note_tags.sqlite.sql"),
            "{line}"
        );
    }
    assert_eq!(tables(&db), before);
    assert_eq!(m.read_state("solo").await.unwrap(), Default::default());
}
