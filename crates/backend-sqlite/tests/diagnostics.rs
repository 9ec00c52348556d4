//! `SqliteDiagnostics`: the integrity of a healthy, missing and damaged store file, each
//! checked without writing or creating anything. (The scratch leftovers are tested next to the
//! engine's rule, in the crate's `diagnostics` unit tests; a store on a read-only file system
//! in the server's `doctor` tests, which need a mount namespace.)

use cairn_core::{EpochStore, Event, SpaceId};
use cairn_migrate::{Backend, Diagnostics, Integrity, OpenOptions};
use cairn_sqlite::{SqliteBackend, SqliteDiagnostics, SqliteOptions, SqliteStore};

/// A store with an append in it is intact, while it is open and after.
#[tokio::test]
async fn a_healthy_store_passes_quick_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    store
        .append(&SpaceId::new("a").unwrap(), vec![Event::new("k", "p")])
        .await
        .unwrap();
    let diagnostics = SqliteDiagnostics::new(&path);
    assert_eq!(diagnostics.engine(), "sqlite");
    let intact = Integrity::Intact {
        detail: "quick_check: ok".into(),
    };
    assert_eq!(diagnostics.integrity().await, intact, "while open");
    drop(store);
    assert_eq!(diagnostics.integrity().await, intact, "after");
}

/// No file is no store: missing, and the check creates none.
#[tokio::test]
async fn a_missing_store_is_missing_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.db");
    assert_eq!(
        SqliteDiagnostics::new(&path).integrity().await,
        Integrity::Missing
    );
    assert!(!path.exists(), "the check created the file");
}

/// A file that is no SQLite database is damaged, named as unreadable, and left as it was.
#[tokio::test]
async fn a_file_that_is_no_database_is_damaged_and_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let found = SqliteDiagnostics::new(&path).integrity().await;
    let Integrity::Damaged { detail } = found else {
        panic!("not damaged: {found:?}")
    };
    assert!(
        detail.starts_with("not a readable SQLite database ("),
        "{detail}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![0x5a; 8192]);
}

/// A database whose pages were overwritten is damaged: `quick_check` finds problems, or SQLite
/// refuses the file outright.
#[tokio::test]
async fn a_store_with_overwritten_pages_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let space = SpaceId::new("a").unwrap();
    for i in 0..50 {
        store
            .append(&space, vec![Event::new("k", vec![b'x'; 200 + i])])
            .await
            .unwrap();
    }
    drop(store);
    // Whatever the log still holds is not read: only the main file's pages count.
    for log in ["s.db-wal", "s.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(log));
    }
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert!(bytes.len() > 4 * page, "the store spans several pages");
    // Keep the header page; garble the b-tree pages after it.
    for b in &mut bytes[page..] {
        *b = 0xa5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let found = SqliteDiagnostics::new(&path).integrity().await;
    let Integrity::Damaged { detail } = found else {
        panic!("not damaged: {found:?}")
    };
    assert!(
        detail.starts_with("quick_check found ")
            || detail.starts_with("not a readable SQLite database ("),
        "{detail}"
    );
}

/// An open store's handle checks the store's own file.
#[tokio::test]
async fn an_open_stores_diagnostics_check_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let backend = SqliteBackend::open(
        dir.path().join("s.db"),
        SqliteOptions::default(),
        OpenOptions::default().register_in_fleet(false),
    )
    .await
    .unwrap();
    let diagnostics = backend.diagnostics();
    assert_eq!(diagnostics.engine(), "sqlite");
    assert_eq!(
        diagnostics.integrity().await,
        Integrity::Intact {
            detail: "quick_check: ok".into()
        }
    );
    backend.close().await.unwrap();
}
