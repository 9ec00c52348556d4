//! Opening options ([`SqliteOptions`]): create-if-missing, sharing a file with an application,
//! the read connections, and what the migration runner reports.

use std::path::Path;
use std::time::Duration;

use cairn_core::{EpochStore, Error, Event, SpaceId};
use cairn_migrate::Opened;
use cairn_sqlite::{SqliteOptions, SqliteStore};

fn space() -> SpaceId {
    SpaceId::new(b"options".to_vec()).unwrap()
}

fn ev(tag: &str) -> Vec<Event> {
    vec![Event::new("test.event", tag.as_bytes().to_vec())]
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn create_if_missing_off_refuses_a_missing_store_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub").join("store.db");
    let opts = SqliteOptions::default().create_if_missing(false);
    let err = SqliteStore::open_with(&db, opts.clone()).await.unwrap_err();
    let Error::NotFound { what } = &err else {
        panic!("expected NotFound, got {err}");
    };
    assert_eq!(what, &format!("cairn store at {}", db.display()));
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

    // Once the store exists, the same options open it.
    drop(SqliteStore::open(&db).await.unwrap());
    let store = SqliteStore::open_with(&db, opts).await.unwrap();
    assert_eq!(store.opened(), &Opened::AtHead);
}

#[tokio::test]
async fn a_file_of_application_tables_is_refused_by_default_naming_the_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);")
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(&db).unwrap();

    let err = SqliteStore::open(&db).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains("share_file_with_application"),
        "{err}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the file was changed");
}

#[tokio::test]
async fn sharing_a_file_puts_cairns_tables_beside_the_applications() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);
         INSERT INTO customers (name) VALUES ('ada');",
    )
    .unwrap();
    drop(conn);

    let opts = SqliteOptions::default().share_file_with_application(true);
    let store = SqliteStore::open_with(&db, opts).await.unwrap();
    assert!(
        matches!(store.opened(), Opened::Upgraded { from: None, .. }),
        "{:?}",
        store.opened()
    );
    let appended = store.append(&space(), ev("a")).await.unwrap();
    assert_eq!(store.heads(&space()).await.unwrap()[0].id, appended.id);
    drop(store);

    let conn = rusqlite::Connection::open(&db).unwrap();
    let name: String = conn
        .query_row("SELECT name FROM customers", [], |r| r.get(0))
        .unwrap();
    assert_eq!(name, "ada");
    // With cairn's stamp in place, the file is cairn's to open without the opt-in too.
    drop(conn);
    let store = SqliteStore::open(&db).await.unwrap();
    assert_eq!(store.opened(), &Opened::AtHead);
}

#[tokio::test]
async fn zero_read_connections_is_invalid_input_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let err = SqliteStore::open_with(&db, SqliteOptions::default().read_connections(0))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    assert!(entries(dir.path()).is_empty());
}

#[tokio::test]
async fn opened_says_what_the_runner_did() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let first = SqliteStore::open(&db).await.unwrap();
    let Opened::Upgraded { from, applied } = first.opened() else {
        panic!("a new store is upgraded from nothing: {:?}", first.opened());
    };
    assert_eq!(from, &None);
    assert_eq!(applied.len(), cairn_migrate::cairn_set().revisions().len());
    let second = SqliteStore::open(&db).await.unwrap();
    assert_eq!(second.opened(), &Opened::AtHead);
}

/// Long enough for any loaded machine to finish one read; reaching it means the read was stuck.
const DEADLINE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_proceed_while_another_read_connection_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = SqliteStore::open_with(&db, SqliteOptions::default().read_connections(2))
        .await
        .unwrap();
    let appended = store.append(&space(), ev("a")).await.unwrap();

    let hold = store.testkit_hold_read(&space()).await.unwrap();
    let heads = tokio::time::timeout(DEADLINE, store.heads(&space()))
        .await
        .expect("heads waited behind the held read connection")
        .unwrap();
    assert_eq!(heads[0].id, appended.id);
    let page = tokio::time::timeout(DEADLINE, store.events_since(&space(), None, 10))
        .await
        .expect("the feed waited behind the held read connection")
        .unwrap();
    assert_eq!(page.events.len(), 1);
    // A write commits meanwhile too (WAL): the held snapshot does not block the writer.
    tokio::time::timeout(DEADLINE, store.append(&space(), ev("b")))
        .await
        .expect("the append waited behind the held read transaction")
        .unwrap();
    drop(hold);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_read_connection_a_read_resumes_when_the_held_one_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = SqliteStore::open_with(&db, SqliteOptions::default().read_connections(1))
        .await
        .unwrap();
    store.append(&space(), ev("a")).await.unwrap();

    let hold = store.testkit_hold_read(&space()).await.unwrap();
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.heads(&space()).await }
    });
    // The only read connection is held, so the read cannot have finished: this is the
    // mechanism the test above relies on, not a timing.
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    drop(hold);
    let heads = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the read did not resume once the connection was free")
        .unwrap()
        .unwrap();
    assert_eq!(heads.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_for_the_in_process_writer_past_the_busy_timeout_is_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let opts = SqliteOptions::default().busy_timeout(Duration::from_millis(100));
    let store = SqliteStore::open_with(&db, opts).await.unwrap();

    let hold = store.testkit_hold_writer().await.unwrap();
    let err = tokio::time::timeout(DEADLINE, store.append(&space(), ev("a")))
        .await
        .expect("the append waited for the writer past its busy timeout")
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
    drop(hold);

    // Once the guard is free, the same append succeeds: nothing was left half-done.
    let appended = tokio::time::timeout(DEADLINE, store.append(&space(), ev("a")))
        .await
        .expect("the append waited for a released writer")
        .unwrap();
    assert_eq!(store.heads(&space()).await.unwrap(), vec![appended.head()]);
}
