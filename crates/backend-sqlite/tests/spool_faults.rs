//! Injected failures on the SQLite spool: a full disk and a read-only store (S12) return
//! errors and nothing claims success; a retention pass that fails at any batch boundary leaves
//! every batch before it committed and the store consistent (S11).

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use cairn_core::spool::{RetentionBudget, RetentionPolicy, RunFilter, Spool};
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, Error, FactName, MemorySpool, QueueName, RunEventId,
};
use cairn_sqlite::spool_testkit::spool_harness;
use cairn_sqlite::{SqliteOptions, SqliteSpool};

fn queue(name: &str) -> QueueName {
    QueueName::new(name).unwrap()
}

fn key(k: &str) -> DedupKey {
    DedupKey::from_parts(["gate", "refs/heads/main", k]).unwrap()
}

/// What every write attempted under an injected failure must leave behind: the run as it was,
/// as another spool instance (its own connections) reads it.
async fn assert_unchanged(
    other: &SqliteSpool,
    run: cairn_core::RunId,
    before: &cairn_core::RunInfo,
    stats: &cairn_core::spool::SpoolStats,
    ctx: &str,
) {
    assert_eq!(
        other.run(run).await.unwrap().as_ref(),
        Some(before),
        "S12: {ctx} changed the run"
    );
    assert_eq!(
        &other.stats().await.unwrap(),
        stats,
        "S12: {ctx} changed the store"
    );
}

/// An error from a failed durable write: a store error, never a validation or spool verdict.
fn assert_write_failed<T: std::fmt::Debug>(r: cairn_core::Result<T>, ctx: &str) {
    // A full disk is told apart (`StorageFull`: the server answers 503 `storage_full`).
    if ctx.contains("full disk") {
        assert!(
            matches!(&r, Err(e) if e.is_storage_full()),
            "S12: {ctx} must fail with StorageFull, got {r:?}"
        );
    }
    match r {
        Err(
            Error::Backend { .. }
            | Error::Io { .. }
            | Error::Unavailable { .. }
            | Error::StorageFull { .. },
        ) => {}
        other => panic!("S12: {ctx} must fail with a store error, got {other:?}"),
    }
}

/// S12 (full disk): with the store capped at its current size (`PRAGMA max_page_count`), an
/// enqueue and an event append that need new pages fail with an error, nothing claims success
/// and nothing is left behind; once space is back the same calls succeed and the store works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_full_disk_fails_writes_without_false_success() {
    let h = spool_harness().await;
    let spool = h.open_with(SqliteOptions::default()).await.unwrap();
    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    let q = queue("s12-full");
    let me = ConsumerId::new("s12").unwrap();
    let run = spool
        .enqueue(&q, &key("first"), vec![1; 16], EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    let lease = spool
        .claim(&q, &me, Duration::from_secs(30), 1)
        .await
        .unwrap()
        .remove(0);
    let before = other.run(run).await.unwrap().unwrap();
    let stats = other.stats().await.unwrap();

    spool.testkit_limit_pages(Some(0)).await.unwrap();
    let big = vec![7u8; 256 * 1024];
    assert_write_failed(
        spool
            .enqueue(&q, &key("big"), big.clone(), EnqueueOptions::default())
            .await,
        "an enqueue on a full disk",
    );
    let event = RunEventId::new(b"e1".to_vec()).unwrap();
    assert_write_failed(
        spool.append_event(run, &event, big.clone()).await,
        "an event append on a full disk",
    );
    assert_unchanged(&other, run, &before, &stats, "a write on a full disk").await;
    assert!(other.events(run, 0, 10).await.unwrap().is_empty());

    spool.testkit_limit_pages(None).await.unwrap();
    let e = spool
        .enqueue(&q, &key("big"), big.clone(), EnqueueOptions::default())
        .await
        .unwrap();
    assert!(e.created, "S12: the failed enqueue left no run behind");
    assert_eq!(
        spool.append_event(run, &event, big).await.unwrap().seq,
        1,
        "S12: the failed append used no seq"
    );
    spool.ack(run, lease.token).await.unwrap();
    assert_eq!(
        other.run(run).await.unwrap().unwrap().state,
        cairn_core::RunState::Succeeded
    );
}

/// Makes the store's files read-only for as long as it lives, even for root: the immutable
/// attribute (`chattr +i`) refuses writes through descriptors SQLite already holds.
struct Immutable(Vec<std::path::PathBuf>);

impl Immutable {
    fn set(files: &[std::path::PathBuf]) -> std::io::Result<Self> {
        let guard = Self(Vec::new());
        let mut guard = guard;
        for f in files {
            let status = Command::new("chattr").arg("+i").arg(f).status()?;
            if !status.success() {
                return Err(std::io::Error::other(format!(
                    "chattr +i {} failed: {status}",
                    f.display()
                )));
            }
            guard.0.push(f.clone());
        }
        Ok(guard)
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = Command::new("chattr").arg("-i").arg(f).status();
        }
    }
}

