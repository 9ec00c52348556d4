//! E1/E4 across OS processes: two processes append to the same space of one SQLite file. First
//! in lockstep (the parent makes them take turns, so their writes interleave for certain and
//! each append must see the other process's last epoch as its parent), then at once. SQLite's
//! writer lock (`BEGIN IMMEDIATE`) must serialize them: every seq is taken exactly once, each
//! process sees its own seqs strictly increase, and one head with one cache row remains.
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
/// Appends each child makes in lockstep, taking turns, before both run free.
const LOCKSTEP: u64 = 20;
const SEQ_LINE: &str = "cairn-two-process-seq ";
const READY_LINE: &str = "cairn-two-process-ready";
const DONE_LINE: &str = "cairn-two-process-done";

fn space() -> SpaceId {
    SpaceId::new(b"two-process".to_vec()).unwrap()
}

/// The child's half: open the store, report ready, then follow the parent's commands on stdin:
/// `append N` appends N epochs, printing each seq on its own line and then a done line; end of
/// input ends the child.
async fn child(db: &str, name: &str) {
    let store = SqliteStore::open(db).await.unwrap();
    println!("\n{READY_LINE}");
    let mut i = 0u64;
    for line in std::io::stdin().lines() {
        let line = line.unwrap();
        let n: u64 = line
            .strip_prefix("append ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("child {name}: bad command {line:?}"));
        for _ in 0..n {
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
            i += 1;
        }
        println!("{DONE_LINE}");
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
    // The lockstep rounds interleaved the two writers: a, b, a, b, …
    let turns = usize::try_from(LOCKSTEP).unwrap();
    assert_eq!(
        per_child[0][..turns],
        (0..LOCKSTEP).map(|r| 2 * r + 1).collect::<Vec<_>>(),
        "E1: in lockstep, the first child takes every odd seq"
    );
    assert_eq!(
        per_child[1][..turns],
        (0..LOCKSTEP).map(|r| 2 * r + 2).collect::<Vec<_>>(),
        "E1: in lockstep, the second child takes every even seq"
    );
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

/// A child as the parent drives it: its stdin, and its stdout read line by line.
struct Driven {
    child: Child,
    stdin: std::process::ChildStdin,
    out: BufReader<std::process::ChildStdout>,
    /// Every seq line read so far.
    seen: String,
}

impl Driven {
    /// Reads lines until one contains `marker` (keeping seq lines); panics if the child exits.
    fn read_until(&mut self, marker: &str) {
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line).unwrap() == 0 {
                let mut stderr = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    e.read_to_string(&mut stderr).unwrap();
                }
                panic!("child exited before {marker:?}:\n{}\n{stderr}", self.seen);
            }
            if line.contains(SEQ_LINE) {
                self.seen.push_str(&line);
            }
            if line.contains(marker) {
                return;
            }
        }
    }

    fn command(&mut self, n: u64) {
        writeln!(self.stdin, "append {n}").unwrap();
        self.stdin.flush().unwrap();
    }
}

/// Waits until both children report ready, runs the lockstep rounds (one append each, in
/// turn, each waited for), then lets both append the rest at once; collects their output
/// (the seq lines, plus the full stderr).
fn run_together(children: [Child; 2]) -> Vec<Output> {
    let mut driven: Vec<Driven> = children
        .into_iter()
        .map(|mut child| {
            let stdin = child.stdin.take().unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            Driven {
                child,
                stdin,
                out,
                seen: String::new(),
            }
        })
        .collect();
    for d in &mut driven {
        d.read_until(READY_LINE);
    }
    for _ in 0..LOCKSTEP {
        for d in &mut driven {
            d.command(1);
            d.read_until(DONE_LINE);
        }
    }
    for d in &mut driven {
        d.command(PER_CHILD - LOCKSTEP);
    }
    driven
        .into_iter()
        .map(|mut d| {
            d.read_until(DONE_LINE);
            drop(d.stdin);
            let mut rest = String::new();
            d.out.read_to_string(&mut rest).unwrap();
            let mut output = d.child.wait_with_output().unwrap();
            output.stdout = d.seen.into_bytes();
            output
        })
        .collect()
}
