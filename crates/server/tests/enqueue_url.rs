//! `cairn enqueue --url`: through a running server when one answers, straight to the store
//! otherwise; the same key gives the same run id on both paths, and a running server delivers
//! a run that was written straight to the store, without a restart. Every wait polls a
//! condition with a deadline.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cairn;

const FULL: &str = "full-token-6f1d2c9a8b7e";
const DEADLINE: Duration = Duration::from_secs(30);

/// `cairn enqueue --url URL` on queue `gate` with key `gate`, `refs/heads/main`, `key`.
fn enqueue(db: &str, url: &str, token: &str, key: &str) -> Output {
    cairn(db)
        .args(["enqueue", "--queue", "gate", "--key", "gate"])
        .args(["--key-part", "refs/heads/main", "--key-part", key])
        .args(["--payload", "{}", "--url", url])
        .env("CAIRN_TOKEN", token)
        .output()
        .unwrap()
}

/// The `(run id, created|existing)` a successful enqueue printed.
fn printed(out: &Output) -> (String, String) {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let mut words = text.split_whitespace();
    (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    )
}

/// A collector that answers 202 to every request and records the run ids.
fn collector() -> (Arc<Mutex<Vec<String>>>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h.trim_end().is_empty() {
                            break;
                        }
                        if let Some((n, v)) = h.split_once(':') {
                            if n.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    sink.lock()
                        .unwrap()
                        .push(v["run_id"].as_str().unwrap().to_owned());
                    let _ = out.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
                }
            });
        }
    });
    (seen, url)
}

struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(db: &str, collector: &str) -> Self {
        let mut cmd = cairn(db);
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--delivery-url", collector, "--delivery-queue", "gate"])
            .args(["--delivery-poll-ms", "100"])
            .env("CAIRN_AUTH__TOKENS", FULL);
        let common::Serving { child, addr, .. } = common::serve(&mut cmd, DEADLINE);
        Self {
            child,
            base: format!("http://{addr}"),
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + DEADLINE;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the server stops in time");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn enqueue_url_goes_through_a_running_server_else_straight_to_the_store_with_one_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cairn.db").display().to_string();
    // A store the HTTP path must never touch: the command names it, the server does not use it.
    let elsewhere = dir.path().join("elsewhere.db").display().to_string();
    let (delivered, collector_url) = collector();
    let server = Server::start(&db, &collector_url);
    let url = server.base.clone();

    // Server up: the run goes through it.
    let (id, how) = printed(&enqueue(&elsewhere, &url, FULL, "sha1"));
    assert_eq!(how, "created");
    assert!(
        !std::path::Path::new(&elsewhere).exists(),
        "the HTTP path wrote no store of its own"
    );
    let (again, how) = printed(&enqueue(&elsewhere, &url, FULL, "sha1"));
    assert_eq!((again.as_str(), how.as_str()), (id.as_str(), "existing"));
    // A server that answers with an error is reported, never bypassed.
    let refused = enqueue(&db, &url, "wrong-token-0000000000", "sha2");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains(&url), "the URL is not printed: {stderr}");

    // While the server runs, an enqueue that finds nobody at its URL writes straight to the
    // store, and the running server delivers that run without a restart.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (direct, how) = printed(&enqueue(&db, &dead, FULL, "sha3"));
    assert_eq!(how, "created");
    let deadline = Instant::now() + DEADLINE;
    while !delivered.lock().unwrap().contains(&direct) {
        assert!(
            Instant::now() < deadline,
            "the running server delivers the straight-to-store run"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(delivered.lock().unwrap().contains(&id));

    // Server down: the same key goes straight to the store and finds the same run.
    server.stop();
    let (down, how) = printed(&enqueue(&db, &url, FULL, "sha1"));
    assert_eq!((down.as_str(), how.as_str()), (id.as_str(), "existing"));
    let (down3, how) = printed(&enqueue(&db, &url, FULL, "sha3"));
    assert_eq!(
        (down3.as_str(), how.as_str()),
        (direct.as_str(), "existing")
    );
}
