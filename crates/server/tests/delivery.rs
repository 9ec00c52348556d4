//! `cairn serve`'s delivery worker, end to end: the real binary forwards run event batches to a
//! real HTTP collector running in the test on a loopback port. The collector answers each run's
//! requests from a script carried in the run's payload (`"429,202"`: first 429, then 202), so
//! the answers do not depend on the order in which retries interleave. Every wait polls a
//! condition with a deadline; retry delays are kept short through the server's
//! `--delivery-retry-*` options.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cairn;

const FULL: &str = "full-token-6f1d2c9a8b7e";
const OLD_TOKEN: &str = "collector-token-old-1234";
const NEW_TOKEN: &str = "collector-token-new-5678";
const DEADLINE: Duration = Duration::from_secs(30);
/// The size a "huge" answer announces; the worker must stop reading long before.
const HUGE: u64 = 1 << 30;

/// One request the collector received.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    auth: Option<String>,
    body: Value,
    /// When the collector read it.
    at: Instant,
}

/// A loopback HTTP/1.1 collector that records requests and answers from per-run scripts.
#[derive(Default)]
struct Collector {
    seen: Mutex<Vec<Seen>>,
    answered: Mutex<HashMap<String, usize>>,
    /// Runs whose requests wait here until released.
    held: Mutex<Vec<String>>,
    release: AtomicBool,
    /// Runs whose `holdrun` requests may go on (released one by one).
    released_runs: Mutex<Vec<String>>,
    huge_written: AtomicU64,
    huge_cut: AtomicBool,
}

