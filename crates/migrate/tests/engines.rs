//! Single-engine sets (issue 25): a set without Postgres files is SQLite-only and the other way
//! round, whether embedded with `embed_migrations!` or read with `MigrationSet::from_dir`; a
//! store of the other engine is refused by the runner before anything is read, naming the
//! missing dialect. (The backends' own tests open real stores with these fixtures.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use cairn_core::schema::Dialect;
use cairn_core::spool::Timestamp;
use cairn_migrate::{
    embed_migrations, FleetEntry, LockedMigration, MigrateError, MigrationBackend, MigrationSet,
    Runner, StoredState,
};

const SQLITE_ONLY: &[(&str, &str)] = embed_migrations!("tests/fixtures/sqlite_only");
const POSTGRES_ONLY: &[(&str, &str)] = embed_migrations!("tests/fixtures/postgres_only");

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn embedded_and_read_sets_agree_on_their_engine() {
    for (files, dir, only) in [
        (SQLITE_ONLY, "sqlite_only", Dialect::Sqlite),
        (POSTGRES_ONLY, "postgres_only", Dialect::Postgres),
    ] {
        let embedded = MigrationSet::from_embedded("solo", files).unwrap();
        let read = MigrationSet::from_dir("solo", fixture(dir)).unwrap();
        assert_eq!(embedded, read, "{dir}");
        assert_eq!(embedded.only(), Some(only), "{dir}");
        assert_eq!(embedded.head().id, "0002_note_tags");
        assert!(!embedded.head().up(only).is_empty(), "{dir}");
    }
    let sqlite = MigrationSet::from_embedded("solo", SQLITE_ONLY).unwrap();
    assert_eq!(
        sqlite.down("0002_note_tags", Dialect::Sqlite).unwrap(),
        ["DROP TABLE solo_note_tags"]
    );
}

/// A migration backend that counts every call: the refusal must come before any of them.
struct Untouched {
    dialect: Dialect,
    calls: AtomicUsize,
}

impl Untouched {
    fn new(dialect: Dialect) -> Self {
        Self {
            dialect,
            calls: AtomicUsize::new(0),
        }
    }

    fn touched(&self) -> MigrateError {
        self.calls.fetch_add(1, Ordering::SeqCst);
        MigrateError::Store(cairn_core::Error::backend("test", "the store was touched"))
    }
}

#[async_trait]
impl MigrationBackend for Untouched {
    fn dialect(&self) -> Dialect {
        self.dialect
    }
    async fn read_state(&self, _: &str) -> Result<StoredState, MigrateError> {
        Err(self.touched())
    }
    async fn lock(&self, _: Duration) -> Result<Box<dyn LockedMigration>, MigrateError> {
        Err(self.touched())
    }
    async fn register(&self, _: &FleetEntry, _: Timestamp) -> Result<(), MigrateError> {
        Err(self.touched())
    }
    async fn heartbeat(&self, _: &str, _: Timestamp) -> Result<(), MigrateError> {
        Err(self.touched())
    }
    async fn deregister(&self, _: &str) -> Result<(), MigrateError> {
        Err(self.touched())
    }
    async fn read_fleet(&self) -> Result<Vec<FleetEntry>, MigrateError> {
        Err(self.touched())
    }
    async fn read_contracts(&self, _: &str) -> Result<Vec<String>, MigrateError> {
        Err(self.touched())
    }
}

#[tokio::test]
async fn the_runner_refuses_the_other_engine_before_touching_the_store() {
    for (files, store, missing) in [
        (SQLITE_ONLY, Dialect::Postgres, "Postgres"),
        (POSTGRES_ONLY, Dialect::Sqlite, "SQLite"),
    ] {
        let runner = Runner::new(MigrationSet::from_embedded("solo", files).unwrap());
        let backend = Untouched::new(store);
        let open = runner.open(&backend).await.unwrap_err();
        let status = runner.status(&backend).await.unwrap_err();
        let repair = runner.repair(&backend).await.unwrap_err();
        assert_eq!(backend.calls.load(Ordering::SeqCst), 0, "{missing}");
        for e in [&open, &status, &repair] {
            assert!(
                matches!(e, MigrateError::UnsupportedDialect { dialect, revision: Some(r), .. } if *dialect == store && r == "0002_note_tags"),
                "{e:?}"
            );
            assert!(e.to_string().contains(&format!("no {missing} SQL")), "{e}");
        }
        // As a store error (what a backend's open returns): incompatible, same line.
        let as_store: cairn_core::Error = open.into();
        assert!(
            matches!(&as_store, cairn_core::Error::Incompatible { detail, .. } if detail.contains(missing)),
            "{as_store:?}"
        );
    }
}