/// S12 (read-only store file): with the store file and its WAL made read-only under a running
/// spool, enqueue, claim, heartbeat, ack, event appends and facts each return an error, nothing
/// claims success and nothing changes; once writable again the store works and holds exactly
/// what succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s12_read_only_store_fails_writes_without_false_success() {
    let h = spool_harness().await;
    let spool = h.open_with(SqliteOptions::default()).await.unwrap();
    let other = h.open_with(SqliteOptions::default()).await.unwrap();
    let q = queue("s12-read-only");
    let me = ConsumerId::new("s12").unwrap();
    let run = spool
        .enqueue(&q, &key("first"), vec![1; 16], EnqueueOptions::default())
        .await
        .unwrap()
        .run_id;
    spool
        .enqueue(&q, &key("second"), vec![2; 16], EnqueueOptions::default())
        .await
        .unwrap();
    let lease = spool
        .claim(&q, &me, Duration::from_secs(30), 1)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(lease.run_id, run);
    let before = other.run(run).await.unwrap().unwrap();
    let stats = other.stats().await.unwrap();

    let mut wal = h.path().as_os_str().to_owned();
    wal.push("-wal");
    let files = [h.path().to_path_buf(), std::path::PathBuf::from(wal)];
    let guard = Immutable::set(&files).unwrap_or_else(|e| {
        panic!(
            "S12 needs the immutable file attribute (root on a file system with chattr, e.g. \
             ext4) to make a store read-only under a running process: {e}"
        )
    });
    assert_write_failed(
        spool
            .enqueue(&q, &key("third"), vec![3; 16], EnqueueOptions::default())
            .await,
        "an enqueue on a read-only store",
    );
    assert_write_failed(
        spool.claim(&q, &me, Duration::from_secs(30), 1).await,
        "a claim on a read-only store",
    );
    assert_write_failed(
        spool
            .heartbeat(run, lease.token, Duration::from_secs(60))
            .await,
        "a heartbeat on a read-only store",
    );
    assert_write_failed(
        spool.ack(run, lease.token).await,
        "an ack on a read-only store",
    );
    let event = RunEventId::new(b"e1".to_vec()).unwrap();
    assert_write_failed(
        spool.append_event(run, &event, vec![9; 8]).await,
        "an event append on a read-only store",
    );
    assert_write_failed(
        spool
            .set_fact(run, &FactName::new("decision").unwrap(), b"yes".to_vec())
            .await,
        "a fact on a read-only store",
    );
    drop(guard);
    assert_unchanged(&other, run, &before, &stats, "a write on a read-only store").await;

    // Writable again: the same spool instance works and the store holds what succeeded only.
    let third = spool
        .enqueue(&q, &key("third"), vec![3; 16], EnqueueOptions::default())
        .await
        .unwrap();
    assert!(third.created, "S12: the failed enqueue left no run behind");
    // The append first: a finished run takes no more events.
    assert_eq!(
        spool
            .append_event(run, &event, vec![9; 8])
            .await
            .unwrap()
            .seq,
        1
    );
    spool.ack(run, lease.token).await.unwrap();
    let reopened = h.open_with(SqliteOptions::default()).await.unwrap();
    let info = reopened.run(run).await.unwrap().unwrap();
    assert_eq!(info.state, cairn_core::RunState::Succeeded);
    assert!(info.facts.is_empty(), "S12: the failed fact was not stored");
    assert_eq!(info.events, 1);
}

/// Enqueues six runs and appends three events of different sizes to each, ten seconds apart on
/// the harness clock; three of the runs finish right after their first event (a finished run
/// takes no more). The same on every spool given, in the same order.
async fn seed(spools: &[&dyn Spool], clock: &cairn_core::ManualClock, q: &QueueName) {
    let me = ConsumerId::new("s11").unwrap();
    let mut claims = Vec::new();
    for spool in spools {
        for i in 0..6 {
            spool
                .enqueue(
                    q,
                    &key(&format!("k{i}")),
                    vec![i; 4],
                    EnqueueOptions::default(),
                )
                .await
                .unwrap();
        }
        claims.push(
            spool
                .claim(q, &me, Duration::from_secs(30), 3)
                .await
                .unwrap(),
        );
    }
    for round in 0..3u8 {
        for (spool, claimed) in spools.iter().zip(&claims) {
            let runs = spool
                .runs(
                    &RunFilter {
                        queue: Some(q.clone()),
                        ..RunFilter::default()
                    },
                    100,
                )
                .await
                .unwrap();
            let mut runs: Vec<_> = runs
                .into_iter()
                .filter(|r| !r.state.is_terminal())
                .map(|r| (r.dedup_key, r.run_id))
                .collect();
            runs.sort();
            for (i, (_, run)) in runs.iter().enumerate() {
                let size = 10 * (i + 1) + usize::from(round);
                spool
                    .append_event(
                        *run,
                        &RunEventId::new(format!("e{round}").into_bytes()).unwrap(),
                        vec![round; size],
                    )
                    .await
                    .unwrap();
            }
            if round == 0 {
                for c in claimed {
                    spool.ack(c.run_id, c.token).await.unwrap();
                }
            }
        }
        clock.advance(Duration::from_secs(10));
    }
    clock.advance(Duration::from_secs(30));
}

