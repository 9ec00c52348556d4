//! The cross-process spool cases on PostgreSQL (S1, S3, S15): the test re-runs its own binary
//! as child processes (selected by an environment variable) against the same schema, the way
//! crash harnesses re-execute themselves. Children report on stdout, one line per result.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_conformance::random_queue;
use cairn_core::spool::{FactOutcome, SpoolConfig};
use cairn_core::{
    ConsumerId, DedupKey, EnqueueOptions, Error, FactName, QueueName, RunId, Spool, SystemClock,
};
use cairn_postgres::spool::testkit::spool_harness;
use cairn_postgres::testkit::{test_server_url, TEST_URL_ENV};
use cairn_postgres::{PgOptions, PgSpool, PgStore};

const ROLE_ENV: &str = "CAIRN_SPOOL_CHILD_ROLE";
const SCHEMA_ENV: &str = "CAIRN_SPOOL_CHILD_SCHEMA";
const ARG_ENV: &str = "CAIRN_SPOOL_CHILD_ARG";
const READY_LINE: &str = "cairn-spool-child-ready";
const OUT: &str = "cairn-spool-child-out ";
const DEADLINE: Duration = Duration::from_secs(20);

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child: {name} is not set"))
}

/// The child's spool: the parent's server and schema, on the system clock.
async fn child_spool() -> PgSpool {
    let url = test_server_url()
        .await
        .expect("child: the parent's test server");
    let opts = PgOptions::new(url)
        .schema(env(SCHEMA_ENV))
        .max_connections(4);
    let store = PgStore::open_with(opts)
        .await
        .expect("child: open the store");
    PgSpool::from_store(&store, Arc::new(SystemClock), SpoolConfig::default())
        .expect("child: the spool")
}

/// Reports ready, then blocks until the parent's go (a line on stdin).
fn ready_then_wait_for_go() {
    println!("\n{READY_LINE}");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("child: read go");
}

fn report(line: impl std::fmt::Display) {
    println!("{OUT}{line}");
}

/// Runs the child side when this process is a child of `test`; returns whether it was.
async fn run_child_if_asked(test: &str) -> bool {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return false;
    };
    let spool = child_spool().await;
    ready_then_wait_for_go();
    let arg = env(ARG_ENV);
    match (test, role.as_str()) {
        ("s1", tag) => s1_child(&spool, &arg, tag).await,
        ("s3", _) => s3_child(&spool, &arg).await,
        ("s15", tag) => s15_child(&spool, &arg, tag).await,
        ("s5", tag) => s5_child(&spool, &arg, tag).await,
        _ => panic!("child: unknown role {role} for {test}"),
    }
    spool.close().await;
    true
}

