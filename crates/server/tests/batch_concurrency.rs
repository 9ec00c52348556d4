//! `POST /v1/batch` under concurrency (issue 44, item 4.1), on SQLite, on Postgres and on two
//! `cairn serve` nodes over one Postgres schema: 16 clients, each sending batches that append to
//! 3 of 4 shared spaces and enqueue 6 of 12 shared keys, every list in random order, all get 200
//! at the first try. The invariant the route holds (`crates/server/src/serve/batch.rs`): every
//! batch takes all its locks — the spaces' write locks, then its queues' keys, then its runs'
//! rows — in one global order, so no two batches can wait for each other in a cycle (Postgres
//! would abort one with SQLSTATE 40P01, answered 503), and the server never reruns a batch.
//!
//! The ops on stored runs take the runs' row locks in run-id order: 16 clients appending
//! events to 4 of 6 shared runs (and setting facts on them) in random order all get 200 too.
//!
//! Each case prints its figures (requests, non-200 answers, p50/p99/max latency) on stderr.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

use common::ApiServer as Server;

const TOKEN: &str = "batch-concurrency-token-7d2e9c";
const DEADLINE: Duration = Duration::from_secs(60);
const CLIENTS: u64 = 16;
const ROUNDS: usize = 5;
const SPACES: usize = 4;
const KEYS: usize = 12;

/// A `cairn serve` on store `db` with this file's token.
fn start(db: &str) -> Server {
    Server::start(db, TOKEN, DEADLINE)
}

/// xorshift64*: the clients' random orders, the same on every run.
struct Shuffle(u64);

impl Shuffle {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `n` distinct picks of `0..of`, in random order.
    fn pick(&mut self, n: usize, of: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..of).collect();
        for i in (1..all.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            all.swap(i, j);
        }
        all.truncate(n);
        all
    }
}