/// Everything observable about the queue's runs, keyed by dedup key (ids differ per store).
async fn snapshot(
    spool: &dyn Spool,
    q: &QueueName,
) -> (
    cairn_core::spool::SpoolStats,
    Vec<(cairn_core::RunInfo, Vec<cairn_core::spool::RunEvent>)>,
) {
    let mut out = Vec::new();
    let runs = spool
        .runs(
            &RunFilter {
                queue: Some(q.clone()),
                ..RunFilter::default()
            },
            100,
        )
        .await
        .unwrap();
    for info in runs {
        let events = spool.events(info.run_id, 0, 100).await.unwrap();
        out.push((
            cairn_core::RunInfo {
                run_id: cairn_core::RunId([0; 16]),
                ..info
            },
            events,
        ));
    }
    out.sort_by(|a, b| a.0.dedup_key.cmp(&b.0.dedup_key));
    (spool.stats().await.unwrap(), out)
}

/// S11 (failure at every batch boundary): for every k, a pass stopped after k batches and a
/// second pass that fails on its first write (the store made read-only) leave the SQLite
/// spool exactly where the reference model is after the same k batches; a complete pass
/// afterwards finishes the job on both with the same report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s11_retention_failure_at_every_batch_boundary_leaves_a_consistent_store() {
    use cairn_conformance::SpoolHarness;
    let policy = RetentionPolicy {
        max_age: Duration::from_secs(45),
        max_bytes: 50,
    };
    let budget = |max_batches| RetentionBudget {
        batch_size: 2,
        max_batches,
        max_duration: Duration::from_secs(3600),
    };
    let q = queue("s11-faults");

    // How many batches a whole pass takes.
    let clock = cairn_core::ManualClock::default();
    let model = MemorySpool::new(Arc::new(clock.clone()));
    seed(&[&model], &clock, &q).await;
    let whole = model.retention_pass(&policy, &budget(1000)).await.unwrap();
    assert!(whole.complete && whole.batches > 3, "{whole:?}");
    assert!(whole.events_expired > 0 && whole.events_over_cap > 0 && whole.runs_removed > 0);

    for k in 0..=whole.batches {
        let h = spool_harness().await;
        let sqlite = h.open_with(SqliteOptions::default()).await.unwrap();
        let model = MemorySpool::new(Arc::new(h.clock().clone()));
        seed(&[&sqlite, &model], h.clock(), &q).await;
        if k > 0 {
            assert_eq!(
                sqlite.retention_pass(&policy, &budget(k)).await.unwrap(),
                model.retention_pass(&policy, &budget(k)).await.unwrap(),
                "k={k}: the first k batches"
            );
        }
        let mut wal = h.path().as_os_str().to_owned();
        wal.push("-wal");
        let guard = Immutable::set(&[h.path().to_path_buf(), std::path::PathBuf::from(wal)])
            .expect("S11 needs the immutable file attribute (chattr, as root)");
        // The pass fails on its first batch that deletes something; batches left that only
        // find a phase finished write nothing and may succeed.
        if let Ok(r) = sqlite.retention_pass(&policy, &budget(1000)).await {
            assert_eq!(
                r.events_expired + r.events_over_cap + r.runs_removed,
                0,
                "k={k}: no batch can delete on a read-only store: {r:?}"
            );
        }
        drop(guard);
        assert_eq!(
            snapshot(&sqlite, &q).await,
            snapshot(&model, &q).await,
            "k={k}: the failed batch left nothing behind"
        );
        let reopened = h.open_with(SqliteOptions::default()).await.unwrap();
        let (r, m) = (
            reopened
                .retention_pass(&policy, &budget(1000))
                .await
                .unwrap(),
            model.retention_pass(&policy, &budget(1000)).await.unwrap(),
        );
        assert_eq!(r, m, "k={k}: the rest of the work");
        assert!(r.complete);
        let (stats, _) = snapshot(&reopened, &q).await;
        assert!(stats.event_bytes <= policy.max_bytes, "k={k}: {stats:?}");
        assert_eq!(snapshot(&reopened, &q).await, snapshot(&model, &q).await);
    }
}

/// A subscription whose wake-up poller cannot open the store (the file was removed under a
/// running spool) fails with `Unavailable`, as the contract says, instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_without_a_readable_store_is_unavailable() {
    let h = spool_harness().await;
    let spool = h.open_with(SqliteOptions::default()).await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let mut p = h.path().as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(std::path::PathBuf::from(p));
    }
    match spool.subscribe(&queue("gone")).await {
        Err(Error::Unavailable { source, .. }) => assert!(source.is_some()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// A spool is never opened through a symbolic link (DESIGN §6): the open is refused with
/// `UnsafePath` and nothing is created at the link's target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_open_refuses_a_symlinked_store() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.db");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let clock = Arc::new(cairn_core::ManualClock::default());
    match SqliteSpool::open(&link, SqliteOptions::default(), clock).await {
        Err(Error::UnsafePath { .. }) => {}
        other => panic!("expected UnsafePath, got {other:?}"),
    }
    assert!(!target.exists(), "nothing is created behind the link");
}
