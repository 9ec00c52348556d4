//! Faults below the API (issue 14), through the facade as a service uses it.
//!
//! SQLite: a genuinely full file system (a small tmpfs filled with a ballast file) and a
//! read-only store file (the immutable attribute, which binds root too) under appends, imports,
//! enqueues, acks, event appends, facts, a retention pass and a migration upgrade: every write
//! returns a store error, nothing changes, and once space or write access returns the same
//! store instance works and the store is consistent (seqs, head cache, run states).
//!
//! Postgres (each test in a scratch database of its own): connections terminated
//! mid-transaction and at random under load, a statement timeout, a server restart under load
//! (on a throwaway cluster), and the migration lock holder dying.
//!
//! Both: migration commit boundaries of an upgrade, a `repair` and a `down` (a failure before
//! the lock, inside the commit, and a death right after it).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn::spool::{RetentionBudget, RetentionPolicy, RunFilter, SpoolStats, MAX_BATCH};
use cairn::testkit::{migration_backend as migrator, Runner};
use cairn::{
    ConsumerId, DatabaseUrl, DedupKey, EnqueueOptions, Error, Event, ForeignEpoch, Head,
    LeaseToken, MigrationSet, Opened, QueueName, RunEventId, RunId, RunInfo, RunState, Seq,
    SpaceId, Store,
};
use cairn_migrate::{MigrationBackend, RunnerHooks, StoredState};
use sqlx::{Connection, PgConnection};

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
    // A full disk is told apart (`storage_full`: the server answers 503 and reports it).
    if what.contains("full disk") {
        assert!(
            matches!(&r, Err(e) if e.is_storage_full()),
            "{what} under the fault must fail with StorageFull, got {r:?}"
        );
    }
    match r {
        Err(
            Error::Backend { .. }
            | Error::Io { .. }
            | Error::Unavailable { .. }
            | Error::StorageFull { .. }
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

// ---------------------------------------------------------------------------------------------
// Postgres: each test works in a scratch database of its own, so that terminating "the store's
// backends" (by database name) can never touch another test's or another user's sessions. The
// server restart runs on a throwaway cluster the test starts and removes.
// ---------------------------------------------------------------------------------------------

/// A Postgres-side fault must surface as a typed, transient error: `Retryable` (nothing was
/// written) or `Unavailable` (the connection dropped; a commit in flight may or may not have
/// happened, which is why the backend does not call it `Retryable`).
fn assert_transient<T: std::fmt::Debug>(r: &cairn::Result<T>, what: &str) {
    assert!(
        matches!(r, Err(Error::Retryable { .. } | Error::Unavailable { .. })),
        "{what} must fail with Retryable or Unavailable, got {r:?}"
    );
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after `within`.
async fn wait_until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `url` with its database replaced by `name` (query string kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let start = base.find("://").unwrap() + 3;
    let path = base[start..].find('/').map_or(base.len(), |i| start + i);
    match query {
        Some(q) => format!("{}/{name}?{q}", &base[..path]),
        None => format!("{}/{name}", &base[..path]),
    }
}

/// A database of the test server that only this test uses; dropped (with its sessions) at
/// the end.
struct ScratchDb {
    admin: String,
    name: String,
}

impl ScratchDb {
    async fn create() -> Self {
        let admin = cairn::testkit::postgres::testkit::test_server_url()
            .await
            .unwrap_or_else(|why| panic!("no Postgres server for the fault tests: {why}"));
        Self::create_on(admin).await
    }

    async fn create_on(admin: String) -> Self {
        let name = cairn::testkit::scratch_name("cairn_fault");
        let mut conn = PgConnection::connect(&admin).await.unwrap();
        // `scratch_name` makes `[a-z0-9_]` only: safe as an identifier.
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        Self { admin, name }
    }

    fn url(&self) -> String {
        with_database(&self.admin, &self.name)
    }

    async fn conn(&self) -> PgConnection {
        PgConnection::connect(&self.url()).await.unwrap()
    }

    async fn admin(&self) -> PgConnection {
        PgConnection::connect(&self.admin).await.unwrap()
    }

    /// Terminates the backends of this database that `filter` selects (never the caller's
    /// own); returns how many.
    async fn terminate(&self, waiting_on_a_lock_only: bool) -> i64 {
        let mut admin = self.admin().await;
        sqlx::query_scalar::<_, i64>(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid() \
             AND (NOT $2 OR wait_event_type = 'Lock')",
        )
        .bind(&self.name)
        .bind(waiting_on_a_lock_only)
        .fetch_one(&mut admin)
        .await
        .unwrap()
    }

    /// How many backends of this database wait on a heavyweight lock.
    async fn waiting_on_locks(&self) -> i64 {
        let mut admin = self.admin().await;
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&self.name)
        .fetch_one(&mut admin)
        .await
        .unwrap()
    }

    /// Backends holding an advisory lock in this database.
    async fn advisory_holders(&self) -> Vec<i32> {
        let mut admin = self.admin().await;
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = $1)",
        )
        .bind(&self.name)
        .fetch_all(&mut admin)
        .await
        .unwrap()
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut c) = PgConnection::connect(&admin).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut c)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A connection holding a table in ACCESS EXCLUSIVE mode inside an open transaction, so that a
/// store statement touching it waits *inside* its own transaction; [`TableLock::release`]
/// rolls back and closes.
struct TableLock(PgConnection);

