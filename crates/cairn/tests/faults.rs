//! Faults below the API (issue 14), through the facade as a service uses it.
//!
//! SQLite: a genuinely full file system (a small tmpfs filled with a ballast file) and a
//! read-only store file (the immutable attribute, which binds root too) under appends, imports,
//! enqueues, acks, event appends, facts, a retention pass and a migration upgrade: every write
//! returns a store error, nothing changes, and once space or write access returns the same
//! store instance works and the store is consistent (seqs, head cache, run states).
//!
//! Postgres: see the `postgres` module below.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cairn::spool::{RetentionBudget, RetentionPolicy, RunFilter, SpoolStats, MAX_BATCH};
use cairn::{
    ConsumerId, DedupKey, EnqueueOptions, Error, Event, ForeignEpoch, Head, LeaseToken,
    MigrationSet, Opened, QueueName, RunEventId, RunId, RunInfo, RunState, Seq, SpaceId, Store,
};

/// The test application's set, `revisions` long. Revision 2 writes ~600 KiB of rows, so its
/// upgrade needs new pages.
fn app(revisions: usize) -> MigrationSet {
    let files = [
        (
            "0001_notes.sql",
            "CREATE TABLE fault_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
        ),
        (
            "0002_fill.sql",
            "CREATE TABLE fault_fill (id INTEGER PRIMARY KEY, pad TEXT NOT NULL);\n\
             INSERT INTO fault_fill (id, pad) WITH RECURSIVE c(i) AS \
             (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) \
             SELECT i, printf('%0200d', i) FROM c;",
        ),
    ];
    MigrationSet::from_files("faults", files.into_iter().take(revisions)).unwrap()
}

fn space() -> SpaceId {
    SpaceId::new("faults").unwrap()
}

fn queue() -> QueueName {
    QueueName::new("faults").unwrap()
}

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts(["faults", k]).unwrap()
}

/// A write under an injected fault must fail with a store error: never `Ok`, never a
/// validation verdict, never a panic.
fn assert_store_error<T: std::fmt::Debug>(r: cairn::Result<T>, what: &str) {
    match r {
        Err(
            Error::Backend { .. }
            | Error::Io { .. }
            | Error::Unavailable { .. }
            | Error::Migration { .. },
        ) => {}
        other => panic!("{what} under the fault must fail with a store error, got {other:?}"),
    }
}

/// Everything the writes under test could change, read through the store's own API.
#[derive(Debug, PartialEq)]
struct Observed {
    heads: Vec<Head>,
    cached: Vec<Head>,
    next: Seq,
    runs: Vec<RunInfo>,
    stats: SpoolStats,
}

async fn observe(store: &Store) -> Observed {
    let diag = store.diagnostics();
    let mut runs = Vec::new();
    let mut filter = RunFilter::default();
    loop {
        let page = store.spool().runs(&filter, MAX_BATCH).await.unwrap();
        let Some(last) = page.last().map(|r| r.run_id) else {
            break;
        };
        runs.extend(page);
        filter.after = Some(last);
    }
    Observed {
        heads: store.epochs().heads(&space()).await.unwrap(),
        cached: diag.cached_heads(&space()).await.unwrap(),
        next: diag.next_seq(&space()).await.unwrap(),
        runs,
        stats: store.spool().stats().await.unwrap(),
    }
}

/// The invariants a store must keep whatever happened: the cache equals the anti-join and is
/// current; every run is listed in exactly one state and `stats` agrees.
async fn assert_consistent(store: &Store, ctx: &str) {
    let diag = store.diagnostics();
    let computed = diag.computed_heads(&space()).await.unwrap();
    assert_eq!(
        diag.cached_heads(&space()).await.unwrap(),
        computed,
        "{ctx}: cache ≠ anti-join"
    );
    assert_eq!(store.epochs().heads(&space()).await.unwrap(), computed);
    let max = computed.iter().map(|h| h.seq.0).max().unwrap();
    assert_eq!(
        diag.next_seq(&space()).await.unwrap().0,
        max + 1,
        "{ctx}: the cache is not current"
    );
    let stats = store.spool().stats().await.unwrap();
    let mut total = 0;
    for state in RunState::ALL {
        let filter = RunFilter {
            state: Some(state),
            ..RunFilter::default()
        };
        let listed = store.spool().runs(&filter, MAX_BATCH).await.unwrap();
        assert!(listed.iter().all(|r| r.state == state), "{ctx}");
        assert_eq!(
            stats.runs.get(&state).copied().unwrap_or(0),
            listed.len() as u64,
            "{ctx}: stats disagree with the {state:?} listing"
        );
        total += listed.len();
    }
    let all = store
        .spool()
        .runs(&RunFilter::default(), MAX_BATCH)
        .await
        .unwrap();
    assert_eq!(all.len(), total, "{ctx}: a run is in no state or in two");
}