/// Starts this test binary as a child running `test_name` in `role`.
async fn spawn(test_name: &str, role: &str, schema: &str, arg: &str) -> Child {
    let url = test_server_url().await.expect("the test server");
    Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .env(SCHEMA_ENV, schema)
        .env(ARG_ENV, arg)
        .env(TEST_URL_ENV, url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child")
}

/// Waits until every child reports ready, releases them at once, and collects their reports.
async fn run_together(children: Vec<Child>) -> Vec<Vec<String>> {
    tokio::task::spawn_blocking(move || {
        let mut ready: Vec<(Child, BufReader<ChildStdout>)> = Vec::new();
        for mut c in children {
            let mut out = BufReader::new(c.stdout.take().expect("piped stdout"));
            let mut line = String::new();
            loop {
                line.clear();
                if out.read_line(&mut line).expect("read the child") == 0 {
                    let output = c.wait_with_output().expect("the child's output");
                    panic!(
                        "child exited before it was ready: {}\n{}",
                        output.status,
                        String::from_utf8_lossy(&output.stderr)
                    );
                }
                if line.contains(READY_LINE) {
                    break;
                }
            }
            ready.push((c, out));
        }
        for (c, _) in &mut ready {
            c.stdin
                .take()
                .expect("piped stdin")
                .write_all(b"go\n")
                .expect("release the child");
        }
        ready
            .into_iter()
            .map(|(c, mut out)| {
                let mut rest = Vec::new();
                out.read_to_end(&mut rest).expect("read the child");
                let output: Output = c.wait_with_output().expect("the child's output");
                let stdout = String::from_utf8_lossy(&rest).into_owned();
                assert!(
                    output.status.success(),
                    "child failed: {}\n{stdout}\n{}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                );
                stdout
                    .lines()
                    // libtest may print its own text on the same line as a report.
                    .filter_map(|l| l.find(OUT).map(|at| l[at + OUT.len()..].trim().to_owned()))
                    .collect()
            })
            .collect()
    })
    .await
    .expect("the children's reader")
}

const S1_KEYS: usize = 40;
const S1_ROUNDS: usize = 3;

fn s1_key(i: usize) -> DedupKey {
    DedupKey::from_parts(["gate", "refs/heads/main", &format!("sha{i}")]).expect("valid key")
}

async fn s1_child(spool: &PgSpool, queue: &str, tag: &str) {
    let q = QueueName::new(queue).expect("valid queue");
    let offset = if tag == "a" { 0 } else { S1_KEYS / 2 };
    for _ in 0..S1_ROUNDS {
        for i in 0..S1_KEYS {
            let k = (i + offset) % S1_KEYS;
            let e = spool
                .enqueue(
                    &q,
                    &s1_key(k),
                    format!("from {tag}").into_bytes(),
                    EnqueueOptions::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("child {tag}: enqueue {k}: {e}"));
            report(format_args!("{k} {} {}", e.run_id, e.created));
        }
    }
}

/// S1 across OS processes: two processes enqueue the same keys, many times each, at once;
/// every key has exactly one run id in both, exactly one enqueue (in either process) created
/// it, and the store holds exactly those runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_two_processes_duplicate_enqueues_one_run_per_key() {
    if run_child_if_asked("s1").await {
        return;
    }
    let h = spool_harness().await;
    let q = random_queue("s1-proc");
    let name = "processes::s1_two_processes_duplicate_enqueues_one_run_per_key";
    let schema = h.pg().schema();
    // The schema exists before the children start, so they only race on enqueues.
    let spool = h.spool().await.expect("parent spool");
    let children = vec![
        spawn(name, "a", schema, q.as_str()).await,
        spawn(name, "b", schema, q.as_str()).await,
    ];
    let reports = run_together(children).await;
    let mut ids: BTreeMap<usize, BTreeSet<RunId>> = BTreeMap::new();
    let mut created: BTreeMap<usize, usize> = BTreeMap::new();
    for lines in &reports {
        assert_eq!(
            lines.len(),
            S1_KEYS * S1_ROUNDS,
            "each child reports every enqueue"
        );
        for line in lines {
            let mut parts = line.split(' ');
            let k: usize = parts.next().unwrap().parse().unwrap();
            let id = RunId::parse(parts.next().unwrap()).unwrap();
            let was_created: bool = parts.next().unwrap().parse().unwrap();
            ids.entry(k).or_default().insert(id);
            *created.entry(k).or_default() += usize::from(was_created);
        }
    }
    for k in 0..S1_KEYS {
        assert_eq!(
            ids[&k].len(),
            1,
            "S1: key {k} has one run id across processes"
        );
        assert_eq!(
            created[&k], 1,
            "S1: exactly one enqueue of key {k} created it"
        );
        let id = *ids[&k].iter().next().unwrap();
        let info = spool.run(id).await.unwrap().expect("the run is stored");
        assert_eq!(info.dedup_key, s1_key(k));
    }
    let stored = spool
        .runs(
            &cairn_core::spool::RunFilter {
                queue: Some(q.clone()),
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), S1_KEYS, "S1: one stored run per key, no more");
    spool.close().await;
}

async fn s3_child(spool: &PgSpool, queue: &str) {
    let q = QueueName::new(queue).expect("valid queue");
    let key = DedupKey::from_parts(["offline-hook"]).expect("valid key");
    let e = spool
        .enqueue(
            &q,
            &key,
            b"from another process".to_vec(),
            EnqueueOptions::default(),
        )
        .await
        .expect("child: enqueue");
    report(e.run_id);
}

/// S3 across OS processes: a consumer blocked in `subscribe` wakes for another process's
/// enqueue without restart. The fallback poll is set far beyond the deadline, so only the
/// enqueue's `NOTIFY` can wake it in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_consumer_wakes_for_another_processes_enqueue() {
    if run_child_if_asked("s3").await {
        return;
    }
    let h = spool_harness().await;
    let q = random_queue("s3-proc");
    let spool = h.spool().await.expect("parent spool");
    spool.set_wake_poll(Duration::from_secs(3600));
    let mut wake = spool.subscribe(&q).await.expect("subscribe");
    assert!(
        spool
            .claim(
                &q,
                &ConsumerId::new("s3").unwrap(),
                Duration::from_secs(30),
                10
            )
            .await
            .unwrap()
            .is_empty(),
        "nothing to claim before the other process enqueues"
    );
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        wake.wait().await.map(|()| started.elapsed())
    });
    let name = "processes::s3_consumer_wakes_for_another_processes_enqueue";
    let child = spawn(name, "producer", h.pg().schema(), q.as_str()).await;
    let reports = run_together(vec![child]).await;
    let produced = RunId::parse(&reports[0][0]).expect("the child's run id");
    let waited = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("S3: the subscriber wakes within the deadline")
        .expect("waiter panicked")
        .expect("wait failed");
    let got = spool
        .claim(
            &q,
            &ConsumerId::new("s3").unwrap(),
            Duration::from_secs(30),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|c| c.run_id).collect::<Vec<_>>(),
        vec![produced],
        "S3: the woken consumer claims the other process's run"
    );
    println!("s3: woke {waited:?} after subscribing (includes the child's start-up)");
    spool.close().await;
}