impl TableLock {
    async fn release(mut self) {
        sqlx::query("ROLLBACK").execute(&mut self.0).await.unwrap();
        self.0.close().await.unwrap();
    }
}

async fn lock_table(db: &ScratchDb, table: &str) -> TableLock {
    let mut conn = db.conn().await;
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    // `table` is one of this file's literals.
    sqlx::query(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .execute(&mut conn)
        .await
        .unwrap();
    TableLock(conn)
}

/// Acknowledged writes, recorded only after the call returned `Ok`.
#[derive(Default)]
struct Acked {
    epochs: Vec<(cairn::EpochId, Seq)>,
    runs: Vec<(String, RunId)>,
}

/// Every acknowledged write is in the store (read through a fresh store): epochs with their
/// seqs, seqs 1..=n without a gap, the cache equal to the anti-join, and every enqueued key
/// still naming its run.
async fn assert_acked_present(url: &str, acked: &Acked) {
    let store = Store::open(url).await.unwrap();
    for (id, seq) in &acked.epochs {
        let got = store.epochs().epoch(&space(), id).await.unwrap();
        assert_eq!(
            got.map(|e| e.seq),
            Some(*seq),
            "acknowledged epoch {id} lost or moved"
        );
    }
    let mut seqs = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .epochs()
            .events_since(&space(), cursor.as_ref(), 1000)
            .await
            .unwrap();
        if page.events.is_empty() {
            break;
        }
        seqs.extend(page.events.iter().map(|e| e.seq.0));
        cursor = Some(page.next);
    }
    seqs.dedup();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "seqs have a gap"
    );
    assert_consistent(&store, "after the fault").await;
    for (k, run) in &acked.runs {
        let again = store
            .spool()
            .enqueue(&queue(), &key(k), vec![0], EnqueueOptions::default())
            .await
            .unwrap();
        assert_eq!(
            (again.run_id, again.created),
            (*run, false),
            "key {k} lost its run"
        );
    }
    store.close().await.unwrap();
}

/// A write that waits inside its transaction on `table`, is terminated there, and must fail
/// with a transient error; the next write proceeds.
async fn terminate_mid_transaction(db: &ScratchDb, store: &Store, table: &str, n: u32) {
    let blocker = lock_table(db, table).await;
    let task = {
        let store = store.clone();
        let table = table.to_owned();
        tokio::spawn(async move {
            if table == "epoch" {
                store
                    .epochs()
                    .append(&space(), vec![Event::new("doomed", format!("{n}"))])
                    .await
                    .map(|_| ())
            } else {
                store
                    .spool()
                    .enqueue(
                        &queue(),
                        &key(&format!("doomed-{n}")),
                        vec![1],
                        EnqueueOptions::default(),
                    )
                    .await
                    .map(|_| ())
            }
        })
    };
    wait_until(
        "the store's write waits on the lock",
        Duration::from_secs(30),
        || async { db.waiting_on_locks().await >= 1 },
    )
    .await;
    assert!(db.terminate(true).await >= 1);
    let result = task.await.unwrap();
    assert_transient(
        &result,
        &format!("a write terminated mid-transaction on {table}"),
    );
    blocker.release().await;
}

