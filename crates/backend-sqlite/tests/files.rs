//! Store files (DESIGN §6): symlinks refused without creating anything, private modes, and
//! typed errors for a foreign or damaged file.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use cairn_core::{EpochStore, Error, Event, SpaceId};
use cairn_sqlite::SqliteStore;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
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
async fn symlinked_store_file_is_refused_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.db");
    let link = dir.path().join("store.db");
    symlink(&target, &link).unwrap();
    let err = SqliteStore::open(&link).await.unwrap_err();
    assert!(matches!(err, Error::UnsafePath { .. }), "{err}");
    assert!(!target.exists(), "the link's target was created");
    assert_eq!(entries(dir.path()), vec!["store.db".to_string()]);
}

#[tokio::test]
async fn symlinked_wal_or_shm_is_refused_and_nothing_is_created() {
    for suffix in ["-wal", "-shm"] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("store.db");
        let side = dir.path().join(format!("store.db{suffix}"));
        let target = dir.path().join("elsewhere");
        symlink(&target, &side).unwrap();
        let err = SqliteStore::open(&db).await.unwrap_err();
        assert!(matches!(err, Error::UnsafePath { .. }), "{suffix}: {err}");
        assert!(err.to_string().contains(suffix), "{err}");
        assert!(!db.exists(), "{suffix}: the store file was created");
        assert!(!target.exists(), "{suffix}: the link's target was created");
    }
}

#[tokio::test]
async fn existing_store_gets_refused_when_its_wal_becomes_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    drop(SqliteStore::open(&db).await.unwrap());
    let wal = dir.path().join("store.db-wal");
    let _ = std::fs::remove_file(&wal);
    symlink(dir.path().join("elsewhere"), &wal).unwrap();
    let err = SqliteStore::open(&db).await.unwrap_err();
    assert!(matches!(err, Error::UnsafePath { .. }), "{err}");
}

#[tokio::test]
async fn new_store_is_0600_in_a_0700_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a").join("b");
    let db = nested.join("store.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let space = SpaceId::new(b"s".to_vec()).unwrap();
    store
        .append(&space, vec![Event::new("k", b"p".to_vec())])
        .await
        .unwrap();
    assert_eq!(mode(&dir.path().join("a")), 0o700);
    assert_eq!(mode(&nested), 0o700);
    assert_eq!(mode(&db), 0o600);
    let wal = nested.join("store.db-wal");
    assert!(wal.exists(), "the store runs in WAL mode");
    assert_eq!(
        mode(&wal),
        0o600,
        "SQLite gives the WAL the database file's mode"
    );
}

#[tokio::test]
async fn text_file_at_the_path_is_a_corrupt_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&db, &text).unwrap();
    let err = SqliteStore::open(&db).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("cairn doctor"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&db).unwrap(),
        text,
        "the file was changed"
    );
}

#[tokio::test]
async fn damaged_database_file_is_a_corrupt_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    {
        let store = SqliteStore::open(&db).await.unwrap();
        let space = SpaceId::new(b"s".to_vec()).unwrap();
        store
            .append(&space, vec![Event::new("k", b"p".to_vec())])
            .await
            .unwrap();
    }
    // Checkpointed by the close above; now overwrite everything after the 100-byte header.
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 100);
    for b in &mut bytes[100..] {
        *b = 0xA5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let err = match SqliteStore::open(&db).await {
        Err(e) => e,
        Ok(store) => {
            let space = SpaceId::new(b"s".to_vec()).unwrap();
            store.heads(&space).await.unwrap_err()
        }
    };
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn foreign_sqlite_database_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE epoch (name TEXT); INSERT INTO epoch VALUES ('x');")
        .unwrap();
    let objects = |c: &rusqlite::Connection| -> Vec<String> {
        let mut s = c
            .prepare("SELECT name FROM sqlite_master ORDER BY name")
            .unwrap();
        let names = s.query_map([], |r| r.get(0)).unwrap();
        names.map(Result::unwrap).collect()
    };
    let before = objects(&conn);
    drop(conn);
    let bytes = std::fs::read(&db).unwrap();
    let err = SqliteStore::open(&db).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(!err.to_string().contains('\n'), "one-line message: {err}");
    assert_eq!(
        std::fs::read(&db).unwrap(),
        bytes,
        "the foreign database was changed"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(objects(&conn), before);
}

#[tokio::test]
async fn directory_at_the_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(matches!(err, Error::UnsafePath { .. }), "{err}");
}