const S15_FACTS: usize = 24;

async fn s15_child(spool: &PgSpool, run: &str, tag: &str) {
    let run = RunId::parse(run).expect("valid run id");
    for i in 0..S15_FACTS {
        let name = FactName::new(format!("stage.{i}")).expect("valid fact name");
        let mine = format!("{tag}-{i}").into_bytes();
        match spool.set_fact(run, &name, mine).await {
            Ok(FactOutcome::Set) => report(format_args!("{i} set")),
            Ok(FactOutcome::AlreadySet) => report(format_args!("{i} already")),
            Err(Error::FactConflict { existing, .. }) => report(format_args!(
                "{i} conflict {}",
                String::from_utf8(existing).expect("utf-8 fact")
            )),
            Err(e) => panic!("child {tag}: set_fact {i}: {e}"),
        }
    }
}

/// S15 across OS processes: two processes race to set the same facts of one run to different
/// values; per fact exactly one wins, the other gets `FactConflict` carrying the winner's
/// value, and the stored fact is the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_facts_first_writer_wins_across_processes() {
    if run_child_if_asked("s15").await {
        return;
    }
    let h = spool_harness().await;
    let q = random_queue("s15-proc");
    let spool = h.spool().await.expect("parent spool");
    let run = spool
        .enqueue(
            &q,
            &DedupKey::from_parts(["merge"]).unwrap(),
            Vec::new(),
            EnqueueOptions::default(),
        )
        .await
        .unwrap()
        .run_id;
    let name = "processes::s15_facts_first_writer_wins_across_processes";
    let arg = run.to_string();
    let children = vec![
        spawn(name, "a", h.pg().schema(), &arg).await,
        spawn(name, "b", h.pg().schema(), &arg).await,
    ];
    let reports = run_together(children).await;
    let facts = spool.facts(run).await.unwrap();
    assert_eq!(facts.len(), S15_FACTS);
    for i in 0..S15_FACTS {
        let stored =
            String::from_utf8(facts[&FactName::new(format!("stage.{i}")).unwrap()].clone())
                .unwrap();
        let mut winners = 0;
        for (lines, tag) in reports.iter().zip(["a", "b"]) {
            let line = lines
                .iter()
                .find(|l| l.split(' ').next() == Some(&i.to_string()))
                .unwrap_or_else(|| panic!("child {tag} reports fact {i}"));
            let mut parts = line.split(' ').skip(1);
            match parts.next() {
                Some("set") => {
                    winners += 1;
                    assert_eq!(
                        stored,
                        format!("{tag}-{i}"),
                        "S15: the winner's value is stored"
                    );
                }
                Some("conflict") => assert_eq!(
                    parts.next(),
                    Some(stored.as_str()),
                    "S15: the loser sees the winner's value"
                ),
                other => panic!("S15: fact {i} in child {tag}: unexpected outcome {other:?}"),
            }
        }
        assert_eq!(winners, 1, "S15: exactly one process sets fact {i}");
    }
    spool.close().await;
}

const S5_KEYS: usize = 60;

