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