#[tokio::test]
async fn unreadable_path_gives_a_typed_error() {
    // A path under a regular file can be neither created nor read, for any user (root
    // included, which ignores permission bits).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let err = SqliteStore::open(file.join("store.db")).await.unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}

// A store file replaced under a running store (issue 21, item 13): every write transaction
// first checks that the file at the path, and its `-wal` file, are the ones opened.

/// A store at `path` holding one epoch in space `name`, closed again.
async fn store_with_space(path: &Path, name: &str) {
    let store = SqliteStore::open(path).await.unwrap();
    let space = SpaceId::new(name).unwrap();
    store
        .append(&space, vec![Event::new("k", name)])
        .await
        .unwrap();
}

fn assert_replaced(r: Result<impl std::fmt::Debug, Error>, what: &str) {
    match r {
        Err(Error::StoreReplaced { path, detail }) => {
            assert!(path.ends_with("store.db"), "{what}: {path}");
            assert!(!detail.is_empty(), "{what}");
        }
        other => panic!("{what}: expected StoreReplaced, got {other:?}"),
    }
}

/// `mv other.db store.db` under an open store: appends (alone and grouped), lone-transaction
/// writes and the readiness check are refused with `StoreReplaced`, and the file now at the
/// path passes `PRAGMA quick_check` and holds only its own data (the open store's log was
/// checkpointed into the file it opened, not left for the newcomer to read).
#[tokio::test]
async fn a_store_file_replaced_under_an_open_store_refuses_writes_and_both_files_stay_intact() {
    use cairn_core::EpochDiagnostics;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let other = dir.path().join("other.db");
    store_with_space(&other, "other").await;
    let store = SqliteStore::open(&db).await.unwrap();
    let mine = SpaceId::new("mine").unwrap();
    for i in 0..20 {
        store
            .append(&mine, vec![Event::new("k", format!("{i}"))])
            .await
            .unwrap();
    }
    store.check_ready().await.unwrap();

    std::fs::rename(&other, &db).unwrap();

    assert_replaced(
        store.append(&mine, vec![Event::new("k", "late")]).await,
        "append",
    );
    let grouped: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let mine = mine.clone();
            tokio::spawn(async move {
                store
                    .append(&mine, vec![Event::new("k", format!("g{i}"))])
                    .await
            })
        })
        .collect();
    for g in grouped {
        assert_replaced(g.await.unwrap(), "grouped append");
    }
    assert_replaced(store.repair_heads(&mine).await, "repair");
    assert_replaced(store.check_ready().await, "readiness");

    // While the first store is still open, the file at the path reads as the other store,
    // whole, without a page of ours.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let reopened = SqliteStore::open(&db).await.unwrap();
    let spaces = reopened.list_spaces(None, 10).await.unwrap();
    assert_eq!(spaces, vec![SpaceId::new("other").unwrap()]);
    drop(store);
}

/// Removing the `-wal` file under an open store (which would lose every commit not yet
/// checkpointed) is caught the same way.
#[tokio::test]
async fn a_wal_file_removed_under_an_open_store_refuses_writes() {
    use cairn_core::EpochDiagnostics;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let s = SpaceId::new("s").unwrap();
    store.append(&s, vec![Event::new("k", "1")]).await.unwrap();
    std::fs::remove_file(dir.path().join("store.db-wal")).unwrap();
    assert_replaced(store.append(&s, vec![Event::new("k", "2")]).await, "append");
    assert_replaced(store.check_ready().await, "readiness");
}

/// Other instances opening, writing and closing the same file (another process's command, a
/// second store in this one) replace nothing: the first store keeps writing.
#[tokio::test]
async fn other_instances_opening_and_closing_the_file_are_not_a_replacement() {
    use cairn_core::EpochDiagnostics;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let store = SqliteStore::open(&db).await.unwrap();
    let s = SpaceId::new("s").unwrap();
    store.append(&s, vec![Event::new("k", "1")]).await.unwrap();
    for i in 0..3 {
        let second = SqliteStore::open(&db).await.unwrap();
        second
            .append(&s, vec![Event::new("k", format!("second {i}"))])
            .await
            .unwrap();
        drop(second);
        store
            .append(&s, vec![Event::new("k", format!("first {i}"))])
            .await
            .unwrap();
        store.check_ready().await.unwrap();
    }
}

/// `mv other.db store.db` under an open store that then writes nothing more: the store's
/// identity watcher finds the replacement by itself, checkpoints the store's log into the
/// file it opened and truncates the `-wal` at the path, so the next opener of the path reads
/// the replacement's own rows, not the old store's log laid over them.
#[tokio::test]
async fn a_store_file_replaced_with_no_write_after_leaves_no_log_for_the_newcomer() {
    use cairn_core::EpochDiagnostics;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let wal = dir.path().join("store.db-wal");
    let other = dir.path().join("other.db");
    store_with_space(&other, "other").await;
    let store = SqliteStore::open(&db).await.unwrap();
    let mine = SpaceId::new("mine").unwrap();
    for i in 0..30 {
        store
            .append(
                &mine,
                vec![Event::new("k", format!("{i}:{}", "x".repeat(3000)))],
            )
            .await
            .unwrap();
    }
    assert!(
        std::fs::metadata(&wal).unwrap().len() > 0,
        "the log holds the appends"
    );

    std::fs::rename(&other, &db).unwrap();

    // No write, no readiness probe: only the watcher can notice.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if wal_len == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the -wal at the path still holds {wal_len} bytes of the old store's log"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let epochs: i64 = conn
        .query_row("SELECT count(*) FROM epoch", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        epochs, 1,
        "the file at the path holds the replacement's one epoch"
    );
    drop(conn);
    assert_replaced(store.check_ready().await, "readiness");
    drop(store);
    let reopened = SqliteStore::open(&db).await.unwrap();
    let spaces = reopened.list_spaces(None, 10).await.unwrap();
    assert_eq!(spaces, vec![SpaceId::new("other").unwrap()]);
}