/// What the seeded store holds before the fault: three epochs, two runs (one claimed), and
/// 8 KiB of run events for the retention pass to remove.
struct Seeded {
    store: Store,
    first_epoch: cairn::EpochId,
    claimed: RunId,
    token: LeaseToken,
    other: RunId,
}

async fn seed(url: &str) -> Seeded {
    let store = Store::builder(url).migrations(app(1)).open().await.unwrap();
    let first_epoch = store
        .epochs()
        .append(&space(), vec![Event::new("seed", "0")])
        .await
        .unwrap()
        .id;
    for i in 1..3 {
        store
            .epochs()
            .append(&space(), vec![Event::new("seed", format!("{i}"))])
            .await
            .unwrap();
    }
    let spool = store.spool();
    let claimed = spool
        .enqueue(&queue(), &key("a"), vec![1; 16], EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let other = spool
        .enqueue(&queue(), &key("b"), vec![2; 16], EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let lease = spool
        .claim(
            &queue(),
            &ConsumerId::new("faults").unwrap(),
            Duration::from_secs(300),
            1,
        )
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.run_id, claimed);
    for i in 0..4 {
        let id = RunEventId::new(format!("seed-{i}").into_bytes()).unwrap();
        spool.append_event(other, &id, vec![3; 2048]).await.unwrap();
    }
    Seeded {
        store,
        first_epoch,
        claimed,
        token: lease.token,
        other,
    }
}

/// Attempts every kind of write; each must fail with a store error.
async fn attempt_every_write(s: &Seeded, url: &str, fault: &str) {
    let spool = s.store.spool();
    let big = || vec![0x5a_u8; 256 * 1024];
    assert_store_error(
        s.store
            .epochs()
            .append(&space(), vec![Event::new("big", big())])
            .await,
        &format!("an append on a {fault}"),
    );
    let event = Event::new("import", big());
    let id = cairn::epoch_id(&space(), &[s.first_epoch], &[event.id()]);
    assert_store_error(
        s.store
            .epochs()
            .import(ForeignEpoch {
                space: space(),
                id,
                parents: vec![s.first_epoch],
                events: vec![event],
            })
            .await,
        &format!("an import on a {fault}"),
    );
    assert_store_error(
        spool
            .enqueue(&queue(), &key("c"), big(), EnqueueOptions::default())
            .await,
        &format!("an enqueue on a {fault}"),
    );
    assert_store_error(
        spool.ack(s.claimed, s.token).await,
        &format!("an ack on a {fault}"),
    );
    assert_store_error(
        spool
            .append_event(
                s.other,
                &RunEventId::new(b"big".to_vec()).unwrap(),
                vec![4; 512 * 1024],
            )
            .await,
        &format!("an event append on a {fault}"),
    );
    assert_store_error(
        spool
            .set_fact(
                s.other,
                &cairn::spool::FactName::new("verdict").unwrap(),
                vec![5; 4096],
            )
            .await,
        &format!("a fact on a {fault}"),
    );
    assert_store_error(
        spool
            .retention_pass(&tight_retention(), &RetentionBudget::default())
            .await,
        &format!("a retention pass that must delete on a {fault}"),
    );
    assert_store_error(
        Store::builder(url).migrations(app(2)).open().await,
        &format!("a migration upgrade on a {fault}"),
    );
}

/// A policy that must delete every seeded run event.
fn tight_retention() -> RetentionPolicy {
    RetentionPolicy {
        max_bytes: 0,
        ..RetentionPolicy::default()
    }
}

/// After the fault is gone: the same store instance takes every write, the upgrade runs, and
/// the store is consistent and holds exactly what succeeded.
async fn writes_succeed_after(s: &Seeded, url: &str, before: &Observed) {
    let spool = s.store.spool();
    let appended = s
        .store
        .epochs()
        .append(&space(), vec![Event::new("after", "x")])
        .await
        .unwrap();
    assert_eq!(
        appended.seq, before.next,
        "the failed writes used no seq (the failed import neither)"
    );
    assert_eq!(
        appended.parents,
        before.heads.iter().map(|h| h.id).collect::<Vec<_>>(),
        "the failed import left no fork"
    );
    let c = spool
        .enqueue(&queue(), &key("c"), vec![6; 8], EnqueueOptions::default())
        .await
        .unwrap();
    assert!(c.created, "the failed enqueue left no run behind");
    spool.ack(s.claimed, s.token).await.unwrap();
    let report = spool
        .retention_pass(&tight_retention(), &RetentionBudget::default())
        .await
        .unwrap();
    assert!(report.complete);
    assert_eq!(report.events_over_cap, 4, "only the seeded events existed");
    let info = spool.run(s.other).await.unwrap().unwrap();
    assert!(info.facts.is_empty(), "the failed fact was not stored");
    assert_eq!(
        spool.run(s.claimed).await.unwrap().unwrap().state,
        RunState::Succeeded
    );
    let upgraded = Store::builder(url).migrations(app(2)).open().await.unwrap();
    assert!(
        matches!(upgraded.migrations()[1].outcome, Opened::Upgraded { .. }),
        "the failed upgrade left the set at revision 1: {:?}",
        upgraded.migrations()
    );
    assert_consistent(&s.store, "after the fault").await;
    assert_consistent(&upgraded, "reopened after the fault").await;
}

/// A small tmpfs mounted for the test (needs root or CAP_SYS_ADMIN; the test fails without),
/// unmounted when dropped.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status();
        match status {
            Ok(s) if s.success() => Self { dir },
            other => panic!(
                "the full-disk test mounts a {size} tmpfs and needs root or CAP_SYS_ADMIN for \
                 it (`mount -t tmpfs` failed: {other:?})"
            ),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a ballast file until the file system is full; returns its path.
    fn fill(&self) -> PathBuf {
        let path = self.path().join("ballast");
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        for chunk in [64 * 1024, 4096, 512, 1] {
            let buf = vec![0xee_u8; chunk];
            while f.write_all(&buf).and_then(|()| f.sync_data()).is_ok() {}
        }
        path
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        // Lazy: a connection still open (e.g. after a failed assertion) must not keep it.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Empties the WAL into the database file and truncates it, so that every later write needs
/// new blocks (a WAL with room left would absorb small writes even on a full disk).
fn truncate_wal(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy, 0, "the checkpoint was blocked by a reader");
}

/// Full disk (a filled tmpfs): every write fails with a store error and changes nothing; once
/// space returns, the same store instance takes every write, the upgrade runs, and the store
/// is consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_full_disk_fails_every_write_then_recovers() {
    let fs = TinyFs::mount("8m");
    let db = fs.path().join("store.db");
    let url = format!("sqlite://{}", db.display());
    let s = seed(&url).await;
    let before = observe(&s.store).await;
    truncate_wal(&db);
    let ballast = fs.fill();

    attempt_every_write(&s, &url, "full disk").await;
    assert_eq!(
        observe(&s.store).await,
        before,
        "a failed write changed the store"
    );

    std::fs::remove_file(ballast).unwrap();
    writes_succeed_after(&s, &url, &before).await;
}

/// Makes files immutable (`chattr +i`), which refuses writes even to root and through
/// descriptors already open; undone when dropped.
struct Immutable(Vec<PathBuf>);

impl Immutable {
    fn set(files: &[PathBuf]) -> Self {
        let mut guard = Self(Vec::new());
        for f in files {
            let status = Command::new("chattr").arg("+i").arg(f).status();
            assert!(
                matches!(status, Ok(s) if s.success()),
                "the read-only test needs `chattr +i` (root on ext4 or similar) on {}: {status:?}",
                f.display()
            );
            guard.0.push(f.clone());
        }
        guard
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(f).status();
        }
    }
}

/// Read-only store (its database and WAL files made immutable under the running store):
/// every write fails with a store error and changes nothing; once writable, the same store
/// instance takes every write, the upgrade runs, and the store is consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_read_only_store_fails_every_write_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store.db");
    let url = format!("sqlite://{}", db.display());
    let s = seed(&url).await;
    let before = observe(&s.store).await;
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let guard = Immutable::set(&[db.clone(), PathBuf::from(wal)]);

    attempt_every_write(&s, &url, "read-only store").await;
    assert_eq!(
        observe(&s.store).await,
        before,
        "a failed write changed the store"
    );

    drop(guard);
    writes_succeed_after(&s, &url, &before).await;
}
