//! Queue flow control across OS processes on SQLite: the test re-runs its own binary as
//! child processes (selected by an environment variable) against one store file, each child a
//! spool on the system clock with several consumers (`cairn_conformance::cases::
//! flow_consumers`); children report on stdout, one line per result.
//!
//! - limits: 8 consumers in 4 processes drain one queue with `max_claimed` 3 and
//!   `per_partition` 1 (runs spread over 4 partitions and none); every sample taken right after
//!   a claim sees at most 3 runs claimed at once and at most 1 per partition, and every run is
//!   handed out exactly once;
//! - pause: two processes' consumers claim a paused queue for a measured window while the
//!   parent enqueues more runs and sees none claimed; after the resume every run is drained.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::cases::{
    check_limit_reports, check_pause_reports, flow_consumers, held_now,
};
use cairn_conformance::random_queue;
use cairn_core::spool::{PartitionKey, QueueLimits};
use cairn_core::{DedupKey, EnqueueOptions, QueueName, RunId, Spool, SystemClock};
use cairn_sqlite::{SqliteOptions, SqliteSpool};

const DB_ENV: &str = "CAIRN_FLOW_CHILD_DB";
const QUEUE_ENV: &str = "CAIRN_FLOW_CHILD_QUEUE";
const OUT: &str = "cairn-flow-child-out ";
/// How long the parent waits for its children.
const DEADLINE: Duration = Duration::from_secs(120);

/// A spool over the store file `path` on the system clock.
async fn spool_over(path: &str) -> SqliteSpool {
    SqliteSpool::open(path, SqliteOptions::default(), Arc::new(SystemClock))
        .await
        .expect("open the store")
}

/// Runs the child side when this process is a child; returns whether it was.
async fn run_child_if_asked() -> bool {
    let (Ok(db), Ok(queue)) = (std::env::var(DB_ENV), std::env::var(QUEUE_ENV)) else {
        return false;
    };
    let spool = spool_over(&db).await;
    let q = QueueName::new(queue).expect("valid queue");
    // Tells the parent this child is up (a run of a queue of its own).
    let hello = QueueName::new(format!("{}-hello", q.as_str())).unwrap();
    let me = DedupKey::from_parts([std::process::id().to_string()]).unwrap();
    spool
        .enqueue(&hello, &me, Vec::new(), EnqueueOptions::default())
        .await
        .expect("hello");
    for line in flow_consumers(Arc::new(spool.clone()), q, 2).await {
        println!("{OUT}{line}");
    }
    true
}

/// Starts `n` children of `test_name` on the store file `db` and `queue`; returns their report lines once
/// they all exited (each must succeed).
async fn children(test_name: &str, db: &str, queue: &QueueName, n: usize) -> Vec<Vec<String>> {
    let mut running = Vec::new();
    for _ in 0..n {
        running.push(
            Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
                .env(DB_ENV, db)
                .env(QUEUE_ENV, queue.as_str())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn a child"),
        );
    }
    let waited = tokio::task::spawn_blocking(move || {
        running
            .into_iter()
            .map(|c| {
                let output = c.wait_with_output().expect("the child's output");
                let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
                assert!(
                    output.status.success(),
                    "child failed: {}\n{stdout}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
                stdout
                    .lines()
                    .filter_map(|l| l.find(OUT).map(|at| l[at + OUT.len()..].trim().to_owned()))
                    .collect()
            })
            .collect()
    });
    tokio::time::timeout(DEADLINE, waited)
        .await
        .expect("the children finish in time")
        .expect("the children's reader")
}

/// Enqueues `n` runs named `prefix-i` on `q`, every fifth one without a partition, the others
/// spread over four partitions.
async fn enqueue_runs(spool: &dyn Spool, q: &QueueName, prefix: &str, n: usize) -> BTreeSet<RunId> {
    let mut ids = BTreeSet::new();
    for i in 0..n {
        let partition_key = (i % 5 != 4).then(|| PartitionKey::new(format!("p{}", i % 4)).unwrap());
        let options = EnqueueOptions {
            partition_key,
            ..EnqueueOptions::default()
        };
        let key = DedupKey::from_parts([prefix, &i.to_string()]).unwrap();
        let e = spool.enqueue(q, &key, Vec::new(), options).await.unwrap();
        assert!(e.created);
        ids.insert(e.run_id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_across_processes() {
    if run_child_if_asked().await {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flow.db").to_string_lossy().into_owned();
    let spool = spool_over(&db).await;
    let q = random_queue("flow-limits");
    let limits = QueueLimits {
        max_claimed: Some(3),
        per_partition: Some(1),
        rate: None,
    };
    spool.set_queue_limits(&q, &limits).await.unwrap();
    let enqueued = enqueue_runs(&spool, &q, "limits", 60).await;
    let reports = children("limits_hold_across_processes", &db, &q, 4).await;
    check_limit_reports(&reports, &enqueued, 3, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_hands_out_nothing_across_processes() {
    if run_child_if_asked().await {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flow.db").to_string_lossy().into_owned();
    let spool = spool_over(&db).await;
    let q = random_queue("flow-pause");
    spool.set_queue_paused(&q, true).await.unwrap();
    let mut enqueued = enqueue_runs(&spool, &q, "before", 10).await;
    let name = "a_paused_queue_hands_out_nothing_across_processes";
    let (path2, q2) = (db.clone(), q.clone());
    let running = tokio::spawn(async move { children(name, &path2, &q2, 2).await });
    // Both children are up (each enqueued its hello run).
    let hello = QueueName::new(format!("{}-hello", q.as_str())).unwrap();
    let start = Instant::now();
    loop {
        let stats = spool.stats().await.unwrap();
        let up: u64 = stats
            .queues
            .get(&hello)
            .map_or(0, |s| s.runs.values().sum());
        if up >= 2 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the children never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A measured window while paused: enqueues land, nothing is claimed.
    let window = Instant::now();
    let mut i = 0;
    while window.elapsed() < Duration::from_millis(800) {
        enqueued.extend(enqueue_runs(&spool, &q, &format!("during-{i}"), 1).await);
        assert_eq!(
            held_now(&spool, &q).await.0,
            0,
            "nothing is claimed while paused"
        );
        i += 1;
    }
    spool.set_queue_paused(&q, false).await.unwrap();
    let reports = running.await.expect("the children");
    check_pause_reports(&reports, &enqueued);
}