/// One process of S5: a producer enqueuing every key (in its own order) and a consumer claiming
/// and acking, at once; the consumer stops when its producer is done and the queue holds no
/// live run.
async fn s5_child(spool: &PgSpool, queue: &str, tag: &str) {
    let q = QueueName::new(queue).expect("valid queue");
    let producer = {
        let (spool, q, tag) = (spool.clone(), q.clone(), tag.to_owned());
        tokio::spawn(async move {
            for i in 0..S5_KEYS {
                let k = if tag == "a" { i } else { S5_KEYS - 1 - i };
                spool
                    .enqueue(
                        &q,
                        &DedupKey::from_parts([format!("s5-{k}")]).unwrap(),
                        Vec::new(),
                        EnqueueOptions::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("child {tag}: enqueue {k}: {e}"));
            }
        })
    };
    let me = ConsumerId::new(format!("s5-{tag}")).unwrap();
    let live = |state| cairn_core::spool::RunFilter {
        queue: Some(q.clone()),
        state: Some(state),
        after: None,
    };
    // 60 runs drain in seconds; a claim or ack that leaves runs live would loop here for ever.
    let within = 6 * DEADLINE;
    let drain_by = Instant::now() + within;
    loop {
        assert!(
            Instant::now() < drain_by,
            "child {tag}: the queue did not drain within {within:?}"
        );
        let got = spool
            .claim(&q, &me, Duration::from_secs(60), 5)
            .await
            .unwrap_or_else(|e| panic!("child {tag}: claim: {e}"));
        for c in &got {
            report(format_args!("claimed {} {}", c.run_id, c.attempt));
            spool
                .ack(c.run_id, c.token)
                .await
                .unwrap_or_else(|e| panic!("child {tag}: ack: {e}"));
            report(format_args!("acked {}", c.run_id));
        }
        if got.is_empty() && producer.is_finished() {
            let queued = spool
                .runs(&live(cairn_core::spool::RunState::Queued), 1)
                .await
                .unwrap();
            let claimed = spool
                .runs(&live(cairn_core::spool::RunState::Claimed), 1)
                .await
                .unwrap();
            if queued.is_empty() && claimed.is_empty() {
                break;
            }
        }
        if got.is_empty() {
            tokio::task::yield_now().await;
        }
    }
    producer.await.expect("producer panicked");
}

/// S5 across OS processes: two processes each enqueue the same keys while claiming and acking;
/// afterwards every key has one run, every run was delivered once (no `(run, attempt)` twice)
/// and acked once, and all succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_two_processes_enqueue_claim_ack_lose_and_duplicate_nothing() {
    if run_child_if_asked("s5").await {
        return;
    }
    let h = spool_harness().await;
    let q = random_queue("s5-proc");
    let spool = h.spool().await.expect("parent spool");
    let name = "processes::s5_two_processes_enqueue_claim_ack_lose_and_duplicate_nothing";
    let children = vec![
        spawn(name, "a", h.pg().schema(), q.as_str()).await,
        spawn(name, "b", h.pg().schema(), q.as_str()).await,
    ];
    let reports = run_together(children).await;
    let mut deliveries = BTreeSet::new();
    let mut acks: BTreeMap<RunId, usize> = BTreeMap::new();
    for line in reports.iter().flatten() {
        let mut parts = line.split(' ');
        match parts.next() {
            Some("claimed") => {
                let run = RunId::parse(parts.next().unwrap()).unwrap();
                let attempt: u32 = parts.next().unwrap().parse().unwrap();
                assert!(
                    deliveries.insert((run, attempt)),
                    "S5: run {run} attempt {attempt} delivered twice"
                );
            }
            Some("acked") => {
                *acks
                    .entry(RunId::parse(parts.next().unwrap()).unwrap())
                    .or_default() += 1;
            }
            other => panic!("unexpected report {other:?}"),
        }
    }
    let runs = spool
        .runs(
            &cairn_core::spool::RunFilter {
                queue: Some(q.clone()),
                ..Default::default()
            },
            1000,
        )
        .await
        .unwrap();
    assert_eq!(runs.len(), S5_KEYS, "S5: one run per key, none lost");
    for r in &runs {
        assert_eq!(
            r.state,
            cairn_core::spool::RunState::Succeeded,
            "S5: run {} ends succeeded",
            r.run_id
        );
        assert_eq!(
            acks.get(&r.run_id),
            Some(&1),
            "S5: run {} acked once",
            r.run_id
        );
    }
    assert_eq!(acks.len(), S5_KEYS);
    spool.close().await;
}
