//! A backend built by hand — a wrapper around the SQLite handle with its own engine name, as a
//! third party would write one — handed to `Store::from_backend` works end to end: the epoch
//! log and the spool through the store, the open's migrations and fleet entry, close.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use cairn::spool::{ConsumerBuilder, Job, Outcome};
use cairn::{ConsumerId, DedupKey, Event, QueueName, RunState, SpaceId, Store};
use cairn_migrate::backend::{Backend, BackendParts, Diagnostics, OpenOptions};
use cairn_sqlite::{SqliteBackend, SqliteOptions};

/// A delegating backend: every capability is the SQLite handle's; it counts its closes.
struct Wrapped {
    inner: SqliteBackend,
    closes: Arc<AtomicUsize>,
}

#[async_trait]
impl Backend for Wrapped {
    // The inner handle's parts give epochs, spool, migrator and session; the name is its own.
    fn parts(&self) -> &BackendParts {
        self.inner.parts()
    }
    fn engine(&self) -> &str {
        "wrapped-sqlite"
    }
    fn diagnostics(&self) -> Arc<dyn Diagnostics> {
        self.inner.diagnostics()
    }
    async fn begin(&self) -> cairn::Result<Box<dyn cairn::backend::Transaction>> {
        self.inner.begin().await
    }
    async fn close(&self) -> cairn::Result<()> {
        self.closes.fetch_add(1, Ordering::SeqCst);
        self.inner.close().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_built_backend_runs_under_the_facade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let notes = cairn::MigrationSet::from_files(
        "notes",
        [(
            "0001_notes.sql",
            "CREATE TABLE notes (id INTEGER PRIMARY KEY)",
        )],
    )
    .unwrap();
    let closes = Arc::new(AtomicUsize::new(0));
    let inner = SqliteBackend::open(
        &path,
        SqliteOptions::default(),
        OpenOptions::default()
            .migrations(notes)
            .build_id("wrapped-1.0"),
    )
    .await
    .unwrap();
    let store = Store::from_backend(Arc::new(Wrapped {
        inner,
        closes: closes.clone(),
    }));
    assert_eq!(store.engine(), "wrapped-sqlite");
    assert_eq!(store.scheme(), None, "not a built-in engine");
    assert_eq!(store.migrations().len(), 2);
    assert_eq!(store.migrations()[1].set, "notes");
    assert!(matches!(
        store.migrations()[1].outcome,
        cairn::Opened::Upgraded { .. }
    ));

    // The epoch log, through the facade's handle.
    let space = SpaceId::new("docs").unwrap();
    let appended = store
        .epochs()
        .append(&space, vec![Event::new("doc.edit", "hello")])
        .await
        .unwrap();
    assert_eq!(
        store.epochs().heads(&space).await.unwrap()[0].id,
        appended.id
    );
    assert_eq!(
        store
            .diagnostics()
            .computed_heads(&space)
            .await
            .unwrap()
            .len(),
        1
    );

    // The spool: a consumer works a run off.
    let queue = QueueName::new("gate").unwrap();
    let key = DedupKey::from_parts(["gate", "1"]).unwrap();
    let run = store
        .spool()
        .enqueue(&queue, &key, b"{}".to_vec(), Default::default())
        .await
        .unwrap();
    store.spool().close_run(run.run_id).await.unwrap();
    let worker = ConsumerBuilder::new(store.spool(), queue, ConsumerId::new("w").unwrap())
        .spawn(|_job: Job| async { Outcome::Done })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store
        .spool()
        .run(run.run_id)
        .await
        .unwrap()
        .map(|r| r.state)
        != Some(RunState::Succeeded)
    {
        assert!(Instant::now() < deadline, "the consumer finishes the run");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    worker.shutdown().await;

    // The fleet: the wrapped open registered, and the store lists it.
    let entry = store.fleet_entry().expect("registered").clone();
    assert_eq!(entry.build, "wrapped-1.0");
    assert_eq!(store.fleet().await.unwrap(), vec![entry]);

    // Close goes to the hand-built backend, which deregisters through the session.
    store.clone().close().await.unwrap();
    assert_eq!(closes.load(Ordering::SeqCst), 1);
    let reader = Store::builder(format!("sqlite://{}", path.display()))
        .register_in_fleet(false)
        .open()
        .await
        .unwrap();
    assert!(
        reader.fleet().await.unwrap().is_empty(),
        "close removed the entry"
    );
    reader.close().await.unwrap();
}