/// One client's batch: appends to 3 of the spaces and enqueues 6 of the keys, both in random
/// order, interleaved at random.
fn batch(rng: &mut Shuffle, client: u64, round: usize) -> Value {
    let mut ops: Vec<Value> = rng
        .pick(3, SPACES)
        .into_iter()
        .map(|s| {
            json!({"op": "append", "space": format!("s{s}"),
                   "events": [{"kind": "k", "payload": format!("{client}/{round}")}]})
        })
        .collect();
    for key in rng.pick(6, KEYS) {
        let at = (rng.next() % (ops.len() as u64 + 1)) as usize;
        ops.insert(
            at,
            json!({"op": "enqueue", "queue": "shared", "key": format!("k{key}"), "payload": "p"}),
        );
    }
    json!({ "ops": ops })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

/// Sends the 16 clients' batches, spread over `servers`, and checks every answer is 200 and the
/// store ends with every append chained and one run per key.
fn sixteen_clients(engine: &str, servers: Vec<Server>) {
    let servers: Vec<Arc<Server>> = servers.into_iter().map(Arc::new).collect();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = Arc::clone(&servers[client as usize % servers.len()]);
            std::thread::spawn(move || {
                let mut rng = Shuffle(0x9E37_79B9_7F4A_7C15 ^ (client + 1));
                let mut answers = Vec::new();
                for round in 0..ROUNDS {
                    let body = batch(&mut rng, client, round);
                    let sent = Instant::now();
                    let (status, answer) = server.send("POST", "/v1/batch", Some(&body));
                    answers.push((status, answer, sent.elapsed()));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in clients {
        answers.extend(c.join().expect("a client panicked"));
    }
    let wall = started.elapsed();
    let mut latencies: Vec<Duration> = answers.iter().map(|a| a.2).collect();
    latencies.sort();
    let refused: Vec<String> = answers
        .iter()
        .filter(|a| a.0 != 200)
        .map(|a| format!("{} {}", a.0, a.1))
        .collect();
    eprintln!(
        "{engine}: {} batches from {CLIENTS} clients over {} node(s) in {wall:?}: {} answered \
         other than 200; p50 {:?}, p99 {:?}, max {:?}",
        answers.len(),
        servers.len(),
        refused.len(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().unwrap(),
    );
    assert!(
        refused.is_empty(),
        "{engine}: {} of {} batches were refused (a deadlock answers 503 retryable 40P01): {:?}",
        refused.len(),
        answers.len(),
        &refused[..refused.len().min(5)]
    );
    let server = &servers[0];
    let mut appended = 0;
    for s in 0..SPACES {
        let (status, heads) = server.send("GET", &format!("/v1/spaces/s{s}/heads"), None);
        assert_eq!(status, 200, "{heads}");
        let heads = heads["heads"].as_array().unwrap();
        assert_eq!(
            heads.len(),
            1,
            "{engine}: space s{s} has one head: {heads:?}"
        );
        appended += heads[0]["seq"].as_u64().unwrap();
    }
    assert_eq!(
        appended as usize,
        CLIENTS as usize * ROUNDS * 3,
        "{engine}: every append chained, seqs gap-free"
    );
    let mut runs = std::collections::BTreeSet::new();
    for (status, answer, _) in &answers {
        assert_eq!(*status, 200);
        for r in answer["results"].as_array().unwrap() {
            if r["op"] == "enqueue" {
                runs.insert(r["run_id"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(runs.len(), KEYS, "{engine}: one run per key");
}

#[test]
fn sixteen_clients_of_overlapping_batches_all_commit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    sixteen_clients("sqlite", vec![start(db.to_str().unwrap())]);
}

#[test]
fn sixteen_clients_of_overlapping_batches_all_commit_on_postgres() {
    common::on_postgres("cairn_batch_conc", |db| {
        sixteen_clients("postgres", vec![start(db)]);
    });
}

#[test]
fn sixteen_clients_of_overlapping_batches_all_commit_on_two_postgres_nodes() {
    common::on_postgres("cairn_batch_conc2", |db| {
        let first = start(db);
        sixteen_clients("postgres, two nodes", vec![first, start(db)]);
    });
}

/// 16 clients, each batch appending an event to 4 of 6 shared runs and setting a fact of its own
/// on 2 of them, in random order, over `servers`: every answer is 200 and every event is stored.
fn sixteen_clients_on_shared_runs(engine: &str, servers: Vec<Server>) {
    let servers: Vec<Arc<Server>> = servers.into_iter().map(Arc::new).collect();
    let setup: Vec<Value> = (0..6)
        .map(|i| json!({"op": "enqueue", "queue": "runs", "key": format!("r{i}"), "payload": "p"}))
        .collect();
    let (status, made) = servers[0].send("POST", "/v1/batch", Some(&json!({ "ops": setup })));
    assert_eq!(status, 200, "{made}");
    let runs: Vec<String> = made["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = Arc::clone(&servers[client as usize % servers.len()]);
            let runs = runs.clone();
            std::thread::spawn(move || {
                let mut rng = Shuffle(0xD1B5_4A32_D192_ED03 ^ (client + 1));
                let mut answers = Vec::new();
                for round in 0..ROUNDS {
                    let picked = rng.pick(4, runs.len());
                    let mut ops: Vec<Value> = picked
                        .iter()
                        .map(|&r| {
                            json!({"op": "append_event", "run_id": runs[r],
                                   "event_id": format!("c{client}-{round}"), "payload": "e"})
                        })
                        .collect();
                    for &r in &picked[..2] {
                        let at = (rng.next() % (ops.len() as u64 + 1)) as usize;
                        ops.insert(
                            at,
                            json!({"op": "set_fact", "run_id": runs[r],
                                   "name": format!("c{client}-{round}"), "value": "v"}),
                        );
                    }
                    let sent = Instant::now();
                    let (status, answer) =
                        server.send("POST", "/v1/batch", Some(&json!({ "ops": ops })));
                    answers.push((status, answer, sent.elapsed()));
                }
                answers
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in clients {
        answers.extend(c.join().expect("a client panicked"));
    }
    let wall = started.elapsed();
    let mut latencies: Vec<Duration> = answers.iter().map(|a| a.2).collect();
    latencies.sort();
    let refused: Vec<String> = answers
        .iter()
        .filter(|a| a.0 != 200)
        .map(|a| format!("{} {}", a.0, a.1))
        .collect();
    eprintln!(
        "{engine}, shared runs: {} batches from {CLIENTS} clients over {} node(s) in {wall:?}: \
         {} answered other than 200; p50 {:?}, p99 {:?}, max {:?}",
        answers.len(),
        servers.len(),
        refused.len(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().unwrap(),
    );
    assert!(
        refused.is_empty(),
        "{engine}: {} of {} batches on shared runs were refused: {:?}",
        refused.len(),
        answers.len(),
        &refused[..refused.len().min(5)]
    );
    let mut events = 0;
    for run in &runs {
        let (status, body) =
            servers[0].send("GET", &format!("/v1/runs/{run}/events?limit=1000"), None);
        assert_eq!(status, 200, "{body}");
        events += body["events"].as_array().unwrap().len();
    }
    assert_eq!(
        events,
        CLIENTS as usize * ROUNDS * 4,
        "{engine}: every event stored"
    );
}

#[test]
fn sixteen_clients_on_shared_runs_all_commit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    sixteen_clients_on_shared_runs("sqlite", vec![start(db.to_str().unwrap())]);
}

#[test]
fn sixteen_clients_on_shared_runs_all_commit_on_two_postgres_nodes() {
    common::on_postgres("cairn_batch_runs2", |db| {
        let first = start(db);
        sixteen_clients_on_shared_runs("postgres, two nodes", vec![first, start(db)]);
    });
}