impl Collector {
    fn start() -> (Arc<Self>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let me = Arc::new(Self::default());
        let c = me.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let c = c.clone();
                std::thread::spawn(move || c.serve(stream));
            }
        });
        (me, format!("http://{addr}"))
    }

    fn serve(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let (mut len, mut auth) = (0usize, None);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                let (name, value) = h.split_once(':').unwrap();
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => len = value.trim().parse().unwrap(),
                    "authorization" => auth = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let run = body["run_id"].as_str().unwrap_or("").to_owned();
            let script = body["payload"].as_str().unwrap_or("").to_owned();
            self.seen.lock().unwrap().push(Seen {
                path,
                auth: auth.clone(),
                body,
                at: Instant::now(),
            });
            let n = {
                let mut a = self.answered.lock().unwrap();
                let n = a.entry(run.clone()).or_default();
                *n += 1;
                *n - 1
            };
            let step = script.split(',').nth(n).unwrap_or("202").to_owned();
            let answer = |out: &mut TcpStream, status: u16| {
                let _ = write!(
                    out,
                    "HTTP/1.1 {status} X\r\ncontent-length: 6\r\n\r\nscript"
                );
            };
            match step.as_str() {
                "hold" => {
                    self.held.lock().unwrap().push(run);
                    while !self.release.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    answer(&mut out, 202);
                }
                // Waits until the test releases this run alone.
                "holdrun" => {
                    self.held.lock().unwrap().push(run.clone());
                    while !self.released_runs.lock().unwrap().contains(&run) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    answer(&mut out, 202);
                }
                "auth" => {
                    let good = auth.as_deref() == Some(&format!("Bearer {NEW_TOKEN}"));
                    answer(&mut out, if good { 202 } else { 401 });
                }
                // Never answers: the worker's request timeout must end it.
                "hang" => {
                    let mut sink = [0u8; 64];
                    while matches!(reader.read(&mut sink), Ok(n) if n > 0) {}
                    return;
                }
                // 404 with a body in two chunks, `ab` then `cdefgh`.
                "chunked404" => {
                    let _ = write!(
                        out,
                        "HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n\
                         2\r\nab\r\n6\r\ncdefgh\r\n0\r\n\r\n"
                    );
                }
                // Too many requests, come back in an hour.
                "429wait" => {
                    let _ = write!(
                        out,
                        "HTTP/1.1 429 Too Many\r\nretry-after: 3600\r\ncontent-length: 4\r\n\r\nslow"
                    );
                }
                "redirect" => {
                    let _ = write!(
                        out,
                        "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n"
                    );
                }
                "huge" => {
                    let _ = write!(
                        out,
                        "HTTP/1.1 202 Accepted\r\ncontent-length: {HUGE}\r\n\r\n"
                    );
                    let chunk = vec![b'x'; 64 * 1024];
                    let mut written = 0u64;
                    while written < HUGE {
                        if out.write_all(&chunk).is_err() {
                            self.huge_cut.store(true, Ordering::SeqCst);
                            break;
                        }
                        written += chunk.len() as u64;
                        self.huge_written.store(written, Ordering::SeqCst);
                    }
                    return;
                }
                s => answer(&mut out, s.parse().unwrap()),
            }
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn for_run(&self, run: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.body["run_id"] == run)
            .collect()
    }
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `cairn enqueue` straight to the store (no server path): prints `<id> created`.
fn enqueue_offline(db: &str, key: &str, payload: &str) -> String {
    let out = cairn(db)
        .args([
            "enqueue",
            "--queue",
            "telemetry",
            "--key",
            key,
            "--payload",
            payload,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split_whitespace().next().unwrap().to_owned()
}

struct Server {
    child: Child,
    base: String,
    agent: ureq::Agent,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Server {
    fn start(db: &str, collector: &str, env: &[(&str, &str)], extra: &[&str]) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--delivery-url", &format!("{collector}/ingest")]);
        // Short retry delays unless the test sets its own.
        if !extra.contains(&"--delivery-retry-base-ms") {
            cmd.args([
                "--delivery-retry-base-ms",
                "20",
                "--delivery-retry-cap-ms",
                "100",
            ]);
        }
        if !extra.contains(&"--delivery-max-response-bytes") {
            cmd.args(["--delivery-max-response-bytes", "1024"]);
        }
        cmd.args(["--delivery-poll-ms", "100"])
            .args(extra)
            .env("CAIRN_AUTH__TOKENS", FULL)
            .envs(env.iter().copied());
        let common::Serving {
            child,
            stderr,
            addr,
        } = common::serve(&mut cmd, DEADLINE);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(DEADLINE))
            .build()
            .into();
        Self {
            child,
            base: format!("http://{addr}"),
            agent,
            stderr,
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let req = ureq::http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {FULL}"))
            .header("Content-Type", "application/json");
        let body = body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        let mut resp = self.agent.run(req.body(body).unwrap()).unwrap();
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    fn enqueue(&self, key: &str, payload: &str) -> String {
        let (s, v) = self.call(
            "POST",
            "/v1/queues/telemetry/runs",
            Some(json!({"key": key, "payload": payload})),
        );
        assert_eq!(s, 201, "{v}");
        v["run_id"].as_str().unwrap().to_owned()
    }

    fn append_event(&self, run: &str, id: &str, payload: &str) {
        let (s, v) = self.call(
            "POST",
            &format!("/v1/runs/{run}/events"),
            Some(json!({"event_id": id, "payload": payload})),
        );
        assert_eq!(s, 201, "{v}");
    }

    /// Closes a run's event stream; answers whether it was open.
    fn close(&self, run: &str) {
        let (s, v) = self.call("POST", &format!("/v1/runs/{run}/close"), None);
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["run_id"], run, "{v}");
    }

    fn run(&self, run: &str) -> Value {
        let (s, v) = self.call("GET", &format!("/v1/runs/{run}"), None);
        assert_eq!(s, 200, "{v}");
        v
    }

    fn wait_state(&self, run: &str, state: &str) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let last = self.run(run);
            if last["state"] == state {
                return last;
            }
            assert!(
                Instant::now() < deadline,
                "run {run} never became {state}: {last}; server stderr: {}",
                String::from_utf8_lossy(&self.stderr.lock().unwrap())
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn metrics(&self) -> String {
        self.agent
            .get(format!("{}/metrics", self.base))
            .header("Authorization", format!("Bearer {FULL}"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    }

    /// How many deliveries ended with `outcome` so far.
    fn outcomes(&self, outcome: &str) -> u64 {
        let prefix = format!("cairn_delivery_outcomes_total{{outcome=\"{outcome}\"}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |n| n.parse().unwrap())
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Sends SIGTERM: the server begins its drain.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn stop(self) -> String {
        self.terminate();
        self.wait_exit()
    }

    /// Waits for the server to exit; its stderr.
    fn wait_exit(mut self) -> String {
        let deadline = Instant::now() + DEADLINE;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the server stops in time");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The thread draining the server's stderr holds the other reference until it reads the
        // end of the pipe: then every line the server wrote is here.
        wait_until("the server's stderr is read to its end", || {
            Arc::strong_count(&self.stderr) == 1
        });
        self.stderr()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sqlite_db(dir: &tempfile::TempDir) -> String {
    dir.path().join("cairn.db").display().to_string()
}

/// Offline enqueues (another process writing straight to the store) reach the collector in
/// enqueue order with their events in seq order, while the server keeps running.
fn offline_enqueues_delivered_in_order(db: &str) {
    let (collector, url) = Collector::start();
    let server = Server::start(db, &url, &[], &[]);
    // The first run's request is held, so the later runs and their events are all stored
    // before the worker claims the next run.
    let gate = enqueue_offline(db, "gate", "hold");
    wait_until("the gate run reaches the collector", || {
        collector.held.lock().unwrap().contains(&gate)
    });
    let r1 = enqueue_offline(db, "r1", "202");
    let r2 = enqueue_offline(db, "r2", "202");
    let r3 = enqueue_offline(db, "r3", "202");
    for (i, e) in ["started", "built", "completed"].iter().enumerate() {
        server.append_event(&r1, &format!("e{i}"), e);
    }
    server.append_event(&r3, "only", "single");
    // The producers are done: the gate through the API, the others with the CLI, straight to
    // the store like their enqueues. Only a closed run is finished by delivery.
    server.close(&gate);
    for run in [&r1, &r2, &r3] {
        let out = cairn(db).args(["run", "close", run]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("closed {run}\n")
        );
    }
    collector.release.store(true, Ordering::SeqCst);
    for run in [&gate, &r1, &r2, &r3] {
        server.wait_state(run, "succeeded");
    }
    let order: Vec<String> = collector
        .seen()
        .iter()
        .map(|s| s.body["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(order, vec![gate, r1.clone(), r2, r3.clone()]);
    let first = &collector.for_run(&r1)[0];
    assert_eq!(first.path, "/ingest");
    assert_eq!(first.body["queue"], "telemetry");
    assert_eq!(first.body["payload"], "202");
    let events: Vec<(u64, String, String)> = first.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["event_id"].as_str().unwrap().to_owned(),
                e["payload"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![
            (1, "e0".into(), "started".into()),
            (2, "e1".into(), "built".into()),
            (3, "e2".into(), "completed".into())
        ]
    );
    assert_eq!(
        collector.for_run(&r3)[0].body["events"][0]["event_id"],
        "only"
    );
    // Delivered events are acknowledged: the runs hold none any more.
    for run in [&r1, &r3] {
        let (s, v) = server.call("GET", &format!("/v1/runs/{run}/events"), None);
        assert_eq!(s, 200);
        assert_eq!(v["events"], json!([]), "{run}");
    }
    server.stop();
}

#[test]
fn offline_enqueues_are_delivered_in_order_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    offline_enqueues_delivered_in_order(&sqlite_db(&dir));
}

#[test]
fn offline_enqueues_are_delivered_in_order_on_postgres() {
    on_postgres(offline_enqueues_delivered_in_order);
}

fn on_postgres(case: fn(&str)) {
    common::on_postgres("cairn_delivery", case);
}

#[test]
fn collector_answers_ack_refresh_park_or_retry_each_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let token_file = dir.path().join("collector-token");
    std::fs::write(&token_file, format!("{OLD_TOKEN}\n")).unwrap();
    let (collector, url) = Collector::start();
    let server = Server::start(
        &db,
        &url,
        &[],
        &[
            "--delivery-token-file",
            token_file.to_str().unwrap(),
            "--delivery-timeout-ms",
            "1000",
        ],
    );
    // Rotated after start: the server still holds the old token until a 401 makes it look.
    std::fs::write(&token_file, format!("{NEW_TOKEN}\n")).unwrap();

    // A gate run holds the worker while every other run is enqueued and closed, so each is
    // closed before the worker first takes it and each POST below is one the script counts.
    let gate = server.enqueue("gate", "hold");
    wait_until("the gate run reaches the collector", || {
        collector.held.lock().unwrap().contains(&gate)
    });
    let scripts = [
        ("accepted", "202"),
        ("refresh", "auth"),
        ("forbidden", "403"),
        ("limited", "429,202"),
        ("waits", "429wait,202"),
        ("failing", "500,503,202"),
        ("slow", "hang,202"),
        ("moved", "redirect"),
        ("huge", "huge"),
    ];
    let ids: HashMap<&str, String> = scripts
        .iter()
        .map(|(key, script)| {
            let id = server.enqueue(key, script);
            server.close(&id);
            (*key, id)
        })
        .collect();
    server.close(&gate);
    let released_us = common::now_us();
    collector.release.store(true, Ordering::SeqCst);
    server.wait_state(&gate, "succeeded");
    assert_eq!(collector.for_run(&gate).len(), 1);

    let accepted = ids["accepted"].clone();
    let v = server.wait_state(&accepted, "succeeded");
    assert_eq!(v["attempts"], 1);
    assert_eq!(collector.for_run(&accepted).len(), 1);

    let refresh = ids["refresh"].clone();
    let v = server.wait_state(&refresh, "succeeded");
    let seen = collector.for_run(&refresh);
    let auths: Vec<_> = seen.iter().map(|s| s.auth.clone().unwrap()).collect();
    assert_eq!(
        auths,
        vec![format!("Bearer {OLD_TOKEN}"), format!("Bearer {NEW_TOKEN}")]
    );
    assert_eq!(seen[0].body, seen[1].body, "the same batch, sent again");
    assert_eq!(
        v["attempts"], 1,
        "the refresh retries within the same attempt"
    );

    // A refused token (403 here, 401 above) is this server's problem: the run is given back
    // and spends no attempt.
    let forbidden = ids["forbidden"].clone();
    let v = server.wait_state(&forbidden, "succeeded");
    assert_eq!(v["attempts"], 1, "{v}");
    assert_eq!(collector.for_run(&forbidden).len(), 2);

    let limited = ids["limited"].clone();
    let v = server.wait_state(&limited, "succeeded");
    assert_eq!(v["attempts"], 2);
    assert_eq!(collector.for_run(&limited).len(), 2);

    // A 429 with `Retry-After`: the run waits what the collector asked, not the backoff.
    let waits = ids["waits"].clone();
    let v = server.wait_state(&waits, "queued");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("retry after 3600 s"), "{v}");
    assert_eq!(v["attempts"], 1, "{v}");
    let due = v["due_at_us"].as_i64().unwrap();
    let hour = 3_600_000_000i64;
    assert!(
        (released_us + hour..=common::now_us() + hour).contains(&due),
        "due an hour after the 429 (answered after {released_us} µs), not after the backoff: {v}"
    );
    assert_eq!(collector.for_run(&waits).len(), 1);

    let failing = ids["failing"].clone();
    let v = server.wait_state(&failing, "succeeded");
    assert_eq!(v["attempts"], 3);
    assert_eq!(collector.for_run(&failing).len(), 3);

    let slow = ids["slow"].clone();
    let v = server.wait_state(&slow, "succeeded");
    assert_eq!(v["attempts"], 2);
    assert_eq!(collector.for_run(&slow).len(), 2);

    let moved = ids["moved"].clone();
    let v = server.wait_state(&moved, "parked");
    assert!(v["reason"].as_str().unwrap().contains("redirect"), "{v}");
    assert_eq!(collector.for_run(&moved).len(), 1);
    assert!(
        collector.seen().iter().all(|s| s.path == "/ingest"),
        "no redirect was followed"
    );

    let huge = ids["huge"].clone();
    server.wait_state(&huge, "succeeded");
    wait_until("the worker drops the huge answer", || {
        collector.huge_cut.load(Ordering::SeqCst)
    });
    let written = collector.huge_written.load(Ordering::SeqCst);
    assert!(written < HUGE / 16, "the worker read on: {written} bytes");

    // Each outcome is counted once per run attempt (an outcome is recorded before the spool
    // settles the run, so every run's final state above implies its count).
    let metrics = server.metrics();
    for (outcome, n) in [
        ("ack", 8),
        ("retry", 5),
        ("park", 1),
        ("refresh", 1),
        ("refused", 1),
    ] {
        let line = format!("cairn_delivery_outcomes_total{{outcome=\"{outcome}\"}} {n}\n");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    // The library's own series, through the `metrics` facade: the delivery worker is a spool
    // consumer, and what it handled is counted per queue and outcome (recorded once the run is
    // settled, so waited for).
    let handled =
        "cairn_spool_consumer_handled_total{queue=\"telemetry\",outcome=\"succeeded\"} 8\n";
    wait_until("the consumer's series show every acked run", || {
        server.metrics().contains(handled)
    });
    let metrics = server.metrics();
    assert!(
        metrics.contains("cairn_spool_consumer_claimed_total{queue=\"telemetry\"} ")
            && metrics.contains("cairn_spool_consumer_handler_seconds_count{queue=\"telemetry\"} "),
        "{metrics}"
    );

    let stderr = server.stop();
    for secret in [OLD_TOKEN, NEW_TOKEN, url.as_str()] {
        assert!(!stderr.contains(secret), "stderr shows a secret: {stderr}");
    }
}

#[test]
fn shutdown_drains_within_the_bound_and_leaves_an_unfinished_run_claimable() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (collector, url) = Collector::start();
    // The collector never answers and the request timeout is long: only the drain bound ends it.
    let server = Server::start(
        &db,
        &url,
        &[],
        &["--drain-timeout", "1", "--delivery-timeout-ms", "600000"],
    );
    let run = server.enqueue("stuck", "hang");
    server.append_event(&run, "e1", "kept");
    wait_until("the run's request reaches the collector", || {
        !collector.for_run(&run).is_empty()
    });
    let started = Instant::now();
    let stderr = server.stop();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the server stopped after {:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains("delivery did not finish within the drain timeout"),
        "the abandoned run is logged: {stderr}"
    );
    let out = cairn(&db).args(["run", "show", &run]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains("state claimed") || shown.contains("state queued"),
        "the unfinished run stays claimable: {shown}"
    );
    assert!(
        shown.contains("event 1 e1 kept"),
        "its events are kept: {shown}"
    );
}

/// The collector's batches for `run`, flattened to `(seq, event id)` in the order they were
/// POSTed.
fn delivered_events(collector: &Collector, run: &str) -> Vec<(u64, String)> {
    collector
        .for_run(run)
        .iter()
        .flat_map(|s| s.body["events"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            (
                e["seq"].as_u64().unwrap(),
                e["event_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Issue 21 item 1: an event whose append was acknowledged is delivered, whatever the timing.
/// Events appended before the first POST, while it is in flight (the collector holds it until
/// they are appended) and after it all reach the collector, in seq order, each at least once;
/// the run is finished only after its producer closed it, and an append to a finished run is
/// refused with 409 `run_closed`.
fn events_before_during_and_after_the_first_post_arrive(db: &str) {
    let (collector, url) = Collector::start();
    let server = Server::start(db, &url, &[], &[]);
    // The gate holds the worker until the run below has its first events.
    let gate = server.enqueue("gate", "hold");
    wait_until("the gate run reaches the collector", || {
        collector.held.lock().unwrap().contains(&gate)
    });
    let run = server.enqueue("build-1", "holdrun");
    server.append_event(&run, "before-1", "b");
    server.append_event(&run, "before-2", "b");
    server.close(&gate);
    collector.release.store(true, Ordering::SeqCst);
    wait_until("the run's first POST is in flight", || {
        collector.held.lock().unwrap().contains(&run)
    });
    // Appended while the first POST waits for its answer.
    server.append_event(&run, "during-1", "d");
    server.append_event(&run, "during-2", "d");
    collector.released_runs.lock().unwrap().push(run.clone());
    wait_until("the first POST is answered", || {
        collector.for_run(&run).len() >= 2
    });
    // Appended after the first POST was answered; then the producer is done.
    server.append_event(&run, "after-1", "a");
    server.append_event(&run, "after-2", "a");
    server.close(&run);
    let v = server.wait_state(&run, "succeeded");
    assert_eq!(v["stream"], "closed", "{v}");
    assert_eq!(v["events"], 0, "every event was acknowledged: {v}");

    let posts = collector.for_run(&run);
    let first: Vec<&str> = posts[0].body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(first, ["before-1", "before-2"], "the first POST");
    let mut once: Vec<(u64, String)> = Vec::new();
    for e in delivered_events(&collector, &run) {
        if !once.contains(&e) {
            once.push(e);
        }
    }
    let want: Vec<(u64, String)> = [
        "before-1", "before-2", "during-1", "during-2", "after-1", "after-2",
    ]
    .iter()
    .enumerate()
    .map(|(i, id)| (i as u64 + 1, (*id).to_owned()))
    .collect();
    assert_eq!(once, want, "every event, in seq order");

    // The run is finished: a late event is refused, never stored and dropped.
    let (s, v) = server.call(
        "POST",
        &format!("/v1/runs/{run}/events"),
        Some(json!({"event_id": "late", "payload": "x"})),
    );
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("run_closed")),
        "{v}"
    );
    let (s, v) = server.call("GET", &format!("/v1/runs/{run}/events"), None);
    assert_eq!((s, &v["events"]), (200, &json!([])), "{v}");
    let (s, v) = server.call("POST", &format!("/v1/runs/{run}/close"), None);
    assert_eq!(
        (s, v["outcome"].as_str()),
        (200, Some("already_closed")),
        "{v}"
    );
    server.stop();
}

#[test]
fn events_before_during_and_after_the_first_post_arrive_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    events_before_during_and_after_the_first_post_arrive(&sqlite_db(&dir));
}

#[test]
fn events_before_during_and_after_the_first_post_arrive_on_postgres() {
    on_postgres(events_before_during_and_after_the_first_post_arrive);
}

/// Issue 21 item 2: a refused collector token never parks a run. With `max_attempts` 3 and a
/// collector that answers 401 to each run's first six POSTs (longer than three backoffs), then
/// 202, every run is delivered and none is parked: a refusal gives the run back (no attempt
/// spent) and pauses deliveries with backoff.
fn a_refused_token_never_parks_a_run(db: &str) {
    let (collector, url) = Collector::start();
    let server = Server::start(db, &url, &[("CAIRN_DELIVERY__TOKEN", OLD_TOKEN)], &[]);
    let script = "401,401,401,401,401,401,202";
    let runs: Vec<String> = (0..3)
        .map(|i| {
            let (s, v) = server.call(
                "POST",
                "/v1/queues/telemetry/runs",
                Some(json!({"key": format!("refused-{i}"), "payload": script, "max_attempts": 3})),
            );
            assert_eq!(s, 201, "{v}");
            let run = v["run_id"].as_str().unwrap().to_owned();
            server.append_event(&run, "e1", "kept");
            server.close(&run);
            run
        })
        .collect();
    for run in &runs {
        let v = server.wait_state(run, "succeeded");
        assert_eq!(v["attempts"], 1, "no attempt was spent: {v}");
        let posts = collector.for_run(run);
        assert!(
            posts
                .iter()
                .all(|p| p.auth.as_deref() == Some(&format!("Bearer {OLD_TOKEN}"))),
            "the token of CAIRN_DELIVERY__TOKEN is sent: {posts:?}"
        );
        assert!(
            posts.len() >= 7,
            "six refusals, then delivered: {}",
            posts.len()
        );
        assert!(
            delivered_events(&collector, run).contains(&(1, "e1".to_owned())),
            "{run}: its event arrived"
        );
    }
    server.stop();
}

#[test]
fn a_refused_token_never_parks_a_run_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_refused_token_never_parks_a_run(&sqlite_db(&dir));
}

#[test]
fn a_refused_token_never_parks_a_run_on_postgres() {
    on_postgres(a_refused_token_never_parks_a_run);
}

/// Issue 21 item 2, across a crash: a refused run is given back at once (queued, its attempt
/// returned), not held while the worker waits, so killing the server (SIGKILL) during the
/// outage spends nothing. With `max_attempts` 1, the collector refuses the first POST (401);
/// the run is then seen queued with `attempts` 0; the server is killed and started again, the
/// collector accepts, and the run succeeds on its one attempt instead of being parked when a
/// held lease expires.
fn a_refused_run_is_given_back_and_survives_a_crash(db: &str) {
    let (collector, url) = Collector::start();
    // A long refusal wait keeps the released run queued (not due) while the server is killed.
    let slow_retry = [
        "--delivery-retry-base-ms",
        "3000",
        "--delivery-retry-cap-ms",
        "3000",
    ];
    let env = [("CAIRN_DELIVERY__TOKEN", OLD_TOKEN)];
    let mut server = Server::start(db, &url, &env, &slow_retry);
    let (s, v) = server.call(
        "POST",
        "/v1/queues/telemetry/runs",
        Some(json!({"key": "refused-crash", "payload": "401,202", "max_attempts": 1})),
    );
    assert_eq!(s, 201, "{v}");
    let run = v["run_id"].as_str().unwrap().to_owned();
    server.append_event(&run, "e1", "kept");
    server.close(&run);
    wait_until("the collector refuses the run once", || {
        !collector.for_run(&run).is_empty()
    });
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = server.run(&run);
        if v["state"] == "queued" {
            assert_eq!(
                v["attempts"], 0,
                "the refused claim's attempt is given back: {v}"
            );
            break;
        }
        // Held by the worker (claimed) until it gives the run back; any other state means it
        // never did.
        assert_eq!(
            v["state"], "claimed",
            "the refused run was never given back: {v}"
        );
        assert!(
            Instant::now() < deadline,
            "the refused run is still held by the worker: {v}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(collector.for_run(&run).len(), 1, "one refused POST so far");
    // SIGKILL: no drain, no release on shutdown.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    drop(server);

    let server = Server::start(db, &url, &env, &slow_retry);
    let v = server.wait_state(&run, "succeeded");
    assert_eq!(v["attempts"], 1, "delivered on its only attempt: {v}");
    assert_eq!(
        collector.for_run(&run).len(),
        2,
        "refused once, then delivered"
    );
    assert!(
        delivered_events(&collector, &run).contains(&(1, "e1".to_owned())),
        "its event arrived"
    );
    server.stop();
}

#[test]
fn a_refused_run_is_given_back_and_survives_a_crash_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_refused_run_is_given_back_and_survives_a_crash(&sqlite_db(&dir));
}

#[test]
fn a_refused_run_is_given_back_and_survives_a_crash_on_postgres() {
    on_postgres(a_refused_run_is_given_back_and_survives_a_crash);
}

/// The event ids of each POST the collector received for `run`, in order.
fn batches(collector: &Collector, run: &str) -> Vec<Vec<String>> {
    collector
        .for_run(run)
        .iter()
        .map(|s| {
            s.body["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["event_id"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect()
}

/// A gate run whose POST the collector holds until `collector.release`, so that the runs a
/// test sets up are stored (and closed) before the worker takes them.
fn hold_the_worker(server: &Server, collector: &Collector) -> String {
    let gate = server.enqueue("gate", "hold");
    wait_until("the gate run reaches the collector", || {
        collector.held.lock().unwrap().contains(&gate)
    });
    gate
}

fn let_the_worker_go(server: &Server, collector: &Collector, gate: &str) {
    server.close(gate);
    collector.release.store(true, Ordering::SeqCst);
    server.wait_state(gate, "succeeded");
}

/// A run its producer has not closed yet is POSTed once with no events when the worker first
/// takes it (so the collector learns of it), and not again each time the worker takes it to
/// look for events; once closed with none, it gets one more POST and is finished. Two runs wait
/// at once, so the worker must remember both as announced.
#[test]
fn an_open_run_is_announced_once_while_it_waits_for_its_producer() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (collector, url) = Collector::start();
    let server = Server::start(&db, &url, &[], &[]);
    let runs = [
        server.enqueue("waiting-1", "202"),
        server.enqueue("waiting-2", "202"),
    ];
    // Each take of a waiting run that finds nothing new ends in a release (every 100 ms here):
    // two for the first takes, then each run taken again twice or more.
    wait_until("the worker takes the waiting runs again and again", || {
        server.outcomes("release") >= 6
    });
    for run in &runs {
        assert_eq!(batches(&collector, run), [Vec::<String>::new()], "{run}");
    }
    for run in &runs {
        server.close(run);
    }
    for run in &runs {
        server.wait_state(run, "succeeded");
        assert_eq!(
            batches(&collector, run),
            [Vec::<String>::new(), Vec::new()],
            "{run}: announced, then once more when closed"
        );
    }
    server.stop();
}

/// A closed run with more events than `--delivery-batch` is delivered whole, a full batch at a
/// time and the rest in a short one, before it is finished.
#[test]
fn a_closed_run_with_more_events_than_a_batch_is_delivered_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (collector, url) = Collector::start();
    let server = Server::start(&db, &url, &[], &["--delivery-batch", "2"]);
    let gate = hold_the_worker(&server, &collector);
    let run = server.enqueue("five-events", "202");
    for i in 1..=5 {
        server.append_event(&run, &format!("e{i}"), "x");
    }
    server.close(&run);
    let_the_worker_go(&server, &collector, &gate);
    let v = server.wait_state(&run, "succeeded");
    assert_eq!(v["events"], 0, "every event was acknowledged: {v}");
    assert_eq!(
        batches(&collector, &run),
        [vec!["e1", "e2"], vec!["e3", "e4"], vec!["e5"]]
    );
    server.stop();
}

/// Stopping the server (SIGTERM) while a run's last batch is in flight waits for it within the
/// drain bound: the collector answers only after the server began to shut down, yet the run is
/// finished (its events acknowledged, the run acked) before the server exits, and a clean drain
/// logs no warning.
#[test]
fn stopping_the_server_lets_the_delivery_in_flight_finish() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (collector, url) = Collector::start();
    let server = Server::start(&db, &url, &[], &["--drain-timeout", "20"]);
    let gate = hold_the_worker(&server, &collector);
    let run = server.enqueue("in-flight", "holdrun");
    server.append_event(&run, "e1", "last");
    server.close(&run);
    let_the_worker_go(&server, &collector, &gate);
    wait_until("the run's POST is in flight", || {
        collector.held.lock().unwrap().contains(&run)
    });
    server.terminate();
    wait_until("the server begins to shut down", || {
        server.stderr().contains("shutting down")
    });
    collector.released_runs.lock().unwrap().push(run.clone());
    let stderr = server.wait_exit();
    assert!(
        !stderr.contains("delivery did not finish within the drain timeout"),
        "the drain was clean: {stderr}"
    );
    let out = cairn(&db).args(["run", "show", &run]).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(shown.contains("state succeeded"), "{shown}; {stderr}");
    assert!(
        !shown.contains("event 1 e1"),
        "its event was acknowledged: {shown}"
    );
    assert_eq!(batches(&collector, &run), [vec!["e1"]]);
}

/// The `wait_ms` of each refusal the server logged (JSON log lines), in order.
fn refusal_waits(server: &Server) -> Vec<u64> {
    server
        .stderr()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.contains("refused the delivery token"))
        })
        .map(|l| l["wait_ms"].as_u64().unwrap())
        .collect()
}

/// A refusal pauses deliveries of every run, not only the refused one: runs `first` (401, then
/// 202) and `second` (202) wait behind a gate; the collector refuses `first`, and `second`,
/// taken during the pause, is given back without a POST: no POST reaches the collector until
/// the logged wait is over. A delivered batch then ends the refusal streak: a later refusal
/// waits the first step of the backoff again (`retry_base_ms` at most), not the doubled one.
#[test]
fn a_refusal_pauses_every_run_and_a_delivered_batch_ends_the_streak() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (collector, url) = Collector::start();
    let server = Server::start(
        &db,
        &url,
        &[
            ("CAIRN_DELIVERY__TOKEN", OLD_TOKEN),
            ("CAIRN_LOG__FORMAT", "json"),
        ],
        &[
            "--delivery-retry-base-ms",
            "1000",
            "--delivery-retry-cap-ms",
            "8000",
        ],
    );
    let gate = hold_the_worker(&server, &collector);
    let first = server.enqueue("first", "401,202");
    let second = server.enqueue("second", "202");
    for run in [&first, &second] {
        server.close(run);
    }
    let_the_worker_go(&server, &collector, &gate);
    for run in [&first, &second] {
        let v = server.wait_state(run, "succeeded");
        assert_eq!(v["attempts"], 1, "no attempt was spent: {v}");
    }
    let waits = refusal_waits(&server);
    assert_eq!(waits.len(), 1, "{waits:?}");
    let wait = Duration::from_millis(waits[0]);
    // The first step of the backoff: 1000 ms with equal jitter.
    assert!(
        (500..=1000).contains(&waits[0]),
        "the first refusal waits {wait:?}"
    );
    let refused = collector.for_run(&first)[0].clone();
    let after: Vec<Seen> = collector
        .seen()
        .into_iter()
        .filter(|s| s.at > refused.at)
        .collect();
    assert_eq!(after.len(), 2, "first again and second: {after:?}");
    for s in &after {
        assert!(
            s.at.duration_since(refused.at) >= wait,
            "a POST {:?} after the refusal, within its wait of {wait:?}: {}",
            s.at.duration_since(refused.at),
            s.body["run_id"]
        );
    }
    assert_eq!(collector.for_run(&second).len(), 1, "no POST while paused");

    // The deliveries above ended the streak: the next refusal starts it over.
    let third = server.enqueue("third", "401,202");
    server.close(&third);
    server.wait_state(&third, "succeeded");
    let waits = refusal_waits(&server);
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(
        (500..=1000).contains(&waits[1]),
        "a refusal after a delivered batch waits the first step again: {waits:?}"
    );
    server.stop();
}

/// At most `--delivery-max-response-bytes` of an answer are read, however it arrives: the
/// collector answers 404 with a body sent in two chunks (`ab`, then `cdefgh`), and with a cap
/// of 4 bytes the parked run's reason quotes exactly the first four, `abcd`.
#[test]
fn a_parked_runs_reason_quotes_at_most_max_response_bytes_of_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let (_collector, url) = Collector::start();
    let server = Server::start(&db, &url, &[], &["--delivery-max-response-bytes", "4"]);
    let run = server.enqueue("cut-answer", "chunked404");
    let v = server.wait_state(&run, "parked");
    assert_eq!(v["reason"], "the collector answered 404: abcd", "{v}");
    server.stop();
}

/// A transport error is named in the run's reason, in words and without the URL: a run with
/// one attempt whose request times out is parked with "the collector did not answer in time",
/// and one whose collector refuses connections with "cannot connect to the collector".
#[test]
fn a_transport_error_is_named_in_the_runs_reason() {
    let dir = tempfile::tempdir().unwrap();
    // The spool parks the run when its one attempt is spent, quoting the worker's reason.
    let last_error = |v: &Value| -> String {
        let reason = v["reason"].as_str().unwrap_or_default();
        reason
            .strip_prefix("attempts exhausted after 1; last error: ")
            .unwrap_or_else(|| panic!("{v}"))
            .to_owned()
    };
    let enqueue_once = |server: &Server, key: &str, script: &str| {
        let (s, v) = server.call(
            "POST",
            "/v1/queues/telemetry/runs",
            Some(json!({"key": key, "payload": script, "max_attempts": 1})),
        );
        assert_eq!(s, 201, "{v}");
        v["run_id"].as_str().unwrap().to_owned()
    };

    let (_collector, url) = Collector::start();
    let db = dir.path().join("timeout.db").display().to_string();
    let server = Server::start(&db, &url, &[], &["--delivery-timeout-ms", "300"]);
    let run = enqueue_once(&server, "timeout", "hang");
    let v = server.wait_state(&run, "parked");
    let reason = last_error(&v);
    assert!(
        reason.starts_with("the collector did not answer in time"),
        "{v}"
    );
    assert!(!reason.contains(&url), "{v}");
    server.stop();

    // A port nothing listens on any more.
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let db = dir.path().join("refused.db").display().to_string();
    let server = Server::start(&db, &closed, &[], &[]);
    let run = enqueue_once(&server, "refused", "202");
    let v = server.wait_state(&run, "parked");
    let reason = last_error(&v);
    assert!(
        reason.starts_with("cannot connect to the collector: "),
        "{v}"
    );
    assert!(!reason.contains(&closed), "{v}");
    server.stop();
}

/// The byte budget of a batch's events in the budget tests below.
const BUDGET: usize = 1000;

/// A run whose events together take several times [`BUDGET`] bytes of JSON — most small (a
/// third of each is control bytes, six bytes of JSON apiece), one larger than the budget on its
/// own — closed before the worker takes it, is delivered in several POSTs: each POST's `events`
/// array within the budget unless it holds that one event alone, each full (the next event
/// would not have fitted), every event exactly once and in seq order; then the run is finished.
/// `batch` is `--delivery-batch`: with 100 one read holds every event, with 4 the POSTs are cut
/// by count and by bytes in turn.
fn a_batch_is_cut_at_the_byte_budget(db: &str, batch: &str) {
    let (collector, url) = Collector::start();
    let budget = BUDGET.to_string();
    let server = Server::start(
        db,
        &url,
        &[("CAIRN_DELIVERY__MAX_BATCH_BYTES", &budget)],
        &["--delivery-batch", batch],
    );
    let gate = hold_the_worker(&server, &collector);
    let run = server.enqueue("big-events", "202");
    let small = format!("{}{}", "x".repeat(100), "\u{1}".repeat(20));
    let large = "y".repeat(BUDGET + 500);
    let ids: Vec<String> = (1..=10).map(|i| format!("e{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        server.append_event(&run, id, if i == 4 { &large } else { &small });
    }
    server.close(&run);
    let_the_worker_go(&server, &collector, &gate);
    let v = server.wait_state(&run, "succeeded");
    assert_eq!(v["events"], 0, "every event was acknowledged: {v}");

    let posts = collector.for_run(&run);
    assert!(posts.len() > 2, "{} POSTs", posts.len());
    let arrays: Vec<&Vec<Value>> = posts
        .iter()
        .map(|p| p.body["events"].as_array().unwrap())
        .collect();
    for (i, events) in arrays.iter().enumerate() {
        let size = serde_json::to_string(events).unwrap().len();
        assert!(
            size <= BUDGET || events.len() == 1,
            "POST {i}: {} events in {size} bytes",
            events.len()
        );
        if let Some(next) = arrays.get(i + 1).map(|a| &a[0]) {
            let next = serde_json::to_string(next).unwrap().len();
            assert!(
                size + 1 + next > BUDGET,
                "POST {i} ({size} bytes) had room for the next event ({next} bytes)"
            );
        }
    }
    let alone = arrays
        .iter()
        .find(|a| a.iter().any(|e| e["event_id"] == "e5"))
        .unwrap();
    assert_eq!(alone.len(), 1, "the large event goes alone");
    let delivered: Vec<(u64, String)> = delivered_events(&collector, &run);
    let want: Vec<(u64, String)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (i as u64 + 1, id.clone()))
        .collect();
    assert_eq!(delivered, want, "every event once, in seq order");
    let payloads: Vec<&str> = arrays
        .iter()
        .flat_map(|a| a.iter())
        .map(|e| e["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads[4], large);
    assert!(payloads
        .iter()
        .enumerate()
        .all(|(i, p)| i == 4 || *p == small));
    server.stop();
}

#[test]
fn a_batch_is_cut_at_the_byte_budget_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_batch_is_cut_at_the_byte_budget(&sqlite_db(&dir), "100");
}

#[test]
fn a_batch_is_cut_at_the_byte_budget_and_by_count_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_batch_is_cut_at_the_byte_budget(&sqlite_db(&dir), "4");
}

#[test]
fn a_batch_is_cut_at_the_byte_budget_on_postgres() {
    on_postgres(|db| a_batch_is_cut_at_the_byte_budget(db, "100"));
}

/// A budget that is not a whole number of bytes, at least 1, is refused at start, naming the
/// key.
#[test]
fn a_bad_batch_byte_budget_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    for bad in ["0", "8MiB"] {
        let out = cairn(&db)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--delivery-url", "http://127.0.0.1:9/ingest"])
            .env("CAIRN_AUTH__TOKENS", FULL)
            .env("CAIRN_DELIVERY__MAX_BATCH_BYTES", bad)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(
            stderr.contains("cairn: config: delivery.max_batch_bytes"),
            "{bad}: {stderr}"
        );
    }
}
