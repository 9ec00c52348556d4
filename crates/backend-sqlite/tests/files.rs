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