/// `pg_terminate_backend` of the store's connections, (1) while a write waits inside its
/// transaction — deterministic — and (2) at random moments under a load of appends and
/// enqueues: every failure is Retryable/Unavailable, the next operation proceeds on the same
/// store, and no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_terminated_connections_lose_no_acknowledged_write() {
    let db = ScratchDb::create().await;
    let store = Store::builder(db.url())
        .pool_size(4)
        .busy_timeout(Duration::from_secs(60))
        .open()
        .await
        .unwrap();
    let mut acked = Acked::default();
    for n in 0..3 {
        let a = store
            .epochs()
            .append(&space(), vec![Event::new("before", format!("{n}"))])
            .await
            .unwrap();
        acked.epochs.push((a.id, a.seq));
        terminate_mid_transaction(&db, &store, "epoch", n).await;
        terminate_mid_transaction(&db, &store, "spool_run", n).await;
        let a = store
            .epochs()
            .append(&space(), vec![Event::new("after", format!("{n}"))])
            .await
            .unwrap();
        acked.epochs.push((a.id, a.seq));
        let r = store
            .spool()
            .enqueue(
                &queue(),
                &key(&format!("k{n}")),
                vec![2],
                EnqueueOptions::default(),
            )
            .await
            .unwrap();
        acked.runs.push((format!("k{n}"), r.run_id));
    }

    // Random moments: a load task, and terminations whenever it has made progress.
    let acked = Arc::new(Mutex::new(acked));
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let load = {
        let (store, acked, done, progress, failures) = (
            store.clone(),
            acked.clone(),
            done.clone(),
            progress.clone(),
            failures.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0u32;
            while !done.load(Ordering::SeqCst) {
                i += 1;
                if i % 2 == 0 {
                    let r = store
                        .epochs()
                        .append(&space(), vec![Event::new("load", format!("{i}"))])
                        .await;
                    match r {
                        Ok(a) => acked.lock().unwrap().epochs.push((a.id, a.seq)),
                        Err(_) => {
                            assert_transient(&r, "an append under terminations");
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                } else {
                    let k = format!("load-{}", i % 40);
                    let r = store
                        .spool()
                        .enqueue(&queue(), &key(&k), vec![3], EnqueueOptions::default())
                        .await;
                    match r {
                        Ok(e) => acked.lock().unwrap().runs.push((k, e.run_id)),
                        Err(_) => {
                            assert_transient(&r, "an enqueue under terminations");
                            failures.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                progress.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let mut terminated = 0;
    for _ in 0..15 {
        let seen = progress.load(Ordering::SeqCst);
        wait_until(
            "the load makes progress",
            Duration::from_secs(60),
            || async { progress.load(Ordering::SeqCst) >= seen + 5 },
        )
        .await;
        terminated += db.terminate(false).await;
    }
    done.store(true, Ordering::SeqCst);
    load.await.unwrap();
    assert!(terminated >= 15, "the faults were injected ({terminated})");
    // One key enqueued twice must name one run: dedup held across the faults.
    let acked = Arc::try_unwrap(acked).ok().unwrap().into_inner().unwrap();
    let mut by_key = BTreeMap::new();
    for (k, run) in &acked.runs {
        assert_eq!(
            *by_key.entry(k.clone()).or_insert(*run),
            *run,
            "key {k} got two runs"
        );
    }
    store.close().await.unwrap();
    assert_acked_present(&db.url(), &acked).await;
    eprintln!(
        "terminated {terminated} backends; {} load failures",
        failures.load(Ordering::SeqCst)
    );
}

/// A statement timeout (set on the scratch database, so every new session carries it) on an
/// append and an enqueue that wait on a lock: `Retryable` (SQLSTATE 57014), nothing written;
/// once the lock is gone the same store writes, with the seq the failed append did not use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_statement_timeout_is_retryable_and_writes_nothing() {
    let db = ScratchDb::create().await;
    let first = Store::open(&db.url()).await.unwrap();
    let a = first
        .epochs()
        .append(&space(), vec![Event::new("seed", "0")])
        .await
        .unwrap();
    first.close().await.unwrap();
    let mut admin = db.admin().await;
    sqlx::query(&format!(
        "ALTER DATABASE {} SET statement_timeout = '1500ms'",
        db.name
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let store = Store::builder(db.url())
        .busy_timeout(Duration::from_secs(60))
        .open()
        .await
        .unwrap();

    let blocker = lock_table(&db, "epoch").await;
    let r = store
        .epochs()
        .append(&space(), vec![Event::new("timed out", "1")])
        .await;
    assert!(
        matches!(&r, Err(Error::Retryable { detail, .. }) if detail.contains("57014")),
        "an append past the statement timeout is Retryable (57014), got {r:?}"
    );
    blocker.release().await;

    let blocker = lock_table(&db, "spool_run").await;
    let r = store
        .spool()
        .enqueue(&queue(), &key("t"), vec![1], EnqueueOptions::default())
        .await;
    assert!(
        matches!(&r, Err(Error::Retryable { detail, .. }) if detail.contains("57014")),
        "an enqueue past the statement timeout is Retryable (57014), got {r:?}"
    );
    blocker.release().await;

    let next = store
        .epochs()
        .append(&space(), vec![Event::new("after", "2")])
        .await
        .unwrap();
    assert_eq!(
        next.seq,
        Seq(a.seq.0 + 1),
        "the timed-out append used no seq"
    );
    assert_eq!(next.parents, vec![a.id]);
    let e = store
        .spool()
        .enqueue(&queue(), &key("t"), vec![1], EnqueueOptions::default())
        .await
        .unwrap();
    assert!(e.created, "the timed-out enqueue left no run");
    assert_consistent(&store, "after statement timeouts").await;
    store.close().await.unwrap();
}

/// The application set of the lock-holder test: revision 2 writes to the table revision 1
/// made, so a test can make the upgrade wait inside its transaction.
fn gate_set(revisions: usize) -> MigrationSet {
    let files = [
        (
            "0001_gate.sql",
            "CREATE TABLE fault_gate (id integer PRIMARY KEY);",
        ),
        ("0002_open.sql", "INSERT INTO fault_gate (id) VALUES (1);"),
    ];
    MigrationSet::from_files("gate", files.into_iter().take(revisions)).unwrap()
}

/// The migration lock holder dies: an upgrade holding the advisory migration lock waits inside
/// its transaction and its backend is terminated. The open fails with a typed error, the
/// advisory lock is released (pg_locks), nothing of the upgrade is left, and the next open
/// runs the upgrade.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_lock_holder_dying_leaves_no_lock_and_the_next_open_upgrades() {
    let db = ScratchDb::create().await;
    let v1 = Store::builder(db.url())
        .migrations(gate_set(1))
        .open()
        .await
        .unwrap();
    v1.close().await.unwrap();

    let blocker = lock_table(&db, "fault_gate").await;
    let url = db.url();
    let upgrade = tokio::spawn(async move {
        Store::builder(url)
            .busy_timeout(Duration::from_secs(60))
            .migration_lock_timeout(Duration::from_secs(60))
            .migrations(gate_set(2))
            .open()
            .await
            .map(|_| ())
    });
    wait_until(
        "the upgrade holds the migration lock and waits inside its transaction",
        Duration::from_secs(30),
        || async { !db.advisory_holders().await.is_empty() && db.waiting_on_locks().await >= 1 },
    )
    .await;
    let holders = db.advisory_holders().await;
    let mut admin = db.admin().await;
    for pid in &holders {
        let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(&mut admin)
            .await
            .unwrap();
        assert!(done, "terminated the lock holder {pid}");
    }
    let r = upgrade.await.unwrap();
    assert!(
        matches!(
            &r,
            Err(Error::Unavailable { .. } | Error::Retryable { .. } | Error::Migration { .. })
        ),
        "an upgrade whose connection died fails with a typed error, got {r:?}"
    );
    wait_until(
        "the dead holder's advisory lock is released",
        Duration::from_secs(30),
        || async { db.advisory_holders().await.is_empty() },
    )
    .await;
    blocker.release().await;

    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM fault_gate")
        .fetch_one(&mut db.conn().await)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the dead upgrade left a row");
    let v2 = Store::builder(db.url())
        .migrations(gate_set(2))
        .open()
        .await
        .unwrap();
    assert!(
        matches!(v2.migrations()[1].outcome, Opened::Upgraded { .. }),
        "{:?}",
        v2.migrations()
    );
    v2.close().await.unwrap();
    assert!(
        db.advisory_holders().await.is_empty(),
        "an advisory lock is left held after the upgrade"
    );
    let again = Store::builder(db.url())
        .migrations(gate_set(2))
        .open()
        .await
        .unwrap();
    assert_eq!(again.migrations()[1].outcome, Opened::AtHead);
    again.close().await.unwrap();
}

/// A private PostgreSQL cluster in a temp dir (initdb + pg_ctl from PATH or
/// /usr/lib/postgresql/*/bin, as user `postgres` when run as root), stopped and removed when
/// dropped. The shared test server is never restarted: only this cluster is.
struct ThrowawayCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
}

impl ThrowawayCluster {
    fn start() -> Self {
        let bin = pg_bin().unwrap_or_else(|| {
            panic!(
                "the server-restart test starts its own cluster and needs initdb and pg_ctl on \
                 PATH or under /usr/lib/postgresql/<version>/bin"
            )
        });
        let as_postgres = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false);
        let dir = tempfile::Builder::new()
            .prefix("cairn-restart-")
            .tempdir()
            .unwrap();
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Self {
            dir,
            bin,
            as_postgres,
            port,
        };
        run(c.tool("initdb").arg("-D").arg(c.data()).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-locale",
        ]));
        run(c
            .tool("pg_ctl")
            .arg("-D")
            .arg(c.data())
            .arg("-l")
            .arg(c.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-p {} -k {} -c listen_addresses=127.0.0.1",
                c.port,
                c.dir.path().display()
            ))
            .arg("start"));
        c
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl restart -m immediate`: the server stops without a checkpoint (as in a crash) and
    /// recovers from its WAL on start.
    fn restart_immediate(&self) {
        run(self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-m", "immediate", "-w", "-t", "60", "restart"]));
    }
}

impl Drop for ThrowawayCluster {
    fn drop(&mut self) {
        let _ = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn pg_bin() -> Option<PathBuf> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        if let Some(d) = std::env::split_paths(&path).find(|d| has(d)) {
            return Some(d);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|d| has(d))
        .collect();
    found.sort();
    found.pop()
}

fn run(cmd: &mut Command) {
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server restart (`pg_ctl restart -m immediate`, on a throwaway cluster) under a load of
/// appends and enqueues: the writes in flight fail with Retryable/Unavailable, the same store
/// recovers once the server is back, and every acknowledged write survived the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_server_restart_under_load_loses_no_acknowledged_write() {
    let cluster = tokio::task::spawn_blocking(ThrowawayCluster::start)
        .await
        .unwrap();
    let db = ScratchDb::create_on(cluster.url()).await;
    let store = Store::builder(db.url()).pool_size(4).open().await.unwrap();
    let acked = Arc::new(Mutex::new(Acked::default()));
    let done = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let load = {
        let (store, acked, done, progress, failures) = (
            store.clone(),
            acked.clone(),
            done.clone(),
            progress.clone(),
            failures.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0u32;
            while !done.load(Ordering::SeqCst) {
                i += 1;
                let ok = if i % 2 == 0 {
                    let r = store
                        .epochs()
                        .append(&space(), vec![Event::new("load", format!("{i}"))])
                        .await;
                    if r.is_err() {
                        assert_transient(&r, "an append during a restart");
                    }
                    r.map(|a| acked.lock().unwrap().epochs.push((a.id, a.seq)))
                        .is_ok()
                } else {
                    let k = format!("load-{}", i % 50);
                    let r = store
                        .spool()
                        .enqueue(&queue(), &key(&k), vec![3], EnqueueOptions::default())
                        .await;
                    if r.is_err() {
                        assert_transient(&r, "an enqueue during a restart");
                    }
                    r.map(|e| acked.lock().unwrap().runs.push((k, e.run_id)))
                        .is_ok()
                };
                if ok {
                    progress.fetch_add(1, Ordering::SeqCst);
                } else {
                    failures.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    wait_until("the load runs", Duration::from_secs(60), || async {
        progress.load(Ordering::SeqCst) >= 30
    })
    .await;
    // Make sure the restart lands inside a write: hold the epoch table so the load's next
    // append waits inside its transaction, and restart only once it does. (Between two writes
    // a restart is invisible: the pool replaces its dead connections.)
    let blocker = lock_table(&db, "epoch").await;
    wait_until(
        "an append waits inside its transaction",
        Duration::from_secs(60),
        || async { db.waiting_on_locks().await >= 1 },
    )
    .await;
    // The blocker stays open until the server goes down (closing it first would let the
    // append through before the restart); its connection dies with the server.
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.restart_immediate();
        cluster
    })
    .await
    .unwrap();
    drop(blocker);
    let after_restart = progress.load(Ordering::SeqCst);
    wait_until(
        "the same store writes again after the restart",
        Duration::from_secs(60),
        || async { progress.load(Ordering::SeqCst) >= after_restart + 30 },
    )
    .await;
    done.store(true, Ordering::SeqCst);
    load.await.unwrap();
    assert!(
        failures.load(Ordering::SeqCst) >= 1,
        "no write failed: the restart did not hit the load"
    );
    store.close().await.unwrap();
    let acked = Arc::try_unwrap(acked).ok().unwrap().into_inner().unwrap();
    assert_acked_present(&db.url(), &acked).await;
    drop(db);
    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// Migration commit boundaries, for each of the runner's three committing operations (an
// upgrade, a `repair`, a `down`): a failure injected before the lock and inside the
// transaction (after the stamp and lineage writes, before COMMIT) leaves the set at its
// previous generation — stamp and lineage exactly as before, no lock held; a death right after
// COMMIT (`RunnerHooks::after_commit`) leaves the new generation whole and durable; and the
// next run of the same operation finds its work done.
// ---------------------------------------------------------------------------------------------

/// A set generic over both engines: revision 2 adds a table and a row.
fn generation_set(revisions: usize) -> MigrationSet {
    let files = [
        (
            "0001_gen_a.sql",
            "CREATE TABLE gen_a (id integer PRIMARY KEY);",
        ),
        (
            "0002_gen_b.sql",
            "CREATE TABLE gen_b (id integer PRIMARY KEY);\nINSERT INTO gen_b (id) VALUES (1);",
        ),
    ];
    MigrationSet::from_files("gen", files.into_iter().take(revisions)).unwrap()
}

/// Runs `op` in its own task, so that a hook may panic as a process dying at that point would
/// (its connections are dropped while unwinding).
async fn in_task<T, F>(op: F) -> Result<T, String>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, cairn_migrate::MigrateError>> + Send + 'static,
{
    match tokio::spawn(op).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(format!("error: {e}")),
        Err(j) if j.is_panic() => Err("died (panic)".into()),
        Err(j) => Err(format!("task failed: {j}")),
    }
}

/// The hooks of the two failures before COMMIT: a death just before taking the lock, and an
/// error after the stamp and lineage writes.
fn failures_before_commit() -> [(&'static str, RunnerHooks); 2] {
    let before_lock = RunnerHooks {
        before_lock: Some(Arc::new(|| {
            panic!("injected: the process dies before taking the migration lock")
        })),
        ..RunnerHooks::default()
    };
    let inside = RunnerHooks {
        fail_after_lineage_write: true,
        ..RunnerHooks::default()
    };
    [
        ("before the lock", before_lock),
        ("inside the commit", inside),
    ]
}

/// A death right after COMMIT, before the runner returns.
fn death_after_commit() -> RunnerHooks {
    RunnerHooks {
        after_commit: Some(Arc::new(|| {
            panic!("injected: the process dies right after the migration commit")
        })),
        ..RunnerHooks::default()
    }
}

/// On Postgres, waits until no advisory lock is held in the scratch database.
async fn no_advisory_lock_left(pg: Option<&ScratchDb>, what: &str) {
    if let Some(db) = pg {
        wait_until(
            &format!("{what}: no advisory lock is left held"),
            Duration::from_secs(30),
            || async { db.advisory_holders().await.is_empty() },
        )
        .await;
    }
}

/// Runs one committing runner operation (`op`, given the hooks to run with) at each boundary:
/// the two failures before COMMIT must fail it and leave set `set` exactly at `before` with no
/// lock held; then a death right after COMMIT must run (the caller checks what it left).
async fn at_each_boundary<T, F, Fut>(
    what: &str,
    backend: &Arc<dyn MigrationBackend>,
    set: &str,
    before: &StoredState,
    pg: Option<&ScratchDb>,
    op: F,
) where
    T: std::fmt::Debug + Send + 'static,
    F: Fn(RunnerHooks) -> Fut,
    Fut: std::future::Future<Output = Result<T, cairn_migrate::MigrateError>> + Send + 'static,
{
    for (boundary, hooks) in failures_before_commit() {
        let r = in_task(op(hooks)).await;
        assert!(
            r.is_err(),
            "{boundary}: the injected failure must fail the {what}: {r:?}"
        );
        assert_eq!(
            &backend.read_state(set).await.unwrap(),
            before,
            "{boundary}: the failed {what} changed stamp or lineage"
        );
        no_advisory_lock_left(pg, boundary).await;
    }
    let r = in_task(op(death_after_commit())).await;
    assert_eq!(
        r.map(|_| ()),
        Err("died (panic)".into()),
        "after the commit: the hook must run (once the {what}'s commit succeeded)"
    );
    no_advisory_lock_left(pg, "after the commit").await;
}

/// The next open of the store with revision 2 of set `gen` (a restarted process) finds it at
/// its head and leaves its state exactly `expected`.
async fn opens_at_head(url: &str, backend: &Arc<dyn MigrationBackend>, expected: &StoredState) {
    let v2 = Store::builder(url)
        .migrations(generation_set(2))
        .open()
        .await
        .unwrap();
    assert_eq!(
        v2.migrations()[1].outcome,
        Opened::AtHead,
        "{:?}",
        v2.migrations()
    );
    v2.close().await.unwrap();
    assert_eq!(&backend.read_state("gen").await.unwrap(), expected);
}

/// Holds every injected failure to "one consistent generation", then upgrades for real.
/// `pg` is the scratch database when the store is on Postgres (its advisory locks are
/// checked).
async fn commit_boundaries(url: &str, pg: Option<&ScratchDb>) {
    let parsed = DatabaseUrl::parse(url).unwrap();
    let v1 = Store::builder(url)
        .migrations(generation_set(1))
        .open()
        .await
        .unwrap();
    v1.close().await.unwrap();
    let backend = migrator(&parsed, false).unwrap();
    let generation_1 = backend.read_state("gen").await.unwrap();
    assert!(generation_1.stamp.is_some());

    // After the commit, the upgrade (whose CREATE TABLE would fail had a failed attempt left
    // revision 2's table behind) is durable, with its stamp and its whole lineage.
    at_each_boundary("upgrade", &backend, "gen", &generation_1, pg, |hooks| {
        let (runner, b) = (
            Runner::new(generation_set(2)).with_hooks(hooks),
            backend.clone(),
        );
        async move { runner.open(&*b).await }
    })
    .await;
    let generation_2 = backend.read_state("gen").await.unwrap();
    let ours = generation_set(2).lineage(backend.dialect());
    assert_eq!(
        generation_2.stamp.as_deref(),
        Some(ours[1].revision.as_str()),
        "after the commit: the upgrade's stamp is durable"
    );
    assert_eq!(
        generation_2.lineage.as_deref(),
        Some(ours.as_slice()),
        "after the commit: the upgrade's lineage is durable and whole"
    );

    // Recovery: the next open (a restarted process) finds the new generation at its head and
    // writes nothing.
    opens_at_head(url, &backend, &generation_2).await;
    if let Some(db) = pg {
        assert!(db.advisory_holders().await.is_empty());
    }
}

/// Migration commit boundaries on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_commit_boundaries_recover_to_one_generation() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    commit_boundaries(&url, None).await;
}

/// Migration commit boundaries on Postgres (a scratch database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migration_commit_boundaries_recover_to_one_generation() {
    let db = ScratchDb::create().await;
    commit_boundaries(&db.url(), Some(&db)).await;
}

/// `repair`'s commit boundaries. The store is at revision 2 without a lineage (both revisions
/// applied by a build that predates lineage), so a repair records this build's lineage.
async fn repair_boundaries(url: &str, pg: Option<&ScratchDb>) {
    let parsed = DatabaseUrl::parse(url).unwrap();
    let backend = migrator(&parsed, true).unwrap();
    let no_lineage = RunnerHooks {
        skip_lineage: true,
        ..RunnerHooks::default()
    };
    Runner::new(generation_set(2))
        .with_hooks(no_lineage)
        .open(&*backend)
        .await
        .unwrap();
    let unrepaired = backend.read_state("gen").await.unwrap();
    let ours = generation_set(2).lineage(backend.dialect());
    assert_eq!(unrepaired.stamp.as_deref(), Some(ours[1].revision.as_str()));
    assert_eq!(unrepaired.lineage, None, "setup: a store without lineage");

    at_each_boundary("repair", &backend, "gen", &unrepaired, pg, |hooks| {
        let (runner, b) = (
            Runner::new(generation_set(2)).with_hooks(hooks),
            backend.clone(),
        );
        async move { runner.repair(&*b).await }
    })
    .await;
    let repaired = backend.read_state("gen").await.unwrap();
    assert_eq!(
        repaired.stamp, unrepaired.stamp,
        "after the commit: the stamp is kept"
    );
    assert_eq!(
        repaired.lineage.as_deref(),
        Some(ours.as_slice()),
        "after the commit: the repair's lineage is durable and whole"
    );

    // Recovery: the next repair finds the work done and writes nothing; the next open is at head.
    let again = Runner::new(generation_set(2))
        .repair(&*backend)
        .await
        .unwrap();
    assert!(
        !again.changed(),
        "the repair after the death wrote again: {again:?}"
    );
    assert_eq!(backend.read_state("gen").await.unwrap(), repaired);
    opens_at_head(url, &backend, &repaired).await;
}

/// A set whose revision 2 has down SQL: it creates a table and a row, and its down drops it.
fn down_set(revisions: usize) -> MigrationSet {
    let files = [
        (
            "0001_dn_a.sql",
            "CREATE TABLE dn_a (id integer PRIMARY KEY);",
        ),
        (
            "0002_dn_b.sql",
            "CREATE TABLE dn_b (id integer PRIMARY KEY);\nINSERT INTO dn_b (id) VALUES (1);",
        ),
        ("0002_dn_b.down.sql", "DROP TABLE dn_b;"),
    ];
    let take = if revisions >= 2 { 3 } else { 1 };
    MigrationSet::from_files("dn", files.into_iter().take(take)).unwrap()
}

/// `down`'s commit boundaries: revision 2 is undone to revision 1.
async fn down_boundaries(url: &str, pg: Option<&ScratchDb>) {
    let parsed = DatabaseUrl::parse(url).unwrap();
    let backend = migrator(&parsed, true).unwrap();
    Runner::new(down_set(2)).open(&*backend).await.unwrap();
    let at_2 = backend.read_state("dn").await.unwrap();
    let ours = down_set(2).lineage(backend.dialect());
    assert_eq!(at_2.stamp.as_deref(), Some(ours[1].revision.as_str()));
    let to = ours[0].revision.clone();

    // The after-commit down's `DROP TABLE dn_b` would fail had a failed attempt dropped the
    // table and kept that.
    at_each_boundary("down", &backend, "dn", &at_2, pg, |hooks| {
        let (runner, b, to) = (
            Runner::new(down_set(2)).with_hooks(hooks),
            backend.clone(),
            to.clone(),
        );
        async move { runner.down(&*b, &to).await }
    })
    .await;
    let at_1 = backend.read_state("dn").await.unwrap();
    assert_eq!(
        at_1.stamp.as_deref(),
        Some(to.as_str()),
        "after the commit: the stamp moved back"
    );
    assert_eq!(
        at_1.lineage.as_deref(),
        Some(&ours[..1]),
        "after the commit: the lineage ends at the down's target"
    );

    // Recovery: the next down finds the store at its target and writes nothing; the next
    // upgrade applies revision 2 again (its CREATE TABLE proves the down dropped the table).
    let again = Runner::new(down_set(2)).down(&*backend, &to).await.unwrap();
    assert!(
        again.reverted.is_empty(),
        "the down after the death ran again: {again:?}"
    );
    assert_eq!(backend.read_state("dn").await.unwrap(), at_1);
    let up = Runner::new(down_set(2)).open(&*backend).await.unwrap();
    assert!(matches!(up, Opened::Upgraded { .. }), "{up:?}");
    let back = backend.read_state("dn").await.unwrap();
    assert_eq!((back.stamp, back.lineage), (at_2.stamp, at_2.lineage));
}

/// Repair commit boundaries on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_repair_commit_boundaries_recover_to_one_generation() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    repair_boundaries(&url, None).await;
}

/// Repair commit boundaries on Postgres (a scratch database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_repair_commit_boundaries_recover_to_one_generation() {
    let db = ScratchDb::create().await;
    repair_boundaries(&db.url(), Some(&db)).await;
}

/// Down commit boundaries on SQLite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_down_commit_boundaries_recover_to_one_generation() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    down_boundaries(&url, None).await;
}

/// Down commit boundaries on Postgres (a scratch database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_commit_boundaries_recover_to_one_generation() {
    let db = ScratchDb::create().await;
    down_boundaries(&db.url(), Some(&db)).await;
}
