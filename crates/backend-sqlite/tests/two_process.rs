//! E1/E4 across OS processes: two processes append to the same space of one SQLite file at
//! once. SQLite's writer lock (`BEGIN IMMEDIATE`) must serialize them: every seq is taken
//! exactly once, each process sees its own seqs strictly increase, and one head with one cache
//! row remains.
//!
//! The test re-runs its own binary as the two children (selected by an environment variable),
//! the way crash harnesses re-execute themselves.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};

use cairn_core::{EpochDiagnostics, EpochStore, Event, FeedCursor, Seq, SpaceId};
use cairn_sqlite::SqliteStore;

const CHILD_ENV: &str = "CAIRN_TWO_PROCESS_CHILD_DB";
const TEST_NAME: &str = "two_processes_append_to_one_space_without_sharing_a_seq";
const PER_CHILD: u64 = 200;
const SEQ_LINE: &str = "cairn-two-process-seq ";
const READY_LINE: &str = "cairn-two-process-ready";

fn space() -> SpaceId {
    SpaceId::new(b"two-process".to_vec()).unwrap()
}

/// The child's half: open the store, report ready, wait for the parent's go (a line on
/// stdin), then append `PER_CHILD` epochs and print each seq on its own line.
async fn child(db: &str, name: &str) {
    let store = SqliteStore::open(db).await.unwrap();
    println!("\n{READY_LINE}");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    for i in 0..PER_CHILD {
        let a = store
            .append(
                &space(),
                vec![Event::new(
                    "two.process",
                    format!("{name}-{i}").into_bytes(),
                )],
            )
            .await
            .unwrap_or_else(|e| panic!("child {name}: append {i} failed: {e}"));
        println!("{SEQ_LINE}{}", a.seq.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_append_to_one_space_without_sharing_a_seq() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        let name = std::env::var("CAIRN_TWO_PROCESS_CHILD_NAME").unwrap_or_default();
        child(&db, &name).await;
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    // Create the file and schema up front so the children only contend on appends.
    drop(SqliteStore::open(&db).await.unwrap());

    let exe = std::env::current_exe().unwrap();
    let spawn = |name: &str| {
        Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &db)
            .env("CAIRN_TWO_PROCESS_CHILD_NAME", name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let outputs = tokio::task::spawn_blocking(move || run_together([a, b]))
        .await
        .unwrap();

    let mut all = BTreeSet::new();
    let mut per_child = Vec::new();
    for out in &outputs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let seqs: Vec<u64> = stdout
            .lines()
            // libtest may print its own text on the same line as the first report.
            .filter_map(|l| l.find(SEQ_LINE).map(|at| &l[at + SEQ_LINE.len()..]))
            .map(|s| s.trim().parse().unwrap())
            .collect();
        assert_eq!(
            seqs.len() as u64,
            PER_CHILD,
            "each child reports every append"
        );
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "E1: a child's seqs strictly increase: {seqs:?}"
        );
        for &s in &seqs {
            assert!(all.insert(s), "E1: seq {s} was handed out twice");
        }
        per_child.push(seqs);
    }
    // Informational: whether the scheduler actually interleaved the two writers this time.
    let interleaved =
        per_child[0].first() < per_child[1].last() && per_child[1].first() < per_child[0].last();
    println!("two_process: writers interleaved = {interleaved}");
    assert_eq!(
        all,
        (1..=2 * PER_CHILD).collect::<BTreeSet<_>>(),
        "E1: seqs 1..=2N, each once"
    );

    let store = SqliteStore::open(&db).await.unwrap();
    let heads = store.heads(&space()).await.unwrap();
    assert_eq!(heads.len(), 1, "E4: one head");
    assert_eq!(heads[0].seq, Seq(2 * PER_CHILD));
    assert_eq!(
        store.cached_heads(&space()).await.unwrap(),
        heads,
        "E4: one cache row"
    );
    assert_eq!(store.computed_heads(&space()).await.unwrap(), heads);

    // The stored log agrees: a linear chain, seq n's parent is seq n-1.
    let page = store
        .events_since(&space(), None::<&FeedCursor>, 10_000)
        .await
        .unwrap();
    let stored: Vec<u64> = page.events.iter().map(|e| e.seq.0).collect();
    assert_eq!(stored, (1..=2 * PER_CHILD).collect::<Vec<_>>());
    for w in page.events.windows(2) {
        let child = store.epoch(&space(), &w[1].epoch).await.unwrap().unwrap();
        assert_eq!(child.parents, vec![w[0].epoch], "the chain has no fork");
    }
}

/// Waits until both children report ready, releases them at once, and collects their output
/// (stdout lines after the ready line, plus the full stderr).
fn run_together(children: [Child; 2]) -> Vec<Output> {
    let mut readers = Vec::new();
    for mut c in children {
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "child exited before it was ready: {:?}",
                c.wait_with_output().unwrap()
            );
            if line.contains(READY_LINE) {
                break;
            }
        }
        readers.push((c, out));
    }
    for (c, _) in &mut readers {
        c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    readers
        .into_iter()
        .map(|(c, mut out)| {
            let mut rest = Vec::new();
            out.read_to_end(&mut rest).unwrap();
            let mut output = c.wait_with_output().unwrap();
            output.stdout = rest;
            output
        })
        .collect()
}
